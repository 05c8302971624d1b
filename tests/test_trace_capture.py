"""acl_mem.trace on acl_mem's fake library: the library captures the records of most calls
itself (no Python wrapper), and the file is the one the wrappers write."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import acl_mem
from acl_mem import _backend, raw
from acl_mem._fake.library import library_dir
from acl_mem.enums import MemAttr
from acl_mem.errors import AclError
from acl_mem.trace import _lines, _recorder, _tap, record

_ONLY = "the capture is acl_mem's fake library's"
#: Fields holding handles the library makes on its heap: they differ from run to run.
_HANDLES = ("stream", "context", "handle", "shareable")


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _calls(path: Path) -> list[dict[str, Any]]:
    return [r for r in _records(path) if "call" in r]


def _formatter_library(formatter: str, tmp_path: Path) -> str:
    """The library a ``#captured`` item names: the fake's own (its formatter in C), or a
    path that cannot be loaded (the writer formats in Python)."""
    return str(library_dir() / "libascendcl.so") if formatter == "library" \
        else str(tmp_path / "no-such-library.so")


def _free_record(t: int) -> bytes:
    """A captured aclrtFree(0x1000) of thread 7 at ``t`` that returned 0: time, thread,
    ptr, return code (signed)."""
    return _lines.CAPTURED_HEAD.pack(_lines.CALL_ORDER.index("aclrtFree"), 4, 1 << 3) + \
        b"".join(v.to_bytes(8, sys.byteorder, signed=True) for v in (t, 7, 0x1000, 0))


def _written(path: Path, t0: int, items: list[Any], end: int) -> None:
    """The file a writer makes of ``items`` (after the recording's start at ``t0``)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    consumer = _lines.Consumer(str(path), fd)
    consumer.feed([_lines.BOXED, ("#process", 0, {"t0": t0, "stack_depth": 0}), *items])
    consumer.close(end)


def _comparable(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Calls without their times, handles numbered by first appearance."""
    seen: dict[int, int] = {}
    out = []
    for call in calls:
        shown = {k: v for k, v in call.items() if k != "t"}
        for key in _HANDLES:
            if isinstance(shown.get(key), int) and shown[key]:
                shown[key] = f"handle#{seen.setdefault(shown[key], len(seen))}"
        out.append(shown)
    return out


def _script() -> None:
    """Every kind of traced call the layers make, failures and NULL outputs included."""
    with pytest.raises(AclError):
        raw.aclrtGetMemInfo(MemAttr.HBM_MEM)  # no device current: 107002, "dev" null
    dev = acl_mem.Device(0)
    dev.use()
    buffer = dev.malloc(1000)
    ptr = raw.aclrtMallocAlign32(100)
    cached = raw.aclrtMallocCached(5000, acl_mem.MallocPolicy.HUGE_ONLY)
    raw.aclrtFree(ptr)
    with pytest.raises(AclError):
        raw.aclrtFree(ptr)
    with pytest.raises(AclError):
        raw.aclrtMalloc(1 << 50)
    backend = _backend.get()
    assert backend.aclrtMalloc(64, 0, null_outputs=1)[0] != 0
    backend.aclrtGetMemInfo(int(MemAttr.HBM_MEM), null_outputs=2)
    raw.aclrtGetMemInfo(MemAttr.HBM_MEM)
    host = dev.malloc_host(256)
    dvpp = raw.acldvppMalloc(4096)
    raw.acldvppFree(dvpp)
    stream = dev.stream()
    stream.synchronize()
    stream.destroy()
    with acl_mem.SegmentPool(dev) as pool:
        segment = pool.allocate(64)
        segment.free()
    virtual = raw.aclrtReserveMemAddress(2 << 20)
    raw.aclrtReleaseMemAddress(virtual)
    host.free()
    buffer.free()
    raw.aclrtFree(cached)
    dev.synchronize()


def _record(path: Path, capture: bool, script: Callable[[], None]) -> list[dict[str, Any]]:
    acl_mem.fake.reset()
    before = _tap.use_library_capture
    _tap.use_library_capture = capture
    try:
        with record(path):
            backend = _backend.get()
            wrapped = hasattr(backend.aclrtMalloc, "__wrapped__")
            script()
    finally:
        _tap.use_library_capture = before
    assert wrapped is not capture  # the path under test is the one taken
    return _calls(path)


@pytest.mark.fake_only(_ONLY)
def test_a_captured_recording_writes_what_the_wrappers_write(backend, tmp_path):
    wrapped = _record(tmp_path / "wrapped.jsonl", False, _script)
    captured = _record(tmp_path / "captured.jsonl", True, _script)
    assert len(wrapped) > 20
    assert {c["call"] for c in captured} >= {
        "aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached", "aclrtFree",
        "aclrtGetMemInfo", "aclrtMallocHost", "aclrtFreeHost", "acldvppMalloc",
        "acldvppFree", "aclrtCreateStream", "aclrtSynchronizeStream", "aclrtDestroyStream",
        "pool.segment_allocated", "pool.segment_freed", "aclrtReserveMemAddress",
        "aclrtReleaseMemAddress", "aclrtSynchronizeDevice", "aclrtSetDevice"}
    assert _comparable(captured) == _comparable(wrapped)


@pytest.mark.fake_only(_ONLY)
def test_a_call_the_library_does_not_capture_keeps_its_place(backend, tmp_path):
    """aclInit's path and the pools' notifications are written from Python, between calls
    the library captured: the order is the order the calls ended."""
    def script() -> None:
        dev = acl_mem.Device(0)
        dev.use()
        with acl_mem.SegmentPool(dev) as pool:
            for size in (64, 128, 256):
                pool.allocate(size).free()
                raw.aclrtFree(raw.aclrtMalloc(size))

    calls = _record(tmp_path / "t.jsonl", True, script)
    order = [(c["call"], c.get("size")) for c in calls
             if c["call"] != "aclrtSetDevice"]
    assert order[0][0] == "aclrtMalloc"  # the pool's block
    pairs = [(c, s) for c, s in order[1:-1]]
    expected = []
    for size in (64, 128, 256):
        expected += [("pool.segment_allocated", size), ("pool.segment_freed", None),
                     ("aclrtMalloc", size), ("aclrtFree", None)]
    assert pairs == expected
    assert order[-1][0] == "aclrtFree"


@pytest.mark.fake_only(_ONLY)
def test_threads_are_told_apart(backend, tmp_path):
    def script() -> None:
        done = threading.Barrier(4)
        named = threading.Event()

        def work(size: int) -> None:
            acl_mem.Device(0).use()
            for _ in range(50):
                raw.aclrtFree(raw.aclrtMalloc(size))
            done.wait()
            named.wait()  # (names are shipped for the threads alive)

        threads = [threading.Thread(target=work, args=(64 * (i + 1),), name=f"worker-{i}")
                   for i in range(3)]
        for thread in threads:
            thread.start()
        done.wait()
        acl_mem.trace.flush()
        named.set()
        for thread in threads:
            thread.join()

    path = tmp_path / "t.jsonl"
    calls = _record(path, True, script)
    names = {r["th"]: r["name"] for r in _records(path) if r.get("type") == "thread"}
    sizes: dict[str, set[int]] = {}
    for call in calls:
        if call["call"] == "aclrtMalloc":
            sizes.setdefault(names[call["th"]], set()).add(call["size"])
    assert sizes == {"worker-0": {64}, "worker-1": {128}, "worker-2": {192}}
    assert sum(c["call"] == "aclrtFree" for c in calls) == 150


@pytest.mark.fake_only(_ONLY)
def test_a_recorder_wanting_stacks_meanwhile_gets_them(dev, tmp_path):
    """Stacks need the wrappers: while such a recorder runs, every call is wrapped, and
    the recorder already running misses nothing."""
    outer_path, inner_path = tmp_path / "outer.jsonl", tmp_path / "inner.jsonl"
    with record(outer_path):
        raw.aclrtFree(raw.aclrtMalloc(100))
        assert not hasattr(_backend.get().aclrtMalloc, "__wrapped__")
        with record(inner_path, stack_depth=2):
            assert hasattr(_backend.get().aclrtMalloc, "__wrapped__")
            raw.aclrtFree(raw.aclrtMalloc(200))
        assert not hasattr(_backend.get().aclrtMalloc, "__wrapped__")
        raw.aclrtFree(raw.aclrtMalloc(300))
    outer = [c.get("size") for c in _calls(outer_path) if c["call"] == "aclrtMalloc"]
    assert outer == [100, 200, 300]
    inner = [c for c in _calls(inner_path) if c["call"] == "aclrtMalloc"]
    assert [c["size"] for c in inner] == [200] and "stack" in inner[0]


@pytest.mark.fake_only(_ONLY)
def test_the_recorders_own_queries_are_not_recorded(dev, tmp_path):
    path = tmp_path / "t.jsonl"
    with record(path):
        acl_mem.memory_summary(dev)  # asks aclrtGetMemInfo
    header = _records(path)[0]
    assert header["memory"] == "HBM"  # (asked with aclrtGetMemInfo)
    assert _calls(path) == []


@pytest.mark.fake_only(_ONLY)
def test_nothing_is_captured_once_recording_stops(dev, tmp_path):
    with record(tmp_path / "t.jsonl"):
        capture = _backend.get().trace_capture()
        assert capture is not None
    raw.aclrtFree(raw.aclrtMalloc(64))
    assert capture.waiting() == 0


@pytest.mark.parametrize("formatter", ["library", "python"])
def test_damaged_captured_records_are_counted_and_the_rest_written(tmp_path, formatter):
    """The writer reads what the library captured as untrusted bytes, with the library's
    formatter or (where it cannot be loaded) its own: a record cut short or of an unknown
    call is lost, counted in the end line, and the batch goes on."""
    library = _formatter_library(formatter, tmp_path)
    whole = _free_record(10)
    unknown = _lines.CAPTURED_HEAD.pack(250, 4, 0) + bytes(32)
    path = tmp_path / "t.jsonl"
    _written(path, 0, [_lines.BOXED, ("#captured", 2, whole, library),
                       _lines.BOXED, ("#captured", 0, whole[:-3], library),
                       _lines.BOXED, ("#captured", 0, unknown, library),
                       _lines.BOXED, ("#captured", 0, whole + whole[:16], library)], 20)
    calls = _calls(path)
    assert [(c["call"], c["ptr"], c["rc"]) for c in calls] == [("aclrtFree", 4096, 0)] * 2
    assert _records(path)[-1] == {"type": "end", "t": 20, "calls": 2, "lost": 5}


@pytest.mark.fake_only(_ONLY)
def test_the_library_formats_captured_records_as_python_does(backend, tmp_path):
    """The same captured records written by the library's formatter and by Python's: the
    same bytes (negative and huge numbers, NULL outputs, failures, several threads)."""
    capture = backend.trace_capture()
    capture.start()
    try:
        with pytest.raises(AclError):
            raw.aclrtSetDevice(-1)
        _script()
        with pytest.raises(AclError):
            raw.aclrtMalloc((1 << 64) - 1)

        def work() -> None:
            acl_mem.Device(0).use()
            raw.aclrtFree(raw.aclrtMalloc(64))

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        data, lost = capture.take()
    finally:
        capture.stop()
    assert lost == 0 and len(data) > 1000
    written = []
    for formatter in ("library", "python"):
        path = tmp_path / f"{formatter}.jsonl"
        _written(path, 1000, [_lines.BOXED, ("#captured", 0, data,
                                             _formatter_library(formatter, tmp_path))], 1)
        written.append(path.read_text())
    assert written[0] == written[1]
    calls = [json.loads(line) for line in written[0].splitlines() if '"call"' in line]
    assert calls[0]["device"] == -1 and calls[0]["rc"] != 0
    assert any(c.get("size") == (1 << 64) - 1 for c in calls)
    assert any("null_outputs" in c for c in calls)
    assert len({c["th"] for c in calls}) == 2


@pytest.mark.fake_only(_ONLY)
def test_no_call_is_lost_while_a_recorder_with_stacks_comes_and_goes(dev, tmp_path):
    """Stacks need wrappers; the library keeps capturing while they go on and off, so
    the recorder without stacks gets every call of the busy threads."""
    go = threading.Barrier(3)
    stop = threading.Event()
    made = [0, 0]

    def work(index: int) -> None:
        acl_mem.Device(0).use()
        go.wait()
        while not stop.is_set():
            raw.aclrtFree(raw.aclrtMalloc(64))
            made[index] += 1

    path = tmp_path / "outer.jsonl"
    with record(path):
        workers = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for worker in workers:
            worker.start()
        go.wait()
        for switch in range(4):  # the workers busy throughout
            with record(tmp_path / f"inner{switch}.jsonl", stack_depth=1):
                time.sleep(0.01)
        stop.set()
        for worker in workers:
            worker.join()
    calls = _calls(path)
    assert sum(c["call"] == "aclrtMalloc" for c in calls) == sum(made)
    assert sum(c["call"] == "aclrtFree" for c in calls) == sum(made)
    assert _records(path)[-1]["lost"] == 0


@pytest.mark.fake_only(_ONLY)
def test_a_release_that_began_before_the_capture_is_timed_within_it(backend, dev):
    """A release is recorded at its entry, but one that entered while nothing was
    captured gets the time it left, never a time from before the capture (frees of busy
    threads while the capture goes on and off, many times)."""
    capture = backend.trace_capture()
    stop = threading.Event()

    def work() -> None:
        acl_mem.Device(0).use()
        while not stop.is_set():
            raw.aclrtFree(raw.aclrtMalloc(64))

    workers = [threading.Thread(target=work) for _ in range(2)]
    for worker in workers:
        worker.start()
    early: list[int] = []
    try:
        for _ in range(100):
            on = time.perf_counter_ns()  # (CLOCK_MONOTONIC, as the library's times)
            capture.start()
            time.sleep(0.0005)
            data, _ = capture.take()
            capture.stop()
            flat, broken = _lines.flat_captured(data)
            assert broken == 0
            i = 0
            while i < len(flat):
                size = _lines.LAYOUTS[flat[i]].size
                if flat[i + 1] < on:
                    early.append(on - flat[i + 1])
                i += 1 + size
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert early == []


def test_a_private_fakes_records_are_formatted_by_a_library_the_writer_can_load():
    """A private fake runs a copy of the library from an unnamed file of this process
    (/proc/self/fd/N, another file in the writer process): its records name the library
    it was copied from, which the writer can load."""
    private = acl_mem.fake.make_backend(private=True)
    capture = private.trace_capture()
    assert capture is not None
    assert not capture.path.startswith("/proc/") and os.path.isfile(capture.path)
    assert _lines.LibraryLines(capture.path, own_process=False) is not None


@pytest.mark.fake_only(_ONLY)
def test_a_stopped_recording_stays_as_written(dev, tmp_path):
    """flush() and sync() after stop() change nothing (they once took the path of a
    forked child without a file, and emptied it)."""
    path = tmp_path / "t.jsonl"
    recorder = record(path)
    raw.aclrtFree(raw.aclrtMalloc(64))
    recorder.stop()
    written = path.read_bytes()
    raw.aclrtFree(raw.aclrtMalloc(64))
    # What a wrapper still running at stop() adds: a call.
    recorder.extend((_lines.CALL_ORDER.index("aclrtFree"), time.perf_counter_ns(), 1,
                     0x1000, 0))
    recorder.flush()
    assert recorder.sync() is True
    assert path.read_bytes() == written


@pytest.mark.parametrize("formatter", ["library", "python"])
def test_a_call_timed_before_the_recording_began_is_written_at_its_start(tmp_path,
                                                                         formatter):
    library = _formatter_library(formatter, tmp_path)
    path = tmp_path / "t.jsonl"
    # time 900 < the recording's start 1000: a release that entered before it began;
    # then the same from a wrapper (the flat shape of aclrtFree)
    _written(path, 1000, [_lines.BOXED, ("#captured", 0, _free_record(900), library),
                          _lines.CALL_ORDER.index("aclrtFree"), 950, 7, 0x2000, 0], 1100)
    assert [c["t"] for c in _calls(path)] == [0, 0]


def test_a_drain_inside_a_drain_is_skipped_not_waited_for(monkeypatch):
    """A collection in the middle of a drain can run a finalizer whose call is recorded,
    and a record drains the library first: that inner drain, on the thread already
    draining, is skipped (the thread would wait for itself)."""
    delivered: list[object] = []
    inner: list[str] = []

    class Reentering:
        path = "library"
        left = 2

        def waiting(self) -> int:
            return self.left

        def take(self) -> tuple[bytes, int]:
            self.left -= 1
            if not inner:
                inner.append("in")
                _tap.drain()  # what a finalizer's recorded call does
                inner.append("out")
            return b"", 1

    monkeypatch.setattr(_tap, "_captures", {1: Reentering()})
    monkeypatch.setattr(_tap, "_deliver", delivered.append)
    worker = threading.Thread(target=_tap.drain, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "a drain waited for itself"
    assert inner == ["in", "out"] and len(delivered) == 1


@pytest.mark.fake_only(_ONLY)
def test_calls_ending_while_the_last_recorder_stops_are_counted_lost(dev, tmp_path,
                                                                     monkeypatch):
    """Captured after the last recorder's final drain, they are in no file: the end
    line counts them."""
    refresh = _tap._refresh

    def refresh_with_calls_meanwhile() -> None:
        if not _tap._sinks:  # the last recorder left: its final drain is done
            raw.aclrtFree(raw.aclrtMalloc(64))
        refresh()

    path = tmp_path / "t.jsonl"
    recorder = record(path)
    raw.aclrtFree(raw.aclrtMalloc(64))
    monkeypatch.setattr(_tap, "_refresh", refresh_with_calls_meanwhile)
    recorder.stop()
    monkeypatch.undo()
    assert [c["call"] for c in _calls(path)] == ["aclrtMalloc", "aclrtFree"]
    assert _records(path)[-1]["lost"] == 2 and recorder.lost == 2


@pytest.mark.fake_only(_ONLY)
def test_the_header_names_the_backend_whatever_calls_came_first(dev, tmp_path,
                                                                 monkeypatch):
    """Another thread's recorded call can reach the new recorder while it is still
    describing the backend: the header describes it all the same."""
    describe = _recorder.describe_backend
    backend = _backend.get()

    def describe_while_a_call_lands(active: Any) -> dict[str, object]:
        worker = threading.Thread(target=lambda: backend.checker_segment_freed(0x1000))
        worker.start()  # (a pool's notification: recorded by a wrapper)
        worker.join()
        return describe(active)

    monkeypatch.setattr(_recorder, "describe_backend", describe_while_a_call_lands)
    path = tmp_path / "t.jsonl"
    with record(path):
        pass
    header = _records(path)[0]
    assert header["type"] == "header" and header["backend"] == "fake"
    assert [c["call"] for c in _calls(path)] == ["pool.segment_freed"]


def test_the_writer_runs_no_library_another_user_could_change(tmp_path):
    """A library in a directory others can write (or itself writable by others) is not
    loaded by the writer: the lines are then made in Python, the same ones."""
    shared = tmp_path / "shared"
    shared.mkdir()
    copy = shared / "libascendcl.so"
    copy.write_bytes((library_dir() / "libascendcl.so").read_bytes())
    for directory_mode, file_mode in ((0o777, 0o755), (0o755, 0o666)):
        shared.chmod(directory_mode)
        copy.chmod(file_mode)
        with pytest.raises(PermissionError):
            _lines.LibraryLines(str(copy), own_process=False)
        path = tmp_path / "t.jsonl"
        _written(path, 0, [_lines.BOXED, ("#captured", 0, _free_record(10), str(copy))], 20)
        assert [(c["call"], c["ptr"]) for c in _calls(path)] == [("aclrtFree", 0x1000)]
    shared.chmod(0o755)  # (the library's own directory is loaded from: the tests above)
