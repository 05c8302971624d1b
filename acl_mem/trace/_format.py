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
    trace = Trace(name, _clean_header(header))
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
            if not isinstance(item, dict) or not _take(trace, keyed, number, item):
                trace.bad_lines += 1
    except UnicodeDecodeError:
        trace.bad_lines += 1
    keyed.sort(key=lambda k: (k[0], k[1]))
    trace.events = [item for _, _, item in keyed]
    return trace


def _is_int(value: object) -> bool:
    return type(value) is int


#: Header fields readers use, and the types the format gives them (None always allowed).
_HEADER_TYPES: dict[str, tuple[type, ...]] = {
    "pid": (int,), "parent_pid": (int,), "stack_depth": (int,), "backend": (str,),
    "soc": (str,), "cann": (str,), "acl": (str,), "padding": (int,), "device_count": (int,),
    "memory": (str,), "capacity": (int,), "current_device": (int,), "details": (dict,),
    "started": (str,), "argv": (list,),
}


def _clean_header(header: dict[str, Any]) -> dict[str, Any]:
    """The header with each field of the wrong type (a damaged or hand-edited file) set to
    None, and ``set_counts`` kept only where it maps device numbers to counts."""
    clean = dict(header)
    for key, types in _HEADER_TYPES.items():
        value = clean.get(key)
        if value is not None and (type(value) is bool or not isinstance(value, types)):
            clean[key] = None
    counts = clean.get("set_counts")
    clean["set_counts"] = {
        k: v for k, v in counts.items()
        if isinstance(k, str) and k.isdigit() and _is_int(v) and 0 < v < 1 << 20
    } if isinstance(counts, dict) else {}
    return clean


def _take(trace: Trace, keyed: list[tuple[int, int, dict[str, Any]]], number: int,
          item: dict[str, Any]) -> bool:
    """File one line's object; False if its fields are not of the format's types (a
    damaged or hand-edited line), so that readers never meet a record they must doubt."""
    kind = item.get("type")
    if "call" in item or kind == "backend":
        t = item.get("t", 0)
        if not _is_int(t) or not _is_int(item.get("th", 0)) or \
                ("call" in item and not isinstance(item["call"], str)) or \
                any(item.get(k) is not None and not _is_int(item[k]) for k in ("dev", "stack")) \
                or ("rc" in item and not _is_int(item["rc"])) or \
                ("raised" in item and not isinstance(item["raised"], str)):
            return False
        keyed.append((t, number, item))
    elif kind == "thread":
        if not _is_int(item.get("th")):
            return False
        trace.threads[item["th"]] = item
    elif kind == "stack":
        frames = item.get("frames", [])
        if not _is_int(item.get("id")) or not isinstance(frames, list) or not all(
                isinstance(f, list) and len(f) == 3 and _is_int(f[1]) for f in frames):
            return False
        trace.stacks[item["id"]] = [(str(f[0]), f[1], str(f[2])) for f in frames]
    elif kind == "end":
        if not _is_int(item.get("lost", 0)) or not _is_int(item.get("calls", 0)):
            return False
        trace.end = item
    # Other kinds belong to later versions of the format: skipped.
    return True


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
