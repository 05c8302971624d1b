"""Sub-allocation that cannot break the rules: segments carved from big blocks
(docs/runtime-model.md §3.14).

Device malloc and free are expensive, so Huawei tells users to take one big block and
carve it up, and warns that carving without honouring §3.14 overwrites memory silently.
:class:`SegmentPool` does the carving: every segment takes ``ALIGN_UP(len, 32) + 32``
bytes (no +32 on SoCs without padding, e.g. Ascend950) and starts on a 64-byte
boundary (128 for DVPP memory, or for every kind with ``mixed_media=True``).
:class:`ExpandablePool` does the same inside one contiguous virtual range that grows
and shrinks by mapping granularity chunks (docs/runtime-model.md §4,
:class:`~acl_mem.ExpandableSegment`).

Segments are :class:`~acl_mem.DeviceBuffer` objects (:class:`~acl_mem.HostBuffer`
for an aclrtMallocHost pool): copies, memset, async calls on streams all work, and
``free()``, ``with`` and the finalizer give the range back to the pool, never to the
runtime.

Design
------
* The pool works in *granules* of the start alignment ``A`` (64 or 128 bytes). Every
  free extent starts on an absolute multiple of ``A`` and is a multiple of ``A`` long,
  so any extent can hold any segment that fits, and alignment needs no per-segment
  arithmetic. A segment of ``m`` bytes occupies ``ALIGN_UP(m, A)`` bytes: the spacing
  Huawei's secondary-allocation table asks for (``ALIGN_UP(m, 64)``); that footprint is what
  :attr:`PoolStats.in_use` counts. Parent addresses are aligned up (start) and down
  (end) to ``A`` before use, so alignment holds for absolute addresses whatever
  alignment the runtime gives (both backends give at least page alignment).
* Best fit: free extents are binned by exact length in granules; the set of non-empty
  lengths is a 64-ary bitmap tree (:class:`_SizeIndex`), so "smallest length >= n" is
  a handful of dict look-ups and bit operations: O(log64 U) for lengths below U,
  4 steps at most for extents below 1 GiB. Among extents of the chosen length any
  one is taken. The segment is cut from the front of the extent.
* Coalescing: free extents are indexed by start and by end (dicts), so a freed
  segment merges with both neighbours in O(1); extents never merge across two parent
  blocks, even when the runtime placed the blocks back to back.
  Allocate and free are therefore O(log U) (effectively constant) plus dict and set
  operations, with no dependency beyond the standard library.
* One lock per pool. A finalizer never takes it (a collection can run inside the
  locked section of the same thread): it queues the address, and the next pool
  operation returns queued addresses first.
* Interrupts (KeyboardInterrupt between any two lines). The parent blocks and the live
  segments are the truth; each changes in one statement (with its counter), and the
  free extents and figures derive from them. An operation stopped half way rebuilds
  the derived state from the truth (``_rebuild``, only on that path). Every allocation
  has a serial number that its segment carries: a return queued twice, or queued by a
  segment whose allocation was rolled back, finds no matching live entry and does
  nothing, so returns can be queued whenever in doubt.
"""

from .expandable_pool import ExpandablePool
from .segment_pool import SegmentPool
from .segments import HostSegment, Segment
from .stats import DEFAULT_BLOCK_SIZE, PoolOutOfMemoryError, PoolStats

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "ExpandablePool",
    "HostSegment",
    "PoolOutOfMemoryError",
    "PoolStats",
    "Segment",
    "SegmentPool",
]
