"""Exported physical memory, visible to other processes of the same user (spec §4.6).

An export writes a record file (owner pid, memfd number, offset, size, flags, the pid
whitelist, and how many processes hold the memory); an importer reads it and opens the
owner's memfd through ``/proc/<pid>/fd``. The memory is given back only when the last
holder frees it. Record updates are serialised with ``flock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["ShareRegistry"]


def _default_directory() -> Path:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return base / f"acl_mem_fake_{os.getuid()}"


class ShareRegistry:
    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or Path(os.environ.get("ACL_MEM_FAKE_SHARE_DIR", "")
                                           or _default_directory())
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, shareable: int) -> Path:
        return self.directory / f"{shareable:016x}.json"

    @contextlib.contextmanager
    def _locked(self, shareable: int) -> Iterator[tuple[Path, dict[str, Any] | None]]:
        path = self._path(shareable)
        lock = self.directory / ".lock"
        with open(lock, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                record = json.loads(path.read_text()) if path.exists() else None
                yield path, record
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def publish(self, shareable: int, record: dict[str, Any]) -> None:
        with self._locked(shareable) as (path, _):
            path.write_text(json.dumps(record))

    def read(self, shareable: int) -> dict[str, Any] | None:
        with self._locked(shareable) as (_, record):
            return record

    def update(self, shareable: int, **changes: Any) -> bool:
        with self._locked(shareable) as (path, record):
            if record is None:
                return False
            record.update(changes)
            path.write_text(json.dumps(record))
            return True

    def release(self, shareable: int) -> bool:
        """One holder is done; True when it was the last (the memory may go)."""
        with self._locked(shareable) as (path, record):
            if record is None:
                return True
            record["holders"] -= 1
            if record["holders"] <= 0:
                path.unlink(missing_ok=True)
                return True
            path.write_text(json.dumps(record))
            return False

    def acquire(self, shareable: int) -> dict[str, Any] | None:
        """Count one more holder; the record, or None if the export is gone."""
        with self._locked(shareable) as (path, record):
            if record is None or record.get("owner_freed"):
                return None
            record["holders"] += 1
            path.write_text(json.dumps(record))
            return record
