"""acl-mem trace summary and acl_mem.memory_summary: figures of scripted traces, exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import acl_mem
from acl_mem import MemAttr, raw
from acl_mem.cli import main
from acl_mem.fake import make_backend
from acl_mem.sizes import GiB, KiB, MiB
from acl_mem.trace import TraceFormatError, format_summary, read_trace, record, summarize

HEADER = {"type": "header", "format": "acl_mem.trace", "version": 1, "acl_mem": "test",
          "pid": 42, "parent_pid": None, "argv": ["train.py"], "started": "2026-01-01T00:00Z",
          "stack_depth": 1, "backend": "fake", "soc": "Ascend910B1", "cann": "9.1.0",
          "acl": "1.17.0", "padding": 32, "device_count": 8, "memory": "HBM",
          "capacity": 64 * GiB, "set_counts": {}, "current_device": None, "details": {}}
A, B, P, H, S = 0x1000_0000, 0x2000_0000, 0x3000_0000, 0x7F00_0000, 0x9000
SEGMENT = P + 1088


def _ok(t: int, call: str, **fields: Any) -> dict[str, Any]:
    return {"t": t, "th": 1, "call": call, **fields}


#: A scripted trace (docs/trace-format.md). Figures by hand:
#: A: aclrtMalloc(100): padded 160 -> one 4 KiB normal page.
#: B: aclrtMalloc(2 MiB): padded 2 MiB + 32 > 1 MiB -> huge pages, 4 MiB.
#: P: aclrtMalloc(32 MiB - 64): padded exactly 32 MiB, huge; a pool's block (reserved only).
#: Segments of P: 1000 and 3 000 000 bytes in use. H: 10 bytes of pinned host memory.
EVENTS: list[dict[str, Any]] = [
    _ok(1000, "aclrtSetDevice", device=0, rc=0, stack=1),
    _ok(2000, "aclrtMalloc", dev=0, size=100, policy=0, rc=0, ptr=A, stack=1),
    _ok(3000, "aclrtMalloc", dev=0, size=2 * MiB, policy=0, rc=0, ptr=B, stack=2),
    _ok(4000, "aclrtMalloc", dev=0, size=1 << 40, policy=0, rc=207001, stack=2),
    _ok(5000, "aclrtMallocHost", size=10, rc=0, ptr=H),
    # (written out of time order: readers order by t)
    _ok(7000, "aclrtMalloc", dev=0, size=32 * MiB - 64, policy=0, rc=0, ptr=P),
    _ok(6000, "aclrtFree", ptr=B, rc=0),
    _ok(8000, "pool.segment_allocated", dev=0, parent=P, ptr=P, size=1000, extent=1056),
    _ok(9000, "pool.segment_allocated", dev=0, parent=P, ptr=SEGMENT, size=3_000_000,
        extent=3_000_032, stack=1),
    _ok(10000, "pool.segment_freed", ptr=P),
    _ok(11000, "aclrtFree", ptr=0xDEAD, rc=107000),
    _ok(12000, "aclrtFree", ptr=0x999, rc=0),
    _ok(13000, "aclrtCreateStream", dev=0, rc=0, stream=S),
    _ok(14000, "aclrtFree", ptr=P, rc=0),
    _ok(15000, "aclrtMalloc", dev=0, size=1 << 41, policy=0, rc=207001),
    _ok(16000, "aclrtFree", ptr=A, raised="HazardError", message="freed with queued work"),
]


def _write(path: Path, events: list[dict[str, Any]], *, end: bool = True,
           header: dict[str, Any] | None = None) -> Path:
    lines = [header or HEADER,
             {"type": "thread", "th": 1, "ident": 7, "name": "MainThread"},
             {"type": "stack", "id": 1, "frames": [["/src/train.py", 42, "step"]]},
             {"type": "stack", "id": 2, "frames": [["/src/model.py", 7, "build"]]},
             *events]
    if end:
        lines.append({"type": "end", "t": 17000, "calls": len(events), "lost": 0})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_the_scripted_trace_figures(tmp_path):
    summary = summarize(_write(tmp_path / "run.jsonl", EVENTS))
    assert (summary.calls, summary.duration, summary.threads, summary.complete) == \
        (16, 16000, 1, True)
    device = summary.devices["0"]
    assert device.total.as_dict() == {
        "in_use": 0, "reserved": 0,
        "peak_in_use": 100 + 1000 + 3_000_000, "peak_in_use_t": 9000,
        "peak_reserved": 4 * KiB + 32 * MiB, "peak_reserved_t": 7000}
    assert device.pools["normal"].as_dict() == {
        "in_use": 0, "reserved": 0, "peak_in_use": 100, "peak_in_use_t": 2000,
        "peak_reserved": 4 * KiB, "peak_reserved_t": 2000}
    assert device.pools["huge"].as_dict() == {
        "in_use": 0, "reserved": 0, "peak_in_use": 3_001_000, "peak_in_use_t": 9000,
        "peak_reserved": 32 * MiB, "peak_reserved_t": 7000}
    assert [(a.kind, a.address, a.in_use) for a in device.largest_at_peak] == \
        [("segment", SEGMENT, 3_000_000), ("segment", P, 1000), ("block", A, 100)]
    assert device.largest_at_peak[0].frames == [("/src/train.py", 42, "step")]
    host = summary.devices["host"]
    assert (host.total.peak_in_use, host.total.peak_reserved, set(host.pools)) == \
        (10, 4 * KiB, {"pinned"})
    assert [(a.kind, a.call, a.address, a.size) for a in summary.never_freed] == \
        [("host", "aclrtMallocHost", H, 10)]
    assert [(f.call, f.rc, f.raised, f.count, f.first_t) for f in summary.failed] == [
        ("aclrtMalloc", 207001, None, 2, 4000),
        ("aclrtFree", 107000, None, 1, 11000),
        ("aclrtFree", None, "HazardError", 1, 16000)]
    assert summary.failed[0].first == f"aclrtMalloc(size={1 << 40}, policy=0)"
    assert summary.failed[0].frames == [("/src/model.py", 7, "build")]
    assert (summary.unknown_frees, summary.streams_left) == (1, 1)
    assert summary.by_call["aclrtMalloc"] == 5 and summary.by_call["aclrtFree"] == 5


def test_the_text_and_the_json_of_the_cli(tmp_path, capsys):
    path = _write(tmp_path / "run.jsonl", EVENTS)
    assert main(["trace", "summary", str(path)]) == 0
    text = capsys.readouterr().out
    assert text == format_summary(summarize(path)) + "\n"
    for expected in ("16 calls in 0.000016 s from 1 thread(s)",
                     "device 0 (HBM 64 GiB)",
                     "peak in use     2.86 MiB at 0.000009 s   peak reserved     32 MiB at "
                     "0.000007 s",
                     "largest live at the in-use peak (0.000009 s):",
                     "train.py:42 in step",
                     "never freed: 1 allocation(s), 4 KiB reserved",
                     "streams never destroyed: 1",
                     "frees of memory allocated before the trace began: 1",
                     "failed calls: 4, 3 kinds",
                     "207001 ACL_ERROR_RT_MEMORY_ALLOCATION  x2",
                     "raised HazardError  x1"):
        assert expected in text, expected
    assert main(["trace", "summary", "--json", "--top", "1", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["devices"]["0"]["peak_in_use"] == 3_001_100
    assert len(data["devices"]["0"]["largest_at_peak"]) == 1
    assert data["never_freed"][0]["address"] == H
    assert [f["count"] for f in data["failed"]] == [2, 1, 1]


def test_the_cli_refuses_what_is_not_a_trace(tmp_path, capsys):
    assert main(["trace", "summary", str(tmp_path / "missing.jsonl")]) == 1
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("hello\n")
    assert main(["trace", "summary", str(tmp_path / "notes.txt")]) == 1
    assert "not an acl_mem trace" in capsys.readouterr().err
    newer = _write(tmp_path / "v2.jsonl", [], header={**HEADER, "version": 2})
    assert main(["trace", "summary", str(newer)]) == 1
    assert "version 2" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["trace"])
    assert usage.value.code == 2


def test_a_killed_recording_is_read_up_to_its_last_line(tmp_path):
    path = _write(tmp_path / "cut.jsonl", EVENTS[:3], end=False)
    with path.open("a") as handle:
        handle.write('{"t":5000,"th":1,"call":"aclrtFr')  # the process died mid-line
    summary = summarize(path)
    assert (summary.complete, summary.bad_lines, summary.calls) == (False, 1, 3)
    assert "no end line" in format_summary(summary)
    # Unknown kinds of line and unknown fields belong to later versions: ignored.
    _write(tmp_path / "later.jsonl", [{**EVENTS[1], "new_field": 1},
                                      {"type": "new_kind", "t": 1}])
    assert summarize(tmp_path / "later.jsonl").devices["0"].total.peak_in_use == 100
    with pytest.raises(TraceFormatError):
        read_trace(_write(tmp_path / "empty.jsonl", [], header={"type": "other"}))


def test_a_reset_to_zero_references_frees_the_devices_blocks(tmp_path):
    events = [
        _ok(1, "aclrtSetDevice", device=1, rc=0),
        _ok(2, "aclrtSetDevice", device=1, rc=0),
        _ok(3, "aclrtMalloc", dev=1, size=100, policy=0, rc=0, ptr=A),
        _ok(4, "aclrtMallocHost", size=100, rc=0, ptr=H),
        _ok(5, "aclrtResetDevice", device=1, rc=0),
        _ok(6, "aclrtMalloc", dev=1, size=200, policy=0, rc=0, ptr=B),
        _ok(7, "aclrtResetDevice", device=1, rc=0),
        # A created context holds its device: allocations of a thread the trace saw
        # create it count there even without a dev field.
        {"t": 8, "th": 2, "call": "aclrtCreateContext", "device": 3, "rc": 0,
         "context": 77},
        {"t": 9, "th": 2, "call": "aclrtMalloc", "dev": None, "size": 300, "policy": 0,
         "rc": 0, "ptr": P},
        {"t": 10, "th": 2, "call": "aclFinalize", "rc": 0},
    ]
    summary = summarize(_write(tmp_path / "reset.jsonl", events))
    assert [(a.address, a.freed_by) for a in summary.never_freed] == [(H, None)]
    assert summary.devices["3"].total.peak_in_use == 300
    assert summary.devices["1"].total.peak_in_use == 300


def test_a_recorded_run_matches_the_fakes_own_figures(tmp_path):
    """Reserved per page pool, as the summary works it out, is what the fake's
    aclrtGetMemInfo says was used."""
    pools = {"normal": MemAttr.HBM_MEM_NORMAL, "huge": MemAttr.HBM_MEM_HUGE}
    with acl_mem.using_backend(make_backend("atlas-a2")), \
            acl_mem.Device(0) as dev:
        before = {name: dev.mem_info(attr) for name, attr in pools.items()}
        with record(tmp_path / "run.jsonl", stack_depth=1):
            kept = [dev.malloc(100), dev.malloc(3 * MiB), dev.malloc_align32(5000),
                    dev.malloc_cached(2 * MiB, acl_mem.MallocPolicy.HUGE_ONLY),
                    dev.malloc(64 * KiB, acl_mem.MallocPolicy.NORMAL_ONLY)]
            pool = acl_mem.SegmentPool(dev)
            segment = pool.allocate(10_000)
            used = {name: before[name].free - dev.mem_info(attr).free
                    for name, attr in pools.items()}
        summary = summarize(tmp_path / "run.jsonl")
        figures = summary.devices["0"]
        assert {name: figures.pools[name].reserved for name in pools} == used
        assert figures.total.in_use == 100 + 3 * MiB + 5000 + 2 * MiB + 64 * KiB + 10_000
        assert figures.total.peak_in_use == figures.total.in_use
        blocks = sorted(a.size for a in summary.never_freed if a.kind == "block")
        assert blocks[:-1] == sorted([100, 3 * MiB, 5000, 2 * MiB, 64 * KiB])
        assert blocks[-1] > 30 * MiB  # the pool's block
        assert [a.size for a in summary.never_freed if a.kind == "segment"] == [10_000]
        segment.free()
        pool.close()
        for buffer in kept:
            buffer.free()


# -- acl_mem.memory_summary ------------------------------------------------------------------------
def test_memory_summary_of_the_fake_without_a_recording():
    with acl_mem.using_backend("fake"), acl_mem.Device(0) as dev:
        buffers = [dev.malloc(100), dev.malloc(3 * MiB), dev.malloc_host(10)]
        text = acl_mem.memory_summary(0)
        assert "fake's live blocks" in text and "device 0" in text
        assert "now           in use 3 MiB" in text
        assert f"{buffers[1].ptr:#x}" in text.split("largest live allocations:")[1]
        assert "the runtime reports (aclrtGetMemInfo):" in text
        everything = acl_mem.memory_summary()
        assert "host (page-locked memory)" in everything
        for buffer in buffers:
            buffer.free()
        assert "now           in use 0 B, reserved 0 B" in acl_mem.memory_summary(dev)
    with pytest.raises(TypeError):
        acl_mem.memory_summary("0")


def test_memory_summary_while_recording(dev, tmp_path, backend):
    with record(tmp_path / "run.jsonl"), acl_mem.SegmentPool(dev) as pool:
        segment = pool.allocate(5000)
        buffer = dev.malloc(300)
        text = acl_mem.memory_summary(dev)
        assert f"from the recording {tmp_path / 'run.jsonl'} ({backend.name} backend)" in text
        assert "peak in use" in text
        live = text.split("largest live allocations:")[1]
        assert f"segment of {pool_parent(pool):#x}" in live
        assert f"{buffer.ptr:#x}" in live
        segment.free()
        buffer.free()


def pool_parent(pool: acl_mem.SegmentPool) -> int:
    return min(block.parent.ptr for block in pool._blocks.values())


def test_memory_summary_without_a_recording_says_where_it_looks(dev, backend):
    ptr = raw.aclrtMalloc(100)
    try:
        text = acl_mem.memory_summary(0)
        assert "the runtime reports (aclrtGetMemInfo):" in text
        if backend.name == "native":
            assert "known only while recording" in text
        else:
            assert f"{ptr:#x}" in text
    finally:
        raw.aclrtFree(ptr)


@pytest.mark.parametrize(("profile", "cann"), [("atlas-a2", "8.5.0"), ("ascend950", "9.1.0"),
                                               ("atlas-inference", "9.0.1")])
def test_reserved_follows_the_socs_padding_and_the_release(tmp_path, profile, cann):
    """Padding differs by SoC and release (docs/runtime-model.md §3.5): the summary takes
    both from the header and agrees with the fake's own accounting."""
    fake = make_backend(profile, cann=cann)
    with acl_mem.using_backend(fake), acl_mem.Device(0) as dev:
        kind = "DDR" if fake.profile.memory == "DDR" else "HBM"
        attrs = {"normal": MemAttr[f"{kind}_MEM_NORMAL"], "huge": MemAttr[f"{kind}_MEM_HUGE"]}
        before = {name: dev.mem_info(attr).free for name, attr in attrs.items()}
        with record(tmp_path / "run.jsonl"):
            kept = [dev.malloc(size) for size in (100, 4064, 4065, MiB - 64, MiB - 63,
                                                  2 * MiB)]
            kept.append(dev.malloc_align32(4096))
            used = {name: before[name] - dev.mem_info(attr).free
                    for name, attr in attrs.items()}
        summary = summarize(tmp_path / "run.jsonl")
        assert summary.header["padding"] == (0 if profile == "ascend950" and cann == "9.1.0"
                                             else 32)
        assert {name: summary.devices["0"].pools[name].reserved for name in attrs} == used
        for buffer in kept:
            buffer.free()


def test_virtual_memory_and_an_expandable_pool(tmp_path):
    """Physical memory is reserved; a mapping is in use unless a pool carves its range,
    where the pool's segments are."""
    with acl_mem.using_backend("fake"), acl_mem.Device(0) as dev, \
            record(tmp_path / "run.jsonl"):
        pool = acl_mem.ExpandablePool(dev, 64 * MiB)
        segment = pool.allocate(3 * MiB)  # grows by 2 MiB chunks: 4 MiB mapped
        mapped = acl_mem.reserve_and_map(2 * MiB)
        segment.free()
        pool.close()
        mapped.close()
    summary = summarize(tmp_path / "run.jsonl")
    huge = summary.devices["0"].pools["huge"]
    assert (huge.peak_in_use, huge.peak_reserved, huge.in_use, huge.reserved) == \
        (5 * MiB, 6 * MiB, 0, 0)
    assert [(a.kind, a.size) for a in summary.devices["0"].largest_at_peak] == \
        [("segment", 3 * MiB), ("mapping", 2 * MiB)]
    assert summary.never_freed == [] and summary.failed == []
