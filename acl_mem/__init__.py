"""acl_mem: Ascend NPU memory from Python, on hardware or on a faithful fake.

``acl_mem.raw`` is the C API one to one; :class:`Device` and the buffers are the
Pythonic layer. Importing touches no driver: the backend is chosen on first use.
"""

import os as _os
from typing import TYPE_CHECKING

from . import _backend, arrays, raw, sizes
from ._backend import backend_name, backend_reason, use_backend, using_backend
from .arrays import DeviceArray
from .buffers import Buffer, DeviceBuffer, HostBuffer
from .device import Device, MemInfo
from .enums import MallocPolicy, MemAttr, MemcpyKind, MemLocationType
from .errors import (
    AclError,
    BackendError,
    ContextNullError,
    ContextReleaseError,
    DestroyedStreamError,
    DeviceNotCurrentError,
    DrvInternalError,
    EventTimestampInvalidError,
    FeatureNotSupportError,
    FreedBufferError,
    FunctionNotAvailableError,
    HazardError,
    HazardWarning,
    InternalError,
    InvalidDeviceIdError,
    InvalidFileError,
    InvalidHandleError,
    InvalidMemoryTypeError,
    InvalidParamError,
    MemoryAllocationError,
    MemoryCheckError,
    MemoryCheckWarning,
    MemoryFreeError,
    NoDeviceError,
    NoStreamResourceError,
    ParseFileError,
    RepeatFinalizeError,
    RepeatInitializeError,
    RtParamInvalidError,
    SettingError,
    StreamContextError,
    UninitializeError,
)
from .events import Context, Event
from .pool import (
    ExpandablePool,
    HostSegment,
    PoolOutOfMemoryError,
    PoolStats,
    Segment,
    SegmentPool,
)
from .sizes import (
    AllocApi,
    GiB,
    KiB,
    MiB,
    PageKind,
    align_up,
    allocation_size,
    segment_alignment,
    segment_size,
)
from .stream import Stream
from .versions import RuntimeVersion, runtime_version
from .vmm import (
    ExpandableSegment,
    MappedMemory,
    Mapping,
    PhysicalMemory,
    VirtualRange,
    granularity,
    reserve_and_map,
)

if TYPE_CHECKING:
    from . import fake as fake
    from . import trace as trace


def memory_summary(device: object = None, *, top: int = 10) -> str:
    """The memory held now, per device and page pool, with the largest live allocations
    (like ``torch.cuda.memory_summary``; ``print()`` it). ``device`` is a Device, an id, or
    None for every device holding memory. Complete while a recording runs
    (``acl_mem.trace.record`` or ``ACL_MEM_TRACE``); otherwise the fake's live blocks, or
    on the native backend only the runtime's own figures (docs/trace-format.md).
    """
    from .trace._live import memory_summary as summary

    return summary(device, top=top)


def check() -> list[tuple[str, str]]:
    """Run the fake's memory checker now: every canary verified; all findings so far.

    Findings are ``(kind, message)``; they were also warned or raised as they were made
    (``acl_mem.fake.configure(check=True, hazards=...)``). On the native backend, or with
    the checker off, the list is empty.
    """
    return _backend.get().checker_verify()

__version__ = "0.1.0.dev0"


def __getattr__(name: str) -> object:
    # ``acl_mem.fake`` loads the device model only when asked for, so that importing
    # acl_mem stays free of backend code.
    if name in ("fake", "trace"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'acl_mem' has no attribute {name!r}")

__all__ = [
    "AclError",
    "AllocApi",
    "BackendError",
    "Buffer",
    "Context",
    "ContextNullError",
    "ContextReleaseError",
    "DestroyedStreamError",
    "Device",
    "DeviceArray",
    "DeviceBuffer",
    "DeviceNotCurrentError",
    "DrvInternalError",
    "Event",
    "EventTimestampInvalidError",
    "ExpandablePool",
    "ExpandableSegment",
    "FeatureNotSupportError",
    "FreedBufferError",
    "FunctionNotAvailableError",
    "GiB",
    "HazardError",
    "HazardWarning",
    "HostBuffer",
    "HostSegment",
    "InternalError",
    "InvalidDeviceIdError",
    "InvalidFileError",
    "InvalidHandleError",
    "InvalidMemoryTypeError",
    "InvalidParamError",
    "KiB",
    "MallocPolicy",
    "MappedMemory",
    "Mapping",
    "MemAttr",
    "MemInfo",
    "MemLocationType",
    "MemcpyKind",
    "MemoryAllocationError",
    "MemoryCheckError",
    "MemoryCheckWarning",
    "MemoryFreeError",
    "MiB",
    "NoDeviceError",
    "NoStreamResourceError",
    "PageKind",
    "ParseFileError",
    "PhysicalMemory",
    "PoolOutOfMemoryError",
    "PoolStats",
    "RepeatFinalizeError",
    "RepeatInitializeError",
    "RtParamInvalidError",
    "RuntimeVersion",
    "Segment",
    "SegmentPool",
    "SettingError",
    "Stream",
    "StreamContextError",
    "UninitializeError",
    "VirtualRange",
    "align_up",
    "allocation_size",
    "arrays",
    "backend_name",
    "backend_reason",
    "check",
    "granularity",
    "memory_summary",
    "raw",
    "reserve_and_map",
    "runtime_version",
    "segment_alignment",
    "segment_size",
    "sizes",
    "use_backend",
    "using_backend",
]

# ACL_MEM_TRACE=FILE records the whole process from here on (docs/trace-format.md).
if _os.environ.get("ACL_MEM_TRACE"):
    from .trace._recorder import start_from_environment as _start_trace

    _start_trace()
