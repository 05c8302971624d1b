"""Fake-engine benchmarks (``python benchmarks/engine_bench.py [--quick] [--json FILE]``).

Not part of the test run. As in run.py, every figure is a ratio of two timings taken in
the same process (or, for RSS, of two readings of one fresh process), each timing the
median of several repeats, with acl_mem and its baseline interleaved so that machine
load hits both alike. Each scenario starts on a fresh fake device (atlas-a2, hazards
counted, not warned). The table gives each figure with its goal and PASS/FAIL.

1  peer: Device.malloc + copy_from + copy_to + free vs Numba's CUDA simulator
   (cuda.to_device + copy_to_host into a preallocated array, as acl_mem copies into
   one) at 4 KiB and 16 MiB; numba time / acl_mem time, goal >= 1 at 4 KiB and >= 3 at
   16 MiB (skipped when numba is not installed: pip install -e ".[bench]")
2  raw aclrtMalloc(4096) + aclrtFree pair vs a dict insert + delete; ratio, goal <= 35
   (1 and 2 also time _python_floor.ToyDevice, a Python fake that checks nothing: the
   note gives its figure, the floor any engine in Python stands on)
3  aclrtMemcpy H2D + D2H vs two bare memmoves (ctypes.memmove between two preallocated
   numpy arrays) of the same bytes, throughput ratio memmove / acl_mem, host side
   pageable (numpy) or pinned (aclrtMallocHost), 64 B - 256 MiB; goal >= 0.2 at 64 B
   and 4 KiB, >= 0.5 at 64 KiB, >= 0.85 from 1 MiB. "raw pageable" passes numpy's
   address as an int, which the fake must prove usable before touching it; "buffer"
   is DeviceBuffer.copy_from / copy_to with the numpy array itself (no proof needed)
4  scaling, time(large case) / time(small case), goal <= 2:
   a) 64 KiB malloc + free pair with 10 vs 100 000 live blocks of mixed sizes, a hole
      between each two
   b) aclrtFree of an idle block with 0 vs 100 000 async copies queued on a stream
   c) malloc + free pair with 0 vs 1000 idle streams
   d) 4 KiB copy into VMM-mapped memory with 1 vs 30 000 live 2 MiB mappings
5  two threads each copying 16 MiB (H2D + D2H, pageable) vs one thread: aggregate
   throughput ratio, goal >= 1.7 (the same for bare memmove is shown as the machine's
   ceiling)
6  RSS: write 100 000 blocks of 4 KiB, free them all: fraction of the RSS growth
   returned, goal >= 0.95 (fresh process, /proc/self/statm)
7  memory checker on vs off: pool_bench.py's replay at 1 000 000 operations,
   slowdown (ops/s off / ops/s on), goal <= 3

``--quick`` (about 30 s) shrinks the scales (named in each figure) and the repeats.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
for _path in (str(ROOT), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from _python_floor import ToyDevice  # noqa: E402  (benchmarks/ is on sys.path now)

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
H2D, D2H, D2D = 1, 2, 3  # aclrtMemcpyKind


# -- scales ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    repeats: int
    #: Wall time one timed sample aims at; loops are calibrated to it.
    sample_s: float
    copy_sizes: tuple[int, ...]
    live_blocks: int
    queued_ops: int
    idle_streams: int
    vmm_mappings: int
    rss_blocks: int
    replay_ops: int
    thread_rounds_s: float


FULL = Scale(repeats=7, sample_s=0.03,
             copy_sizes=(64, 4 * KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB),
             live_blocks=100_000, queued_ops=100_000, idle_streams=1000,
             vmm_mappings=30_000, rss_blocks=100_000, replay_ops=1_000_000,
             thread_rounds_s=0.3)
QUICK = Scale(repeats=3, sample_s=0.01,
              copy_sizes=(64, 4 * KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB),
              live_blocks=20_000, queued_ops=20_000, idle_streams=1000,
              vmm_mappings=5_000, rss_blocks=20_000, replay_ops=100_000,
              thread_rounds_s=0.08)


# -- figures and the table -------------------------------------------------------------------------


@dataclass
class Figure:
    key: str
    title: str
    value: float | None
    goal: float
    #: ">=" or "<=": how ``value`` must compare with ``goal``.
    op: str
    details: dict[str, float] = field(default_factory=dict)
    note: str = ""

    @property
    def status(self) -> str:
        if self.value is None or math.isnan(self.value):
            return "SKIP"
        ok = self.value >= self.goal if self.op == ">=" else self.value <= self.goal
        return "PASS" if ok else "FAIL"

    def as_json(self) -> dict[str, object]:
        return {"title": self.title, "value": self.value, "goal": f"{self.op} {self.goal:g}",
                "goal_op": self.op, "goal_value": self.goal, "status": self.status,
                "details": self.details, "note": self.note}


def print_table(figures: list[Figure]) -> None:
    width = max(len(f.key) for f in figures)
    title_width = max(len(f.title) for f in figures)
    print(f"{'figure':<{width}}  {'what':<{title_width}}  {'value':>9}  {'goal':>8}  status")
    for f in figures:
        value = "-" if f.value is None else f"{f.value:9.3f}"
        goal = f"{f.op} {f.goal:g}"
        print(f"{f.key:<{width}}  {f.title:<{title_width}}  {value:>9}  {goal:>8}  {f.status}"
              + (f"  ({f.note})" if f.note else ""))


# -- timing helpers --------------------------------------------------------------------------------


def _calibrate(fn: Callable[[int], object], sample_s: float, max_loops: int) -> int:
    """Loops of ``fn`` that take about ``sample_s``; the runs also warm ``fn`` up."""
    loops = 1
    while True:
        start = time.perf_counter()
        fn(loops)
        elapsed = time.perf_counter() - start
        if elapsed >= sample_s / 8 or loops >= max_loops:
            break
        loops = min(max_loops, loops * 8)
    return max(1, min(max_loops, round(loops * sample_s / max(elapsed, 1e-9))))


def _interleaved(fns: dict[str, Callable[[int], object]], sample_s: float, repeats: int,
                 max_loops: int = 1_000_000) -> dict[str, float]:
    """Median seconds per loop of each ``fns[name](loops)``, the repeats interleaved."""
    loops = {name: _calibrate(fn, sample_s, max_loops) for name, fn in fns.items()}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn(loops[name])
            times[name].append((time.perf_counter() - start) / loops[name])
    return {name: statistics.median(samples) for name, samples in times.items()}


def _fresh_fake(*, check: bool = False, hbm_bytes: int | None = None) -> None:
    """A new fake device (atlas-a2), hazards counted; buffers from before go stale."""
    import acl_mem
    from acl_mem import _backend

    if _backend._active is None:
        acl_mem.use_backend("fake")
    elif _backend._active.name != "fake":  # e.g. run.py left the native binding installed
        _backend._install(acl_mem.fake.make_backend(), "fake: engine benchmark")
    acl_mem.fake.configure("atlas-a2", hbm_bytes=hbm_bytes, hazards="count", check=check)


def _size_name(n: int) -> str:
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{name}"
    return f"{n}B"


# -- 1: peer ---------------------------------------------------------------------------------------


def bench_peer(scale: Scale) -> list[Figure]:
    import numpy as np

    import acl_mem

    sizes = (4 * KiB, 16 * MiB)
    titles = {n: f"alloc+copy in+out+free vs numba cudasim, {_size_name(n)}" for n in sizes}
    keys = {n: f"1.peer_{_size_name(n)}" for n in sizes}
    already = "numba" in sys.modules
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    try:
        import numba
        from numba import cuda
    except ImportError as exc:
        return [Figure(keys[n], titles[n], None, 2, ">=", note=f"skipped: {exc}")
                for n in sizes]
    if not getattr(numba.config, "ENABLE_CUDASIM", False):
        reason = "skipped: numba was imported before NUMBA_ENABLE_CUDASIM=1" if already \
            else "skipped: numba's CUDA simulator is not enabled"
        return [Figure(keys[n], titles[n], None, 2, ">=", note=reason) for n in sizes]

    figures = []
    _fresh_fake()
    with acl_mem.Device(0) as dev:
        for n in sizes:
            x = np.random.default_rng(1).integers(0, 255, n, dtype=np.uint8)
            y = np.empty_like(x)

            def acl(loops: int, n: int = n, x: np.ndarray = x, y: np.ndarray = y) -> None:
                for _ in range(loops):
                    b = dev.malloc(n)
                    b.copy_from(x)
                    b.copy_to(y)
                    b.free()

            def simulator(loops: int, x: np.ndarray = x, y: np.ndarray = y) -> None:
                for _ in range(loops):
                    d = cuda.to_device(x)
                    d.copy_to_host(y)  # like for like: acl_mem copies into y too

            toy = ToyDevice(n, 4)

            def floor(loops: int, n: int = n, x: np.ndarray = x, y: np.ndarray = y,
                      toy: ToyDevice = toy) -> None:
                for _ in range(loops):
                    b = toy.malloc(n)
                    toy.copy_from(b, x)
                    toy.copy_to(b, y)
                    toy.free(b)

            acl(1)
            assert np.array_equal(x, y)
            contenders = {"acl_mem": acl, "numba": simulator}
            if n <= 4 * KiB:  # the floor matters where per-call costs dominate
                contenders["floor"] = floor
            t = _interleaved(contenders, scale.sample_s * 2, scale.repeats)
            details = {"acl_mem_us": t["acl_mem"] * 1e6, "numba_cudasim_us": t["numba"] * 1e6}
            note = ""
            if "floor" in t:
                details["python_floor_us"] = t["floor"] * 1e6
                note = f"a Python fake that checks nothing: {t['numba'] / t['floor']:.2f}"
            goal = 1 if n <= 4 * KiB else 3
            figures.append(Figure(keys[n], titles[n], t["numba"] / t["acl_mem"], goal, ">=",
                                  details, note))
    return figures


# -- 2: raw malloc + free pair ---------------------------------------------------------------------


def bench_malloc_pair(scale: Scale) -> list[Figure]:
    import acl_mem
    from acl_mem import raw

    _fresh_fake()
    table: dict[int, int] = {}

    def malloc_free(loops: int) -> None:
        malloc, free = raw.aclrtMalloc, raw.aclrtFree
        for _ in range(loops):
            free(malloc(4096, 0))

    def dict_pair(loops: int) -> None:
        for i in range(loops):
            table[i] = i
            del table[i]

    toy = ToyDevice(4096, 4)

    def floor(loops: int) -> None:
        malloc, free = toy.malloc, toy.free
        for _ in range(loops):
            free(malloc(4096))

    with acl_mem.Device(0):
        t = _interleaved({"acl_mem": malloc_free, "dict": dict_pair, "floor": floor},
                         scale.sample_s * 2, scale.repeats)
    return [Figure("2.malloc_pair", "raw aclrtMalloc(4 KiB)+aclrtFree vs dict insert+del",
                   t["acl_mem"] / t["dict"], 35, "<=",
                   {"raw_pair_us": t["acl_mem"] * 1e6, "dict_pair_us": t["dict"] * 1e6,
                    "python_floor_pair_us": t["floor"] * 1e6},
                   f"a Python fake that checks nothing: {t['floor'] / t['dict']:.1f}")]


# -- 3: copies vs memmove --------------------------------------------------------------------------


def _copy_goal(n: int) -> float:
    if n <= 4 * KiB:
        return 0.2
    if n < MiB:
        return 0.5
    return 0.85


def bench_copies(scale: Scale) -> list[Figure]:
    import numpy as np

    import acl_mem
    from acl_mem import raw

    memmove = ctypes.memmove
    memcpy = raw.aclrtMemcpy
    figures: list[Figure] = []
    _fresh_fake()
    with acl_mem.Device(0) as device:
        for n in scale.copy_sizes:
            src = np.random.default_rng(n).integers(0, 255, n, dtype=np.uint8)
            dst = np.empty_like(src)
            s, d = src.ctypes.data, dst.ctypes.data
            buffer = device.malloc(n)
            buffer.copy_from(src)
            dev = raw.aclrtMalloc(n, 0)
            pinned = raw.aclrtMallocHost(n)
            ctypes.memmove(pinned, s, n)
            memcpy(dev, n, s, n, H2D)  # first touch of the device pages is not timed
            memcpy(d, n, dev, n, D2H)
            assert np.array_equal(src, dst)

            def base(loops: int, n: int = n, s: int = s, d: int = d) -> None:
                for _ in range(loops):
                    memmove(d, s, n)

            def pageable_h2d(loops: int, n: int = n, s: int = s, dev: int = dev) -> None:
                for _ in range(loops):
                    memcpy(dev, n, s, n, H2D)

            def pageable_d2h(loops: int, n: int = n, d: int = d, dev: int = dev) -> None:
                for _ in range(loops):
                    memcpy(d, n, dev, n, D2H)

            def pinned_h2d(loops: int, n: int = n, p: int = pinned, dev: int = dev) -> None:
                for _ in range(loops):
                    memcpy(dev, n, p, n, H2D)

            def pinned_d2h(loops: int, n: int = n, p: int = pinned, dev: int = dev) -> None:
                for _ in range(loops):
                    memcpy(p, n, dev, n, D2H)

            # The Pythonic layer passes numpy's memory as a buffer it holds: no proof needed.
            def buffer_h2d(loops: int, b: acl_mem.DeviceBuffer = buffer,
                           x: np.ndarray = src) -> None:
                for _ in range(loops):
                    b.copy_from(x)

            def buffer_d2h(loops: int, b: acl_mem.DeviceBuffer = buffer,
                           y: np.ndarray = dst) -> None:
                for _ in range(loops):
                    b.copy_to(y)

            repeats = scale.repeats if n < 64 * MiB else max(3, scale.repeats // 2)
            t = _interleaved({"memmove": base, "pageable_h2d": pageable_h2d,
                              "pageable_d2h": pageable_d2h, "pinned_h2d": pinned_h2d,
                              "pinned_d2h": pinned_d2h, "buffer_h2d": buffer_h2d,
                              "buffer_d2h": buffer_d2h}, scale.sample_s, repeats)
            buffer.free()
            raw.aclrtFree(dev)
            raw.aclrtFreeHost(pinned)
            del src, dst
            for mode, what in (("pageable", "raw pageable"), ("pinned", "raw pinned"),
                               ("buffer", "buffer.copy_from/to numpy")):
                h2d, d2h = t[f"{mode}_h2d"], t[f"{mode}_d2h"]
                figures.append(Figure(
                    f"3.{mode}_{_size_name(n)}",
                    f"{what} H2D+D2H vs 2 memmoves, {_size_name(n)}",
                    2 * t["memmove"] / (h2d + d2h), _copy_goal(n), ">=",
                    {"memmove_us": t["memmove"] * 1e6, "h2d_us": h2d * 1e6,
                     "d2h_us": d2h * 1e6, "ratio_h2d": t["memmove"] / h2d,
                     "ratio_d2h": t["memmove"] / d2h}))
    return figures


# -- 4: scaling ------------------------------------------------------------------------------------


def _pair_time(scale: Scale, size: int) -> float:
    from acl_mem import raw

    def pair(loops: int) -> None:
        malloc, free = raw.aclrtMalloc, raw.aclrtFree
        for _ in range(loops):
            free(malloc(size, 0))

    return _interleaved({"pair": pair}, scale.sample_s, scale.repeats)["pair"]


def bench_live_blocks(scale: Scale) -> Figure:
    """4a: a 64 KiB pair among N live blocks of mixed sizes with holes between them."""
    import acl_mem
    from acl_mem import raw

    mixed = (64, 1000, 4096, 10_000, 40_000)  # every hole is smaller than 64 KiB
    times: dict[int, float] = {}
    for live in (10, scale.live_blocks):
        _fresh_fake()
        with acl_mem.Device(0):
            blocks = [raw.aclrtMalloc(mixed[i % len(mixed)], 0) for i in range(2 * live)]
            for ptr in blocks[::2]:
                raw.aclrtFree(ptr)
            times[live] = _pair_time(scale, 64 * KiB)
            for ptr in blocks[1::2]:
                raw.aclrtFree(ptr)
    small, large = times[10], times[scale.live_blocks]
    return Figure("4a.live_blocks", f"64 KiB pair, 10 vs {scale.live_blocks} live blocks+holes",
                  large / small, 2, "<=", {"pair_us_10": small * 1e6,
                                           f"pair_us_{scale.live_blocks}": large * 1e6})


def bench_free_while_queued(scale: Scale) -> Figure:
    """4b: aclrtFree of blocks no queued op touches, with 0 vs N ops queued."""
    import acl_mem
    from acl_mem import raw

    _fresh_fake()
    times: dict[int, float] = {}
    details: dict[str, float] = {}

    def free_blocks(count: int) -> float:
        """Seconds per aclrtFree over ``count`` blocks allocated beforehand (untimed)."""
        blocks = [raw.aclrtMalloc(4096, 0) for _ in range(count)]
        start = time.perf_counter()
        for ptr in blocks:
            raw.aclrtFree(ptr)
        return (time.perf_counter() - start) / count

    with acl_mem.Device(0):
        stream = raw.aclrtCreateStream()
        a, b = raw.aclrtMalloc(64, 0), raw.aclrtMalloc(64, 0)
        # The device's host backing exists from the first touch on (frees then record
        # their pages for the next sweep); both cases must start with it, as the queued
        # copies touch it.
        raw.aclrtMemset(a, 64, 0, 64)
        for queued in (0, scale.queued_ops):
            start = time.perf_counter()
            for _ in range(queued):
                raw.aclrtMemcpyAsync(b, 64, a, 64, D2D, stream)
            if queued:
                details["enqueue_us"] = (time.perf_counter() - start) / queued * 1e6
            # As many frees per sample as fit in sample_s (a free may cost O(queue)).
            probe = free_blocks(8)
            count = max(4, min(5000, round(scale.sample_s / max(probe, 1e-9))))
            times[queued] = statistics.median(free_blocks(count)
                                              for _ in range(scale.repeats))
            start = time.perf_counter()
            raw.aclrtSynchronizeStream(stream)
            details[f"synchronize_s_{queued}"] = time.perf_counter() - start
        hazards = sum(acl_mem.fake.hazards().values())
        raw.aclrtFree(a)
        raw.aclrtFree(b)
        raw.aclrtDestroyStream(stream)
    small, large = times[0], times[scale.queued_ops]
    return Figure("4b.free_while_queued", f"aclrtFree, 0 vs {scale.queued_ops} queued ops",
                  large / small, 2, "<=", {"free_us_0": small * 1e6,
                                           f"free_us_{scale.queued_ops}": large * 1e6,
                                           "hazards_reported": float(hazards), **details})


def bench_idle_streams(scale: Scale) -> Figure:
    """4c: a malloc + free pair with 0 vs N idle streams."""
    import acl_mem
    from acl_mem import raw

    _fresh_fake()
    with acl_mem.Device(0):
        small = _pair_time(scale, 4096)
        streams = [raw.aclrtCreateStream() for _ in range(scale.idle_streams)]
        large = _pair_time(scale, 4096)
        for handle in streams:
            raw.aclrtDestroyStream(handle)
    return Figure("4c.idle_streams", f"4 KiB pair, 0 vs {scale.idle_streams} idle streams",
                  large / small, 2, "<=", {"pair_us_0": small * 1e6,
                                           f"pair_us_{scale.idle_streams}": large * 1e6})


def bench_vmm_mappings(scale: Scale) -> Figure:
    """4d: a 4 KiB H2D copy into mapped memory with 1 vs N 2 MiB mappings live."""
    import numpy as np

    import acl_mem
    from acl_mem import MemAttr, raw

    gran = 2 * MiB
    wanted = scale.vmm_mappings * gran
    _fresh_fake()
    prop = raw.aclrtPhysicalMemProp(memAttr=MemAttr.HBM_MEM_HUGE,
                                    location=raw.aclrtMemLocation(id=0, type=1))
    with acl_mem.Device(0):
        huge_free, _ = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_HUGE)
        granularity = raw.aclrtMemGetAllocationGranularity(prop)
    hbm = None
    if huge_free < wanted:  # room for the mappings, on a bigger device of the same kind
        hbm = -(-(wanted + GiB) * 16 // 15 // GiB) * GiB
        _fresh_fake(hbm_bytes=hbm)
    src = np.random.default_rng(4).integers(0, 255, 4 * KiB, dtype=np.uint8)
    s = src.ctypes.data
    times: dict[int, float] = {}
    with acl_mem.Device(0):
        reserved = -(-wanted // (64 * GiB)) * 64 * GiB
        for count in (1, scale.vmm_mappings):
            base = raw.aclrtReserveMemAddress(reserved, 0, 0, 0)
            handles = []
            for i in range(count):
                handle = raw.aclrtMallocPhysical(gran, prop)
                raw.aclrtMapMem(base + i * gran, gran, 0, handle)
                handles.append(handle)
            # Sixteen targets spread over the mappings (all the same one when there is one).
            targets = [base + (k * count // 16) * gran + 4096 for k in range(16)]

            def copy(loops: int, targets: list[int] = targets) -> None:
                memcpy = raw.aclrtMemcpy
                for i in range(loops):
                    memcpy(targets[i & 15], 4096, s, 4096, H2D)

            times[count] = _interleaved({"copy": copy}, scale.sample_s, scale.repeats)["copy"]
            for i, handle in enumerate(handles):
                raw.aclrtUnmapMem(base + i * gran)
                raw.aclrtFreePhysical(handle)
            raw.aclrtReleaseMemAddress(base)
    small, large = times[1], times[scale.vmm_mappings]
    details = {"copy_us_1": small * 1e6, f"copy_us_{scale.vmm_mappings}": large * 1e6,
               "granularity": float(granularity)}
    if hbm is not None:
        details["hbm_bytes_configured"] = float(hbm)
    return Figure("4d.vmm_mappings", f"4 KiB copy, 1 vs {scale.vmm_mappings} VMM mappings",
                  large / small, 2, "<=", details)


# -- 5: two threads --------------------------------------------------------------------------------


def bench_threads(scale: Scale) -> list[Figure]:
    import numpy as np

    import acl_mem
    from acl_mem import raw

    n = 16 * MiB
    _fresh_fake()
    # Every host page touched before timing (np.empty's pages would fault in the first copy).
    hosts = [(np.full(n, k + 1, dtype=np.uint8), np.full(n, 0, dtype=np.uint8))
             for k in range(2)]

    def acl_worker(k: int, rounds: int, gate: threading.Barrier) -> None:
        src, dst = hosts[k]
        with acl_mem.Device(0):
            dev = raw.aclrtMalloc(n, 0)
            raw.aclrtMemcpy(dev, n, src.ctypes.data, n, H2D)
            gate.wait()
            for _ in range(rounds):
                raw.aclrtMemcpy(dev, n, src.ctypes.data, n, H2D)
                raw.aclrtMemcpy(dst.ctypes.data, n, dev, n, D2H)
            gate.wait()
            raw.aclrtFree(dev)

    def memmove_worker(k: int, rounds: int, gate: threading.Barrier) -> None:
        src, dst = hosts[k]
        tmp = np.full_like(src, 0)
        gate.wait()
        for _ in range(rounds):
            ctypes.memmove(tmp.ctypes.data, src.ctypes.data, n)
            ctypes.memmove(dst.ctypes.data, tmp.ctypes.data, n)
        gate.wait()

    def run(worker: Callable[[int, int, threading.Barrier], None], threads: int,
            rounds: int) -> float:
        gate = threading.Barrier(threads + 1)
        pool = [threading.Thread(target=worker, args=(k, rounds, gate)) for k in range(threads)]
        for t in pool:
            t.start()
        gate.wait()
        start = time.perf_counter()
        gate.wait()
        elapsed = time.perf_counter() - start
        for t in pool:
            t.join()
        return elapsed

    workers = {"acl_mem": acl_worker, "memmove": memmove_worker}
    rounds = {name: max(2, round(scale.thread_rounds_s /
                                 max(min(run(worker, 1, 1) for _ in range(2)), 1e-6)))
              for name, worker in workers.items()}
    samples: dict[str, list[float]] = {}
    for _ in range(scale.repeats):  # interleaved: load from elsewhere hits all alike
        for name, worker in workers.items():
            for threads in (1, 2):
                samples.setdefault(f"{name}_{threads}", []).append(
                    run(worker, threads, rounds[name]))
    results: dict[str, float] = {}
    for name in workers:
        one = statistics.median(samples[f"{name}_1"])
        two = statistics.median(samples[f"{name}_2"])
        results[f"{name}_one_thread_s"] = one
        results[f"{name}_two_threads_s"] = two
        results[f"{name}_scaling"] = 2 * one / two
        results[f"{name}_rounds"] = float(rounds[name])
    results["acl_mem_one_thread_GBps"] = 2 * n * rounds["acl_mem"] / \
        results["acl_mem_one_thread_s"] / 1e9
    results["acl_mem_scaling_over_memmove_scaling"] = \
        results["acl_mem_scaling"] / results["memmove_scaling"]
    return [Figure("5.two_threads", "2 threads x 16 MiB H2D+D2H vs 1 thread, throughput",
                   results["acl_mem_scaling"], 1.7, ">=", results,
                   note=f"bare memmove scales {results['memmove_scaling']:.2f}x here")]


# -- 6: RSS returned -------------------------------------------------------------------------------

_RSS_CHILD = """
import array, ctypes, json, os, sys
import acl_mem
from acl_mem import raw

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

blocks = int(sys.argv[1])
acl_mem.use_backend("fake")
acl_mem.fake.configure("atlas-a2", hazards="count")
data = bytes(range(256)) * 16
ptrs = array.array("Q", bytes(8 * blocks))
with acl_mem.Device(0):
    warm = raw.aclrtMalloc(4096, 0)
    raw.aclrtFree(warm)
    before = rss()
    for i in range(blocks):
        ptrs[i] = raw.aclrtMalloc(4096, 0)
    allocated = rss()
    buf = ctypes.create_string_buffer(data, 4096)
    host = ctypes.addressof(buf)
    for i in range(blocks):
        raw.aclrtMemcpy(ptrs[i], 4096, host, 4096, 1)
    written = rss()
    for i in range(blocks):
        raw.aclrtFree(ptrs[i])
    freed = rss()
print(json.dumps({"rss_before_MiB": before / 2**20, "rss_allocated_MiB": allocated / 2**20,
                  "rss_written_MiB": written / 2**20, "rss_freed_MiB": freed / 2**20}))
"""


def _child_env() -> dict[str, str]:
    """The environment of a child that must import the same acl_mem as this process."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "ACL_MEM_BACKEND": "fake", "PYTHONPATH": path}


def bench_rss(scale: Scale) -> list[Figure]:
    out = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(scale.rss_blocks)],
                         capture_output=True, text=True, env=_child_env())
    if out.returncode:
        raise RuntimeError(f"the RSS child failed:\n{out.stderr}")
    r: dict[str, float] = json.loads(out.stdout)
    growth = r["rss_written_MiB"] - r["rss_before_MiB"]
    returned = r["rss_written_MiB"] - r["rss_freed_MiB"]
    r["growth_MiB"] = growth
    r["returned_MiB"] = returned
    return [Figure("6.rss_returned", f"RSS growth returned after freeing {scale.rss_blocks}"
                   " written 4 KiB blocks", returned / growth if growth > 0 else math.nan,
                   0.95, ">=", r)]


# -- 7: checker overhead ---------------------------------------------------------------------------


def bench_checker(scale: Scale) -> list[Figure]:
    import pool_bench

    off = pool_bench.bench_replay(scale.replay_ops)
    on = pool_bench.bench_replay(scale.replay_ops, check=True)
    _fresh_fake()
    return [Figure("7.checker", f"pool replay of {scale.replay_ops} ops, checker on vs off",
                   off["ops_per_s"] / on["ops_per_s"], 3, "<=",
                   {"ops_per_s_off": off["ops_per_s"], "ops_per_s_on": on["ops_per_s"],
                    "operations": off["operations"]})]


# -- main ------------------------------------------------------------------------------------------

SCENARIOS: dict[str, Callable[[Scale], list[Figure]]] = {
    "1": bench_peer,
    "2": bench_malloc_pair,
    "3": bench_copies,
    "4a": lambda s: [bench_live_blocks(s)],
    "4b": lambda s: [bench_free_while_queued(s)],
    "4c": lambda s: [bench_idle_streams(s)],
    "4d": lambda s: [bench_vmm_mappings(s)],
    "5": bench_threads,
    "6": bench_rss,
    "7": bench_checker,
}


def run_all(scale: Scale, only: list[str] | None = None,
            progress: bool = True) -> list[Figure]:
    figures: list[Figure] = []
    for name, scenario in SCENARIOS.items():
        if only and not any(name.startswith(o) for o in only):
            continue
        start = time.perf_counter()
        figures.extend(scenario(scale))
        if progress:
            print(f"[scenario {name}: {time.perf_counter() - start:.1f} s]", file=sys.stderr)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller scales, about 30 s")
    parser.add_argument("--only", nargs="*", metavar="N",
                        help="scenarios to run, e.g. 2 3 4b (default: all)")
    parser.add_argument("--details", action="store_true",
                        help="also print every scenario's raw figures")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    started = time.perf_counter()
    figures = run_all(scale, args.only)
    if args.details:
        from run import report

        report({f.key: f.details for f in figures}, None)
    print_table(figures)
    elapsed = time.perf_counter() - started
    print(f"{sum(f.status == 'PASS' for f in figures)} pass, "
          f"{sum(f.status == 'FAIL' for f in figures)} fail, "
          f"{sum(f.status == 'SKIP' for f in figures)} skipped in {elapsed:.0f} s"
          + (" (--quick: reduced scales)" if args.quick else ""))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"scale": "quick" if args.quick else "full", "seconds": elapsed,
                       "figures": {f.key: f.as_json() for f in figures}}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
