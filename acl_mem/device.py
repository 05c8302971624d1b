"""``Device``: a device id with the allocation and query calls that need its context."""

from __future__ import annotations

import contextlib
import operator
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from typing_extensions import Self

from . import _backend, arrays, raw
from ._args import c_int
from ._context import device_id, keep_device, register_device_type
from ._lifecycle import close_on_exit, state
from .buffers import DeviceBuffer, HostBuffer
from .enums import MallocPolicy, MemAttr
from .errors import (
    DeviceNotCurrentError,
    FeatureNotSupportError,
    InvalidDeviceIdError,
    InvalidMemoryTypeError,
)
from .events import Context
from .sizes import AllocApi
from .stream import Stream

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from .arrays import DeviceArray

__all__ = ["Device", "MemInfo", "device_id"]

# Enum members read once: ``AllocApi.MALLOC`` is a slow class attribute lookup.
_MALLOC, _MALLOC_ALIGN32, _MALLOC_CACHED = (AllocApi.MALLOC, AllocApi.MALLOC_ALIGN32,
                                            AllocApi.MALLOC_CACHED)


class MemInfo(NamedTuple):
    """Free and total bytes of one page pool (docs/runtime-model.md §3.12)."""

    free: int
    total: int

    @property
    def used(self) -> int:
        """Bytes in use: ``total - free``."""
        return self.total - self.free


class Device:
    """Device ``device_id`` and the calls that need it current in the calling thread.

    The runtime keeps one current device per thread; allocations, streams and queries
    run there. A Device becomes current in a thread in one of three ways:

    * implicitly: the first allocation, stream or query through a Device, in a thread
      where no device is current, makes it current there (aclrtSetDevice) and it stays
      current, as in torch_npu and CuPy;
    * ``dev.use()``: the same, explicitly;
    * ``with Device(0) as dev:``: aclrtSetDevice on entry and aclrtResetDevice at the end,
      the set/reset pair of a C program. **When that reset drops the device's last
      reference, the runtime releases all of the device's memory**: buffers and streams
      made inside the block are gone afterwards (using them raises FreedBufferError /
      DestroyedStreamError). Use the block for scoped work that must leave nothing
      behind (tests, scripts); use ``use()`` when memory must outlive a block.

    A thread where another device is current gets
    :class:`~acl_mem.DeviceNotCurrentError` rather than memory on the wrong device
    (:class:`~acl_mem.InvalidDeviceIdError` for an id beyond the device count).
    The raw layer (:mod:`acl_mem.raw`) stays exact: it never sets a device itself.
    """

    __slots__ = ("_id",)

    def __init__(self, device_id: int = 0) -> None:
        self._id = c_int(device_id, "Device", "device_id")

    @property
    def id(self) -> int:
        """The device id, as aclrtSetDevice takes it."""
        return self._id

    def __repr__(self) -> str:
        return f"Device({self._id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other._id == self._id

    def __hash__(self) -> int:
        return hash((Device, self._id))

    # -- context ------------------------------------------------------------------------------
    @staticmethod
    def count() -> int:
        """Number of visible devices."""
        return raw.aclrtGetDeviceCount()

    @staticmethod
    def current() -> Device:
        """The calling thread's current device (ContextNullError if none, docs/runtime-model.md
        §3.2)."""
        return Device(raw.aclrtGetDevice())

    def use(self) -> Device:
        """Make this device current in the calling thread and keep it so (no reset at any
        scope's end); returns ``self``.

        Calling it again while this thread holds the device is free: it adds no further
        reference. The device is released by :meth:`reset` (or aclFinalize), not by
        threads ending.
        """
        keep_device(self._id)
        return self

    def set_current(self) -> Device:
        """aclrtSetDevice: make current for this thread and add one reference
        (docs/runtime-model.md §3.2); pair it with :meth:`reset`, or prefer :meth:`use`."""
        raw.aclrtSetDevice(self._id)
        return self

    def reset(self) -> None:
        """aclrtResetDevice: drop one reference; at zero the runtime releases all of this
        device's memory and streams, and no device is current in this thread."""
        raw.aclrtResetDevice(self._id)

    def __enter__(self) -> Self:
        self.set_current()
        # The process state this block's reference belongs to, for its end (per thread:
        # one Device may be entered in several threads, and blocks nest).
        _blocks_entered().append(state.global_epoch)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        entered = _blocks_entered()
        if entered and entered.pop() != state.global_epoch:
            # aclFinalize, a fork or a reconfigured fake released every device inside the
            # block: its reference went with them, and a reset now would fail (507007).
            return
        close_on_exit(self.reset, exc)

    def _require_current(self, call: str) -> None:
        """Make this device current if no device is (see the class docs); refuse if another
        one is."""
        current = state.current_device()
        if current == self._id:
            return
        if current is None:
            self.use()
            return
        count = raw.aclrtGetDeviceCount()
        if self._id >= count:
            # Switching would fail too: say what exists rather than advise use().
            from ._hints import device_count_hint

            raise InvalidDeviceIdError(
                107001, f"Device({self._id}).{call}",
                hint=device_count_hint(count, _backend.get().name == "fake"))
        thread = threading.current_thread().name
        raise DeviceNotCurrentError(
            f"Device({self._id}).{call}: device {current} is current in thread {thread!r}, "
            f"not device {self._id}. Call Device({self._id}).use() to switch this thread to "
            f"device {self._id}, or run the call inside `with Device({self._id}):`"
        )

    # -- allocation --------------------------------------------------------------------------------
    def _device_alloc(
        self, api: AllocApi, allocate: Callable[[int, int], int], size: int, policy: int
    ) -> DeviceBuffer:
        if state.current_device() != self._id:
            self._require_current(api.value)
        # No closures on this path (every allocation runs it); the raw call validates
        # size and policy as C integers before _device_buffer sees them.
        return _adopt(allocate, (size, policy), raw.aclrtFree, _device_buffer,
                      size, api, self, policy)

    def malloc(self, size: int, policy: int = MallocPolicy.HUGE_FIRST) -> DeviceBuffer:
        """aclrtMalloc: ``ALIGN_UP(size,32)+padding`` bytes (docs/runtime-model.md §3.5)."""
        # _device_alloc and _adopt spelled out: the most frequent allocation, and each
        # frame they add costs a tenth of a microsecond.
        if state.current_device() != self._id:
            self._require_current("aclrtMalloc")
        with state.lock:  # see _adopt
            buffer: DeviceBuffer | None = None
            ptr = raw.aclrtMalloc(size, policy)
            try:
                # raw.aclrtMalloc took size and policy: ints, or what converts to one.
                buffer = DeviceBuffer(
                    ptr, size if type(size) is int else operator.index(size), _MALLOC, self,
                    policy if type(policy) is int else operator.index(policy))
                return buffer
            except BaseException:
                with contextlib.suppress(Exception):
                    if buffer is not None:
                        buffer.free()
                    else:
                        raw.aclrtFree(ptr)
                raise

    def malloc_align32(self, size: int, policy: int = MallocPolicy.HUGE_FIRST) -> DeviceBuffer:
        """aclrtMallocAlign32: ``ALIGN_UP(size,32)`` bytes, for carving up (docs/runtime-model.md
        §3.5)."""
        return self._device_alloc(_MALLOC_ALIGN32, raw.aclrtMallocAlign32, size, policy)

    def malloc_cached(self, size: int, policy: int = MallocPolicy.HUGE_FIRST) -> DeviceBuffer:
        """aclrtMallocCached: cacheable memory sized like aclrtMalloc (docs/runtime-model.md
        §3.5)."""
        return self._device_alloc(_MALLOC_CACHED, raw.aclrtMallocCached, size, policy)

    def malloc_host(self, size: int) -> HostBuffer:
        """aclrtMallocHost: page-locked host memory, viewable without copying (docs/runtime-model.md
        §3.7)."""
        self._require_current("aclrtMallocHost")
        return _adopt(raw.aclrtMallocHost, (size,), raw.aclrtFreeHost,
                      lambda ptr: HostBuffer(ptr, int(size), AllocApi.MALLOC_HOST, self))

    def dvpp_malloc(
        self, size: int, *, api: AllocApi | str = AllocApi.DVPP_MALLOC
    ) -> DeviceBuffer:
        """Media memory: acldvppMalloc (default) or ``api="hi_mpi_dvpp_malloc"`` (§3.8-§3.9)."""
        chosen = AllocApi(api)
        if chosen not in (AllocApi.DVPP_MALLOC, AllocApi.HI_MPI_DVPP_MALLOC):
            raise ValueError(f"dvpp_malloc: api must be acldvppMalloc or hi_mpi_dvpp_malloc, "
                             f"got {chosen.value}")
        self._require_current(chosen.value)
        if chosen is AllocApi.DVPP_MALLOC:
            return _adopt(raw.acldvppMalloc, (size,), raw.acldvppFree,
                          lambda ptr: DeviceBuffer(ptr, int(size), chosen, self))
        return _adopt(raw.hi_mpi_dvpp_malloc, (self._id, size), raw.hi_mpi_dvpp_free,
                      lambda ptr: DeviceBuffer(ptr, int(size), chosen, self))

    # -- typed arrays (numpy needed) ---------------------------------------------------------
    def to_device(self, array: Any, stream: Stream | None = None) -> DeviceArray:
        """A new :class:`~acl_mem.DeviceArray` holding a copy of the numpy ``array`` (same
        shape and dtype); asynchronous on ``stream``, where ``array`` must stay alive and
        unchanged until the stream is synchronised."""
        return arrays.to_device(self, array, stream)

    def empty(self, shape: int | Iterable[int], dtype: DTypeLike) -> DeviceArray:
        """A new uninitialised :class:`~acl_mem.DeviceArray` of ``shape`` and ``dtype``."""
        return arrays.empty(self, shape, dtype)

    # -- streams -----------------------------------------------------------------------------------
    def stream(self) -> Stream:
        """aclrtCreateStream in this device's context (docs/runtime-model.md §3.4)."""
        self._require_current("stream")
        return Stream(raw.aclrtCreateStream(), self)

    def context(self) -> Context:
        """aclrtCreateContext on this device: a new context, current for the calling thread,
        that holds the device open until destroyed (docs/runtime-model.md §3.3)."""
        return Context(self)

    @property
    def default_stream(self) -> Stream:
        """The context's default stream (the NULL handle)."""
        return Stream(0, self)

    def synchronize(self) -> None:
        """aclrtSynchronizeDevice: wait for every stream of this context (docs/runtime-model.md
        §3.4)."""
        self._require_current("synchronize")
        raw.aclrtSynchronizeDevice()

    # -- queries -----------------------------------------------------------------------------------
    def mem_info(self, attr: int = MemAttr.HBM_MEM) -> MemInfo:
        """aclrtGetMemInfo for this device: ``(free, total)`` of a page pool (docs/runtime-model.md
        §3.12)."""
        self._require_current("mem_info")
        return MemInfo(*raw.aclrtGetMemInfo(attr))

    def pools(self) -> dict[MemAttr, MemInfo]:
        """Every pool this device reports; attributes its chip lacks are left out."""
        found: dict[MemAttr, MemInfo] = {}
        for attr in MemAttr:
            try:
                found[attr] = self.mem_info(attr)
            except (FeatureNotSupportError, InvalidMemoryTypeError):
                continue  # a pool the chip lacks, or an attribute older releases do not know
        return found


_B = TypeVar("_B", DeviceBuffer, HostBuffer)


def _device_buffer(ptr: int, size: int, api: AllocApi, device: Device,
                   policy: int) -> DeviceBuffer:
    return DeviceBuffer(ptr, operator.index(size), api, device, operator.index(policy))


_entered = threading.local()


def _blocks_entered() -> list[int]:
    """The calling thread's open ``with Device(...)`` blocks: the epoch each began in."""
    blocks: list[int] | None = getattr(_entered, "blocks", None)
    if blocks is None:
        blocks = _entered.blocks = []
    return blocks


def _adopt(allocate: Callable[..., int], args: tuple[Any, ...], free: Callable[[int], None],
           wrap: Callable[..., _B], *details: Any) -> _B:
    """``wrap(allocate(*args), *details)`` as one step.

    Under the lock that device set/reset take, so no reset on another thread can fall
    between the allocation and the buffer's ownership token (the buffer would look
    live on memory the reset released); and an interrupt before the buffer exists
    frees the memory instead of losing it.
    """
    with state.lock:
        buffer: _B | None = None
        ptr = allocate(*args)
        # Nothing between the allocation and the try: an interrupt there would lose ptr.
        try:
            buffer = wrap(ptr, *details)
            return buffer
        except BaseException:
            with contextlib.suppress(Exception):
                if buffer is not None:
                    buffer.free()  # through the buffer, so its finalizer has nothing left
                else:
                    free(ptr)
            raise


register_device_type(Device)
