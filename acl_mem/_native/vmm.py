"""Virtual-memory calls of the native backend (docs/runtime-model.md §4): struct conversion both
ways."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._structs import aclrtMemAccessDesc, aclrtMemLocation, aclrtPhysicalMemProp

__all__ = ["NativeVmm"]


class NativeVmm:
    """Mixed into NativeBackend; uses its ``ffi``, ``lib`` and pointer helpers."""

    ffi: Any
    lib: Any
    _null: Any

    if TYPE_CHECKING:  # provided by NativeBackend
        def _ptr(self, value: int) -> Any: ...
        def _alloc(self, fn: Any, null_outputs: int, *args: Any) -> tuple[int, int]: ...

    def _out_pointer(self, fn: Any, null_outputs: int, *args: Any) -> tuple[int, int]:
        """Call ``fn(*args, out)`` where ``out`` is a ``void **`` (or NULL)."""
        out = self._null if null_outputs & 1 else self.ffi.new("void **")
        rc = int(fn(*args, out))
        return rc, int(self.ffi.cast("uintptr_t", out[0])) if rc == 0 and out != self._null \
            else 0

    def _c_prop(self, prop: aclrtPhysicalMemProp | None) -> Any:
        if prop is None:
            return self._null
        c_prop = self.ffi.new("aclrtPhysicalMemProp *")
        c_prop.handleType = prop.handleType
        c_prop.allocationType = prop.allocationType
        c_prop.memAttr = prop.memAttr
        c_prop.location.id = prop.location.id
        c_prop.location.type = prop.location.type
        c_prop.reserve = prop.reserve
        return c_prop

    def aclrtReserveMemAddress(
        self, size: int, alignment: int, expectPtr: int, flags: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self._alloc(self.lib.aclrtReserveMemAddress, null_outputs, size, alignment,
                           self._ptr(expectPtr), flags)

    def aclrtReleaseMemAddress(self, virPtr: int) -> int:
        return int(self.lib.aclrtReleaseMemAddress(self._ptr(virPtr)))

    def aclrtMallocPhysical(
        self, size: int, prop: aclrtPhysicalMemProp | None, flags: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self._alloc(self.lib.aclrtMallocPhysical, null_outputs, size,
                           self._c_prop(prop), flags)

    def aclrtFreePhysical(self, handle: int) -> int:
        return int(self.lib.aclrtFreePhysical(self._ptr(handle)))

    def aclrtMapMem(self, virPtr: int, size: int, offset: int, handle: int, flags: int) -> int:
        return int(self.lib.aclrtMapMem(self._ptr(virPtr), size, offset, self._ptr(handle),
                                        flags))

    def aclrtUnmapMem(self, virPtr: int) -> int:
        return int(self.lib.aclrtUnmapMem(self._ptr(virPtr)))

    def aclrtMemGetAllocationGranularity(
        self, prop: aclrtPhysicalMemProp | None, option: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        out = self._null if null_outputs & 1 else self.ffi.new("size_t *")
        rc = int(self.lib.aclrtMemGetAllocationGranularity(self._c_prop(prop), option, out))
        return rc, int(out[0]) if rc == 0 and out != self._null else 0

    def aclrtMemSetAccess(
        self, virPtr: int, size: int, desc: list[aclrtMemAccessDesc] | None, count: int
    ) -> int:
        c_desc = self._null
        if desc is not None:
            c_desc = self.ffi.new("aclrtMemAccessDesc[]", max(len(desc), 1))
            for i, entry in enumerate(desc):
                c_desc[i].flags = entry.flags
                c_desc[i].location.id = entry.location.id
                c_desc[i].location.type = entry.location.type
                self.ffi.memmove(c_desc[i].rsv, entry.rsv, 12)
        return int(self.lib.aclrtMemSetAccess(self._ptr(virPtr), size, c_desc, count))

    def aclrtMemExportToShareableHandle(
        self, handle: int, handleType: int, flags: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        out = self._null if null_outputs & 1 else self.ffi.new("uint64_t *")
        rc = int(self.lib.aclrtMemExportToShareableHandle(self._ptr(handle), handleType, flags,
                                                          out))
        return rc, int(out[0]) if rc == 0 and out != self._null else 0

    def aclrtMemImportFromShareableHandle(
        self, shareableHandle: int, deviceId: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self._out_pointer(self.lib.aclrtMemImportFromShareableHandle, null_outputs,
                                 shareableHandle, deviceId)

    def aclrtMemSetPidToShareableHandle(
        self, shareableHandle: int, pid: list[int] | None, pidNum: int
    ) -> int:
        c_pid = self._null if pid is None else self.ffi.new("int32_t[]", pid or [0])
        return int(self.lib.aclrtMemSetPidToShareableHandle(shareableHandle, c_pid, pidNum))

    def aclrtMemRetainAllocationHandle(
        self, virPtr: int, null_outputs: int = 0
    ) -> tuple[int, int]:
        return self._out_pointer(self.lib.aclrtMemRetainAllocationHandle, null_outputs,
                                 self._ptr(virPtr))

    def aclrtMemGetAllocationPropertiesFromHandle(
        self, handle: int, null_outputs: int = 0
    ) -> tuple[int, aclrtPhysicalMemProp | None]:
        out = self._null if null_outputs & 1 else self.ffi.new("aclrtPhysicalMemProp *")
        rc = int(self.lib.aclrtMemGetAllocationPropertiesFromHandle(self._ptr(handle), out))
        if rc or out == self._null:
            return rc, None
        return rc, aclrtPhysicalMemProp(
            int(out.handleType), int(out.allocationType), int(out.memAttr),
            aclrtMemLocation(int(out.location.id), int(out.location.type)), int(out.reserve))
