"""The trace file format, version 1 (docs/trace-format.md): reading a file back, and the
copies the recorder makes of mutable arguments. Writing is in ``_lines.py``."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._structs import aclrtPhysicalMemProp
from ._lines import BY_WRITTEN, CALLS, FORMAT_NAME, FORMAT_VERSION
from ._progress import Progress

__all__ = ["CALLS", "FORMAT_NAME", "FORMAT_VERSION", "Trace", "TraceFormatError",
           "call_label", "read_trace", "snapshot"]


class TraceFormatError(ValueError):
    """The file is not an acl_mem trace, or one of a version this acl_mem cannot read."""


#: Calls whose arguments include mutable objects, copied when the call is recorded.
SNAPSHOT_ARGUMENTS = frozenset({"aclrtMallocPhysical"})


def _plain(value: object) -> object:
    """Ints (IntEnum members included) as ints; anything else unchanged."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return value


def prop_to_json(prop: object) -> object:
    """An aclrtPhysicalMemProp as a plain dict with the C field names (None stays None)."""
    if isinstance(prop, aclrtPhysicalMemProp):
        location = prop.location
        return {"handleType": _plain(prop.handleType),
                "allocationType": _plain(prop.allocationType),
                "memAttr": _plain(prop.memAttr),
                "location": {"id": _plain(getattr(location, "id", None)),
                             "type": _plain(getattr(location, "type", None))},
                "reserve": _plain(prop.reserve)}
    return prop if prop is None else repr(prop)


def snapshot(name: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None
             ) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
    """Copies of the mutable arguments of ``name`` as they are now."""
    if name == "aclrtMallocPhysical":
        args = tuple(prop_to_json(a) if i == 1 else a for i, a in enumerate(args))
        if kwargs and "prop" in kwargs:
            kwargs = {**kwargs, "prop": prop_to_json(kwargs["prop"])}
    return args, kwargs


@dataclass
class Trace:
    """A trace file read back: the header, the calls in time order, and the rest."""

    path: str
    header: dict[str, Any]
    #: Call records and backend changes, ordered by ``t`` (file order on ties).
    events: list[dict[str, Any]] = field(default_factory=list)
    threads: dict[int, dict[str, Any]] = field(default_factory=dict)
    stacks: dict[int, list[tuple[str, int, str]]] = field(default_factory=dict)
    end: dict[str, Any] | None = None
    #: Lines that could not be read (a process killed while writing leaves half a line).
    bad_lines: int = 0

    @property
    def calls(self) -> int:
        """Number of call records."""
        return sum(1 for e in self.events if "call" in e)


def _lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    with open(path, encoding="utf-8") as handle:
        yield from enumerate(handle, start=1)


def read_trace(path: str | os.PathLike[str], *, progress: Progress | None = None) -> Trace:
    """Read a trace file of any version up to :data:`FORMAT_VERSION`; TraceFormatError if
    it is not one (OSError if it cannot be read). ``progress`` is told the characters read
    (its total set to the file's size)."""
    name = os.fspath(path)
    if progress is not None:
        with contextlib.suppress(OSError):
            progress.total = os.path.getsize(path)
    read = 0
    lines = _lines(path)
    try:
        _, first = next(lines)
        header = json.loads(first)
    except StopIteration:
        raise TraceFormatError(f"{name}: the file is empty; not an acl_mem trace") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"{name}: line 1 is not a JSON object ({exc}); not an "
                               "acl_mem trace") from None
    if not isinstance(header, dict) or header.get("type") != "header" or \
            header.get("format") != FORMAT_NAME:
        raise TraceFormatError(f"{name}: line 1 is not an {FORMAT_NAME} header; not an "
                               "acl_mem trace")
    version = header.get("version")
    if type(version) is not int or version < 1 or version > FORMAT_VERSION:
        raise TraceFormatError(f"{name}: trace format version {version!r}; this acl_mem "
                               f"reads versions 1 to {FORMAT_VERSION}")
    trace = Trace(name, header)
    keyed: list[tuple[int, int, dict[str, Any]]] = []
    try:
        for number, line in lines:
            if progress is not None:
                read += len(line)
                progress.update(read)
            try:
                item = json.loads(line)
            except ValueError:
                trace.bad_lines += 1
                continue
            if not isinstance(item, dict):
                trace.bad_lines += 1
                continue
            kind = item.get("type")
            if "call" in item or kind == "backend":
                keyed.append((int(item.get("t", 0)), number, item))
            elif kind == "thread":
                trace.threads[int(item["th"])] = item
            elif kind == "stack":
                trace.stacks[int(item["id"])] = [
                    (str(f[0]), int(f[1]), str(f[2])) for f in item.get("frames", [])]
            elif kind == "end":
                trace.end = item
            # Other kinds belong to later versions of the format: skipped.
    except UnicodeDecodeError:
        trace.bad_lines += 1
    keyed.sort(key=lambda k: (k[0], k[1]))
    trace.events = [item for _, _, item in keyed]
    return trace


def call_label(record: Mapping[str, Any]) -> str:
    """The record's call with its arguments: ``aclrtMalloc(size=4096, policy=0)``."""
    spec = BY_WRITTEN.get(str(record.get("call")))
    keys = spec.fields if spec else ()
    shown = ", ".join(f"{k}={_shown(record[k])}" for k in (*keys, "null_outputs")
                      if k in record)
    return f"{record.get('call')}({shown})"


def _shown(value: object) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (dict, list)) \
        else str(value)
