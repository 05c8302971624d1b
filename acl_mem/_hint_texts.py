"""What a failure's hint says, written once for acl_mem's Python errors and the fake library
in C.

acl_mem/_hints.py fills these in for the errors the raw layer raises (on any backend);
stubs/gen_engine_api.py compiles them into the C library (``hints.h``), whose failure
texts (aclGetRecentErrMsg) carry the same hints for C programs. A text names C calls, not
Python ones; what only Python has (``buffer.free()``, ``acl_mem.fake.configure``) is added
by acl_mem/_hints.py after it. Placeholders are ``{name}``; :data:`PLACEHOLDERS` gives each
one's C conversion (``s`` text, ``d`` int).
"""

from __future__ import annotations

__all__ = ["PLACEHOLDERS", "TEXTS"]

TEXTS: dict[str, str] = {
    "free_not_live": (
        "The pointer is not a live allocation of {allocators}: it was already freed (or "
        "released by a device reset), was never allocated, points inside a block instead of "
        "at its start, or came from another allocation call"),
    "release_reservation": (
        "Either the address is not the start of a live reservation, or part of the "
        "reservation is still mapped: unmap every mapping in it first (aclrtUnmapMem)"),
    "unmap": (
        "The address is not the start of a live mapping (already unmapped, never mapped, or "
        "inside a mapping rather than at its start)"),
    "free_physical": (
        "The handle is unknown or already freed, or still mapped: unmap it first "
        "(aclrtUnmapMem)"),
    "map": (
        "Check that the range lies inside one live reservation, is not mapped already, "
        "starts at a granularity multiple, and that size equals the physical memory's size "
        "with offset 0"),
    "stream_context": (
        "The stream belongs to another context (another device, or a context created "
        "since): use a stream of the calling thread's current device"),
    "context_null": (
        "No device is current in {thread}: each thread starts without one, and the reset "
        "that drops a device's last reference leaves none"),
    "context_null_remedy_c": "Call aclrtSetDevice(n) in this thread first",
    "device_ids": "Device ids run from 0 to {last} here (aclrtGetDeviceCount() = {count})",
    "oom_request": "Asked for {asked}, {padded} after rounding and padding, from {pages} pages",
    "oom_pools": "free/total now: {pools}",
    "oom_remedy_c": "free memory you no longer need (aclrtFree), or ask for less",
    # {asked}: "Asked for 2 GiB of" (or "Out of" when the size is unknown).
    "host_oom": (
        "{asked} page-locked host memory, which the host provides (the device's page pools "
        "play no part): free host buffers you no longer need, or ask for less"),
    # {asked}: "Asked to reserve 2 GiB of" (or "Out of").
    "address_space": (
        "{asked} virtual address space: a reservation takes addresses, not memory (the page "
        "pools play no part), and the runtime has only so much of it. Release reservations "
        "you no longer need{how}, or reserve less"),
    "granularity": (
        "The size must be a multiple of the allocation granularity, "
        "aclrtMemGetAllocationGranularity() = {granularity} for this memory"),
    "granularity_round": "{size} is not; round it up to {rounded}",
}

#: Each placeholder's C conversion: ``s`` a string, ``d`` an int, ``llu`` a 64-bit count.
PLACEHOLDERS: dict[str, str] = {
    "allocators": "s", "thread": "s", "last": "d", "count": "d", "asked": "s",
    "padded": "s", "pages": "s", "pools": "s", "how": "s", "granularity": "s",
    "size": "llu", "rounded": "llu",
}
