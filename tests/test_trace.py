"""acl_mem.trace: recording every memory call through every layer, on both backends, without
changing a single result (docs/trace-format.md)."""

from __future__ import annotations

import inspect
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import acl_mem
from acl_mem import _backend, pyacl, raw
from acl_mem._fake.engine_fake import EngineFake
from acl_mem.errors import AclError
from acl_mem.fake import make_backend
from acl_mem.trace import _lines, _recorder, _tap, read_trace, record

ROOT = Path(__file__).resolve().parent.parent


def _calls(path: Path) -> list[dict[str, Any]]:
    return [e for e in read_trace(path).events if "call" in e]


def _lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the format's definition agrees with the backend contract and the documentation -------------
def test_every_traced_call_takes_the_protocols_parameters():
    """The wrappers take the protocol's parameters by name; both backends start with them
    (a keyword call reaches the backend as it would without recording)."""
    from acl_mem._native.backend import NativeBackend

    for name, spec in _lines.CALLS.items():
        params = list(inspect.signature(getattr(_backend.Backend, name)).parameters)[1:]
        expected = [*spec.params, *(["null_outputs"] if spec.takes_null_outputs else [])]
        assert params == expected, name
        for cls in (EngineFake, NativeBackend):
            own = list(inspect.signature(getattr(cls, name)).parameters)[1:]
            assert own[:len(expected)] == expected, (cls.__name__, name)


def test_the_format_document_names_every_call_and_field():
    text = (ROOT / "docs" / "trace-format.md").read_text()
    for spec in _lines.CALLS.values():
        assert f"`{spec.written}`" in text, spec.written
        for field in (*spec.fields, *spec.outputs):
            assert f"`{field}`" in text, (spec.written, field)
    assert f"version {_lines.FORMAT_VERSION}" in text


# -- every layer, both backends -----------------------------------------------------------------
def test_every_layer_is_recorded(dev, tmp_path, backend):
    path = tmp_path / "run.jsonl"
    with record(path) as recorder:
        ptr = raw.aclrtMalloc(1000)
        raw.aclrtFree(ptr)
        buffer = dev.malloc(4096)
        buffer.free()
        host = dev.malloc_host(100)
        host.free()
        with acl_mem.SegmentPool(dev) as pool:
            segment = pool.allocate(100)
            segment.free()
        dev_ptr, ret = pyacl.rt.malloc(512, 0)
        assert ret == 0
        assert pyacl.rt.free(dev_ptr) == 0
        with dev.stream() as stream:
            stream.synchronize()
        mapped = acl_mem.reserve_and_map(2 << 20)
        mapped.close()
        assert recorder.active
    assert not recorder.active and recorder.lost == 0
    calls = _calls(path)
    names = [c["call"] for c in calls]
    assert names[:4] == ["aclrtMalloc", "aclrtFree", "aclrtMalloc", "aclrtFree"]
    assert calls[0]["size"] == 1000 and calls[0]["ptr"] == ptr and calls[0]["rc"] == 0
    assert calls[0]["dev"] == 0 and calls[1] == {**calls[1], "ptr": ptr, "rc": 0}
    assert calls[2]["size"] == 4096
    for name in ("aclrtMallocHost", "aclrtFreeHost", "pool.segment_allocated",
                 "pool.segment_freed", "aclrtCreateStream", "aclrtSynchronizeStream",
                 "aclrtDestroyStream", "aclrtReserveMemAddress", "aclrtMallocPhysical",
                 "aclrtMapMem", "aclrtUnmapMem", "aclrtFreePhysical",
                 "aclrtReleaseMemAddress"):
        assert name in names, name
    pyacl_malloc = [c for c in calls if c["call"] == "aclrtMalloc" and c["size"] == 512]
    assert pyacl_malloc and pyacl_malloc[0]["ptr"] == dev_ptr
    segment_call = next(c for c in calls if c["call"] == "pool.segment_allocated")
    assert segment_call["size"] == 100 and segment_call["extent"] == 160
    physical = next(c for c in calls if c["call"] == "aclrtMallocPhysical")
    assert physical["prop"]["location"] == {"id": 0, "type": 1} and physical["size"] == 2 << 20
    lines = _lines_of(path)
    assert lines[0]["type"] == "header" and lines[0]["backend"] == backend.name
    assert lines[0]["format"] == "acl_mem.trace" and lines[0]["version"] == 1
    assert lines[-1] == {**lines[-1], "type": "end", "calls": len(calls), "lost": 0}
    if not _recorder.active():  # (ACL_MEM_TRACE may be recording the whole test run)
        # Recording over: the backend is as it was.
        assert all(not hasattr(getattr(backend, name), "__wrapped__")
                   for name in _lines.CALLS)


def test_a_pool_made_before_the_recording_is_recorded_too(dev, tmp_path):
    with acl_mem.SegmentPool(dev) as pool:
        first = pool.allocate(64)
        with record(tmp_path / "t.jsonl"):
            second = pool.allocate(64)
            first.free()
            second.free()
    names = [c["call"] for c in _calls(tmp_path / "t.jsonl")]
    assert names == ["pool.segment_allocated", "pool.segment_freed", "pool.segment_freed"]


def test_a_buffer_made_before_the_recording_is_freed_on_the_record(dev, tmp_path):
    buffer = dev.malloc(100)
    address = buffer.ptr
    with record(tmp_path / "t.jsonl"):
        buffer.free()
    assert [(c["call"], c["ptr"]) for c in _calls(tmp_path / "t.jsonl")] == \
        [("aclrtFree", address)]


# -- results never change -------------------------------------------------------------------------
def _script(backend: _backend.Backend) -> list[object]:
    """Backend calls, including failing ones, with what each returned or raised."""
    seen: list[object] = []

    def call(name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            result = getattr(backend, name)(*args, **kwargs)
        except Exception as exc:  # compared by class and code
            seen.append((name, type(exc).__name__, getattr(exc, "code", None)))
            return None
        seen.append((name, result))
        return result

    call("aclrtGetMemInfo", 1)  # no context yet: 107002
    call("aclrtSetDevice", 0)
    rc, ptr = call("aclrtMalloc", 4096, 0)
    call("aclrtMalloc", 0, 0)
    call("aclrtMalloc", 100, 0, null_outputs=1)
    call("aclrtMalloc", 1 << 50, 0)
    call("aclrtMallocCached", 100, acl_mem.MallocPolicy.HUGE_ONLY)
    call("aclrtMallocAlign32", 100, 99)
    call("aclrtFree", ptr)
    call("aclrtFree", ptr)
    call("aclrtFree", 0)
    rc, host = call("aclrtMallocHost", 64)
    seen[-1] = ("aclrtMallocHost", rc)  # a host mapping: its address differs run to run
    call("aclrtFreeHost", host)
    call("aclrtFreeHost", 12345)
    rc, stream = call("aclrtCreateStream")
    call("aclrtSynchronizeStream", stream)
    call("aclrtDestroyStream", stream)
    call("aclrtDestroyStream", stream)
    call("aclrtReserveMemAddress", 2 << 20, 0, 0, 0)
    call("aclrtUnmapMem", 4096)
    call("checker_segment_freed", 64)
    call("aclrtMallocPhysical", 2 << 20, None, 0)
    call("aclrtResetDevice", 0)
    call("aclrtResetDevice", 0)
    return seen


def _outcome(entry: Any) -> object:
    """Addresses may differ between two runs; codes and exception classes may not."""
    name, *rest = entry
    if len(rest) == 1 and isinstance(rest[0], tuple):
        return (name, rest[0][0])
    return entry


def test_recording_changes_no_result_on_the_fake(tmp_path):
    plain = make_backend()
    with _backend.using_backend(plain):
        expected = _script(plain)
    recorded = make_backend()
    with _backend.using_backend(recorded), record(tmp_path / "t.jsonl"):
        got = _script(recorded)
    # Handles (streams) are the library's heap addresses: the codes and exceptions match.
    assert [_outcome(e) for e in got] == [_outcome(e) for e in expected]
    calls = _calls(tmp_path / "t.jsonl")
    assert len(calls) == len(expected)
    assert [c.get("rc") for c in calls][:4] == [107002, 0, 0, 100000]
    assert calls[4]["null_outputs"] == 1


def test_recording_changes_no_result_on_either_backend(backend, tmp_path):
    """The same script twice on the backend under test (native: acl_mem's library), recorded
    the second time: the same codes and the same exceptions."""
    first = [_outcome(e) for e in _script(backend)]
    with record(tmp_path / "t.jsonl"):
        second = [_outcome(e) for e in _script(backend)]
    assert second == first


def test_a_wrapper_returns_the_very_object_and_raises_the_very_exception(tmp_path):
    fake = make_backend()
    sentinel = (0, 1234)
    failure = RuntimeError("from the backend")

    def malloc(size: int, policy: int, null_outputs: int = 0) -> tuple[int, int]:
        return sentinel

    def free(devPtr: int) -> int:
        raise failure

    fake.__dict__["aclrtMalloc"] = malloc
    fake.__dict__["aclrtFree"] = free
    with _backend.using_backend(fake), record(tmp_path / "t.jsonl"):
        assert fake.aclrtMalloc(1, 0) is sentinel
        with pytest.raises(RuntimeError) as caught:
            fake.aclrtFree(5)
        assert caught.value is failure
    assert fake.__dict__["aclrtMalloc"] is malloc and fake.__dict__["aclrtFree"] is free
    freed = _calls(tmp_path / "t.jsonl")[1]
    assert freed == {**freed, "call": "aclrtFree", "ptr": 5, "raised": "RuntimeError",
                     "message": "from the backend"}


def test_a_failure_of_the_recording_does_not_reach_the_call(dev, tmp_path, monkeypatch):
    # The wrappers' failures (on the fake, most calls are captured by the library instead).
    monkeypatch.setattr(_tap, "use_library_capture", False)
    with record(tmp_path / "t.jsonl") as recorder:
        before = _tap.lost()

        def broken(values: tuple[Any, ...]) -> None:
            raise MemoryError("no room for the record")

        monkeypatch.setattr(_tap, "_extend", broken)
        ptr = raw.aclrtMalloc(100)
        raw.aclrtFree(ptr)
        with pytest.raises(AclError) as caught:
            raw.aclrtFree(ptr)
        assert caught.value.code == 107000
        assert _tap.lost() == before + 3
        monkeypatch.undo()
        raw.aclrtFree(raw.aclrtMalloc(100))
        assert recorder.lost == 3  # (its own: not those of recordings before it)
    lines = _lines_of(tmp_path / "t.jsonl")
    assert [line["call"] for line in lines if "call" in line] == ["aclrtMalloc", "aclrtFree"]
    assert lines[-1]["lost"] >= 3


def test_a_writer_that_cannot_write_loses_calls_not_results(dev, tmp_path, monkeypatch):
    recorder = record(tmp_path / "t.jsonl")
    try:
        monkeypatch.setattr(_recorder, "_dumps", lambda batch: 1 / 0)
        for _ in range(3):
            raw.aclrtFree(raw.aclrtMalloc(64))
        recorder.flush()
    finally:
        monkeypatch.undo()
        recorder.stop()
    assert recorder.lost >= 1
    assert _lines_of(tmp_path / "t.jsonl")[-1]["type"] == "end"


# -- threads, stacks, nesting, the in-process writer ----------------------------------------------
def test_threads_are_numbered_and_named(dev, tmp_path):
    done = threading.Barrier(4)
    shipped = threading.Event()

    def work() -> None:
        acl_mem.Device(0).use()
        for _ in range(50):
            raw.aclrtFree(raw.aclrtMalloc(64))
        done.wait()
        shipped.wait()  # alive until the names are shipped (idents of ended threads are
        # reused, and their names are known only while they run)

    with record(tmp_path / "t.jsonl") as recorder:
        threads = [threading.Thread(target=work, name=f"worker-{i}") for i in range(3)]
        for thread in threads:
            thread.start()
        done.wait()
        recorder.flush()
        shipped.set()
        for thread in threads:
            thread.join()
    trace = read_trace(tmp_path / "t.jsonl")
    assert sorted(t["name"] for t in trace.threads.values()) == \
        ["worker-0", "worker-1", "worker-2"]
    calls = [e for e in trace.events if e["call"] in ("aclrtMalloc", "aclrtFree")]
    assert len(calls) == 300
    live: set[int] = set()
    for call in calls:  # time order: a free comes before the allocation reusing its address
        if call["call"] == "aclrtMalloc":
            assert call["ptr"] not in live
            live.add(call["ptr"])
        else:
            live.remove(call["ptr"])
    assert live == set()


def test_stacks_point_at_the_caller(dev, tmp_path):
    with record(tmp_path / "t.jsonl", stack_depth=2):
        buffer = dev.malloc(64); line = inspect.currentframe().f_lineno  # noqa: E702
        buffer.free()
    trace = read_trace(tmp_path / "t.jsonl")
    malloc = next(e for e in trace.events if e["call"] == "aclrtMalloc")
    frames = trace.stacks[malloc["stack"]]
    assert frames[0] == (__file__, line, "test_stacks_point_at_the_caller")
    assert len(frames) == 2


def test_two_recorders_at_once(dev, tmp_path):
    sinks = list(_tap._sinks)
    outer = record(tmp_path / "outer.jsonl")
    raw.aclrtFree(raw.aclrtMalloc(64))
    with record(tmp_path / "inner.jsonl", stack_depth=1):
        raw.aclrtFree(raw.aclrtMalloc(128))
    raw.aclrtFree(raw.aclrtMalloc(256))
    outer.stop()
    sizes = [c["size"] for c in _calls(tmp_path / "outer.jsonl") if "size" in c]
    assert sizes == [64, 128, 256]
    inner = _calls(tmp_path / "inner.jsonl")
    assert [c.get("size") for c in inner] == [128, None] and "stack" in inner[0]
    assert "stack" not in _calls(tmp_path / "outer.jsonl")[2]
    assert _tap._sinks == sinks and _tap._recording == bool(sinks)


def test_the_in_process_writer_writes_the_same_file(dev, tmp_path, monkeypatch):
    def run(name: str) -> list[dict[str, Any]]:
        with record(tmp_path / name):
            ptr = raw.aclrtMalloc(100)
            raw.aclrtFree(ptr)
            with pytest.raises(AclError):
                raw.aclrtFree(ptr)
        return [{k: v for k, v in c.items() if k not in ("t", "ptr")}
                for c in _calls(tmp_path / name)]

    by_process = run("process.jsonl")
    monkeypatch.setattr(_recorder, "use_writer_process", False)
    assert run("inline.jsonl") == by_process


def test_sync_makes_the_file_current(dev, tmp_path):
    with record(tmp_path / "t.jsonl") as recorder:
        raw.aclrtFree(raw.aclrtMalloc(64))
        assert recorder.sync()
        assert [c["call"] for c in _calls(tmp_path / "t.jsonl")] == ["aclrtMalloc",
                                                                    "aclrtFree"]


def test_a_backend_installed_while_recording_is_recorded(tmp_path):
    first, second = make_backend(), make_backend(private=True)
    with _backend.using_backend(first), record(tmp_path / "t.jsonl"):
        acl_mem.Device(0).use()
        raw.aclrtMalloc(64)
        with _backend.using_backend(second):
            acl_mem.Device(0).use()
            raw.aclrtMalloc(128)
    lines = _lines_of(tmp_path / "t.jsonl")
    kinds = [line.get("type") or line["call"] for line in lines]
    assert kinds.count("backend") == 1
    assert kinds.index("backend") < kinds.index("aclrtMalloc", kinds.index("backend"))
    summary = acl_mem.trace.summarize(tmp_path / "t.jsonl")
    # The first fake's block went with it when the second was installed (its trace says so).
    assert [a.size for a in summary.never_freed] == [128]


def test_record_refuses_a_bad_path_and_depth(tmp_path):
    sinks = list(_tap._sinks)
    with pytest.raises(OSError):
        record(tmp_path / "missing" / "t.jsonl")
    with pytest.raises(ValueError):
        record(tmp_path / "t.jsonl", stack_depth=-1)
    assert _tap._sinks == sinks
