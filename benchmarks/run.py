"""acl_mem benchmarks: figures as ratios measured in one run (``python benchmarks/run.py``).

Not part of the test run. Each figure compares acl_mem with a baseline timed in the
same process, so machine load affects both sides alike; every timing is the median
of several repeats.

(a) fake H2D then D2H of 256 MiB vs numpy.copyto of the same bytes twice (goal >= 0.8)
(b) peak RSS after 60 x 1 GiB allocations on a 64 GiB profile, 1 MiB written to each
    (goal < 1 GiB), measured in a fresh process
(c) raw fake aclrtMalloc + aclrtFree pair vs a Python dict insert + delete (reported)
(d) through the native backend on acl_mem's fake libascendcl (the C engine, built at
    install): DeviceBuffer allocate + free, and the raw-layer pair, vs the bare cffi
    sequence the wrapper performs (ffi.new, lib.aclrtMalloc, lib.aclrtFree); goal <= 1.5
(e) fake: enqueue + synchronise 10 000 small (64 B) async copies vs the same copies done
    synchronously (reported)
(f) fake: async H2D of 256 MiB from pinned memory, enqueue + synchronise, vs numpy.copyto
    of the same bytes (goal >= 0.8)
(g) fake: grow an ExpandableSegment to 16 GiB in 2 MiB steps and shrink it back; time per
    map (MallocPhysical + MapMem) and unmap (UnmapMem + FreePhysical) vs one raw
    aclrtMalloc + aclrtFree pair, and peak RSS in a fresh process (goal < 256 MiB)

The fake engine's figures with their goals and PASS/FAIL (peer vs Numba's CUDA
simulator, copies vs memmove, scaling, threads, RSS, checker) are in engine_bench.py;
``--engine`` runs them here too (at its --quick scale).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

MiB = 1 << 20
GiB = 1 << 30


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_copy(repeats: int) -> dict[str, float]:
    import numpy as np

    import acl_mem

    acl_mem.use_backend("fake")
    size = 256 * MiB
    src = np.random.default_rng(1).integers(0, 255, size, dtype=np.uint8)
    dst = np.empty_like(src)
    tmp = np.empty_like(src)
    with acl_mem.Device(0) as dev, dev.malloc(size) as buf:
        buf.copy_from(src)  # first touch of the device pages is not part of the steady state

        def fake_round_trip() -> None:
            buf.copy_from(src)
            buf.copy_to(dst)

        def numpy_round_trip() -> None:
            np.copyto(tmp, src)
            np.copyto(dst, tmp)

        fake_round_trip()
        assert np.array_equal(src, dst)
        fake_s = _median_seconds(fake_round_trip, repeats)
        numpy_s = _median_seconds(numpy_round_trip, repeats)
    return {
        "fake_round_trip_s": fake_s,
        "numpy_round_trip_s": numpy_s,
        "throughput_ratio_fake_over_numpy": numpy_s / fake_s,
        "fake_GBps": 2 * size / fake_s / 1e9,
    }


_RSS_CHILD = """
import acl_mem

def peak_rss():
    # VmHWM starts afresh at exec; ru_maxrss would carry the parent's peak over.
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
acl_mem.use_backend("fake")
acl_mem.fake.configure("atlas-a2", hbm_bytes=64 << 30)
chunk = b"\\x5a" * (1 << 20)
with acl_mem.Device(0) as dev:
    before = peak_rss()
    bufs = [dev.malloc(1 << 30) for _ in range(60)]
    for b in bufs:
        b.copy_from(chunk)
    peak = peak_rss()
    print(before * 1024, peak * 1024)
"""


def bench_rss() -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _RSS_CHILD], check=True, capture_output=True,
                         text=True, env={**os.environ, "ACL_MEM_BACKEND": "fake"})
    before, peak = (int(x) for x in out.stdout.split())
    return {"rss_before_MiB": before / MiB, "peak_rss_MiB": peak / MiB,
            "allocated_GiB": 60.0, "written_MiB": 60.0}


def bench_malloc_pair(loops: int, repeats: int) -> dict[str, float]:
    import acl_mem
    from acl_mem import raw

    acl_mem.use_backend("fake")
    table: dict[int, int] = {}

    def malloc_free() -> None:
        for _ in range(loops):
            raw.aclrtFree(raw.aclrtMalloc(4096, 0))

    def dict_pair() -> None:
        for i in range(loops):
            table[i] = i
            del table[i]

    with acl_mem.Device(0):
        acl_s = _median_seconds(malloc_free, repeats) / loops
    dict_s = _median_seconds(dict_pair, repeats) / loops
    return {"raw_malloc_free_pair_us": acl_s * 1e6, "dict_insert_delete_us": dict_s * 1e6,
            "ratio_malloc_pair_over_dict": acl_s / dict_s}


def bench_native_overhead(loops: int, repeats: int) -> dict[str, float]:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from native_library import install_native_library

    import acl_mem
    from acl_mem import raw

    native, _ = install_native_library("the benchmark")
    ffi, lib = native.ffi, native.lib

    def bare() -> None:
        for _ in range(loops):
            out = ffi.new("void **")
            lib.aclrtMalloc(out, 4096, 0)
            lib.aclrtFree(out[0])

    def raw_pair() -> None:
        for _ in range(loops):
            raw.aclrtFree(raw.aclrtMalloc(4096, 0))

    with acl_mem.Device(0) as dev:
        def buffer_pair() -> None:
            for _ in range(loops):
                dev.malloc(4096).free()

        # Interleaved repeats, so that load on the machine hits all three alike.
        times: dict[str, list[float]] = {"bare": [], "raw": [], "buffer": []}
        for _ in range(repeats):
            for name, fn in (("bare", bare), ("raw", raw_pair), ("buffer", buffer_pair)):
                times[name].append(_median_seconds(fn, 1) / loops)
    b, r, d = (statistics.median(times[k]) for k in ("bare", "raw", "buffer"))
    return {"bare_cffi_pair_us": b * 1e6, "raw_pair_us": r * 1e6, "device_buffer_pair_us": d * 1e6,
            "ratio_raw_over_bare": r / b, "ratio_device_buffer_over_bare": d / b}


def bench_async(repeats: int) -> dict[str, float]:
    import numpy as np

    import acl_mem
    from acl_mem import _backend
    from acl_mem.fake import make_backend

    _backend._install(make_backend(), "fake: benchmark")
    copies, small = 10_000, 64
    size = 256 * MiB
    with acl_mem.Device(0) as dev, dev.stream() as stream:
        device = dev.malloc(small * copies)
        pinned = dev.malloc_host(small)

        def queued() -> None:
            for i in range(copies):
                device.copy_from_async(pinned, small, offset=i * small, stream=stream)
            stream.synchronize()

        def synchronous() -> None:
            for i in range(copies):
                device.copy_from(pinned, small, offset=i * small)

        queued_s = _median_seconds(queued, repeats)
        sync_s = _median_seconds(synchronous, repeats)
        device.free()
        pinned.free()

        big_host = dev.malloc_host(size)
        big_device = dev.malloc(size)
        view = big_host.numpy()
        view[:] = 7
        # numpy's own case: two arrays it allocated (a page-aligned source would make
        # numpy pay for 4K aliasing, flattering acl_mem).
        source = view.copy()
        target = np.empty(size, dtype=np.uint8)

        def async_h2d() -> None:
            big_device.copy_from_async(big_host, stream=stream)
            stream.synchronize()

        async_h2d()
        async_s = _median_seconds(async_h2d, repeats)
        numpy_s = _median_seconds(lambda: np.copyto(target, source), repeats)
        del view
        big_host.free()
        big_device.free()
    return {"queued_10000_copies_ms": queued_s * 1e3, "sync_10000_copies_ms": sync_s * 1e3,
            "ratio_queued_over_sync": queued_s / sync_s,
            "async_h2d_256MiB_s": async_s, "numpy_copyto_256MiB_s": numpy_s,
            "throughput_ratio_async_over_numpy": numpy_s / async_s}


_SEGMENT_CHILD = """
import json, time, acl_mem
from acl_mem import raw
from acl_mem.vmm import ExpandableSegment

def peak_rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

acl_mem.use_backend("fake")
step, total = 2 << 20, 16 << 30
with acl_mem.Device(0):
    segment = ExpandableSegment(total)
    start = time.perf_counter()
    for size in range(step, total + 1, step):
        segment.grow(size)
    grown = time.perf_counter()
    for size in range(total - step, -1, -step):
        segment.shrink(size)
    shrunk = time.perf_counter()
    segment.close()
    loops = 2000
    pair_start = time.perf_counter()
    for _ in range(loops):
        raw.aclrtFree(raw.aclrtMalloc(step, 0))
    pair = (time.perf_counter() - pair_start) / loops
steps = total // step
print(json.dumps({"map_us": (grown - start) / steps * 1e6,
                  "unmap_us": (shrunk - grown) / steps * 1e6,
                  "raw_malloc_free_pair_us": pair * 1e6,
                  "ratio_map_over_pair": (grown - start) / steps / pair,
                  "ratio_unmap_over_pair": (shrunk - grown) / steps / pair,
                  "peak_rss_MiB": peak_rss() / (1 << 20)}))
"""


def bench_segment() -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _SEGMENT_CHILD], check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "ACL_MEM_BACKEND": "fake"})
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--loops", type=int, default=20000)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--engine", action="store_true",
                        help="then run engine_bench.py --quick (its goals table)")
    args = parser.parse_args()
    results = {
        "a_copy_256MiB": bench_copy(args.repeats),
        "b_sparse_rss": bench_rss(),
        "c_malloc_pair": bench_malloc_pair(args.loops, args.repeats),
    }
    results["d_native_overhead"] = bench_native_overhead(args.loops // 4, args.repeats)
    results["e_f_async"] = bench_async(args.repeats)
    results["g_expandable_segment"] = bench_segment()
    report(results, args.json)
    if args.engine:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import engine_bench

        return engine_bench.main(["--quick"])
    return 0


def report(results: dict[str, dict[str, float]], json_path: str | None) -> None:
    """Print the figures per benchmark; also write them as JSON if asked."""
    for name, figures in results.items():
        print(name)
        for key, value in figures.items():
            print(f"  {key:<42} {value:14.3f}")
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    sys.exit(main())
