"""What one share record says, and how it is written (docs/runtime-model.md §4.6).

A record file starts with :data:`MAGIC`, then holds one JSON object: the exporter (pid
and process start time), its memfd number and that memfd's inode, the range, flags, the
pid whitelist, whether the exporter has freed its handle, and the importers holding the
memory. The magic line is how the fake knows a file is one it wrote: nothing without it
is ever removed (docs/fidelity.md row 56).

A process is named by (pid, start time from field 22 of ``/proc/<pid>/stat``) so that a
pid reused by an unrelated process is not taken for a holder, an exporter or a
whitelisted importer.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field

__all__ = ["MAGIC", "Allowed", "DamagedRecord", "Identity", "Record", "identity_of",
           "is_alive", "self_identity"]

#: First bytes of every file the registry writes; version 2 added whitelist start times.
MAGIC = b"acl_mem fake share record 2\n"
#: (pid, start time in clock ticks after boot): one process, never a later one.
Identity = tuple[int, int]
_U64 = (1 << 64) - 1
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


def _ticks_now() -> int:
    """Now, in the clock of field 22 (ticks since boot, suspend included)."""
    return math.floor(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


@dataclass(frozen=True)
class Allowed:
    """One whitelisted pid. ``exact``: the process that ran under it when it was
    whitelisted (started at ``start``); otherwise none ran, and a process started under
    it at or after ``start`` (the moment of whitelisting) is the one meant."""

    pid: int
    start: int
    exact: bool

    @classmethod
    def now(cls, pid: int) -> Allowed:
        who = identity_of(pid)
        if who is not None:
            return cls(pid, who[1], True)
        return cls(pid, _ticks_now(), False)

    def admits(self, who: Identity) -> bool:
        if who[0] != self.pid:
            return False
        return who[1] == self.start if self.exact else who[1] >= self.start


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
    allowed: list[Allowed] = field(default_factory=list)
    holders: list[Identity] = field(default_factory=list)
    owner_freed: bool = False

    def owner_gone(self) -> bool:
        return self.owner_freed or not is_alive(self.owner)

    def admits(self, who: Identity) -> bool:
        return any(entry.admits(who) for entry in self.allowed)

    def allow(self, pids: list[int]) -> None:
        entries = set(self.allowed) | {Allowed.now(pid) for pid in pids}
        # Of the entries for a pid nothing ran under, the earliest admits every later
        # one's processes: keeping one stops repeated calls from growing the record.
        earliest: dict[int, Allowed] = {}
        for entry in entries:
            if not entry.exact and (entry.pid not in earliest or
                                    entry.start < earliest[entry.pid].start):
                earliest[entry.pid] = entry
        kept = {e for e in entries if e.exact or earliest[e.pid] is e}
        self.allowed = sorted(kept, key=lambda e: (e.pid, e.start, e.exact))

    def drop_dead_holders(self) -> bool:
        """Forget holders that no longer run; True if any went."""
        alive = [who for who in self.holders if is_alive(who)]
        changed = len(alive) != len(self.holders)
        self.holders = alive
        return changed

    def encode(self) -> bytes:
        return MAGIC + json.dumps({
            "pid": self.owner[0], "start": self.owner[1], "fd": self.fd,
            "dev": self.inode[0], "ino": self.inode[1], "offset": self.offset,
            "size": self.size, "device": self.device, "flags": self.flags,
            "memAttr": self.mem_attr,
            "pids": [[e.pid, e.start, e.exact] for e in self.allowed],
            "holders": [list(who) for who in self.holders], "owner_freed": self.owner_freed,
        }).encode()

    @classmethod
    def decode(cls, data: bytes) -> Record:
        """The record in ``data`` (which starts with :data:`MAGIC`)."""
        try:
            raw = json.loads(data[len(MAGIC):])
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise DamagedRecord(f"not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise DamagedRecord(f"a JSON {type(raw).__name__}, not an object")
        holders = _pairs(raw.get("holders"), 2, "'holders' is not a list of [pid, start]")
        pids = _pairs(raw.get("pids"), 3, "'pids' is not a list of [pid, start, exact]")
        freed = raw.get("owner_freed")
        if not isinstance(freed, bool):
            raise DamagedRecord("'owner_freed' is not true or false")
        allowed = []
        for pid, start, exact in pids:
            if not isinstance(exact, bool):
                raise DamagedRecord("a whitelist entry's 'exact' is not true or false")
            allowed.append(Allowed(_whole(pid, "a whitelisted pid", low=-(1 << 31)),
                                   _whole(start, "a whitelisted start"), exact))
        return cls(
            owner=(_whole(raw.get("pid"), "pid"), _whole(raw.get("start"), "start")),
            fd=_whole(raw.get("fd"), "fd"),
            inode=(_whole(raw.get("dev"), "dev"), _whole(raw.get("ino"), "ino")),
            offset=_whole(raw.get("offset"), "offset"), size=_whole(raw.get("size"), "size"),
            device=_whole(raw.get("device"), "device"),
            flags=_whole(raw.get("flags"), "flags"),
            mem_attr=_whole(raw.get("memAttr"), "memAttr"),
            allowed=allowed,
            holders=[(_whole(p, "a holder's pid"), _whole(s, "a holder's start"))
                     for p, s in holders],
            owner_freed=freed,
        )


def _pairs(value: object, width: int, why: str) -> list[list[object]]:
    if not isinstance(value, list) or not all(
            isinstance(item, list) and len(item) == width for item in value):
        raise DamagedRecord(why)
    return value


def _whole(value: object, what: str, *, low: int = 0) -> int:
    # bool is an int to Python, never to the record.
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= _U64:
        raise DamagedRecord(f"{what} is {value!r}, not a whole number")
    return value
