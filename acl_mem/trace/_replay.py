"""Replaying a trace on the fake: every recorded call made again on a fresh fake device
(the recorded one, or another profile, capacity, CANN release or a pool), with recorded
addresses mapped to replayed ones; the calls whose result differs from the recording,
and the memory figures of the replay beside the recording's."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import _backend
from .. import fake as _fake
from .._lifecycle import state as raw_state
from .._runtime_facts import padding_of
from ..errors import error_name
from ..fake import (
    PROFILES,
    VERSIONS,
    CannVersion,
    Profile,
    profile_for_soc,
    resolve_cann,
    resolve_profile,
)
from ..pool.stats import PoolStats
from ._figures import TraceSummary
from ._format import Trace, call_label, prop_to_json, read_trace
from ._lines import CALLS, CallSpec
from ._progress import Progress
from ._replay_calls import CallReplayer, Outcome, Skip, outcome_of
from ._summary import summarize_trace

__all__ = ["Difference", "ReplayOptions", "ReplayReport", "replay", "replay_trace"]

POOLS = ("segment", "expandable")
#: Exceptions the fake raises after the call took effect: the replay (which counts
#: hazards instead of raising) sees the call succeed, as it did.
_AFTER_EFFECT = frozenset({"HazardError", "MemoryCheckError"})
_ALLOCATIONS = frozenset({"aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached",
                          "acldvppMalloc", "hi_mpi_dvpp_malloc", "aclrtMallocPhysical",
                          "aclrtMallocHost", "aclrtReserveMemAddress"})


@dataclass(frozen=True)
class ReplayOptions:
    """What to replay on: a fake profile (name or SoC family), bytes per device, a CANN
    release, and ``pool`` ("segment" or "expandable") to serve the aclrtMalloc family's
    device memory from an acl_mem pool per device. None: as the trace's header says."""

    profile: str | None = None
    hbm: int | None = None
    cann: str | None = None
    pool: str | None = None

    def __post_init__(self) -> None:
        if self.pool is not None and self.pool not in POOLS:
            raise ValueError(f"replay: pool must be one of {', '.join(POOLS)} or None, got "
                             f"{self.pool!r}")
        if self.hbm is not None and self.hbm < (1 << 21):
            raise ValueError(f"replay: hbm must be at least 2 MiB per device, got {self.hbm}")
        # Unknown names fail here, before the trace is read.
        if self.profile is not None:
            resolve_profile(self.profile)
        if self.cann is not None:
            resolve_cann(self.cann)


@dataclass
class Difference:
    """A call whose result in the replay is not the recorded one."""

    #: Position among the trace's calls (0 first) and time since the recording began (ns).
    number: int
    t: int
    thread: int
    #: The call with its recorded arguments.
    call: str
    recorded: str
    replayed: str
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    #: For an allocation the replay refused: free and total bytes of the device then.
    free: int | None = None
    total: int | None = None
    #: The return codes (None where the call raised instead).
    recorded_rc: int | None = None
    replayed_rc: int | None = None

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {"number": self.number, "t": self.t, "thread": self.thread, "call": self.call,
                "recorded": self.recorded, "replayed": self.replayed,
                "recorded_rc": self.recorded_rc, "replayed_rc": self.replayed_rc,
                "stack": [list(f) for f in self.frames], "free": self.free,
                "total": self.total}


@dataclass
class ReplayReport:
    """What ``acl-mem trace replay`` reports."""

    path: str
    #: What the replay ran on: profile name, SoC, CANN release, bytes and devices.
    profile: str
    soc: str
    cann: str
    capacity: int
    device_count: int
    pool: str | None
    calls: int
    replayed: int
    seconds: float
    differences: int
    #: The first differences (as many as asked for), in time order.
    first: list[Difference]
    #: Calls not replayed, by reason.
    skipped: dict[str, int]
    recorded_summary: TraceSummary
    replayed_summary: TraceSummary
    #: Per device, the figures of the pool the replay used (``pool`` given).
    pools: dict[int, PoolStats] = field(default_factory=dict)
    #: Choices the replay made that the user should know (a release it does not play...).
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON (``acl-mem trace replay --json``)."""
        return {
            "path": self.path, "profile": self.profile, "soc": self.soc, "cann": self.cann,
            "capacity": self.capacity, "device_count": self.device_count, "pool": self.pool,
            "calls": self.calls, "replayed": self.replayed, "seconds": self.seconds,
            "differences": self.differences, "first": [d.as_dict() for d in self.first],
            "skipped": self.skipped, "notes": self.notes,
            "devices": _peaks(self.recorded_summary, self.replayed_summary),
            "pools": {str(d): _pool_dict(s) for d, s in sorted(self.pools.items())},
        }


def _pool_dict(stats: PoolStats) -> dict[str, object]:
    return {"peak_in_use": stats.peak_in_use, "peak_reserved": stats.peak_reserved,
            "reserved": stats.reserved, "cached": stats.cached,
            "largest_free_extent": stats.largest_free_extent,
            "fragmentation": stats.fragmentation, "blocks_allocated": stats.blocks_allocated}


def _peaks(recorded: TraceSummary, replayed: TraceSummary) -> dict[str, dict[str, int]]:
    """Per device: the recorded and replayed peaks."""
    out: dict[str, dict[str, int]] = {}
    for device in dict.fromkeys([*recorded.devices, *replayed.devices]):
        before, after = recorded.devices.get(device), replayed.devices.get(device)
        out[device] = {
            "recorded_peak_in_use": before.total.peak_in_use if before else 0,
            "recorded_peak_reserved": before.total.peak_reserved if before else 0,
            "replayed_peak_in_use": after.total.peak_in_use if after else 0,
            "replayed_peak_reserved": after.total.peak_reserved if after else 0,
        }
    return out


# -- what to replay on -----------------------------------------------------------------------------
def _target(header: Mapping[str, Any], options: ReplayOptions
            ) -> tuple[Profile, CannVersion, list[str]]:
    notes: list[str] = []
    found = header.get("details")
    details: Mapping[str, Any] = found if isinstance(found, dict) else {}
    if options.profile is not None:
        profile = resolve_profile(options.profile)
    elif header.get("backend") == "fake" and str(details.get("profile")) in PROFILES:
        profile = PROFILES[str(details["profile"])]
    elif isinstance(header.get("soc"), str) and header["soc"]:
        profile = profile_for_soc(header["soc"])
    else:
        profile = resolve_profile("atlas-a2")
        notes.append("the trace names no SoC: replayed on the atlas-a2 profile")
    recorded_capacity = header.get("capacity")
    capacity = options.hbm if options.hbm is not None else (
        recorded_capacity if isinstance(recorded_capacity, int) and recorded_capacity >= 1 << 21
        and options.profile is None else None)
    count = header.get("device_count")
    profile = profile.with_overrides(
        device_count=count if isinstance(count, int) and 1 <= count <= 32 else None,
        capacity=capacity)
    if options.cann is not None:
        release = resolve_cann(options.cann)
    elif header.get("cann") in VERSIONS:
        release = VERSIONS[str(header["cann"])]
    else:
        release = resolve_cann(_fake.cann())
        notes.append(f"the trace's CANN release {header.get('cann')!r} is not one the fake "
                     f"plays: replayed as {release.name}")
    return profile, release, notes


# -- recording what the replay does ----------------------------------------------------------------
class _Capture:
    """Shadows the traced calls of the replay's backend, so that every call made on it
    (the replay's, and the pools' own) becomes a record of the replayed trace."""

    def __init__(self, replayer: CallReplayer) -> None:
        self.replayer = replayer
        self.events: list[dict[str, Any]] = []
        self.t = 0
        self.th = 0

    def install(self, backend: Any) -> None:
        slots = vars(backend)
        for name, spec in CALLS.items():
            call = getattr(backend, name, None)
            if call is not None:
                slots[name] = self._wrap(spec, call)

    def _wrap(self, spec: CallSpec, call: Callable[..., Any]) -> Callable[..., Any]:
        events, fields, outputs = self.events, spec.fields, spec.outputs
        written, device, returns = spec.written, spec.device, spec.returns_code

        def record(args: tuple[Any, ...]) -> dict[str, Any]:
            event: dict[str, Any] = {"t": self.t, "th": self.th}
            if device:
                event["dev"] = self.replayer.current.get(self.th)
            event["call"] = written
            for name, value in zip(fields, args, strict=False):
                event[name] = prop_to_json(value) if name == "prop" else value
            return event

        def captured(*args: Any) -> Any:
            try:
                result = call(*args)
            except BaseException as exc:
                event = record(args)
                event["raised"], event["message"] = type(exc).__name__, ""
                events.append(event)
                raise
            event = record(args)
            if returns:
                if outputs:
                    event["rc"] = result[0]
                    if result[0] == 0:
                        event.update(zip(outputs, result[1:], strict=True))
                else:
                    event["rc"] = result
            events.append(event)
            return result

        captured.__wrapped__ = call  # type: ignore[attr-defined]
        return captured


# -- threads ---------------------------------------------------------------------------------------
#: Replaying threads kept at once: a server that ran a short-lived thread per request
#: leaves thousands of thread numbers in its trace.
MAX_WORKERS = 64


class _Threads:
    """One replaying thread per recorded thread (the current device and context are per
    thread): the first recorded thread replays in the caller's, the others in threads of
    their own, one call at a time in the recorded order. At most :data:`MAX_WORKERS`
    threads are started: once they all serve a recorded thread, the one unused longest
    is handed to the next new one, after ``retired`` is told the number it served and
    ``forget`` (run in it) gave it a new thread's state: a trace of a server that ran a
    thread per request costs no thread start per request."""

    def __init__(self, retired: Callable[[int], None] | None = None,
                 forget: Callable[[], None] | None = None) -> None:
        self.main: int | None = None
        self._retired = retired
        self._forget = forget
        # Insertion order is use order: a worker is moved to the end when used.
        self._workers: dict[int, _Worker] = {}

    def run(self, th: int, work: Callable[..., Any], *args: Any) -> Any:
        if self.main is None:
            self.main = th
        if th == self.main:
            return work(*args)
        worker = self._workers.pop(th, None)
        if worker is None:
            worker = self._reuse() if len(self._workers) >= MAX_WORKERS else _new_worker(th)
        self._workers[th] = worker
        return worker.call(work, args)

    def _reuse(self) -> _Worker:
        oldest = next(iter(self._workers))
        worker = self._workers.pop(oldest)
        if self._retired is not None:
            self._retired(oldest)
        if self._forget is not None:
            worker.call(self._forget, ())
        return worker

    def close(self) -> None:
        for worker in self._workers.values():
            worker.stop()
        self._workers.clear()


class _Worker:
    """A replaying thread and its two queues."""

    def __init__(self, name: str) -> None:
        self.inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=_serve, args=(self.inbox, self.outbox),
                                       daemon=True, name=name)
        self.thread.start()

    def call(self, work: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        self.inbox.put((work, args))
        ok, value = self.outbox.get()
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        self.inbox.put(None)
        self.thread.join(timeout=5)


def _new_worker(th: int) -> _Worker:
    return _Worker(f"acl-mem replay of thread {th}")


def _serve(inbox: queue.SimpleQueue[Any], outbox: queue.SimpleQueue[Any]) -> None:
    while True:
        item = inbox.get()
        if item is None:
            return
        work, args = item
        try:
            outbox.put((True, work(*args)))
        except BaseException as exc:  # handed to the replaying thread, raised there
            outbox.put((False, exc))


# -- the replay ------------------------------------------------------------------------------------
def _text(outcome: Outcome) -> str:
    kind, value = outcome
    if kind == "raised":
        return f"raised {value}"
    code = int(value)  # type: ignore[call-overload]
    return "0 (success)" if code == 0 else f"{code} {error_name(code)}"


def _code(outcome: Outcome) -> int | None:
    return int(outcome[1]) if outcome[0] == "rc" else None  # type: ignore[call-overload]


class _Run:
    """One replay: the fake, the thread runner, the counts."""

    def __init__(self, trace: Trace, options: ReplayOptions, keep: int,
                 progress: Progress | None) -> None:
        self.trace, self.options, self.keep, self.progress = trace, options, keep, progress
        self.profile, self.release, self.notes = _target(trace.header, options)
        # The process's second engine: the user's fake keeps its memory.
        self.backend = _fake.make_backend(self.profile, cann=self.release.name,
                                          hazards="count", check=False, private=True)
        self.replayer = CallReplayer(self.backend, options.pool, self.profile.capacity)
        self.capture = _Capture(self.replayer)
        self.threads = _Threads(retired=self._thread_retired, forget=self._forget_thread)
        self.skipped: Counter[str] = Counter()
        self.first: list[Difference] = []
        self.differences = 0
        self.replayed = 0
        self.calls = 0

    def _fresh_runtime(self) -> None:
        """Another backend became active in the recording: everything of the previous one
        is gone, as after aclFinalize; ACL starts initialised again."""
        self.capture.th = self.threads.main or 0
        self.replayer.replay(self.capture.th, {"call": "aclFinalize", "rc": 0})
        self.backend.aclInit(None)

    def _thread_retired(self, th: int) -> None:
        self.replayer.current.pop(th, None)

    def _forget_thread(self) -> None:
        """(In a replaying thread handed to another recorded thread.)"""
        self.backend.forget_thread()
        raw_state.forget_thread()

    def _setup(self) -> None:
        """The state the recording began in: ACL initialised (unless the trace does it),
        the devices set as often as they were, the starting thread's device current."""
        header = self.trace.header
        calls = [e for e in self.trace.events if "call" in e]
        first_th = int(calls[0].get("th", 0)) if calls else 0
        lifecycle = [e["call"] for e in calls if e["call"] in ("aclInit", "aclFinalize")]
        if not lifecycle or lifecycle[0] != "aclInit":
            self.backend.aclInit(None)
        counts = {int(d): int(n) for d, n in (header.get("set_counts") or {}).items()}
        missing = [d for d in counts if d >= self.profile.device_count]
        if missing:
            # (The fake would refuse each of them, as many times as the header says.)
            self.notes.append(f"the trace began with {len(missing)} device(s) set that the "
                              f"replay's {self.profile.device_count} do not include: not set")
            for device in missing:
                del counts[device]
        start = header.get("current_device")
        order = sorted(counts, key=lambda d: d == start)
        for device in order:
            for _ in range(counts[device]):
                self.threads.run(first_th, self.replayer.replay, first_th,
                                 {"call": "aclrtSetDevice", "device": device, "rc": 0})
        self.capture.events.clear()

    def _step(self, th: int, event: Mapping[str, Any]) -> Outcome:
        if event.get("dev") is not None:
            self.replayer.ensure_device(th, event["dev"])
        try:
            return self.replayer.replay(th, event)
        except Skip:
            raise
        except Exception as exc:
            return ("raised", type(exc).__name__)

    def _memory_then(self, th: int) -> tuple[int | None, int | None]:
        attr = 1 if self.profile.memory == "HBM" else 0  # ACL_HBM_MEM / ACL_DDR_MEM
        info = self.backend.aclrtGetMemInfo
        call = getattr(info, "__wrapped__", info)
        rc, free, total = self.threads.run(th, call, attr)
        return (free, total) if rc == 0 else (None, None)

    def run(self) -> None:
        events = self.trace.events
        self._setup()
        for index, event in enumerate(events):
            if self.progress is not None:
                self.progress.update(index)
            if "call" not in event:
                if event.get("type") == "backend" and self.threads.main is not None:
                    # The recording's memory went with its backend: so does the replay's.
                    self.capture.t = int(event.get("t", 0))
                    self.threads.run(self.threads.main, self._fresh_runtime)
                continue
            self.calls += 1
            th = int(event.get("th", 0))
            self.capture.t, self.capture.th = int(event.get("t", 0)), th
            try:
                outcome = self.threads.run(th, self._step, th, event)
            except Skip as skip:
                self.skipped[skip.reason] += 1
                continue
            self.replayed += 1
            recorded = outcome_of(event)
            if recorded[0] == "raised" and recorded[1] in _AFTER_EFFECT:
                recorded = ("rc", 0)
            if outcome != recorded:
                self._differ(index, th, event, recorded, outcome)
        self.replayer.finish()

    def _differ(self, index: int, th: int, event: Mapping[str, Any], recorded: Outcome,
                outcome: Outcome) -> None:
        self.differences += 1
        if len(self.first) >= self.keep:
            return
        stack = event.get("stack")
        frames = self.trace.stacks.get(int(stack), []) if isinstance(stack, int) else []
        free = total = None
        if event.get("call") in _ALLOCATIONS and outcome[0] == "rc" and outcome[1] != 0:
            free, total = self._memory_then(th)
        self.first.append(Difference(
            number=self.calls - 1, t=int(event.get("t", 0)), thread=th,
            call=call_label(event), recorded=_text(recorded), replayed=_text(outcome),
            frames=list(frames), free=free, total=total, recorded_rc=_code(recorded),
            replayed_rc=_code(outcome)))

    def header(self) -> dict[str, Any]:
        header = dict(self.trace.header)
        header.update(backend="fake", soc=self.profile.soc_name, cann=self.release.name,
                      padding=padding_of(self.backend), device_count=self.profile.device_count,
                      memory=self.profile.memory, capacity=self.profile.capacity,
                      details={"profile": self.profile.name, "cann": self.release.name,
                               "replay_of": self.trace.path})
        return header


def replay_trace(trace: Trace, options: ReplayOptions | None = None, *, keep: int = 10,
                 progress: Progress | None = None) -> ReplayReport:
    """Replay a trace already read (:func:`acl_mem.trace.read_trace`) on a fresh fake
    (the process's second engine, so the active fake keeps its memory); ``keep`` is how
    many differences to describe. With ``options.pool`` the replay's fake is the active
    backend while it runs (as :func:`acl_mem.using_backend` makes it): buffers made before
    in this process are released from Python's side. Two replays at once in one process
    share that engine: the older one's calls then fail with BackendError."""
    options = options or ReplayOptions()
    started = time.perf_counter()
    run = _Run(trace, options, keep, progress)
    run.capture.install(run.backend)
    try:
        if options.pool is None:
            run.run()
        else:
            with _backend.using_backend(run.backend, "acl-mem trace replay"):
                run.run()
    finally:
        run.threads.close()
    seconds = time.perf_counter() - started
    replayed = Trace(path=f"{trace.path} (replayed)", header=run.header(),
                     events=run.capture.events, threads=trace.threads,
                     stacks=trace.stacks, end={"calls": len(run.capture.events), "lost": 0})
    return ReplayReport(
        path=trace.path, profile=run.profile.name, soc=run.profile.soc_name,
        cann=run.release.name, capacity=run.profile.capacity,
        device_count=run.profile.device_count, pool=options.pool, calls=run.calls,
        replayed=run.replayed, seconds=seconds, differences=run.differences,
        first=run.first, skipped=dict(run.skipped.most_common()),
        recorded_summary=summarize_trace(trace), replayed_summary=summarize_trace(replayed),
        pools=dict(run.replayer.pool_stats), notes=run.notes)


def replay(path: str | os.PathLike[str], *, profile: str | None = None, hbm: int | None = None,
           cann: str | None = None, pool: str | None = None, keep: int = 10) -> ReplayReport:
    """Replay the trace file at ``path`` on a fresh fake (what ``acl-mem trace replay``
    does): by default on the device and CANN release the trace's header names; ``profile``,
    ``hbm`` (bytes per device), ``cann`` and ``pool`` ("segment", "expandable") ask
    "what if". See :func:`replay_trace`."""
    return replay_trace(read_trace(path), ReplayOptions(profile, hbm, cann, pool), keep=keep)
