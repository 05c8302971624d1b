"""The trace file format, version 1 (docs/trace-format.md): reading a file back, and the
copies the recorder makes of mutable arguments. Writing is in ``_lines.py``."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from .._structs import aclrtPhysicalMemProp
from ._checks import (
    check_call,
    check_end,
    check_stack,
    check_thread,
    clean_header,
    cut,
    known_fields,
    shown,
)
from ._lines import BY_WRITTEN, CALLS, FORMAT_NAME, FORMAT_VERSION
from ._open import file_kind
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
    #: The first :data:`PROBLEMS_KEPT` problems, ``FILE:LINE: what``: lines left out,
    #: header fields ignored. ``problem_count`` counts them all.
    problems: list[str] = field(default_factory=list)
    problem_count: int = 0

    def note(self, line: int, problem: str) -> None:
        """Remember a problem found on ``line``."""
        self.problem_count += 1
        if len(self.problems) < PROBLEMS_KEPT:
            self.problems.append(f"{self.path}:{line}: {problem}")

    @property
    def calls(self) -> int:
        """Number of call records."""
        return sum(1 for e in self.events if "call" in e)


#: Bytes a line may take (its newline not counted): a longer one is skipped unread.
LINE_LIMIT = 1 << 20
#: Problems kept word for word (:attr:`Trace.problems`); the rest are only counted.
PROBLEMS_KEPT = 20


def _open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """The file, opened for reading only if it is a regular file: a FIFO is opened
    without waiting for a writer (O_NONBLOCK), then refused with the rest."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) |
                 getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise TraceFormatError(f"{os.fspath(path)}: {file_kind(mode)}; a trace is read "
                                   "only from a regular file")
        # Left non-blocking: a regular file never waits anyway, and a /proc or FUSE file
        # that waits for data (/proc/kmsg) then ends the reading instead of hanging.
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _lines(handle: BinaryIO, size: int) -> Iterator[tuple[int, bytes | None, int]]:
    """(line number, the line or None when longer than LINE_LIMIT, bytes taken), of the
    first ``size`` bytes: a file still being written is read as it was when opened, not
    followed for as long as its writer goes on (a line cut there reads as cut short)."""
    number = 0
    left = size
    while left > 0:
        line = handle.readline(min(LINE_LIMIT + 1, left))
        if not line:
            return
        left -= len(line)
        number += 1
        if len(line) <= LINE_LIMIT or line.endswith(b"\n"):
            yield number, line, len(line)
            continue
        taken = len(line)
        while not line.endswith(b"\n") and left > 0:  # the rest of it, a piece at a time
            line = handle.readline(min(1 << 16, left))
            if not line:
                break
            left -= len(line)
            taken += len(line)
        yield number, None, taken


def _parsed(line: bytes | None) -> tuple[object, str | None]:
    """A line's JSON value, or why it has none."""
    if line is None:
        return None, f"longer than {LINE_LIMIT} bytes"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    try:
        value = json.loads(text)
    except RecursionError:
        return None, "not JSON: nested too deeply"
    except ValueError as exc:
        return None, f"not JSON: {cut(str(exc), 80)}"
    # A \ud800 escape without its pair (a file name that was not UTF-8, recorded with
    # its undecodable bytes) decodes to a string no UTF-8 output can hold: each such
    # character becomes "?", the record is kept.
    if "\\ud" in text or "\\uD" in text:
        try:
            value = _mended(value)
        except RecursionError:
            return None, "not JSON: nested too deeply"
    return value, None


def _mended(value: object) -> object:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_mended(k): _mended(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mended(item) for item in value]
    return value


def read_trace(path: str | os.PathLike[str], *, progress: Progress | None = None) -> Trace:
    """Read a trace file of any version up to :data:`FORMAT_VERSION`; TraceFormatError if
    it is not one (or not a regular file), OSError if it cannot be read. A damaged line
    is left out and named in :attr:`Trace.problems`. ``progress`` is told the bytes read
    (its total set to the file's size)."""
    name = os.fspath(path)
    with _open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if progress is not None:
            progress.total = size
        return _read(name, handle, size, progress)


def _read(name: str, handle: BinaryIO, size: int, progress: Progress | None) -> Trace:
    lines = _lines(handle, size)
    first = next(lines, None)
    if first is None:
        raise TraceFormatError(f"{name}: the file is empty; not an acl_mem trace")
    header, problem = _parsed(first[1])
    if problem:
        raise TraceFormatError(f"{name}: line 1 is {problem}; not an acl_mem trace")
    if not isinstance(header, dict) or header.get("type") != "header" or \
            header.get("format") != FORMAT_NAME:
        raise TraceFormatError(f"{name}: line 1 is not an {FORMAT_NAME} header; not an "
                               "acl_mem trace")
    version = header.get("version")
    if type(version) is not int or version < 1 or version > FORMAT_VERSION:
        raise TraceFormatError(f"{name}: trace format version {shown(version)}; this "
                               f"acl_mem reads versions 1 to {FORMAT_VERSION}")
    clean, problems = clean_header(header)
    trace = Trace(name, clean)
    for problem in problems:
        trace.note(1, problem)
    keyed: list[tuple[int, int, dict[str, Any]]] = []
    read = first[2]
    for number, line, taken in lines:
        read += taken
        if progress is not None:
            progress.update(read)
        if line is not None and not line.strip():
            continue  # a blank line holds nothing to lose
        item, problem = _parsed(line)
        if problem is None:
            problem = "not a JSON object" if not isinstance(item, dict) else \
                _take(trace, keyed, number, item)
        if problem is not None:
            if line is not None and not line.endswith(b"\n") and problem.startswith("not JSON"):
                problem += " (the last line is cut short: the recording was killed?)"
            trace.bad_lines += 1
            trace.note(number, problem)
    keyed.sort(key=lambda k: (k[0], k[1]))
    trace.events = [item for _, _, item in keyed]
    return trace


def _take(trace: Trace, keyed: list[tuple[int, int, dict[str, Any]]], number: int,
          item: dict[str, Any]) -> str | None:
    """File one line's object; the reason it is rejected when one of its fields is not of
    the format's type and range (a damaged, hand-edited or forged line), so that readers
    never meet a record they must doubt."""
    kind = item.get("type")
    if "call" in item:
        problem = check_call(item)
        if problem is None:
            keyed.append((item.get("t", 0), number, known_fields(item)))
        return problem
    if kind == "backend":
        problem = check_call(item)
        if problem is None:
            clean, problems = clean_header(item)
            for field_problem in problems:
                trace.note(number, field_problem)
            clean.update(type="backend", t=item.get("t", 0))
            keyed.append((clean["t"], number, clean))
        return problem
    if kind == "thread":
        problem = check_thread(item)
        if problem is None:
            trace.threads[item["th"]] = known_fields(item)
        return problem
    if kind == "stack":
        problem, frames = check_stack(item)
        if problem is None:
            trace.stacks[item["id"]] = frames
        return problem
    if kind == "end":
        problem = check_end(item)
        if problem is None:
            trace.end = known_fields(item)
        return problem
    # Other kinds belong to later versions of the format: skipped.
    return None


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
