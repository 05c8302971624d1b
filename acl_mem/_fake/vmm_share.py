"""Exported physical memory, visible to other processes of the same user (docs/runtime-model.md
§4.6).

An export writes a record (:mod:`.share_record`) into the share directory
(:mod:`.share_dir`). An importer reads it and opens the exporter's memfd through
``/proc/<pid>/fd``. The memory goes back to the exporter's pool once the exporter has
freed it and no live importer holds it; dead or zombie holders are dropped whenever a
record is read, and records of dead exporters go once nobody holds them.

The directory may be a user's own (ACL_MEM_FAKE_SHARE_DIR), holding files the fake
knows nothing of, so the fake only ever removes what it can prove it wrote: a regular
file owned by the user, named like its records or temporary files, that starts with the
record magic, and is still the file that was checked when it is unlinked. Anything
else at a record's name (a symlink, a fifo, a user's file) is left alone and makes that
shareable number unusable. Files are opened relative to the directory's descriptor,
never through a symlink and never blocking; reads are capped. A record is written into
an unnamed file (``O_TMPFILE``) and linked or renamed into place whole, and every
read-modify-write holds ``flock`` on the lock file (released by closing its descriptor,
so no exception can leave it locked).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import itertools
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import AclError
from . import codes
from .share_dir import UNUSABLE_DIRECTORY, open_share_directory
from .share_record import (
    MAGIC,
    DamagedRecord,
    Identity,
    Record,
    identity_of,
    is_alive,
    self_identity,
)

__all__ = ["UNUSABLE_DIRECTORY", "Identity", "Record", "ShareRegistry", "identity_of",
           "new_shareable", "record_name", "self_identity"]

LOCK_NAME = ".acl_mem_fake.lock"
_RECORD_NAME = re.compile(r"acl_mem_fake-([0-9a-f]{16})\.record")
_TEMP_PREFIX = ".acl_mem_fake-tmp-"
_TEMP_NAME = re.compile(re.escape(_TEMP_PREFIX) + r"\d+-[0-9a-f]{12}")
#: One call's 65535 whitelisted pids fit with room to spare; a whitelist that would grow
#: past it over many calls is refused (docs/fidelity.md row 57).
_MAX_RECORD_BYTES = 4 << 20
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC
#: Errors of open(O_TMPFILE) where the file system cannot make unnamed files.
_NO_TMPFILE = frozenset({errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL})
_counter = itertools.count(1)
#: Temporary files this process creates without the magic in them yet (where there are no
#: unnamed files): its own to remove, whatever they hold.
_own_temps: set[str] = set()
_counter_lock = threading.Lock()


def new_shareable() -> int:
    """A shareable handle no other export of this process has used lately."""
    with _counter_lock:
        n = next(_counter)
    return (os.getpid() << 24) | (n & 0xFF_FFFF or 1)


def record_name(shareable: int) -> str:
    return f"acl_mem_fake-{shareable:016x}.record"


class _NotOurs(Exception):
    """Something at a record's name the fake did not write, or cannot read."""


class _Session:
    """The open share directory, locked; every name is resolved relative to it."""

    def __init__(self, directory: Path, dirfd: int) -> None:
        self.directory = directory
        self.dirfd = dirfd

    # -- reading ---------------------------------------------------------------------------------
    def load(self, shareable: int) -> Record | None:
        """The record of ``shareable``; None if there is none. A record that cannot be
        read or parsed, or a file there the fake did not write, raises 107000."""
        try:
            data = self._read(record_name(shareable))
            if data is None:
                return None
            if len(data) > _MAX_RECORD_BYTES:
                raise DamagedRecord("too long")
            return Record.decode(data)
        except (_NotOurs, DamagedRecord) as exc:
            raise self._damaged(shareable, str(exc)) from None

    def _read(self, name: str) -> bytes | None:
        """The bytes of ``name`` (capped) if the fake wrote it; None if nothing is there."""
        try:
            # O_NONBLOCK: a fifo planted at the name must not hang the reader.
            with open(name, "rb", opener=self._opener(os.O_NONBLOCK)) as file:
                if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                    raise _NotOurs("not a regular file")
                data = file.read(_MAX_RECORD_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _NotOurs("a symlink" if exc.errno == errno.ELOOP else _reason(exc)) \
                from None
        if not data.startswith(MAGIC):
            raise _NotOurs("not written by the acl_mem fake")
        return data

    def _damaged(self, shareable: int, why: str) -> AclError:
        path = self.directory / record_name(shareable)
        return AclError(codes.RT_PARAM_INVALID,
                        f"shareable handle {shareable:#x} cannot be used: its record {path} "
                        f"is damaged or not the fake's ({why}); the exporting process "
                        f"removes a damaged record of its own by freeing its handle; "
                        f"anything else there is left for you to delete")

    def names(self) -> list[str]:
        return os.listdir(self.dirfd)

    # -- writing ---------------------------------------------------------------------------------
    def store(self, shareable: int, record: Record) -> None:
        """Replace the record (loaded, so the fake's) at once: readers see the old one or
        the new one, whole."""
        temp = f"{_TEMP_PREFIX}{os.getpid()}-{os.urandom(6).hex()}"
        with self._staged(record.encode()) as link:
            link(temp)
        try:
            os.replace(temp, record_name(shareable), src_dir_fd=self.dirfd,
                       dst_dir_fd=self.dirfd)
        except BaseException:
            self.remove_temp(temp)
            raise

    def create(self, shareable: int, record: Record) -> bool:
        """Publish a new record, whole; False if the name is taken."""
        with self._staged(record.encode()) as link:
            try:
                # link() neither replaces nor follows whatever already has the name.
                link(record_name(shareable))
            except FileExistsError:
                return False
        return True

    @contextlib.contextmanager
    def _staged(self, data: bytes) -> Iterator[Callable[[str], None]]:
        """``data`` in a file of the directory under no name yet; the yielded function
        links it at a name (FileExistsError if taken). An interrupted write leaves no
        file behind, so nothing half-written ever needs telling from a user's file."""
        try:
            unnamed = open(".", "wb", buffering=0,  # noqa: SIM115 (closed by the with below)
                           opener=lambda _, __: os.open(
                               ".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600,
                               dir_fd=self.dirfd))
        except OSError as exc:
            if exc.errno not in _NO_TMPFILE:
                raise
            unnamed = None
        if unnamed is not None:
            with unnamed:
                _write_all(unnamed, data)
                source = f"/proc/self/fd/{unnamed.fileno()}"
                yield lambda name: os.link(source, name, dst_dir_fd=self.dirfd,
                                           follow_symlinks=True)
            return
        # No unnamed files here: a named one. Until the magic is in it, it is proven
        # ours by its name being in _own_temps, entered before it is created (with
        # O_EXCL, under a random name) and left only once the file is gone.
        temp = f"{_TEMP_PREFIX}{os.getpid()}-{os.urandom(6).hex()}"
        _own_temps.add(temp)
        try:
            try:
                file = open(temp, "xb", buffering=0, opener=self._opener())  # noqa: SIM115
            except FileExistsError:
                _own_temps.discard(temp)  # someone else's file had the name
                raise
            with file:
                _write_all(file, data)
            yield lambda name: os.link(temp, name, src_dir_fd=self.dirfd,
                                       dst_dir_fd=self.dirfd, follow_symlinks=False)
        finally:
            self.remove_temp(temp)

    def remove(self, name: str, *, created_here: bool = False) -> bool:
        """Unlink ``name`` if it is provably the fake's: a regular file of this user that
        starts with the magic (or that this process created: ``created_here``), and still
        the same file when unlinked. True once nothing is at the name."""
        try:
            with open(name, "rb", buffering=0, opener=self._opener(os.O_NONBLOCK)) as file:
                info = os.fstat(file.fileno())
                if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                    return False
                if not created_here and file.read(len(MAGIC)) != MAGIC:
                    return False
                now = os.stat(name, dir_fd=self.dirfd, follow_symlinks=False)
                if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
                    return False
                os.unlink(name, dir_fd=self.dirfd)
                return True
        except FileNotFoundError:
            return True
        except OSError:
            return False

    def remove_temp(self, name: str) -> None:
        """Remove a temporary file (abandoned: they exist only under the lock)."""
        if self.remove(name, created_here=name in _own_temps):
            _own_temps.discard(name)

    def remove_record(self, shareable: int) -> bool:
        return self.remove(record_name(shareable))

    def _opener(self, extra: int = 0) -> Callable[[str, int], int]:
        """For open(): relative to the directory, never through a symlink. A file object
        closes in C when its ``with`` ends, so no interrupt can leave it open."""
        return lambda name, flags: os.open(name, flags | extra | _OPEN_FLAGS, 0o600,
                                           dir_fd=self.dirfd)


def _write_all(file: io.FileIO, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[file.write(view) or 0:]


class ShareRegistry:
    def __init__(self) -> None:
        #: The directory of the last session (for messages); chosen anew every time.
        self.directory: Path | None = None

    @contextlib.contextmanager
    def _session(self) -> Iterator[_Session]:
        dirfd, directory = open_share_directory()
        self.directory = directory
        try:
            session = _Session(directory, dirfd)
            try:
                # Closing the file releases the flock; a file object's ``with`` closes it
                # in C, so no interrupt can leave the lock held.
                lock = open(LOCK_NAME, "ab", opener=session._opener(os.O_NONBLOCK))  # noqa: SIM115
            except OSError as exc:
                why = "a symlink" if exc.errno == errno.ELOOP else _reason(exc)
                raise _refuse(directory, f"its lock file {LOCK_NAME} cannot be used ({why})") \
                    from None
            with lock:
                if not stat.S_ISREG(os.fstat(lock.fileno()).st_mode):
                    raise _refuse(directory, f"its lock file {LOCK_NAME} is not a regular file")
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    yield session
                except OSError as exc:
                    raise _refuse(directory, f"writing a record failed ({_reason(exc)})") \
                        from None
        finally:
            os.close(dirfd)

    # -- what the fake's calls need ----------------------------------------------------------------
    def publish(self, shareable: int, record: Record) -> bool:
        """Create the record of a new export; False if ``shareable`` is in use."""
        with self._session() as session:
            self._sweep(session)
            if session.create(shareable, record):
                return True
            # The name is taken. Only a record of ours that nobody uses any more is
            # reclaimed; anything else (a live record, a user's file, a symlink) stays
            # and the caller picks another number.
            try:
                if self._current(session, shareable) is not None:
                    return False
            except AclError:
                return False
            return session.create(shareable, record)

    def allow(self, shareable: int, pids: list[int], owner: Identity) -> int:
        """Add ``pids`` (each with the start time of the process now running under it)
        to the whitelist of ``owner``'s export; an aclError code."""
        with self._session() as session:
            record = session.load(shareable)
            if record is None or record.owner != owner:
                return codes.RT_PARAM_INVALID
            record.allow(pids)
            if len(record.encode()) > _MAX_RECORD_BYTES:
                # Its readers would refuse it as too long: left as it was.
                return codes.RT_PARAM_INVALID
            session.store(shareable, record)
            return codes.SUCCESS

    def acquire(self, shareable: int, me: Identity) -> tuple[int, int, Record | None]:
        """(aclError code, descriptor of the exporter's memfd, record) for an import;
        on success ``me`` is counted as a holder until :meth:`release`."""
        with self._session() as session:
            record = self._current(session, shareable)
            if record is None or record.owner_gone():
                return codes.RT_PARAM_INVALID, -1, None
            if record.owner == me:
                return codes.FEATURE_NOT_SUPPORT, -1, None  # same-process import: fidelity row 50
            if record.flags == 0 and not record.admits(me):
                return codes.RT_PARAM_INVALID, -1, None
            fd = _open_memfd(record)
            if fd < 0:
                return codes.RT_PARAM_INVALID, -1, None
            try:
                record.holders.append(me)
                session.store(shareable, record)
            except BaseException:
                os.close(fd)
                raise
            return codes.SUCCESS, fd, record

    def release(self, shareable: int, me: Identity, on_last: Callable[[], None]) -> None:
        """An importer lets go. If nobody holds the memory any more, ``on_last`` runs
        before the record goes, so the exporter cannot reuse the range before it."""
        with self._session() as session:
            try:
                record = session.load(shareable)
            except AclError:
                return  # the exporter decides about a damaged record
            if record is None:
                return  # the exporter took its memory back already
            if me in record.holders:
                record.holders.remove(me)
            record.drop_dead_holders()
            if record.owner_gone() and not record.holders:
                on_last()
                session.remove_record(shareable)
            else:
                session.store(shareable, record)

    def forget(self, shareable: int, me: Identity, keep: int) -> None:
        """Count ``me`` as a holder at most ``keep`` times (undoes an interrupted import)."""
        with self._session() as session:
            record = session.load(shareable)
            if record is None or record.holders.count(me) <= keep:
                return
            while record.holders.count(me) > keep:
                record.holders.remove(me)
            session.store(shareable, record)

    def release_owner(self, shareable: int) -> bool:
        """The exporter has freed its handle (again, when retried); True once no live
        importer holds the memory: it may go back to the exporter's pool."""
        with self._session() as session:
            try:
                record = session.load(shareable)
            except AclError:
                # Its holders are unknowable (docs/fidelity.md row 56); a damaged record
                # of ours goes, whatever else is there stays.
                session.remove_record(shareable)
                return True
            if record is None:
                return True
            changed = record.drop_dead_holders() or not record.owner_freed
            record.owner_freed = True
            if not record.holders:
                session.remove_record(shareable)
                return True
            if changed:
                session.store(shareable, record)
            return False

    # -- housekeeping ------------------------------------------------------------------------------
    def _current(self, session: _Session, shareable: int) -> Record | None:
        """The record with dead holders dropped; None (and removed) if nobody is left."""
        record = session.load(shareable)
        if record is None:
            return None
        changed = record.drop_dead_holders()
        if not is_alive(record.owner) and not record.holders:
            session.remove_record(shareable)
            return None
        if changed:
            session.store(shareable, record)
        return record

    def _sweep(self, session: _Session) -> None:
        """Remove what dead processes left (their records nobody holds) and temporary
        files of interrupted writes, where they are provably the fake's."""
        me = os.getpid()
        for name in session.names():
            if _TEMP_NAME.fullmatch(name):
                session.remove_temp(name)  # written only under the lock we hold: abandoned
                continue
            match = _RECORD_NAME.fullmatch(name)
            if match is None:
                continue
            shareable = int(match.group(1), 16)
            if shareable >> 24 == me:
                continue  # ours; our own frees keep them tidy
            try:
                self._current(session, shareable)
            except AclError:
                if identity_of(shareable >> 24) is None:
                    session.remove_record(shareable)


def _refuse(directory: Path, why: str) -> AclError:
    return AclError(UNUSABLE_DIRECTORY,
                    f"the acl_mem fake will not share memory through {directory}: {why}",
                    "Remove it (it is recreated with mode 0700), or set "
                    "ACL_MEM_FAKE_SHARE_DIR to a directory of your own with mode 0700")


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _open_memfd(record: Record) -> int:
    """The exporter's memfd, opened anew; -1 unless it is still the exported one."""
    try:
        fd = os.open(f"/proc/{record.owner[0]}/fd/{record.fd}", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return -1
    try:
        info = os.fstat(fd)
    except OSError:
        info = None
    # The exporter may have closed the memfd and reused the number for another file.
    if info is None or (info.st_dev, info.st_ino) != record.inode or \
            not is_alive(record.owner):
        os.close(fd)
        return -1
    return fd
