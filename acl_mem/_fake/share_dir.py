"""Which directory the fake's share records live in, and whether it can be trusted
(docs/runtime-model.md §4.6, docs/fidelity.md rows 52 and 55).

``ACL_MEM_FAKE_SHARE_DIR`` names it outright: it is used, or every sharing call refuses
with 507000. Otherwise the fake tries, in order, places that depend on the user id only
(never on the environment), so every process of one user lands in the same one:

1. ``/dev/shm/acl_mem_fake_<uid>`` (the temporary directory where there is no /dev/shm);
2. ``/run/user/<uid>/acl_mem_fake``, when ``/run/user/<uid>`` is the user's own private
   directory (systemd makes it at login);
3. ``<home from the password database>/.cache/acl_mem/share``.

The first is in a directory everyone can write to, so another user can take the name
first (a directory or file of theirs, a symlink); the fake then says once on stderr
that it uses the next one, instead of refusing to share for ever.

A directory is trusted only if it is a real directory (not a symlink) owned by the
user with mode 0700; that is checked on every use, through the descriptor that is
then used.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .. import _env
from ..errors import AclError

__all__ = ["UNUSABLE_DIRECTORY", "open_share_directory"]

#: ACL_ERROR_RT_INTERNAL_ERROR: the fake cannot use its share directory (docs/fidelity.md row 55).
UNUSABLE_DIRECTORY = 507000
_OPEN_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Parents of the default places; tests point them elsewhere.
_SHM = Path("/dev/shm")
_RUN_USER = Path("/run/user")
_noticed: set[tuple[int, Path]] = set()


class Untrusted(Exception):
    """A candidate directory the fake will not use; the text says why."""


def open_share_directory() -> tuple[int, Path]:
    """A descriptor of the share directory to use now, and its path. Raises 507000
    when no candidate can be trusted."""
    explicit = _env.secure_path("ACL_MEM_FAKE_SHARE_DIR")
    if explicit is not None:
        directory = Path(explicit)
        try:
            return _open_trusted(directory), directory
        except Untrusted as exc:
            raise _refusal(f"{directory}: {exc}", "Fix or remove it (it is recreated with "
                           "mode 0700), or set ACL_MEM_FAKE_SHARE_DIR to a directory of your "
                           "own with mode 0700") from None
    refused: list[str] = []
    for directory in default_candidates():
        try:
            fd = _open_trusted(directory)
        except Untrusted as exc:
            refused.append(f"{directory}: {exc}")
            continue
        if refused:
            _notice_fallback(directory, refused)
        return fd, directory
    raise _refusal("; ".join(refused), "Remove the first of them if it is yours (it is "
                   "recreated with mode 0700), or set ACL_MEM_FAKE_SHARE_DIR to a directory "
                   "of your own with mode 0700")


def default_candidates() -> Iterator[Path]:
    """The default places in order, each looked up only if the one before is refused."""
    uid = os.geteuid()
    base = _SHM if _SHM.is_dir() else Path(tempfile.gettempdir())
    yield base / f"acl_mem_fake_{uid}"
    run = _RUN_USER / str(uid)
    try:
        info = os.stat(run, follow_symlinks=False)
    except OSError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode) and info.st_uid == uid and \
            stat.S_IMODE(info.st_mode) & 0o077 == 0:
        yield run / "acl_mem_fake"
    home = _home(uid)
    if home is not None:
        yield home / ".cache" / "acl_mem" / "share"


def _home(uid: int) -> Path | None:
    # The password database, not $HOME: the same for every process of the user.
    try:
        directory = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return None
    return Path(directory) if directory.startswith("/") and directory != "/" else None


def _open_trusted(directory: Path) -> int:
    if directory.name == "..":
        # O_NOFOLLOW judges the last component only: "link/.." would lead through a
        # symlink to a directory nobody named (the C library refuses it too).
        raise Untrusted('it is not a plain directory path (it ends in "..")')
    created = False
    try:
        fd = os.open(directory, _OPEN_FLAGS)
    except FileNotFoundError:
        created = _create(directory)
        try:
            fd = os.open(directory, _OPEN_FLAGS)
        except OSError as exc:
            raise Untrusted(_open_reason(exc, directory)) from None
    except OSError as exc:
        raise Untrusted(_open_reason(exc, directory)) from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise Untrusted(f"it belongs to uid {info.st_uid}, not to uid {os.geteuid()}")
        if created and stat.S_IMODE(info.st_mode) != 0o700:
            os.fchmod(fd, 0o700)  # the umask may have taken bits away
            info = os.fstat(fd)
        if stat.S_IMODE(info.st_mode) != 0o700:
            raise Untrusted(f"its mode is {stat.S_IMODE(info.st_mode):#o}, not 0o700, so "
                            "another user could read or replace its records")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _create(directory: Path) -> bool:
    try:
        directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.mkdir(directory, 0o700)
    except FileExistsError:
        return False  # someone else was first; checked like any existing directory
    except OSError as exc:
        raise Untrusted(f"it cannot be created ({exc.strerror or type(exc).__name__})") \
            from None
    return True


def _open_reason(exc: OSError, directory: Path) -> str:
    # O_DIRECTORY|O_NOFOLLOW on a symlink gives ENOTDIR, not ELOOP: ask the link itself.
    if exc.errno == errno.ELOOP or directory.is_symlink():
        return "it is a symlink"
    if exc.errno == errno.ENOTDIR:
        return "it is not a directory"
    return f"it cannot be opened ({exc.strerror or type(exc).__name__})"


def _refusal(why: str, remedy: str) -> AclError:
    return AclError(UNUSABLE_DIRECTORY, f"the acl_mem fake will not share memory through "
                    f"{why}", remedy)


def _notice_fallback(directory: Path, refused: list[str]) -> None:
    key = (os.getpid(), directory)  # once per process: a forked child says it again
    if key in _noticed:
        return
    _noticed.add(key)
    stream = sys.stderr
    if stream is None:  # pythonw, or closed on purpose: nobody to tell
        return
    with contextlib.suppress(OSError, ValueError):  # a closed or broken stderr
        stream.write(f"acl_mem fake: sharing memory through {directory}, not through "
                     f"{'; '.join(refused)}\n")
