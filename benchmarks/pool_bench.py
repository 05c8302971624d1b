"""Pool benchmarks (``python benchmarks/pool_bench.py``); not part of the tests.

(a) SegmentPool allocate + free pair vs one raw fake aclrtMalloc + aclrtFree pair
    (goal <= 1.0: the pool must be cheaper than a round trip to the driver), and vs the
    bare cffi aclrtMalloc + aclrtFree sequence through acl_mem's fake libascendcl
    (the C engine, benchmarks/native_library.py), as benchmarks/run.py (d) does
(b) replay of ``ops`` operations (default 1 000 000) of log-uniform sizes 32 B - 16 MiB
    with a realistic live set: objects live a log-uniform number of operations
    (1 - 4096, so most are temporaries and a few last long); figures: peak reserved /
    peak in use (goal <= 1.3) and operations per second
(c) thread stress: 8 threads x 20 000 operations on one pool; the final statistics must
    add up (allocations == frees == operations that allocated, nothing in use)

Every function returns a dict of figures; ``main`` prints them (and writes JSON).
"""

from __future__ import annotations

import argparse
import heapq
import math
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MiB = 1 << 20


def _fresh_fake(check: bool = False) -> None:
    from acl_mem import _backend
    from acl_mem.fake import make_backend

    _backend._install(make_backend("atlas-a2", hazards="count", check=check),
                      "fake: pool benchmark")


def _per_call(fn: Callable[[int], None], loops: int, repeats: int) -> float:
    """Median seconds per loop iteration over ``repeats`` runs of ``fn(loops)``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(loops)
        times.append((time.perf_counter() - start) / loops)
    return statistics.median(times)


def bench_pair(loops: int = 20000, repeats: int = 7, size: int = 4096) -> dict[str, float]:
    """(a) on the fake: pool allocate + free vs raw aclrtMalloc + aclrtFree."""
    import acl_mem
    from acl_mem import raw
    from acl_mem.pool import SegmentPool

    _fresh_fake()
    with acl_mem.Device(0) as dev, SegmentPool(dev) as pool:
        # A pool in use: other live segments around, its block already taken.
        keep = [pool.allocate(n) for n in (100, 5000, 64 * 1024, 1000) * 25]

        def pool_pair(n: int) -> None:
            allocate = pool.allocate
            for _ in range(n):
                allocate(size).free()

        def raw_pair(n: int) -> None:
            malloc, free = raw.aclrtMalloc, raw.aclrtFree
            for _ in range(n):
                free(malloc(size, 0))

        def buffer_pair(n: int) -> None:
            for _ in range(n):
                dev.malloc(size).free()

        times: dict[str, list[float]] = {"pool": [], "raw": [], "buffer": []}
        for _ in range(repeats):  # interleaved: machine load hits all alike
            for name, fn in (("pool", pool_pair), ("raw", raw_pair), ("buffer", buffer_pair)):
                times[name].append(_per_call(fn, loops, 1))
        del keep
    p, r, b = (statistics.median(times[k]) for k in ("pool", "raw", "buffer"))
    return {"pool_pair_us": p * 1e6, "raw_fake_pair_us": r * 1e6,
            "device_buffer_pair_us": b * 1e6, "ratio_pool_over_raw_fake_pair": p / r,
            "ratio_pool_over_device_buffer_pair": p / b}


def bench_pair_native(loops: int = 5000, repeats: int = 7,
                      size: int = 4096) -> dict[str, float]:
    """(a) through the native backend on acl_mem's library: pool pair vs the bare cffi pair."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from native_library import install_native_library

    import acl_mem
    from acl_mem import _backend
    from acl_mem.pool import SegmentPool

    native, previous = install_native_library("the pool benchmark")
    ffi, lib = native.ffi, native.lib
    try:
        with acl_mem.Device(0) as dev, SegmentPool(dev) as pool:
            keep = [pool.allocate(n) for n in (100, 5000, 64 * 1024, 1000) * 25]

            def bare(n: int) -> None:
                for _ in range(n):
                    out = ffi.new("void **")
                    lib.aclrtMalloc(out, size, 0)
                    lib.aclrtFree(out[0])

            def pool_pair(n: int) -> None:
                allocate = pool.allocate
                for _ in range(n):
                    allocate(size).free()

            times: dict[str, list[float]] = {"bare": [], "pool": []}
            for _ in range(repeats):
                for name, fn in (("bare", bare), ("pool", pool_pair)):
                    times[name].append(_per_call(fn, loops, 1))
            del keep
    finally:
        _backend._install(previous)
    b, p = statistics.median(times["bare"]), statistics.median(times["pool"])
    return {"bare_cffi_pair_us": b * 1e6, "pool_pair_native_us": p * 1e6,
            "ratio_pool_over_bare_cffi_pair": p / b}


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(math.exp(rng.uniform(math.log(low), math.log(high))))


def bench_replay(ops: int = 1_000_000, seed: int = 6, block_size: int | None = None,
                 max_lifetime: int = 4096, check: bool = False) -> dict[str, float]:
    """(b) replay ``ops`` allocations and frees; sizes log-uniform 32 B - 16 MiB.

    Each allocation lives a log-uniform number of operations between 1 and
    ``max_lifetime``: mostly short-lived temporaries, some long-lived tensors (about
    500 live segments, 600-900 MiB in use in steady state). ``ops // 2`` allocations,
    each freed once: ``ops`` operations. Sizes and lifetimes are drawn before timing;
    the timed loop does only pool calls and the bookkeeping of which segment dies when.
    """
    import acl_mem
    from acl_mem.pool import DEFAULT_BLOCK_SIZE, SegmentPool

    _fresh_fake(check)
    rng = random.Random(seed)
    allocations = ops // 2
    sizes = [_log_uniform(rng, 32, 16 * MiB) for _ in range(allocations)]
    lifetimes = [_log_uniform(rng, 1, max_lifetime) for _ in range(allocations)]
    peak_requested = requested = 0
    done = 0
    with acl_mem.Device(0) as dev, \
            SegmentPool(dev, block_size=block_size or DEFAULT_BLOCK_SIZE) as pool:
        deaths: list[tuple[int, int]] = []  # (time of death, index)
        live: dict[int, object] = {}
        allocate = pool.allocate
        start = time.perf_counter()
        for step in range(allocations):
            while deaths and deaths[0][0] <= step:
                _, index = heapq.heappop(deaths)
                live.pop(index).free()  # type: ignore[attr-defined]
                requested -= sizes[index]
                done += 1
            live[step] = allocate(sizes[step])
            requested += sizes[step]
            if requested > peak_requested:
                peak_requested = requested
            heapq.heappush(deaths, (step + lifetimes[step], step))
            done += 1
        stats = pool.stats()  # the peaks, before the survivors go
        for segment in live.values():
            segment.free()  # type: ignore[attr-defined]
            done += 1
        elapsed = time.perf_counter() - start
        released = pool.release_unused()
        after = pool.stats()
    return {
        "operations": float(done),
        "ops_per_s": done / elapsed,
        "us_per_op": elapsed / done * 1e6,
        "peak_reserved_MiB": stats.peak_reserved / MiB,
        "peak_in_use_MiB": stats.peak_in_use / MiB,
        "peak_requested_MiB": peak_requested / MiB,
        "ratio_peak_reserved_over_peak_in_use": stats.peak_reserved / stats.peak_in_use,
        "ratio_peak_reserved_over_peak_requested": stats.peak_reserved / peak_requested,
        "fragmentation_at_end": stats.fragmentation,
        "blocks_allocated": float(stats.blocks_allocated),
        "released_at_end_MiB": released / MiB,
        "consistent": float(after.reserved == 0 and after.in_use == 0
                            and after.allocations == after.frees == allocations),
    }


def bench_threads(threads: int = 8, operations: int = 20000,
                  block_size: int = 1 * MiB) -> dict[str, float]:
    """(c) ``threads`` threads x ``operations`` allocate/free operations on one pool."""
    import acl_mem
    from acl_mem.pool import SegmentPool

    _fresh_fake()
    sizes = [1, 64, 100, 1000, 4096, 30 * 1024, 300 * 1024]
    allocated = [0] * threads
    errors: list[BaseException] = []
    with acl_mem.Device(0) as dev:
        pool = SegmentPool(dev, block_size=block_size)
        gate = threading.Barrier(threads + 1)

        def worker(k: int) -> None:
            rng = random.Random(k)
            try:
                with acl_mem.Device(0):
                    live: list[object] = []
                    gate.wait()
                    for _ in range(operations):
                        if live and (len(live) >= 64 or rng.random() < 0.5):
                            live.pop(rng.randrange(len(live))).free()  # type: ignore[attr-defined]
                        else:
                            live.append(pool.allocate(rng.choice(sizes)))
                            allocated[k] += 1
                    for segment in live:
                        segment.free()  # type: ignore[attr-defined]
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
        for t in workers:
            t.start()
        gate.wait()
        start = time.perf_counter()
        for t in workers:
            t.join()
        elapsed = time.perf_counter() - start
        stats = pool.stats()
        released = pool.release_unused()
        pool.close()
    total = sum(allocated)
    consistent = (not errors and stats.allocations == stats.frees == total
                  and stats.in_use == 0 and stats.requested == 0 and stats.segments == 0
                  and stats.cached == stats.reserved == released)
    return {"threads": float(threads), "operations_per_thread": float(operations),
            "seconds": elapsed, "ops_per_s": threads * operations / elapsed,
            "allocations": float(total), "frees": float(stats.frees),
            "peak_reserved_MiB": stats.peak_reserved / MiB, "errors": float(len(errors)),
            "consistent": float(consistent)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=1_000_000, help="replay operations (b)")
    parser.add_argument("--loops", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--thread-ops", type=int, default=20000)
    parser.add_argument("--no-native", action="store_true", help="skip the native binding's figure")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    results = {"a_pair_fake": bench_pair(args.loops, args.repeats)}
    if not args.no_native:
        results["a_pair_native_library"] = bench_pair_native(args.loops // 4, args.repeats)
    results["b_replay"] = bench_replay(args.ops)
    results["c_threads"] = bench_threads(8, args.thread_ops)
    # (c) checker overhead: the same replay (a tenth of it) with the memory checker on.
    plain = bench_replay(args.ops // 10)
    checked = bench_replay(args.ops // 10, check=True)
    results["c_checker_overhead"] = {
        "ops_per_s_checker_off": plain["ops_per_s"], "ops_per_s_checker_on": checked["ops_per_s"],
        "slowdown_checker_on": plain["ops_per_s"] / checked["ops_per_s"]}
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from run import report

    report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
