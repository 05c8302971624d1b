"""Exported physical memory, visible to other processes of the same user (docs/runtime-model.md
§4.6).

An export writes a record file into the share directory: the exporter (pid and process
start time), its memfd number and that memfd's inode, the range, flags, the pid
whitelist, whether the exporter has freed its handle, and the importers holding the
memory, each as (pid, start time). An importer reads the record and opens the
exporter's memfd through ``/proc/<pid>/fd``. The memory goes back to the exporter's
pool once the exporter has freed it and no live importer holds it.

A process is named by (pid, start time from ``/proc/<pid>/stat``) so that a pid reused
by an unrelated process is not taken for a holder; dead or zombie holders are dropped
whenever a record is read, and records of dead exporters go once nobody holds them.

The directory is trusted only if it is a real directory owned by the user with mode
0700, checked on every use (docs/fidelity.md row 55). Files in it are opened relative to the
directory's descriptor without following symlinks, records are written to a temporary
file and renamed into place, and every read-modify-write holds ``flock`` on ``.lock``
(released by closing its descriptor, so no exception can leave it locked).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import json
import os
import re
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import AclError
from . import codes

__all__ = ["Identity", "Record", "ShareRegistry", "identity_of", "new_shareable",
           "self_identity"]

#: ACL_ERROR_RT_INTERNAL_ERROR: the fake cannot use its share directory (docs/fidelity.md row 55).
UNUSABLE_DIRECTORY = 507000
#: (pid, start time in clock ticks after boot): one process, never a later one.
Identity = tuple[int, int]

_LOCK_NAME = ".lock"
_RECORD_NAME = re.compile(r"([0-9a-f]{16})\.json")
_TEMP_PREFIX = ".tmp-"
_MAX_RECORD_BYTES = 4 << 20  # 65535 whitelisted pids fit with room to spare
_U64 = (1 << 64) - 1
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC
_counter = itertools.count(1)
_counter_lock = threading.Lock()
_self: dict[int, Identity] = {}


def identity_of(pid: int) -> Identity | None:
    """(pid, start time) of a running process; None if it is gone or a zombie."""
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            text = file.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: fields 3.. follow the last ")".
    rest = text[text.rfind(b")") + 1:].split()
    if len(rest) < 20 or rest[0] in (b"Z", b"X", b"x"):
        return None
    try:
        return pid, int(rest[19])
    except ValueError:
        return None


def self_identity() -> Identity:
    pid = os.getpid()
    if pid not in _self:  # keyed by pid: a forked child is another process
        _self[pid] = identity_of(pid) or (pid, 0)
    return _self[pid]


def is_alive(who: Identity) -> bool:
    return identity_of(who[0]) == who


def new_shareable() -> int:
    """A shareable handle no other export of this process has used lately."""
    with _counter_lock:
        n = next(_counter)
    return (os.getpid() << 24) | (n & 0xFF_FFFF or 1)


class DamagedRecord(Exception):
    """A record file that is not a record (bad JSON, missing or mistyped fields)."""


@dataclass
class Record:
    owner: Identity
    fd: int
    inode: tuple[int, int]
    offset: int
    size: int
    device: int
    flags: int
    mem_attr: int
    pids: list[int] = field(default_factory=list)
    holders: list[Identity] = field(default_factory=list)
    owner_freed: bool = False

    def owner_gone(self) -> bool:
        return self.owner_freed or not is_alive(self.owner)

    def drop_dead_holders(self) -> bool:
        """Forget holders that no longer run; True if any went."""
        alive = [who for who in self.holders if is_alive(who)]
        changed = len(alive) != len(self.holders)
        self.holders = alive
        return changed

    def to_json(self) -> bytes:
        return json.dumps({
            "pid": self.owner[0], "start": self.owner[1], "fd": self.fd,
            "dev": self.inode[0], "ino": self.inode[1], "offset": self.offset,
            "size": self.size, "device": self.device, "flags": self.flags,
            "memAttr": self.mem_attr, "pids": self.pids,
            "holders": [list(who) for who in self.holders], "owner_freed": self.owner_freed,
        }).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Record:
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise DamagedRecord(f"not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise DamagedRecord(f"a JSON {type(raw).__name__}, not an object")
        holders = raw.get("holders")
        if not isinstance(holders, list) or not all(
                isinstance(who, list) and len(who) == 2 for who in holders):
            raise DamagedRecord("'holders' is not a list of [pid, start] pairs")
        pids = raw.get("pids")
        if not isinstance(pids, list):
            raise DamagedRecord("'pids' is not a list")
        freed = raw.get("owner_freed")
        if not isinstance(freed, bool):
            raise DamagedRecord("'owner_freed' is not true or false")
        return cls(
            owner=(_whole(raw.get("pid"), "pid"), _whole(raw.get("start"), "start")),
            fd=_whole(raw.get("fd"), "fd"),
            inode=(_whole(raw.get("dev"), "dev"), _whole(raw.get("ino"), "ino")),
            offset=_whole(raw.get("offset"), "offset"), size=_whole(raw.get("size"), "size"),
            device=_whole(raw.get("device"), "device"),
            flags=_whole(raw.get("flags"), "flags"),
            mem_attr=_whole(raw.get("memAttr"), "memAttr"),
            pids=[_whole(p, "a whitelisted pid", low=-(1 << 31)) for p in pids],
            holders=[(_whole(p, "a holder's pid"), _whole(s, "a holder's start"))
                     for p, s in holders],
            owner_freed=freed,
        )


def _whole(value: object, what: str, *, low: int = 0) -> int:
    # bool is an int to Python, never to the record.
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= _U64:
        raise DamagedRecord(f"{what} is {value!r}, not a whole number")
    return value


class _Session:
    """The open share directory, locked; every name is resolved relative to it."""

    def __init__(self, registry: ShareRegistry, dirfd: int) -> None:
        self.registry = registry
        self.dirfd = dirfd

    def load(self, shareable: int) -> Record | None:
        """The record of ``shareable``; None if there is none. A record that cannot be
        read or parsed raises 107000 with the reason."""
        try:
            # O_NONBLOCK: a fifo planted at the name must not hang the reader.
            with open(_name(shareable), "rb", opener=self._opener(os.O_NONBLOCK)) as file:
                if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                    raise self._damaged(shareable, "not a regular file")
                data = file.read(_MAX_RECORD_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._damaged(shareable, _reason(exc)) from None
        try:
            if len(data) > _MAX_RECORD_BYTES:
                raise DamagedRecord("too long")
            return Record.from_json(data)
        except DamagedRecord as exc:
            raise self._damaged(shareable, str(exc)) from None

    def _damaged(self, shareable: int, why: str) -> AclError:
        path = self.registry.directory / _name(shareable)
        return AclError(codes.RT_PARAM_INVALID,
                        f"shareable handle {shareable:#x} cannot be used: its record {path} "
                        f"is damaged ({why}); the exporting process may remove it by freeing "
                        f"its handle, or delete the file")

    def store(self, shareable: int, record: Record) -> None:
        """Replace the record at once: readers see the old one or the new one, whole."""
        temp = self._write_temp(record.to_json())
        try:
            os.replace(temp, _name(shareable), src_dir_fd=self.dirfd, dst_dir_fd=self.dirfd)
        except BaseException:
            self._unlink(temp)
            raise

    def create(self, shareable: int, record: Record) -> bool:
        """Publish a new record, whole; False if the name is taken."""
        temp = self._write_temp(record.to_json())
        try:
            # link() neither replaces nor follows whatever already has the name.
            os.link(temp, _name(shareable), src_dir_fd=self.dirfd, dst_dir_fd=self.dirfd,
                    follow_symlinks=False)
        except BaseException as exc:
            self._unlink(temp)
            if isinstance(exc, FileExistsError):
                return False
            raise
        # Published: no error may say otherwise now (a stray temp file is swept later).
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=self.dirfd)
        return True

    def remove(self, shareable: int) -> None:
        self._unlink(_name(shareable))

    def _unlink(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.dirfd)

    def _write_temp(self, data: bytes) -> str:
        name = f"{_TEMP_PREFIX}{os.getpid()}-{os.urandom(6).hex()}"
        try:
            with open(name, "xb", opener=self._opener()) as file:
                file.write(data)
        except BaseException:
            self._unlink(name)
            raise
        return name

    def _opener(self, extra: int = 0) -> Callable[[str, int], int]:
        """For open(): relative to the directory, never through a symlink. A file object
        closes in C when its ``with`` ends, so no interrupt can leave it open."""
        return lambda name, flags: os.open(name, flags | extra | _OPEN_FLAGS, 0o600,
                                           dir_fd=self.dirfd)

    def names(self) -> list[str]:
        return os.listdir(self.dirfd)


class ShareRegistry:
    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or Path(os.environ.get("ACL_MEM_FAKE_SHARE_DIR", "")
                                           or _default_directory())

    # -- the directory -----------------------------------------------------------------------------
    def _refuse(self, why: str) -> AclError:
        return AclError(UNUSABLE_DIRECTORY,
                        f"the acl_mem fake will not share memory through {self.directory}: "
                        f"{why}. Another user could read or replace its records. Remove it "
                        f"(it is recreated with mode 0700), or set ACL_MEM_FAKE_SHARE_DIR to "
                        f"a directory of your own with mode 0700")

    def _open_directory(self) -> int:
        created = False
        try:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | _OPEN_FLAGS)
        except FileNotFoundError:
            created = self._create_directory()
            fd = self._open_existing_directory()
        except OSError as exc:
            raise self._refuse(_directory_reason(exc)) from None
        try:
            info = os.fstat(fd)
            if info.st_uid != os.geteuid():
                raise self._refuse(f"it belongs to uid {info.st_uid}, not to uid "
                                   f"{os.geteuid()}")
            if created and stat.S_IMODE(info.st_mode) != 0o700:
                os.fchmod(fd, 0o700)  # the umask may have taken bits away
                info = os.fstat(fd)
            if stat.S_IMODE(info.st_mode) != 0o700:
                raise self._refuse(f"its mode is {stat.S_IMODE(info.st_mode):#o}, not 0o700")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _create_directory(self) -> bool:
        try:
            self.directory.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(self.directory, 0o700)
        except FileExistsError:
            return False  # someone else was first; checked like any existing directory
        except OSError as exc:
            raise self._refuse(f"it cannot be created ({_reason(exc)})") from None
        return True

    def _open_existing_directory(self) -> int:
        try:
            return os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | _OPEN_FLAGS)
        except OSError as exc:
            raise self._refuse(_directory_reason(exc)) from None

    @contextlib.contextmanager
    def _session(self) -> Iterator[_Session]:
        dirfd = self._open_directory()
        try:
            session = _Session(self, dirfd)
            try:
                # Closing the file releases the flock; a file object's ``with`` closes it
                # in C, so no interrupt can leave the lock held.
                lock = open(_LOCK_NAME, "ab", opener=session._opener())  # noqa: SIM115
            except OSError as exc:
                why = "a symlink" if exc.errno == errno.ELOOP else _reason(exc)
                raise self._refuse(f"its lock file {_LOCK_NAME} cannot be used ({why})") \
                    from None
            with lock:
                if not stat.S_ISREG(os.fstat(lock.fileno()).st_mode):
                    raise self._refuse(f"its lock file {_LOCK_NAME} is not a regular file")
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    yield session
                except OSError as exc:
                    raise self._refuse(f"writing a record failed ({_reason(exc)})") from None
        finally:
            os.close(dirfd)

    # -- what the fake's calls need ----------------------------------------------------------------
    def publish(self, shareable: int, record: Record) -> bool:
        """Create the record of a new export; False if ``shareable`` is in use."""
        with self._session() as session:
            self._sweep(session)
            if session.create(shareable, record):
                return True
            # The name is taken. Ours and live: the caller picks another number.
            # Anything else there (a dead process's record, a symlink) is replaced.
            try:
                existing = session.load(shareable)
            except AclError:
                existing = None
            if existing is not None and existing.owner == record.owner:
                return False
            session.remove(shareable)
            return session.create(shareable, record)

    def allow(self, shareable: int, pids: list[int], owner: Identity) -> int:
        """Add ``pids`` to the whitelist of ``owner``'s export; an aclError code."""
        with self._session() as session:
            record = session.load(shareable)
            if record is None or record.owner != owner:
                return codes.RT_PARAM_INVALID
            record.pids = sorted(set(record.pids) | set(pids))
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
            if record.flags == 0 and me[0] not in record.pids:
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
                session.remove(shareable)
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
                session.remove(shareable)  # the holders are unknowable: docs/fidelity.md row 56
                return True
            if record is None:
                return True
            changed = record.drop_dead_holders() or not record.owner_freed
            record.owner_freed = True
            if not record.holders:
                session.remove(shareable)
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
            session.remove(shareable)
            return None
        if changed:
            session.store(shareable, record)
        return record

    def _sweep(self, session: _Session) -> None:
        """Remove what dead processes left (their records nobody holds) and temporary
        files of interrupted writes."""
        me = os.getpid()
        for name in session.names():
            if name.startswith(_TEMP_PREFIX):
                session._unlink(name)  # written only under the lock we hold: abandoned
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
                    session.remove(shareable)


def _name(shareable: int) -> str:
    return f"{shareable:016x}.json"


def _default_directory() -> Path:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return base / f"acl_mem_fake_{os.getuid()}"


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _directory_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "it is a symlink"
    if exc.errno == errno.ENOTDIR:
        return "it is not a directory"
    return f"it cannot be opened ({_reason(exc)})"


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
