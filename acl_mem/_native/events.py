"""Contexts and events of the native backend (docs/runtime-model.md §3.3, §3.15): handles
are passed as ``void *`` and returned as ints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["NativeEvents"]


class NativeEvents:
    """Mixed into NativeBackend; uses its ``ffi``, ``lib`` and pointer helpers."""

    ffi: Any
    lib: Any
    _null: Any

    if TYPE_CHECKING:  # provided by NativeBackend
        def _ptr(self, value: int) -> Any: ...
        def _alloc(self, fn: Any, null_outputs: int, *args: Any) -> tuple[int, int]: ...
        def _out(self, ctype: str, null: bool) -> Any: ...

    def _out_handle(self, fn: Any, null_outputs: int, *args: Any) -> tuple[int, int]:
        """Call ``fn(out, *args)`` where ``out`` is a ``void **`` (or NULL)."""
        out = self._out("void **", bool(null_outputs & 1))
        rc = int(fn(out, *args))
        if rc or out == self._null:
            return rc, 0
        return rc, int(self.ffi.cast("uintptr_t", out[0]))

    # -- contexts ----------------------------------------------------------------------------------
    def aclrtCreateContext(self, deviceId: int, null_outputs: int = 0) -> tuple[int, int]:
        return self._out_handle(self.lib.aclrtCreateContext, null_outputs, deviceId)

    def aclrtDestroyContext(self, context: int) -> int:
        return int(self.lib.aclrtDestroyContext(self._ptr(context)))

    def aclrtSetCurrentContext(self, context: int) -> int:
        return int(self.lib.aclrtSetCurrentContext(self._ptr(context)))

    def aclrtGetCurrentContext(self, null_outputs: int = 0) -> tuple[int, int]:
        return self._out_handle(self.lib.aclrtGetCurrentContext, null_outputs)

    # -- events ------------------------------------------------------------------------------------
    def aclrtCreateEvent(self, null_outputs: int = 0) -> tuple[int, int]:
        return self._out_handle(self.lib.aclrtCreateEvent, null_outputs)

    def aclrtCreateEventWithFlag(self, flag: int, null_outputs: int = 0) -> tuple[int, int]:
        return self._out_handle(self.lib.aclrtCreateEventWithFlag, null_outputs, flag)

    def aclrtCreateEventExWithFlag(self, flag: int, null_outputs: int = 0) -> tuple[int, int]:
        return self._out_handle(self.lib.aclrtCreateEventExWithFlag, null_outputs, flag)

    def aclrtDestroyEvent(self, event: int) -> int:
        return int(self.lib.aclrtDestroyEvent(self._ptr(event)))

    def aclrtRecordEvent(self, event: int, stream: int) -> int:
        return int(self.lib.aclrtRecordEvent(self._ptr(event), self._ptr(stream)))

    def aclrtResetEvent(self, event: int, stream: int) -> int:
        return int(self.lib.aclrtResetEvent(self._ptr(event), self._ptr(stream)))

    def aclrtStreamWaitEvent(self, stream: int, event: int) -> int:
        return int(self.lib.aclrtStreamWaitEvent(self._ptr(stream), self._ptr(event)))

    def aclrtSynchronizeEvent(self, event: int) -> int:
        return int(self.lib.aclrtSynchronizeEvent(self._ptr(event)))

    def aclrtQueryEventStatus(self, event: int, null_outputs: int = 0) -> tuple[int, int]:
        status = self._out("aclrtEventRecordedStatus *", bool(null_outputs & 1))
        rc = int(self.lib.aclrtQueryEventStatus(self._ptr(event), status))
        return rc, int(status[0]) if rc == 0 and status != self._null else 0

    def aclrtQueryEvent(self, event: int, null_outputs: int = 0) -> tuple[int, int]:
        status = self._out("aclrtEventStatus *", bool(null_outputs & 1))
        rc = int(self.lib.aclrtQueryEvent(self._ptr(event), status))
        return rc, int(status[0]) if rc == 0 and status != self._null else 0

    def aclrtEventElapsedTime(
        self, startEvent: int, endEvent: int, null_outputs: int = 0
    ) -> tuple[int, float]:
        ms = self._out("float *", bool(null_outputs & 1))
        rc = int(self.lib.aclrtEventElapsedTime(ms, self._ptr(startEvent), self._ptr(endEvent)))
        return rc, float(ms[0]) if rc == 0 and ms != self._null else 0.0
