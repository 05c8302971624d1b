"""Pool figures and the pool's out-of-memory error."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import MemoryAllocationError
from ..sizes import (
    MiB,
)

#: Bytes the runtime reserves for one ordinary parent block (the padding included).
DEFAULT_BLOCK_SIZE = 32 * MiB
_OOM = 207001
_SIZE_LIMIT = 1 << 64


class PoolOutOfMemoryError(MemoryAllocationError):
    """207001: the pool cannot serve a request within its limit or the device's memory.

    ``requested`` (bytes asked), ``free`` (largest free extent), ``cached`` (free bytes
    in the pool's blocks), ``reserved`` (bytes of the pool's blocks) and ``limit`` are
    attributes as well as part of the message. When the runtime ran out of memory, its
    :class:`~acl_mem.MemoryAllocationError` is chained as ``__cause__``.
    """

    # Not registered for 207001: the runtime's own out-of-memory error stays
    # MemoryAllocationError (AclError.__init_subclass__ registers non-None codes).
    CODE = None  # type: ignore[assignment]
    requested: int = 0
    free: int = 0
    cached: int = 0
    reserved: int = 0
    limit: int | None = None

    def __new__(cls, code: int = _OOM, what: str = "") -> PoolOutOfMemoryError:
        # AclError.__new__ would reach MemoryError.__new__ for a MemoryAllocationError
        # subclass, which CPython refuses ("not safe"); Exception.__new__ is the right one.
        return Exception.__new__(cls)

    def __init__(self, code: int = _OOM, what: str = "") -> None:
        super().__init__(code, what)


@dataclass(frozen=True)
class PoolStats:
    """A pool's figures, kept apart like torch_npu's and CuPy's allocator statistics.

    ``in_use + cached == reserved`` always holds.
    """

    #: Bytes of live segments: each segment's §3.14 size rounded up to the start alignment.
    in_use: int
    #: Bytes the live segments were asked for.
    requested: int
    #: Free bytes inside the pool's blocks (ready for reuse without a runtime call).
    cached: int
    #: Bytes of the parent blocks (mapped bytes for an ExpandablePool) usable for segments.
    reserved: int
    peak_in_use: int
    peak_reserved: int
    #: Live segments.
    segments: int
    allocations: int
    frees: int
    #: Parent blocks taken from / given back to the runtime (mapped / unmapped chunks).
    blocks_allocated: int
    blocks_freed: int
    largest_free_extent: int
    #: ``1 - largest_free_extent / cached``; 0 when nothing is cached.
    fragmentation: float
