"""What recording an allocation trace costs (``python benchmarks/trace_bench.py``).

Not part of the test run. Every figure is a ratio measured in one process: rounds of a
short loop without recording and the same loop recording alternate, so that load on the
machine hits both sides alike; ratios are medians over the pairs of neighbouring rounds,
times medians over the rounds.

(a) raw fake ``aclrtMalloc`` + ``aclrtFree`` pair, recording vs not (goal <= 1.3); the
    fake library captures both calls' records itself (docs/trace-format.md):
    * ``wall_ratio``: elapsed time per pair; a recording round ends by shipping what is
      left of its records, so all of their shipping is inside it;
    * ``cpu_ratio``: CPU time of the recording process (all its threads) per pair; the
      writer process formats the lines on another core (on a busy machine it competes);
    (the writer process's own CPU is not measured here: it detaches from the recording
    process, so the system never reports its time to it);
    * ``bytes_per_call``: size of the trace file per recorded call.
(b) the same with the lines formatted in the recording process (what happens where no
    writer process can be started).
(c) the same with stack_depth=4 (every call wrapped in Python).
(f) the same as (a) with the library's capture off: every call wrapped in Python.
(g) sustained: ``--sustained-pairs`` pairs in one go, recorded (until ``stop()`` has the
    whole file written) against not recorded, medians of 5 runs each way, with the
    library's capture and with wrappers. A loop doing nothing but pairs makes records
    faster than the writer process turns them into lines (about 1.3 us a line here):
    the pipe to it (1 MiB) absorbs a burst, then the program waits for the writer.
(d) the raw pair through the native backend on acl_mem's fake libascendcl
    (the C engine, benchmarks/native_library.py).
(e) replay (``acl-mem trace replay``) of a recorded run of ``--replay-calls`` calls
    (default 1 000 000: malloc/free with log-uniform sizes from 32 B to 16 MiB, about
    500 live): calls per second of reading the file, of the replay itself and of the
    two summaries it reports, and the whole replay's time against the time the recorded
    program took on the fake in the same process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path


def compare(pairs: int, rounds: int, *, stack_depth: int = 0,
            writer_process: bool = True, capture: bool = True) -> dict[str, float]:
    """Per-pair figures with and without recording, rounds interleaved."""
    import acl_mem.trace
    from acl_mem import raw
    from acl_mem.trace import _recorder, _tap

    _tap.use_library_capture = capture

    def loop() -> None:
        for _ in range(pairs):
            raw.aclrtFree(raw.aclrtMalloc(4096, 0))

    loop()  # warm up: the fake's recycled addresses, the interpreter's caches
    _recorder.use_writer_process = writer_process
    path = os.path.join(tempfile.mkdtemp(prefix="acl_mem_trace_bench_"), "run.jsonl")
    plain_wall: list[float] = []
    plain_cpu: list[float] = []
    recorded_wall: list[float] = []
    recorded_cpu: list[float] = []
    recorder = acl_mem.trace.record(path, stack_depth=stack_depth)
    try:
        for _ in range(rounds):
            # The recorder (and its writer) stays up; detached, it takes the wrappers off
            # the backend: the plain rounds run exactly as without acl_mem.trace.
            _tap.detach(recorder)
            wall, cpu = time.perf_counter(), time.process_time()
            loop()
            plain_cpu.append(time.process_time() - cpu)
            plain_wall.append(time.perf_counter() - wall)
            _tap.attach(recorder)
            wall, cpu = time.perf_counter(), time.process_time()
            loop()
            recorder.flush()  # the round's records leave the process inside the round
            recorded_cpu.append(time.process_time() - cpu)
            recorded_wall.append(time.perf_counter() - wall)
    finally:
        recorder.stop()
        _recorder.use_writer_process = True
        _tap.use_library_capture = True
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    end = json.loads(lines[-1])
    assert end["type"] == "end" and end["lost"] == 0, end
    calls = end["calls"]
    size = os.path.getsize(path)
    os.remove(path)
    p_wall = statistics.median(plain_wall) / pairs
    r_wall = statistics.median(recorded_wall) / pairs
    # Each recording round against the plain round just before it: neighbours share the
    # machine's state, so the median of their ratios moves least with its load.
    figures = {
        "pair_us": p_wall * 1e6,
        "recorded_pair_us": r_wall * 1e6,
        "wall_ratio": statistics.median(r / p for r, p in zip(recorded_wall, plain_wall,
                                                               strict=True)),
        "cpu_ratio": statistics.median(r / p for r, p in zip(recorded_cpu, plain_cpu,
                                                              strict=True)),
        "bytes_per_call": size / calls,
    }
    return figures


def bench_fake(pairs: int, rounds: int) -> dict[str, dict[str, float]]:
    import acl_mem

    acl_mem.use_backend("fake")
    acl_mem.Device(0).use()
    return {
        "a_fake_raw_pair": compare(pairs, rounds),
        "b_fake_raw_pair_formatting_in_process": compare(pairs, rounds, writer_process=False),
        "c_fake_raw_pair_stack_depth_4": compare(pairs, rounds, stack_depth=4),
        "f_fake_raw_pair_wrapped": compare(pairs, rounds, capture=False),
    }


def sustained(pairs: int, runs: int = 5) -> dict[str, float]:
    """One long recorded loop against the same loop unrecorded (see (g))."""
    import acl_mem.trace
    from acl_mem import raw
    from acl_mem.trace import _tap

    def loop() -> float:
        start = time.perf_counter()
        for _ in range(pairs):
            raw.aclrtFree(raw.aclrtMalloc(4096, 0))
        return time.perf_counter() - start

    loop()
    figures: dict[str, float] = {}
    for capture in (True, False):
        _tap.use_library_capture = capture
        ratios = []
        try:
            for _ in range(runs):
                plain = loop()
                path = os.path.join(tempfile.mkdtemp(prefix="acl_mem_trace_bench_"),
                                    "run.jsonl")
                start = time.perf_counter()
                with acl_mem.trace.record(path):
                    loop()
                ratios.append((time.perf_counter() - start) / plain)
                os.remove(path)
        finally:
            _tap.use_library_capture = True
        figures["captured_ratio" if capture else "wrapped_ratio"] = statistics.median(ratios)
    return figures


def bench_native(pairs: int, rounds: int) -> dict[str, float]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from native_library import install_native_library

    import acl_mem
    from acl_mem import _backend

    _, previous = install_native_library("the benchmark")
    try:
        with acl_mem.Device(0):
            return compare(pairs, rounds)
    finally:
        _backend._install(previous)


def _replay_workload(calls: int, seed: int = 7) -> None:
    import random

    from acl_mem import raw

    rng = random.Random(seed)
    live: list[int] = []
    for _ in range(calls - 500):
        if len(live) >= 500 or (live and rng.random() < 0.5):
            raw.aclrtFree(live.pop(rng.randrange(len(live))))
        else:
            live.append(raw.aclrtMalloc(int(2 ** rng.uniform(5, 24)), 0))
    for ptr in live:
        raw.aclrtFree(ptr)


def bench_replay(calls: int) -> dict[str, float]:
    import acl_mem
    from acl_mem.trace import read_trace, record, replay_trace
    from acl_mem.trace._replay import ReplayOptions
    from acl_mem.trace._summary import summarize_trace

    acl_mem.fake.configure("atlas-a2")
    path = Path(tempfile.mkdtemp(prefix="acl_mem_replay_")) / "run.jsonl"
    with acl_mem.Device(0):
        started = time.perf_counter()
        _replay_workload(calls)
        plain = time.perf_counter() - started
        with record(path):
            _replay_workload(calls)
    started = time.perf_counter()
    trace = read_trace(path)
    read = time.perf_counter() - started
    recorded = sum(1 for e in trace.events if "call" in e)
    started = time.perf_counter()
    summarize_trace(trace)
    summary = time.perf_counter() - started
    started = time.perf_counter()
    report = replay_trace(trace, ReplayOptions())
    whole = time.perf_counter() - started
    assert report.differences == 0, report.first
    calls_only = whole - 2 * summary  # the report summarises the recording and the replay
    return {
        "calls": float(recorded),
        "file_mib": path.stat().st_size / 2**20,
        "read_calls_per_s": recorded / read,
        "replay_calls_per_s": recorded / max(calls_only, 1e-9),
        "summary_calls_per_s": recorded / summary,
        "replay_with_summaries_calls_per_s": recorded / whole,
        "replay_vs_recorded_program_time": whole / plain,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=1000, help="pairs per round")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--replay-calls", type=int, default=1_000_000,
                        help="calls of the recorded run that (e) replays")
    parser.add_argument("--only-replay", action="store_true", help="measure (e) only")
    parser.add_argument("--sustained-pairs", type=int, default=100_000,
                        help="pairs of the sustained loop (g)")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    if not args.only_replay:
        results = bench_fake(args.pairs, args.rounds)
        results["g_sustained_fake_raw_pairs"] = sustained(args.sustained_pairs)
        results["d_native_library_raw_pair"] = bench_native(args.pairs // 2, args.rounds)
    results["e_replay"] = bench_replay(args.replay_calls)
    for name, figures in results.items():
        print(name)
        for key, value in figures.items():
            print(f"  {key:<28} {value:12.3f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
