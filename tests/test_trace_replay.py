"""acl-mem trace replay: a recorded run made again on the fake, with the recorded addresses,
handles and streams mapped to the replay's (docs/trace-format.md)."""

from __future__ import annotations

import contextlib
import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import acl_mem
from acl_mem import raw
from acl_mem.cli import main
from acl_mem.errors import AclError
from acl_mem.sizes import GiB, MiB
from acl_mem.trace import ReplayOptions, read_trace, record, replay, replay_trace
from acl_mem.trace._progress import Progress

OOM = 207001


def _workload(dev: acl_mem.Device) -> list[int]:
    """Most of what the trace records: the aclrtMalloc family with every policy, a failed
    allocation, a double free, host and DVPP memory, streams, virtual memory, a pool,
    a context, and a second thread on another device. Leaves some memory live."""
    kept = [raw.aclrtMalloc(size, policy % 3)
            for policy, size in enumerate([1, 100, 4096, 2 * MiB, 3 * MiB, 64 << 10])]
    raw.aclrtFree(kept.pop(1))
    aligned = raw.aclrtMallocAlign32(1000)
    kept.append(raw.aclrtMallocCached(5000))
    with pytest.raises(AclError) as too_big:
        raw.aclrtMalloc(1 << 50)
    assert too_big.value.code == OOM
    raw.aclrtFree(aligned)
    with pytest.raises(AclError):
        raw.aclrtFree(aligned)
    raw.aclrtFreeHost(raw.aclrtMallocHost(5000))
    kept.append(raw.aclrtMallocHost(300))
    raw.acldvppFree(raw.acldvppMalloc(1 * MiB))
    stream = raw.aclrtCreateStream()
    raw.aclrtSynchronizeStream(stream)
    raw.aclrtDestroyStream(stream)
    raw.aclrtSynchronizeDevice()
    mapped = acl_mem.reserve_and_map(2 * MiB)
    mapped.close()
    with acl_mem.SegmentPool(dev) as pool:
        segments = [pool.allocate(n) for n in (100, 5000, 70000)]
        segments[1].free()
    with dev.context():
        kept.append(raw.aclrtMalloc(777))

    def other_thread() -> None:
        with acl_mem.Device(1):
            raw.aclrtFree(raw.aclrtMalloc(77))

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    return kept


def _peaks(summary: Any) -> dict[str, tuple[int, int]]:
    return {d: (f.total.peak_in_use, f.total.peak_reserved) for d, f in summary.devices.items()}


def test_a_recorded_run_replays_with_no_difference(dev, tmp_path, backend):
    """On either backend (native: through acl_mem's library): the replay on the fake
    returns what every call returned, and reaches the same peaks."""
    path = tmp_path / "run.jsonl"
    with record(path):
        _workload(dev)
    report = replay(path)
    assert report.calls > 40
    assert report.differences == 0, report.first
    assert report.skipped == {} and report.replayed == report.calls
    assert _peaks(report.replayed_summary) == _peaks(report.recorded_summary)
    assert len(report.replayed_summary.never_freed) == \
        len(report.recorded_summary.never_freed)
    assert report.soc == read_trace(path).header["soc"]


def test_force_teardowns_are_recorded_and_replayed(tmp_path):
    """aclrtDestroyStreamForce and aclrtResetDeviceForce end their stream and device in the
    recording's model and in the replay: nothing differs, nothing is left live."""
    path = tmp_path / "run.jsonl"
    with record(path):
        raw.aclrtSetDevice(0)
        raw.aclrtSetDevice(0)
        stream = raw.aclrtCreateStream()
        raw.aclrtDestroyStreamForce(stream)
        raw.aclrtMalloc(4096)
        raw.aclrtResetDeviceForce(0)
        with pytest.raises(AclError):
            raw.aclrtResetDeviceForce(0)
    calls = [e["call"] for e in read_trace(path).events if "call" in e]
    assert {"aclrtDestroyStreamForce", "aclrtResetDeviceForce"} <= set(calls)
    report = replay(path)
    assert report.differences == 0, report.first
    assert report.skipped == {}
    assert report.recorded_summary.never_freed == []
    assert report.replayed_summary.never_freed == []


def test_the_first_difference_names_the_call_its_codes_and_its_site(tmp_path):
    acl_mem.fake.configure(hbm_bytes=1 * GiB)
    path = tmp_path / "run.jsonl"
    with acl_mem.Device(0), record(path, stack_depth=2):
        small = raw.aclrtMalloc(64 * MiB)
        big = raw.aclrtMalloc(512 * MiB)  # the line the difference points at
        raw.aclrtFree(big)
        raw.aclrtFree(small)
    report = replay(path, hbm=256 * MiB, keep=5)
    assert report.capacity == 256 * MiB
    assert report.differences == 1
    first = report.first[0]
    assert (first.recorded_rc, first.replayed_rc) == (0, OOM)
    assert "size=536870912" in first.call
    assert first.frames[0][0] == __file__ and first.frames[0][2] == \
        "test_the_first_difference_names_the_call_its_codes_and_its_site"
    assert first.free is not None and first.total is not None and first.free < 512 * MiB
    # Its free was never replayed: the replay has no such memory.
    assert report.skipped == {"calls on memory or handles the replay could not get": 1}


def test_a_failure_that_no_longer_happens_on_a_bigger_device(tmp_path):
    acl_mem.fake.configure(hbm_bytes=256 * MiB)
    path = tmp_path / "run.jsonl"
    with acl_mem.Device(0), record(path):
        with pytest.raises(AclError) as failed:
            raw.aclrtMalloc(512 * MiB)
        assert failed.value.code == OOM
    assert replay(path).differences == 0  # the recorded device: fails again
    report = replay(path, hbm=1 * GiB)
    assert report.differences == 1
    assert (report.first[0].recorded_rc, report.first[0].replayed_rc) == (OOM, 0)
    assert report.replayed_summary.devices["0"].total.peak_in_use == 512 * MiB


def test_another_release_is_played(tmp_path):
    """aclrtGetMemInfo's attributes 12-17 are refused by 8.5.0 (docs/runtime-model.md
    §0.1): a 9.1.0 trace replayed as 8.5.0 shows it."""
    path = tmp_path / "run.jsonl"
    with acl_mem.Device(0), record(path):
        raw.aclrtGetMemInfo(acl_mem.MemAttr.MEM_NORMAL)
    assert replay(path).differences == 0
    report = replay(path, cann="8.5.0")
    assert report.cann == "8.5.0" and report.differences == 1
    assert report.first[0].recorded_rc == 0 and report.first[0].replayed_rc == 107016


@pytest.mark.parametrize("pool", ["segment", "expandable"])
def test_pooling_the_malloc_family(tmp_path, pool):
    path = tmp_path / "run.jsonl"
    sizes = [1000 + 4096 * i for i in range(40)]
    with acl_mem.Device(0), record(path):
        pointers = [raw.aclrtMalloc(n) for n in sizes]
        for ptr in pointers[::2]:
            raw.aclrtFree(ptr)
        raw.aclrtFreeHost(raw.aclrtMallocHost(100))
    plain = replay(path)
    report = replay(path, pool=pool)
    assert report.pool == pool and report.differences == 0 and report.skipped == {}
    stats = report.pools[0]
    assert stats.blocks_allocated >= 1 and stats.peak_in_use >= sum(sizes) // 2
    recorded_blocks = plain.replayed_summary.by_call["aclrtMalloc"]
    pooled = report.replayed_summary
    # The pool asked the runtime for a few blocks instead of one per allocation.
    assert pooled.by_call.get("aclrtMalloc", 0) + \
        pooled.by_call.get("aclrtMallocPhysical", 0) < recorded_blocks
    assert pooled.devices["0"].total.peak_in_use == \
        plain.replayed_summary.devices["0"].total.peak_in_use


def test_memory_from_before_the_trace_is_counted_not_replayed(tmp_path):
    with acl_mem.Device(0):
        early = raw.aclrtMalloc(100)
        with record(tmp_path / "run.jsonl"):
            raw.aclrtFree(early)
            raw.aclrtFree(raw.aclrtMalloc(200))
    report = replay(tmp_path / "run.jsonl")
    assert report.differences == 0
    assert report.skipped == {"calls on memory or handles from before the trace began": 1}


def test_damaged_and_unknown_records_are_counted(tmp_path):
    lines = [
        {"type": "header", "format": "acl_mem.trace", "version": 1, "backend": "fake",
         "soc": "Ascend910B1", "cann": "9.1.0", "set_counts": {}, "current_device": None},
        {"t": 1, "th": 1, "call": "aclrtSetDevice", "device": 0, "rc": 0},
        {"t": 2, "th": 1, "dev": 0, "call": "aclrtMalloc", "policy": 0, "rc": 0, "ptr": 5},
        {"t": 3, "th": 1, "call": "aclrtFree", "ptr": None, "rc": 0},
        {"t": 4, "th": 1, "call": "aclrtSomethingNew", "rc": 0},
        {"t": 5, "th": 1, "dev": 0, "call": "aclrtMalloc", "size": 64, "policy": 0, "rc": 0,
         "ptr": 4096},
    ]
    path = tmp_path / "odd.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = replay(path)
    assert report.differences == 0 and report.replayed == 2
    assert report.skipped == {"records with a missing or malformed field": 2,
                              "calls this acl_mem does not replay": 1}


def test_the_cli(tmp_path, capsys):
    acl_mem.fake.configure(hbm_bytes=1 * GiB)
    path = tmp_path / "run.jsonl"
    with acl_mem.Device(0), record(path):
        raw.aclrtFree(raw.aclrtMalloc(600 * MiB))
    assert main(["trace", "replay", str(path)]) == 0
    text = capsys.readouterr().out
    assert "differences: none" in text and "device 0" in text
    assert main(["trace", "replay", "--hbm", "512MiB", "--json", str(path)]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["differences"] == 1 and data["capacity"] == 512 * MiB
    assert data["first"][0]["replayed_rc"] == OOM and data["first"][0]["recorded_rc"] == 0
    assert set(data["devices"]["0"]) == {"recorded_peak_in_use", "recorded_peak_reserved",
                                         "replayed_peak_in_use", "replayed_peak_reserved"}
    assert main(["trace", "replay", str(tmp_path / "missing.jsonl")]) == 1
    assert main(["trace", "replay", "--cann", "7.0", str(path)]) == 2
    assert main(["trace", "replay", "--profile", "nonsense", str(path)]) == 2
    with pytest.raises(SystemExit) as usage:
        main(["trace", "replay", "--hbm", "1KiB", str(path)])
    assert usage.value.code == 2
    with pytest.raises(SystemExit):
        main(["trace", "replay", "--pool", "arena", str(path)])


def test_options_refuse_what_cannot_be_played():
    with pytest.raises(ValueError):
        ReplayOptions(pool="arena")
    with pytest.raises(ValueError):
        ReplayOptions(hbm=1024)
    with pytest.raises(ValueError):
        ReplayOptions(cann="7.0")


def test_progress_is_drawn_on_a_terminal_only(tmp_path):
    path = tmp_path / "run.jsonl"
    with acl_mem.Device(0), record(path):
        for _ in range(3):
            raw.aclrtFree(raw.aclrtMalloc(100))
    trace = read_trace(path)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    drawn, piped = Terminal(), io.StringIO()
    with Progress("replay", len(trace.events), stream=drawn) as progress:
        replay_trace(trace, progress=progress)
        assert "replay: 0/" in drawn.getvalue()
    assert drawn.getvalue().endswith("\r")  # the line is cleared at the end
    with Progress("replay", len(trace.events), stream=piped) as progress:
        replay_trace(trace, progress=progress)
    assert piped.getvalue() == ""


def test_replay_does_not_touch_the_callers_fake(tmp_path):
    """Without a pool the replay runs on a fake of its own: the caller's memory and
    current device stay as they were."""
    path = tmp_path / "run.jsonl"
    with acl_mem.Device(0) as device, record(path):
        buffer = device.malloc(4096)
        buffer.free()
    with acl_mem.Device(0) as device:
        kept = device.malloc(1000)
        replay(path)
        assert not kept.freed and acl_mem.Device.current() == device
        kept.free()



def test_an_address_map_keeps_adjacent_blocks_and_lost_ones_apart():
    from acl_mem.trace._replay_map import AddressMap

    addresses = AddressMap()
    addresses.add_range(0x1000, 0xA000, 0x1000)
    addresses.add_range(0x2000, 0xB000, 0x10)
    assert addresses.get(0x1FFF) == 0xAFFF and addresses.get(0x2000) == 0xB000
    addresses.drop(0x2000)
    assert addresses.get(0x2000) == 0xB000  # stale: a double free stays a double free
    addresses.lose(0x2000)  # reused by the recording, refused by the replay
    assert addresses.get(0x2000) is None
    addresses.drop(0x1000)
    addresses.lose(0x1800)
    assert addresses.get(0x1800) is None and addresses.get(0x1004) is None
    addresses.lost.discard(0x1800)  # its recorded free (skipped) ended it
    addresses.add_range(0x1000, 0xC000, 0x2000)
    assert addresses.get(0x1004) == 0xC004 and addresses.get(0x1800) == 0xC800


def test_the_readme_example_end_to_end(tmp_path):
    """examples/serving_trace.py recorded with ACL_MEM_TRACE, then summarised and replayed
    as the README shows it."""
    import os
    import subprocess
    import sys

    from acl_mem.trace import summarize

    root = Path(__file__).resolve().parent.parent
    path = tmp_path / "run.jsonl"
    env = {**os.environ, "ACL_MEM_BACKEND": "fake", "ACL_MEM_TRACE": str(path),
           "ACL_MEM_TRACE_STACK": "3"}
    for name in ("ACL_MEM_FAKE_PROFILE", "ACL_MEM_FAKE_CANN", "ACL_MEM_TRACE_OWNER"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, str(root / "examples" / "serving_trace.py")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = summarize(path)
    assert summary.devices["0"].total.peak_in_use > 16 * GiB
    [forgotten] = summary.never_freed
    assert forgotten.call == "aclrtMallocHost" and forgotten.frames[0][2] == "main"
    assert replay(path).differences == 0
    smaller = replay(path, hbm=16 * GiB)
    assert smaller.differences > 0 and smaller.first[0].replayed_rc == OOM
    assert smaller.first[0].frames[1][2] == "activations"
    # Frees of the blocks the replay could not get are counted as such, also where a
    # pool's segment started at its block's address.
    assert set(smaller.skipped) == {"calls on memory or handles the replay could not get"}
    replayed = smaller.replayed_summary.devices["0"].total
    assert replayed.peak_reserved <= 16 * GiB
    assert replayed.peak_in_use <= replayed.peak_reserved


WILD = [None, "x", -1, 0, 1 << 70, 3.5, [], {}, True, 2**64 - 1, -(2**63), {"id": []}]


def test_damaged_traces_never_crash_the_reader_the_summary_or_the_replay(tmp_path):
    """Lines of a real trace with fields replaced by wild values: every reader either
    refuses the file (TraceFormatError) or reads what it can; nothing else escapes."""
    import random

    from acl_mem.trace import TraceFormatError, summarize

    source = tmp_path / "run.jsonl"
    with acl_mem.Device(0) as dev, record(source, stack_depth=1):
        _workload(dev)
    lines = [json.loads(line) for line in source.read_text().splitlines()]
    rng = random.Random(20261124)
    damaged = tmp_path / "damaged.jsonl"
    for _ in range(40):
        copy = [dict(line) for line in lines]
        for _ in range(rng.randint(1, 5)):
            line = copy[rng.randrange(len(copy))]
            line[rng.choice(list(line))] = rng.choice(WILD)
        damaged.write_text("".join(json.dumps(line) + "\n" for line in copy))
        for read in (summarize, replay, lambda p: replay(p, pool="segment")):
            with contextlib.suppress(TraceFormatError):
                read(damaged)


def test_many_recorded_threads_replay_on_a_bounded_number(tmp_path, monkeypatch):
    """A server that ran a thread per request: every thread is replayed, on at most
    MAX_WORKERS threads at once, and none is left running afterwards."""
    from acl_mem.trace import _replay

    turn = threading.Lock()
    everyone = threading.Barrier(12)

    def request() -> None:
        with turn, acl_mem.Device(0):
            raw.aclrtFree(raw.aclrtMalloc(64))
        everyone.wait()  # alive together: twelve thread idents, twelve numbers

    path = tmp_path / "run.jsonl"
    with acl_mem.Device(0), record(path):
        threads = [threading.Thread(target=request) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len({e["th"] for e in read_trace(path).events}) == 12
    monkeypatch.setattr(_replay, "MAX_WORKERS", 2)
    kept: list[int] = []
    original = _replay._Threads.run

    def counted(self: Any, th: int, work: Any, *args: Any) -> Any:
        result = original(self, th, work, *args)
        kept.append(len(self._workers))
        return result

    monkeypatch.setattr(_replay._Threads, "run", counted)
    before = threading.active_count()
    report = replay(path)
    assert 0 < max(kept) <= 2
    assert report.differences == 0 and report.skipped == {}
    assert report.replayed == report.calls == 12 * 4
    assert threading.active_count() == before


def test_a_backend_switch_in_the_recording_releases_the_replays_memory(tmp_path):
    from acl_mem import _backend
    from acl_mem.fake import make_backend

    first, second = make_backend(), make_backend(private=True)
    path = tmp_path / "run.jsonl"
    with _backend.using_backend(first), record(path):
        acl_mem.Device(0).use()
        raw.aclrtMalloc(64)
        with _backend.using_backend(second):
            acl_mem.Device(0).use()
            raw.aclrtMalloc(128)
    report = replay(path)
    assert report.differences == 0 and report.skipped == {}
    assert [a.size for a in report.replayed_summary.never_freed] == \
        [a.size for a in report.recorded_summary.never_freed] == [128]
