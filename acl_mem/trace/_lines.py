"""Writing trace files, version 1 (docs/trace-format.md): which calls are recorded, how the
recorder keeps them, and how each becomes one JSON line.

Standard library only: besides its use inside acl_mem, this file runs as the recorder's
writer process (``python -I -S _lines.py FILE FD``, FD the file the recorder opened and
checked), which reads batches of recorded calls from its standard input and writes the
file, so that turning calls into text takes another core instead of the recording
program's time.

A batch is one flat list. A call in its common shape is stored as consecutive plain
values, ``code, t_ns, thread_ident[, current], *arguments, *result`` (``code`` indexes
:data:`CALL_ORDER`; ``current`` is ``(device,)`` or None, the thread's current device;
``arguments`` are the backend method's positional parameters, ``null_outputs`` included
where it has one; ``result`` is the return code and outputs, nothing for the pools'
notifications): no object per call stays alive for the garbage collector to visit.
When stacks are recorded a flat call is preceded by ``STACKED, stack``.
Anything else is *boxed*: ``BOXED, item``, where ``item`` is either a call
``(t_ns, ident, current, name, args, kwargs, result, stack)`` (``result`` is
``(RAISED, class name, message)`` when the call raised; ``stack`` None or
``((file, line, function), ...)``, innermost first) or a control item ``(kind, t_ns,
payload)`` with ``kind`` one of ``#process``, ``#backend``, ``#threads``, ``#sync``,
``#end``, or ``#captured``: then ``t_ns`` is a count of records lost and ``payload`` the
records acl_mem's fake library captured (:data:`CAPTURED_HEAD`), which stand where the
item stands.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import pickle
import stat
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

FORMAT_NAME = "acl_mem.trace"
FORMAT_VERSION = 1
#: The first element of a recorded result when the call raised.
RAISED = "!raised"
#: The code of a boxed item in a batch, and of a stack for the flat call that follows.
BOXED = -1
STACKED = -2
#: Frames of the writer process's input: an 8-byte little-endian length, then a tag byte
#: and the batch, marshalled (``M``) or pickled (``P``).
FRAME = struct.Struct("<Q")
MARSHAL = b"M"
PICKLE = b"P"


@dataclass(frozen=True)
class CallSpec:
    """How one traced backend call is written.

    ``fields`` names the positional arguments in the file and ``params`` the same
    arguments in the Backend protocol; calls with ``outputs`` also take ``null_outputs``
    last. ``release``: the call gives something back, so its time is taken before the
    call (an allocation's after): a free always sorts before the allocation that reuses
    its address. ``device``: the record carries the thread's current device.
    """

    name: str
    written: str
    fields: tuple[str, ...]
    params: tuple[str, ...]
    outputs: tuple[str, ...] = ()
    release: bool = False
    device: bool = False
    returns_code: bool = True

    @property
    def takes_null_outputs(self) -> bool:
        """Whether the backend method has a ``null_outputs`` parameter (last)."""
        return bool(self.outputs)


def _spec(name: str, arguments: str = "", outputs: str = "", *, release: bool = False,
          device: bool = False, written: str = "", returns_code: bool = True) -> CallSpec:
    """``arguments`` is ``"file_name:protocolName ..."`` (``name`` alone when both agree)."""
    pairs = [a.split(":") if ":" in a else (a, a) for a in arguments.split()]
    return CallSpec(name, written or name, tuple(p[0] for p in pairs),
                    tuple(p[1] for p in pairs), tuple(outputs.split()), release, device,
                    returns_code)


_MALLOC = ("size policy", "ptr")
#: Every traced backend call, by its name on the backend (docs/trace-format.md lists them).
CALLS: dict[str, CallSpec] = {spec.name: spec for spec in (
    _spec("aclInit", "config:config_path"),
    _spec("aclFinalize", release=True),
    _spec("aclrtSetDevice", "device:deviceId"),
    _spec("aclrtResetDevice", "device:deviceId", release=True),
    _spec("aclrtResetDeviceForce", "device:deviceId", release=True),
    _spec("aclrtCreateContext", "device:deviceId", "context"),
    _spec("aclrtDestroyContext", "context", release=True),
    _spec("aclrtSetCurrentContext", "context"),
    _spec("aclrtMalloc", *_MALLOC, device=True),
    _spec("aclrtMallocAlign32", *_MALLOC, device=True),
    _spec("aclrtMallocCached", *_MALLOC, device=True),
    _spec("aclrtFree", "ptr:devPtr", release=True),
    _spec("aclrtMallocHost", "size", "ptr"),
    _spec("aclrtFreeHost", "ptr:hostPtr", release=True),
    _spec("acldvppMalloc", "size", "ptr", device=True),
    _spec("acldvppFree", "ptr:devPtr", release=True),
    _spec("hi_mpi_dvpp_malloc", "device_id:dev_id size", "ptr", device=True),
    _spec("hi_mpi_dvpp_free", "ptr:dev_ptr", release=True),
    _spec("aclrtGetMemInfo", "attr", "free total", device=True),
    _spec("aclrtCreateStream", "", "stream", device=True),
    _spec("aclrtDestroyStream", "stream", release=True),
    _spec("aclrtDestroyStreamForce", "stream", release=True),
    _spec("aclrtSynchronizeStream", "stream"),
    _spec("aclrtSynchronizeDevice", device=True),
    _spec("aclrtReserveMemAddress", "size alignment expect:expectPtr flags", "ptr"),
    _spec("aclrtReleaseMemAddress", "ptr:virPtr", release=True),
    _spec("aclrtMallocPhysical", "size prop flags", "handle", device=True),
    _spec("aclrtFreePhysical", "handle", release=True),
    _spec("aclrtMapMem", "ptr:virPtr size offset handle flags"),
    _spec("aclrtUnmapMem", "ptr:virPtr", release=True),
    _spec("aclrtMemExportToShareableHandle", "handle handle_type:handleType flags",
          "shareable"),
    _spec("aclrtMemImportFromShareableHandle", "shareable:shareableHandle device:deviceId",
          "handle"),
    _spec("aclrtMemRetainAllocationHandle", "ptr:virPtr", "handle"),
    # The pools' notifications (the Backend protocol's checker hooks), made after the
    # pool's own change, under its lock.
    _spec("checker_segment_allocated", "parent ptr:start size:requested extent:size",
          written="pool.segment_allocated", device=True, returns_code=False),
    _spec("checker_segment_freed", "ptr:start", written="pool.segment_freed",
          returns_code=False),
)}
#: Call codes of the flat shape: the position in this tuple.
CALL_ORDER: tuple[str, ...] = tuple(CALLS)
#: Inputs the record shows by what they point to, not as a number: a path (a string) or
#: a structure (aclrtPhysicalMemProp).
POINTED_FIELDS = {"config": "string", "prop": "prop"}
#: The calls acl_mem's fake library records itself while capturing (the others' inputs
#: point to what it does not write): those returning a code with numbers for inputs.
LIBRARY_CAPTURED = frozenset(
    name for name, spec in CALLS.items()
    if spec.returns_code and not POINTED_FIELDS.keys() & set(spec.fields))
#: The calls by the name the file gives them.
BY_WRITTEN: dict[str, CallSpec] = {spec.written: spec for spec in CALLS.values()}


def _value(value: object) -> str:
    if type(value) is int:
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    try:
        return json.dumps(value, default=repr, separators=(",", ":"))
    except (TypeError, ValueError):
        return json.dumps(repr(value))


def meta_line(kind: str, t: int | None, body: Mapping[str, object]) -> str:
    """A line of another kind than a call (header, thread, stack, backend, end)."""
    data: dict[str, object] = {"type": kind}
    if t is not None:
        data["t"] = t
    data.update(body)
    return json.dumps(data, default=repr, separators=(",", ":")) + "\n"


@dataclass(frozen=True)
class _Layout:
    """A call's flat shape and its %-templates (the common case costs one format)."""

    spec: CallSpec
    #: Values after code: t, ident, [current], arguments, result.
    size: int
    arguments: int
    result: int
    done: str
    failed: str


def _layout(spec: CallSpec) -> _Layout:
    head = '{"t":%d,"th":%d' + (',"dev":%s' if spec.device else "") + \
        f',"call":"{spec.written}"' + "".join(f',"{k}":%d' for k in spec.fields)
    arguments = len(spec.fields) + spec.takes_null_outputs
    if not spec.returns_code:
        result, done, failed = 0, head + "}\n", head + "}\n"
    else:
        result = 1 + len(spec.outputs)
        done = head + ',"rc":%d' + "".join(f',"{k}":%d' for k in spec.outputs) + "}\n"
        failed = head + ',"rc":%d}\n'
    return _Layout(spec, 2 + spec.device + arguments + result, arguments, result, done,
                   failed)


LAYOUTS: tuple[_Layout, ...] = tuple(_layout(CALLS[name]) for name in CALL_ORDER)
#: Per code: (values after the code, with device, index of null_outputs among them or 0,
#: outputs after the return code, returns a code, template of a success, of a failure).
_FAST: tuple[tuple[int, bool, int, int, bool, str, str], ...] = tuple(
    (lay.size, lay.spec.device,
     (2 + lay.spec.device + len(lay.spec.fields)) if lay.spec.takes_null_outputs else 0,
     len(lay.spec.outputs), lay.spec.returns_code, lay.done, lay.failed) for lay in LAYOUTS)

Stack = tuple[tuple[str, int, str], ...]


class LineWriter:
    """Turns recorded calls into lines. Threads and stacks get their own line the first
    time a call uses them; calls refer to them by number. A call timed before the
    recording began (a release is timed at its entry, which may come before) is written
    at its start, t 0."""

    def __init__(self, t0: int, stack_depth: int) -> None:
        self.t0 = t0
        self.stack_depth = stack_depth
        self.thread_names: dict[int, str] = {}
        self.calls = 0
        self._threads: dict[int, int] = {}
        self._stacks: dict[Stack, int] = {}
        self._keywords = {name: dict(zip(spec.params, spec.fields, strict=True))
                          for name, spec in CALLS.items()}

    def _thread(self, ident: int, out: list[str]) -> int:
        number = self._threads[ident] = len(self._threads) + 1
        out.append(meta_line("thread", None, {"th": number, "ident": ident,
                                              "name": self.thread_names.get(ident, "")}))
        return number

    def _stack(self, frames: Stack, out: list[str]) -> int:
        frames = tuple(tuple(f) for f in frames[:self.stack_depth])  # type: ignore[misc]
        number = self._stacks.get(frames)
        if number is None:
            number = self._stacks[frames] = len(self._stacks) + 1
            out.append(meta_line("stack", None, {"id": number, "frames": [
                list(f) for f in frames]}))
        return number

    def flat(self, code: int, values: list[Any], out: list[str],
             stack: Stack | None = None) -> None:
        """One call stored flat: ``values`` is what follows its code."""
        if not self.stack_depth:
            stack = None
        layout = LAYOUTS[code]
        spec = layout.spec
        t, ident = values[0], values[1]
        th = self._threads.get(ident) or self._thread(ident, out)
        self.calls += 1
        start = 3 if spec.device else 2
        current = values[2] if spec.device else None
        end = start + layout.arguments
        arguments = values[start:end]
        result = values[end:]
        if not stack and (not spec.takes_null_outputs or arguments[-1] == 0):
            shown = arguments[:-1] if spec.takes_null_outputs else arguments
            since = max(t - self.t0, 0)
            head = (since, th, "null" if current is None else current[0]) \
                if spec.device else (since, th)
            try:
                if not result:
                    out.append(layout.done % (*head, *shown))
                elif result[0] == 0:
                    out.append(layout.done % (*head, *shown, *result))
                else:
                    out.append(layout.failed % (*head, *shown, result[0]))
                return
            except TypeError:
                pass  # not plain numbers: the general path below
        rc: Any = (result[0] if len(result) == 1 else tuple(result)) if result else None
        self._general(t, th, current, spec.name, tuple(arguments), None, rc, stack, out)

    def boxed(self, record: tuple[Any, ...], out: list[str]) -> None:
        """A call in the general shape."""
        t, ident, current, name, args, kwargs, result, stack = record
        if not self.stack_depth:
            stack = None  # another recorder of the process wanted stacks
        th = self._threads.get(ident) or self._thread(ident, out)
        self.calls += 1
        self._general(t, th, current, name, args, kwargs, result, stack, out)

    def _general(self, t: int, th: int, current: Any, name: str, args: tuple[Any, ...],
                 kwargs: dict[str, Any] | None, result: Any, stack: Stack | None,
                 out: list[str]) -> None:
        spec = CALLS[name]
        parts = ['{"t":', str(max(t - self.t0, 0)), ',"th":', str(th)]
        if spec.device:
            parts += [',"dev":', "null" if current is None else _value(current[0])]
        parts.append(f',"call":"{spec.written}"')
        for key, value in zip(spec.fields, args, strict=False):
            parts += [',"', key, '":', _value(value)]
        null_outputs = args[len(spec.fields)] if len(args) > len(spec.fields) else 0
        if kwargs:
            renamed = self._keywords[name]
            for key, value in kwargs.items():
                if key == "null_outputs":
                    null_outputs = value
                else:
                    parts += [',"', renamed.get(key, key), '":', _value(value)]
        if null_outputs:
            parts += [',"null_outputs":', _value(null_outputs)]
        if type(result) is tuple and result and result[0] == RAISED:
            parts += [',"raised":', json.dumps(str(result[1])), ',"message":',
                      json.dumps(str(result[2]))]
        elif spec.returns_code:
            rc = result[0] if type(result) is tuple and result else result
            parts += [',"rc":', _value(rc)]
            if rc == 0 and type(result) is tuple:
                for key, value in zip(spec.outputs, result[1:], strict=False):
                    parts += [',"', key, '":', _value(value)]
        if stack:
            parts += [',"stack":', str(self._stack(stack, out))]
        parts.append("}\n")
        out.append("".join(parts))


#: A captured record's head: the call's code, the count of 8-byte values after it, and a
#: mask of those that are signed (acl_mem/_fake/src/trace.c, capture()); the machine's
#: own byte order: the library and this reader run on one machine.
CAPTURED_HEAD = struct.Struct("=BBxxI")
_LITTLE = sys.byteorder == "little"
#: The positions a signed mask names, by mask.
_signed_positions: dict[int, tuple[int, ...]] = {}


def _positions(mask: int) -> tuple[int, ...]:
    found = _signed_positions[mask] = tuple(b for b in range(32) if mask >> b & 1)
    return found


def count_captured(data: bytes) -> int:
    """How many records the fake library captured ``data`` holds (whole ones)."""
    count = i = 0
    while i + CAPTURED_HEAD.size <= len(data):
        i += CAPTURED_HEAD.size + 8 * CAPTURED_HEAD.unpack_from(data, i)[1]
        count += i <= len(data)
    return count


def flat_captured(data: bytes) -> tuple[list[Any], int]:
    """Records the fake library captured (CAPTURED_HEAD, then the values) as calls in
    the flat shape, and 1 if they end in bytes that are not a whole record of a traced
    call (read no further), else 0."""
    out: list[Any] = []
    try:
        words: list[Any] = memoryview(data).cast("Q").tolist()
    except (TypeError, ValueError):
        return out, 1
    i, n = 0, len(words)
    while i < n:
        head = words[i]
        if _LITTLE:
            code, count, signed = head & 0xFF, head >> 8 & 0xFF, head >> 32
        else:
            code, count, signed = head >> 56, head >> 48 & 0xFF, head & 0xFFFFFFFF
        j = i + 1
        i = j + count
        if code >= len(LAYOUTS) or count != LAYOUTS[code].size or i > n or \
                not LAYOUTS[code].spec.returns_code:
            return out, 1
        values = words[j:i]
        for bit in _signed_positions.get(signed) or _positions(signed):
            if values[bit] >> 63:
                values[bit] -= 1 << 64
        if LAYOUTS[code].spec.device:
            values[2] = None if values[2] < 0 else (values[2],)
        out.append(code)
        out += values
    return out, 0


def _refuse_others_library(path: str) -> None:
    """OSError unless ``path`` is a regular file that no one but this user (or root) can
    change, in a directory the same holds for: the writer runs code from it, and the name
    came from the environment (ACL_MEM_FAKE_LIBRARY_DIR) long before."""
    me = os.geteuid()
    for place in (path, os.path.dirname(path)):
        info = os.stat(place)
        if info.st_uid not in (me, 0) or info.st_mode & 0o022:
            raise PermissionError(f"{place} can be changed by another user: not loaded")
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(f"{path} is not a regular file")


class LibraryLines:
    """The fake library's own formatter of the records it captured
    (``acl_mem_fake_trace_lines``), about ten times faster than formatting them here.
    Loaded with ctypes: this file runs as the writer process with the standard library
    only."""

    _OUT = 256 * 1024

    def __init__(self, path: str, *, own_process: bool) -> None:
        import ctypes

        path = os.path.realpath(path)
        _refuse_others_library(path)
        lib = ctypes.CDLL(path)
        if own_process:
            # The writer makes no ACL call: at its exit the library's leak report must not
            # start an engine to find nothing.
            lib.acl_mem_fake_set_leak_report(0)
        call = lib.acl_mem_fake_trace_lines
        call.restype = ctypes.c_long
        call.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                         ctypes.c_int64, ctypes.POINTER(ctypes.c_uint64),
                         ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint32, ctypes.c_void_p,
                         ctypes.c_size_t]
        self._ctypes = ctypes
        self._call = call
        self._threads = (ctypes.c_uint64 * 64)()
        self._count = ctypes.c_uint32(0)
        self._used = ctypes.c_size_t(0)
        self._out = ctypes.create_string_buffer(self._OUT)

    def write(self, data: bytes, lines: LineWriter, out: list[str]) -> int:
        """Append the lines of ``data`` (thread lines first where a thread is new);
        returns 1 if the records ended in something that is not a record, else 0."""
        ctypes = self._ctypes
        threads = lines._threads
        known = len(threads)
        if known > len(self._threads):
            self._grow(known)
        if self._count.value != known:  # (threads the Python-written calls numbered)
            for number, ident in enumerate(threads):
                self._threads[number] = ident
            self._count.value = known
        keep = ctypes.c_char_p(data)  # the bytes' own memory, no copy
        base = ctypes.cast(keep, ctypes.c_void_p).value or 0
        position, size = 0, len(data)
        while position < size:
            written = self._call(base + position, size - position, ctypes.byref(self._used),
                                 lines.t0, self._threads, ctypes.byref(self._count),
                                 len(self._threads), self._out, self._OUT)
            if written > 0:
                text = ctypes.string_at(self._out, written).decode("ascii")
                out.append(text)
                lines.calls += text.count("\n")
            elif written < 0:
                return 1
            new = self._count.value
            for number in range(known, new):  # its line before its first call's
                lines._thread(self._threads[number], out)
            if self._used.value == 0 and written == 0 and new == known:
                self._grow(2 * len(self._threads))  # the table was full
            known = new
            position += self._used.value
        return 0

    def _grow(self, at_least: int) -> None:
        bigger = (self._ctypes.c_uint64 * max(at_least, 2 * len(self._threads)))()
        for i in range(self._count.value):
            bigger[i] = self._threads[i]
        self._threads = bigger


def has_calls(batch: list[Any]) -> bool:
    """Whether a batch holds at least one call."""
    i, n = 0, len(batch)
    while i < n:
        code = batch[i]
        if code != BOXED:
            return True  # (a flat call, or the stack of one)
        item = batch[i + 1]
        if type(item[0]) is int or (item[0] == "#captured" and item[2]):
            return True
        i += 2
    return False


class Consumer:
    """Turns batches into the file: in the writer process, or in the recording process
    itself when no writer process could be started."""

    def __init__(self, path: str, fd: int, *, own_process: bool = False) -> None:
        self.path = path
        #: Running as the writer process (not inside the recording program).
        self._own_process = own_process
        self._formatters: dict[str, LibraryLines | None] = {}
        #: The file, opened and checked by the recorder (None once closed or failed).
        self._fd: int | None = fd
        self._process: dict[str, object] = {}
        self._lines = LineWriter(0, 0)
        self._header_written = False
        self._info: dict[str, object] | None = None
        self.lost = 0
        #: Called once a batch with a ``#sync`` item is written (the writer process
        #: answers its recorder).
        self.on_sync: Any = None

    def _header(self, info: Mapping[str, object] | None) -> str:
        header: dict[str, object] = {"format": FORMAT_NAME, "version": FORMAT_VERSION}
        header.update(self._process)
        header.update(info or {"backend": None})
        self._header_written = True
        return meta_line("header", None, header)

    def feed(self, batch: list[Any]) -> None:
        """Format and write one batch."""
        out: list[str] = []
        end: int | None = None
        synced = False
        lines = self._lines
        threads = lines._threads
        stack: Stack | None = None
        i, n = 0, len(batch)
        while i < n:
            code = batch[i]
            if code == STACKED:
                stack = batch[i + 1]
                i += 2
                continue
            if code != BOXED:
                # The common shape, written out here: this loop is the writer's hot path.
                size, device, null_at, outputs, returns_code, done, failed = _FAST[code]
                j = i + 1
                i = j + size
                if not self._header_written:
                    out.append(self._header(self._info))
                if stack is not None:
                    try:
                        lines.flat(code, batch[j:i], out, stack)
                    except Exception:
                        self.lost += 1
                    stack = None
                    continue
                try:
                    values = batch[j:i]
                    ident = values[1]
                    th = threads.get(ident) or lines._thread(ident, out)
                    values[0] = max(values[0] - lines.t0, 0)
                    values[1] = th
                    if device:
                        current = values[2]
                        values[2] = "null" if current is None else current[0]
                    if null_at:
                        if values[null_at]:
                            raise ValueError  # NULL outputs asked for: the general path
                        del values[null_at]
                    if not returns_code:
                        out.append(done % tuple(values))
                    elif values[-1 - outputs]:
                        if outputs:
                            del values[-outputs:]
                        out.append(failed % tuple(values))
                    else:
                        out.append(done % tuple(values))
                    lines.calls += 1
                except (TypeError, ValueError, IndexError):
                    try:
                        lines.flat(code, batch[j:i], out)
                    except Exception:
                        self.lost += 1
                continue
            try:
                item = batch[i + 1]
                i += 2
                if type(item[0]) is int:
                    lines.boxed(item, out)
                elif item[0] == "#end":
                    end = int(item[1])
                    self.lost += int(item[2])
                elif item[0] == "#sync":
                    synced = True
                elif item[0] == "#captured":
                    self.lost += int(item[1])
                    formatter = self._formatter(item[3])
                    if formatter is not None:
                        if not self._header_written:
                            out.append(self._header(self._info))
                        self.lost += formatter.write(item[2], lines, out)
                    else:
                        # Python formats them: they stand here, in the flat shape.
                        flat, broken = flat_captured(item[2])
                        self.lost += broken
                        batch = flat + batch[i:]
                        i, n = 0, len(batch)
                else:
                    self._control(item, out)
                    if lines is not self._lines:
                        lines = self._lines
                        threads = lines._threads
            except Exception:
                self.lost += 1
        if out:
            self._write("".join(out))
        if end is not None:
            self.close(end)
        if synced and self.on_sync is not None:
            self.on_sync()

    def _formatter(self, path: str) -> LibraryLines | None:
        """The fake library's formatter of captured records (None where it cannot be
        loaded: then Python formats them, slower)."""
        if path not in self._formatters:
            try:
                self._formatters[path] = LibraryLines(path, own_process=self._own_process)
            except (OSError, AttributeError, TypeError):
                self._formatters[path] = None
        return self._formatters[path]

    def _control(self, item: tuple[Any, ...], out: list[str]) -> None:
        kind, t, payload = item
        if kind == "#process":
            self._process = dict(payload)
            t0: Any = self._process.pop("t0")
            depth: Any = self._process.get("stack_depth") or 0
            names = self._lines.thread_names
            self._lines = LineWriter(int(t0), int(depth))
            self._lines.thread_names.update(names)
        elif kind == "#threads":
            self._lines.thread_names.update(payload)
        elif kind == "#backend":
            self._info = dict(payload)
            if not self._header_written:
                out.append(self._header(self._info))
            else:
                out.append(meta_line("backend", t - self._lines.t0, payload))

    def close(self, t: int | None = None) -> None:
        """Write the ``end`` line (when ``t`` is given) and close the file."""
        if self._fd is None and self._header_written and t is None:
            return
        out = [] if self._header_written else [self._header(self._info)]
        if t is not None:
            out.append(meta_line("end", t - self._lines.t0,
                                 {"calls": self._lines.calls, "lost": self.lost}))
        self._write("".join(out))
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _write(self, text: str) -> None:
        if not text:
            return
        if self._fd is None:
            self.lost += text.count("\n")
            return
        try:
            write_all(self._fd, text.encode("utf-8"))
        except OSError as exc:
            # A full disk, a quota, an I/O error: said once, and the recording stops
            # (a file with holes in it would mislead); the program goes on.
            self.lost += text.count("\n")
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
            with contextlib.suppress(Exception):
                print(f"acl_mem.trace: cannot write {self.path}: {exc.strerror or exc}; "
                      "calls from now on are not recorded", file=sys.stderr, flush=True)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (OSError when the file takes no more)."""
    while data:
        data = data[os.write(fd, data):]


def decode(payload: bytes | memoryview) -> list[Any]:
    """A batch from its tagged bytes."""
    body = memoryview(payload)[1:]
    loaded: list[Any] = marshal.loads(body) if bytes(payload[:1]) == MARSHAL \
        else pickle.loads(body)
    return loaded


def _read_exactly(stream: BinaryIO, count: int) -> bytes | None:
    chunks: list[bytes] = []
    while count:
        chunk = stream.read(count)
        if not chunk:
            return None
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def writer_main(path: str, fd: int, stream: BinaryIO) -> int:
    """The writer process: batches from ``stream`` until it ends (the recorder stopped,
    or its process died: then the file has no end line), written to ``fd`` (the file at
    ``path`` as the recorder opened and checked it)."""
    consumer = Consumer(path, fd, own_process=True)
    answers = sys.stdout.buffer

    def answer() -> None:
        answers.write(b"\x01")
        answers.flush()

    consumer.on_sync = answer
    while True:
        size = _read_exactly(stream, FRAME.size)
        if size is None:
            break
        payload = _read_exactly(stream, FRAME.unpack(size)[0])
        if payload is None:
            break
        consumer.feed(decode(payload))
    consumer.close()
    return 0


def _detach() -> None:
    """Leave the recorded process's children: fork, and let the first process exit (its
    parent reaps it at once); the second writes the file, a child of nobody waiting."""
    if os.fork():
        os._exit(0)


if __name__ == "__main__":
    if sys.argv[3:] == ["detach"]:
        _detach()
    sys.exit(writer_main(sys.argv[1], int(sys.argv[2]), sys.stdin.buffer))
