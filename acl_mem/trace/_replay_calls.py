"""Replaying one recorded call on a fake backend: its arguments mapped to the replay's
values, the call made, its outputs mapped for later calls, and its result returned for
comparison with the recording."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from .. import raw
from .._backend import Backend
from .._structs import aclrtMemLocation, aclrtPhysicalMemProp
from ..enums import MallocPolicy
from ..pool import ExpandablePool, SegmentPool
from ..pool.segments import Segment
from ._lines import BY_WRITTEN
from ._replay_map import AddressMap, ValueMap

__all__ = ["CallReplayer", "Outcome", "Skip"]

#: A call's result as compared: ("rc", code) or ("raised", exception class name).
Outcome = tuple[str, object]

_POOLED = frozenset({"aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached"})
_FREES = frozenset({"aclrtFree", "aclrtFreeHost", "acldvppFree", "hi_mpi_dvpp_free"})
#: Device calls made through acl_mem.raw when the replay pools (the pools' own calls need
#: the raw layer's record of each thread's current device).
_MIRRORED = {"aclrtSetDevice": "aclrtSetDevice", "aclrtResetDevice": "aclrtResetDevice",
             "aclrtCreateContext": "aclrtCreateContext",
             "aclrtDestroyContext": "aclrtDestroyContext",
             "aclrtSetCurrentContext": "aclrtSetCurrentContext", "aclFinalize": "aclFinalize"}


MALFORMED = "records with a missing or malformed field"
LOST = "calls on memory or handles the replay could not get"


def _backend_raised(exc: BaseException) -> bool:
    """Whether the exception came out of the backend rather than the record's parsing."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and "_replay" not in tb.tb_frame.f_code.co_filename


class Skip(Exception):
    """The call cannot be replayed; ``reason`` says why (a key of the report's skips)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def outcome_of(record: Mapping[str, Any]) -> Outcome:
    """What the recorded call returned."""
    raised = record.get("raised")
    if raised is not None:
        return ("raised", str(raised))
    return ("rc", int(record.get("rc", 0)))


def prop_from_json(value: object) -> aclrtPhysicalMemProp | None:
    """aclrtPhysicalMemProp from its recorded JSON object (None stays None)."""
    if not isinstance(value, Mapping):
        return None
    location = value.get("location") or {}
    return aclrtPhysicalMemProp(
        int(value.get("handleType", 0)), int(value.get("allocationType", 0)),
        int(value.get("memAttr", 0)),
        aclrtMemLocation(int(location.get("id", 0)), int(location.get("type", 1))),
        int(value.get("reserve", 0)))


class CallReplayer:
    """Makes recorded calls on ``backend`` with mapped values, one call at a time.

    ``pool`` ("segment", "expandable" or None) serves the aclrtMalloc family's device
    memory from an acl_mem pool per device instead (the backend must then be the active
    one, as pools allocate through acl_mem's own layers).
    """

    def __init__(self, backend: Backend, pool: str | None, capacity: int) -> None:
        self.backend = backend
        self.pool_kind = pool
        self.capacity = capacity
        self.addresses = AddressMap()
        self.handles = ValueMap()
        self.streams = ValueMap()
        self.contexts = ValueMap()
        self.shareables = ValueMap()
        #: Replayed context → its device; each device's default context in the replay.
        self.context_device: dict[int, int] = {}
        self.primary: dict[int, int] = {}
        self.references: dict[int, int] = {}
        #: Recorded thread → the device it has current in the replay.
        self.current: dict[int, int | None] = {}
        self.pools: dict[int, SegmentPool | ExpandablePool] = {}
        self.pool_stats: dict[int, Any] = {}
        self.pooled: dict[int, tuple[int, Segment]] = {}
        #: Recorded segments whose block the replay could not get.
        self.lost_segments: set[int] = set()
        self._handlers: dict[str, Callable[[int, Mapping[str, Any]], Outcome]] = {
            "aclInit": self._init, "aclFinalize": self._finalize,
            "aclrtSetDevice": self._set_device, "aclrtResetDevice": self._reset_device,
            "aclrtResetDeviceForce": self._reset_device,
            "aclrtCreateContext": self._create_context,
            "aclrtDestroyContext": self._destroy_context,
            "aclrtSetCurrentContext": self._set_context,
            "aclrtMallocHost": self._malloc_host, "acldvppMalloc": self._dvpp_malloc,
            "hi_mpi_dvpp_malloc": self._mpi_malloc, "aclrtGetMemInfo": self._mem_info,
            "aclrtCreateStream": self._create_stream,
            "aclrtDestroyStream": self._stream_call, "aclrtSynchronizeStream": self._stream_call,
            "aclrtDestroyStreamForce": self._stream_call,
            "aclrtSynchronizeDevice": self._synchronize_device,
            "aclrtReserveMemAddress": self._reserve, "aclrtReleaseMemAddress": self._release,
            "aclrtMallocPhysical": self._malloc_physical,
            "aclrtFreePhysical": self._free_physical, "aclrtMapMem": self._map,
            "aclrtUnmapMem": self._unmap,
            "aclrtMemExportToShareableHandle": self._export,
            "aclrtMemImportFromShareableHandle": self._import,
            "aclrtMemRetainAllocationHandle": self._retain,
            "pool.segment_allocated": self._segment, "pool.segment_freed": self._segment_freed,
        }
        for name in _POOLED:
            self._handlers[name] = self._malloc
        for name in _FREES:
            self._handlers[name] = self._free

    # -- the entry point -------------------------------------------------------------------------
    def replay(self, th: int, record: Mapping[str, Any]) -> Outcome:
        """Make the recorded call; its outcome. Raises Skip when it cannot be made."""
        handler = self._handlers.get(str(record.get("call")))
        if handler is None:
            raise Skip("calls this acl_mem does not replay")
        try:
            return handler(th, record)
        except (KeyError, TypeError, ValueError) as exc:
            # A field missing or of the wrong type: a damaged or hand-edited record (the
            # backend itself returns codes for every integer it is given).
            if isinstance(exc, KeyError) or not _backend_raised(exc):
                raise Skip(MALFORMED) from None
            raise

    # -- values ----------------------------------------------------------------------------------
    @staticmethod
    def _needed(values: ValueMap, recorded: object, record: Mapping[str, Any], *,
                gives_back: bool = False) -> int:
        """The replay's value for a recorded input, or Skip when the replay has none.
        ``gives_back``: the call frees what it names (when recorded, it ended there)."""
        if type(recorded) is not int:
            raise Skip(MALFORMED)
        value: int = recorded
        mapped = values.get(value)
        if mapped is not None:
            return mapped
        if value in values.lost:
            if gives_back and outcome_of(record) == ("rc", 0):
                values.lost.discard(value)
            raise Skip(LOST)
        if outcome_of(record) != ("rc", 0):
            return value  # refused when recorded: let the replay refuse it too
        raise Skip("calls on memory or handles from before the trace began")

    def _call(self, name: str, *args: Any) -> Any:
        return getattr(self.backend, name)(*args)

    def _device_call(self, name: str, *args: Any) -> Any:
        """A device call: through acl_mem.raw when pooling, so its mirror follows."""
        if self.pool_kind is None:
            return self._call(name, *args)
        try:
            result = getattr(raw, _MIRRORED[name])(*args)
        except Exception as exc:
            code = getattr(exc, "code", None)
            if isinstance(code, int):
                return code if name != "aclrtCreateContext" else (code, 0)
            raise
        return 0 if name != "aclrtCreateContext" else (0, result)

    def ensure_device(self, th: int, dev: object) -> None:
        """Give the replaying thread the device the recorded one had current, through that
        device's default context (no reference is added, as none was in the recording)."""
        if not isinstance(dev, int) or self.current.get(th) == dev:
            return
        context = self.primary.get(dev)
        if context is None:
            return
        if self._device_call("aclrtSetCurrentContext", context) == 0:
            self.current[th] = dev

    @staticmethod
    def _result(result: Any) -> tuple[Outcome, tuple[Any, ...]]:
        if isinstance(result, tuple):
            return ("rc", int(result[0])), tuple(result[1:])
        return ("rc", int(result)), ()

    def _output(self, values: ValueMap, record: Mapping[str, Any], field: str,
                result: Any, size: int | None = None) -> Outcome:
        """Map the recorded output ``field`` to the replay's; remember a lost one."""
        outcome, outputs = self._result(result)
        recorded = record.get(field)
        if not isinstance(recorded, int) or recorded == 0:
            return outcome
        if outcome == ("rc", 0) and outputs and outputs[0]:
            if size is not None and isinstance(values, AddressMap):
                values.add_range(recorded, int(outputs[0]), size)
            else:
                values.add(recorded, int(outputs[0]))
        elif outcome_of(record) == ("rc", 0):
            values.lose(recorded)
        return outcome

    # -- device and context ----------------------------------------------------------------------
    def _init(self, th: int, r: Mapping[str, Any]) -> Outcome:
        # The recorded configuration file is not the replay's to read.
        return self._result(self._call("aclInit", None))[0]

    def _finalize(self, th: int, r: Mapping[str, Any]) -> Outcome:
        outcome = self._result(self._device_call("aclFinalize"))[0]
        if outcome == ("rc", 0):
            for values in (self.addresses, self.streams, self.contexts):
                values.drop_all()
            self.references.clear()
            self.current.clear()
            self._drop_pools(None)
        return outcome

    def _set_device(self, th: int, r: Mapping[str, Any]) -> Outcome:
        device = int(r["device"])
        outcome = self._result(self._device_call("aclrtSetDevice", device))[0]
        if outcome == ("rc", 0):
            self.current[th] = device
            self.references[device] = self.references.get(device, 0) + 1
            rc, context = self.backend.aclrtGetCurrentContext()
            if rc == 0 and context:
                self.primary[device] = context
                self.context_device[context] = device
        return outcome

    def _reset_device(self, th: int, r: Mapping[str, Any]) -> Outcome:
        device, call = int(r["device"]), str(r["call"])
        outcome = self._result(self._device_call(call, device))[0]
        if outcome == ("rc", 0):
            # The force reset drops every reference of aclrtSetDevice at once.
            left = 0 if call == "aclrtResetDeviceForce" else self.references.get(device, 1) - 1
            self.references[device] = max(left, 0)
            if left <= 0:
                self.primary.pop(device, None)
                self._drop_pools(device)
                for thread, current in list(self.current.items()):
                    if current == device:
                        self.current[thread] = None
        return outcome

    def _create_context(self, th: int, r: Mapping[str, Any]) -> Outcome:
        device = int(r["device"])
        result = self._device_call("aclrtCreateContext", device)
        outcome = self._output(self.contexts, r, "context", result)
        if outcome == ("rc", 0):
            self.context_device[int(result[1])] = device
            self.current[th] = device
        return outcome

    def _destroy_context(self, th: int, r: Mapping[str, Any]) -> Outcome:
        context = self._needed(self.contexts, r["context"], r, gives_back=True)
        outcome = self._result(self._device_call("aclrtDestroyContext", context))[0]
        if outcome == ("rc", 0):
            self.contexts.drop(int(r["context"]))
        return outcome

    def _set_context(self, th: int, r: Mapping[str, Any]) -> Outcome:
        context = self._needed(self.contexts, r["context"], r)
        outcome = self._result(self._device_call("aclrtSetCurrentContext", context))[0]
        if outcome == ("rc", 0):
            self.current[th] = self.context_device.get(context)
        return outcome

    # -- memory ----------------------------------------------------------------------------------
    def _malloc(self, th: int, r: Mapping[str, Any]) -> Outcome:
        call, size, policy = str(r["call"]), int(r["size"]), int(r["policy"])
        if self.pool_kind is not None:
            return self._pool_malloc(th, r, size)
        return self._output(self.addresses, r, "ptr", self._call(call, size, policy), size)

    def _malloc_host(self, th: int, r: Mapping[str, Any]) -> Outcome:
        size = int(r["size"])
        return self._output(self.addresses, r, "ptr", self._call("aclrtMallocHost", size), size)

    def _dvpp_malloc(self, th: int, r: Mapping[str, Any]) -> Outcome:
        size = int(r["size"])
        return self._output(self.addresses, r, "ptr", self._call("acldvppMalloc", size), size)

    def _mpi_malloc(self, th: int, r: Mapping[str, Any]) -> Outcome:
        size = int(r["size"])
        result = self._call("hi_mpi_dvpp_malloc", int(r["device_id"]), size)
        return self._output(self.addresses, r, "ptr", result, size)

    def _free(self, th: int, r: Mapping[str, Any]) -> Outcome:
        recorded = int(r["ptr"])
        ptr = self._needed(self.addresses, recorded, r, gives_back=True)
        pooled = self.pooled.pop(ptr, None)
        if pooled is not None:
            pooled[1].free()
            outcome: Outcome = ("rc", 0)
        else:
            outcome = self._result(self._call(str(r["call"]), ptr))[0]
        if outcome == ("rc", 0):
            self.addresses.drop(recorded)
        return outcome

    def _mem_info(self, th: int, r: Mapping[str, Any]) -> Outcome:
        return self._result(self._call("aclrtGetMemInfo", int(r["attr"])))[0]

    # -- pools -----------------------------------------------------------------------------------
    def _pool_malloc(self, th: int, r: Mapping[str, Any], size: int) -> Outcome:
        device = self.current.get(th)
        if device is None:
            # As the runtime: no current device, no memory (its code for that case).
            return self._result(self._call(str(r["call"]), size, int(r["policy"])))[0]
        pool = self.pools.get(device)
        if pool is None:
            pool = self.pools[device] = (
                SegmentPool(device, policy=int(MallocPolicy.HUGE_FIRST))
                if self.pool_kind == "segment" else ExpandablePool(device, self.capacity))
        try:
            segment = pool.allocate(size)
        except Exception as exc:
            code = getattr(exc, "code", None)
            if not isinstance(code, int):
                raise
            self.addresses.lose(int(r.get("ptr") or 0))
            return ("rc", code)
        assert isinstance(segment, Segment)
        ptr = segment.ptr
        self.pooled[ptr] = (device, segment)
        recorded = r.get("ptr")
        if isinstance(recorded, int) and recorded:
            self.addresses.add_range(recorded, ptr, size)
        return ("rc", 0)

    def _drop_pools(self, device: int | None) -> None:
        for key in [d for d in self.pools if device is None or d == device]:
            pool = self.pools.pop(key)
            self.pool_stats[key] = pool.stats()
            for ptr in [p for p, (d, _) in self.pooled.items() if d == key]:
                del self.pooled[ptr]
            with contextlib.suppress(Exception):  # its memory went with the device already
                pool.close()

    def finish(self) -> None:
        """Keep each pool's figures (the replay ends)."""
        for device, pool in self.pools.items():
            self.pool_stats[device] = pool.stats()

    # -- streams ---------------------------------------------------------------------------------
    def _create_stream(self, th: int, r: Mapping[str, Any]) -> Outcome:
        return self._output(self.streams, r, "stream", self._call("aclrtCreateStream"))

    def _stream_call(self, th: int, r: Mapping[str, Any]) -> Outcome:
        call, recorded = str(r["call"]), int(r["stream"])
        destroys = call in ("aclrtDestroyStream", "aclrtDestroyStreamForce")
        stream = self._needed(self.streams, recorded, r, gives_back=destroys)
        outcome = self._result(self._call(call, stream))[0]
        if destroys and outcome == ("rc", 0):
            self.streams.drop(recorded)
        return outcome

    def _synchronize_device(self, th: int, r: Mapping[str, Any]) -> Outcome:
        return self._result(self._call("aclrtSynchronizeDevice"))[0]

    # -- virtual memory --------------------------------------------------------------------------
    def _reserve(self, th: int, r: Mapping[str, Any]) -> Outcome:
        size, expect = int(r["size"]), int(r.get("expect") or 0)
        hint = self.addresses.get(expect) if expect else 0
        result = self._call("aclrtReserveMemAddress", size, int(r["alignment"]),
                            expect if hint is None else hint, int(r["flags"]))
        return self._output(self.addresses, r, "ptr", result, size)

    def _release(self, th: int, r: Mapping[str, Any]) -> Outcome:
        recorded = int(r["ptr"])
        ptr = self._needed(self.addresses, recorded, r, gives_back=True)
        outcome = self._result(self._call("aclrtReleaseMemAddress", ptr))[0]
        if outcome == ("rc", 0):
            self.addresses.drop(recorded)
        return outcome

    def _malloc_physical(self, th: int, r: Mapping[str, Any]) -> Outcome:
        result = self._call("aclrtMallocPhysical", int(r["size"]), prop_from_json(r.get("prop")),
                            int(r["flags"]))
        return self._output(self.handles, r, "handle", result)

    def _free_physical(self, th: int, r: Mapping[str, Any]) -> Outcome:
        recorded = int(r["handle"])
        handle = self._needed(self.handles, recorded, r, gives_back=True)
        outcome = self._result(self._call("aclrtFreePhysical", handle))[0]
        if outcome == ("rc", 0):
            self.handles.drop(recorded)
        return outcome

    def _map(self, th: int, r: Mapping[str, Any]) -> Outcome:
        ptr = self._needed(self.addresses, r["ptr"], r)
        handle = self._needed(self.handles, r["handle"], r)
        return self._result(self._call("aclrtMapMem", ptr, int(r["size"]), int(r["offset"]),
                                       handle, int(r["flags"])))[0]

    def _unmap(self, th: int, r: Mapping[str, Any]) -> Outcome:
        ptr = self._needed(self.addresses, r["ptr"], r)
        return self._result(self._call("aclrtUnmapMem", ptr))[0]

    def _export(self, th: int, r: Mapping[str, Any]) -> Outcome:
        handle = self._needed(self.handles, r["handle"], r)
        result = self._call("aclrtMemExportToShareableHandle", handle, int(r["handle_type"]),
                            int(r["flags"]))
        return self._output(self.shareables, r, "shareable", result)

    def _import(self, th: int, r: Mapping[str, Any]) -> Outcome:
        shareable = self._needed(self.shareables, r["shareable"], r)
        result = self._call("aclrtMemImportFromShareableHandle", shareable, int(r["device"]))
        return self._output(self.handles, r, "handle", result)

    def _retain(self, th: int, r: Mapping[str, Any]) -> Outcome:
        ptr = self._needed(self.addresses, r["ptr"], r)
        result = self._call("aclrtMemRetainAllocationHandle", ptr)
        return self._output(self.handles, r, "handle", result)

    # -- the pools' notifications ----------------------------------------------------------------
    # A segment's address is inside its block and is often the block's own address, so
    # segments whose block the replay lacks are kept apart from the address map's
    # lost values: the block's own free must still find its block lost.
    def _segment(self, th: int, r: Mapping[str, Any]) -> Outcome:
        ptr_recorded = r["ptr"]
        try:
            parent = self._needed(self.addresses, r["parent"], r)
        except Skip:
            if type(ptr_recorded) is int:
                self.lost_segments.add(ptr_recorded)
            raise
        ptr = self._needed(self.addresses, ptr_recorded, r)
        self.lost_segments.discard(ptr_recorded)
        self._call("checker_segment_allocated", parent, ptr, int(r["size"]), int(r["extent"]))
        return ("rc", 0)

    def _segment_freed(self, th: int, r: Mapping[str, Any]) -> Outcome:
        recorded = r["ptr"]
        if recorded in self.lost_segments:
            self.lost_segments.discard(recorded)
            raise Skip(LOST)
        self._call("checker_segment_freed", self._needed(self.addresses, recorded, r))
        return ("rc", 0)


def written_fields(call: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The argument and output field names of a call as the file writes them."""
    spec = BY_WRITTEN[call]
    return spec.fields, spec.outputs
