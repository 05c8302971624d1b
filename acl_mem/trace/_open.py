"""Opening the file a recording writes (docs/trace-format.md, "Recording").

The path often comes from the environment (``ACL_MEM_TRACE``), which a program inherits
from whoever started it, so opening it must not be turned against the user: a symlink
planted at the path is not followed (O_NOFOLLOW), a FIFO does not block the program
(O_NONBLOCK, then refused), and nothing but a regular file the user owns is written.
A file of one process of a recording (``FILE.<pid>``) is always a new one (O_EXCL): when
an earlier run left one there (pids repeat, in a container's pid namespace from its first
run to the next), ``FILE.<pid>.<n>`` with the first free ``n`` is made instead; a file
that exists is never opened, emptied or removed.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["file_kind", "open_new_trace_file", "open_trace_file"]

#: ``FILE.<pid>.<n>`` tried at most, from 1, when ``FILE.<pid>`` exists.
NEW_FILE_TRIES = 1000


def _user() -> int:
    """Whose files may be written (tests stand in for another user here)."""
    return os.geteuid()


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, from its ``st_mode``."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_trace_file(path: str, *, exclusive: bool) -> int:
    """A descriptor to write the trace at ``path`` from its start; OSError if it cannot
    be, or must not be, written. ``exclusive``: the file must not exist yet; otherwise an
    existing regular file of the user's is emptied (the user named it)."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | \
        getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if exclusive:
        flags |= os.O_EXCL
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link: not followed", path) from None
        if exc.errno == errno.ENXIO:  # O_NONBLOCK's answer for a FIFO nobody reads
            raise OSError(errno.ENXIO, "a FIFO: a trace is written only to a regular file",
                          path) from None
        if exc.errno == errno.EEXIST:
            raise OSError(errno.EEXIST, "exists already: a process's own trace file is "
                          "always a new one", path) from None
        raise
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OSError(errno.EINVAL, f"{file_kind(status.st_mode)}: a trace is written only "
                          "to a regular file", path)
        if status.st_uid != _user():
            raise OSError(errno.EPERM, "owned by another user: not written", path)
        if not exclusive:
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_new_trace_file(path: str) -> tuple[int, str]:
    """A descriptor on a new file at ``path``, or at ``path.<n>`` with the first free
    ``n`` when one exists there, and the path it was made at; OSError as
    :func:`open_trace_file` (EEXIST when all :data:`NEW_FILE_TRIES` are taken)."""
    for number in range(NEW_FILE_TRIES + 1):
        candidate = f"{path}.{number}" if number else path
        try:
            return open_trace_file(candidate, exclusive=True), candidate
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
    raise OSError(errno.EEXIST, f"exists already, and so do {path}.1 to "
                  f".{NEW_FILE_TRIES}", path)
