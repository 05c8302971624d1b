"""Synchronous copies and memset of the fake backend (docs/runtime-model.md §3.10, §3.11).

Checks run under the engine lock; the bytes of a large copy (or of one whose pageable
memory must be proven usable) move with the lock released, so other threads allocate and
copy meanwhile. Such a running copy is registered in the state's copies-in-flight, and
whatever unmaps host memory (frees, unmaps, device resets) waits for it first
(:meth:`~acl_mem._fake.state.EngineState.wait_for_copies`). Small copies move under the
lock: registering them would cost more than their bytes.
"""

from __future__ import annotations

import ctypes
import threading

from .._hostbuf import vouched
from . import codes
from .addresses import AddressMap
from .diagnostics import Diagnostics
from .hostmem import COPIED, PROVEN, REFUSED, prove_untrusted
from .state import EngineState

__all__ = ["LOCKED_COPY_LIMIT", "Copies", "acl_copy_checks"]

#: Copies of up to this many bytes between memory the fake knows (device, pinned, mapped
#: or vouched for) move with the lock held; larger ones release it while the bytes move.
LOCKED_COPY_LIMIT = 64 << 10


def acl_copy_checks(count_first: bool, dst: int, src: int, count: int, kind: int) -> int | None:
    """The ACL layer's checks of aclrtMemcpy and aclrtMemcpyAsync (docs/runtime-model.md
    §3.10): the code they return, or None to go on to the runtime's checks. 9.1.0 checks
    count 0 first (success), then NULL, then the kind; older releases NULL, then the kind,
    and leave count 0 to the runtime."""
    if count_first and count == 0:
        return codes.SUCCESS
    if dst == 0 or src == 0 or kind > 5:
        return codes.INVALID_PARAM
    return None


#: The sides of a copy to prove usable, by (destination pageable, source pageable).
_UNTRUSTED: dict[tuple[bool, bool], tuple[str, ...]] = {
    (False, False): (), (True, False): ("dst",), (False, True): ("src",),
    (True, True): ("src", "dst")}


class Copies:
    """aclrtMemcpy and aclrtMemset for the fake."""

    def __init__(self, state: EngineState, addresses: AddressMap,
                 diagnostics: Diagnostics) -> None:
        self._state = state
        self._addresses = addresses
        self._diagnostics = diagnostics
        # The release's order of the first checks and its answer to count 0 (fixed for the
        # life of the fake).
        self._count_first = state.cann.count_checked_first
        self._zero_count_ok = state.cann.zero_count_succeeds
        # Frees and unmaps recognise a thread still copying by this code on its stack.
        state.copy_codes.add(Copies.aclrtMemcpy.__code__)

    def aclrtMemcpy(self, dst: int, destMax: int, src: int, count: int, kind: int) -> int:
        rc = acl_copy_checks(self._count_first, dst, src, count, kind)
        if rc is not None:
            return rc
        if destMax == 0 or count == 0 or count > destMax:
            return codes.RT_PARAM_INVALID
        if dst == src:
            return codes.SUCCESS
        state = self._state
        token = 0
        try:
            with state.lock:
                if state.draining:
                    # Before the addresses are resolved: what is being freed is gone then.
                    state.wait_for_drains((dst, src, count))
                # runtime.current() spelled out: one thread-local lookup, no call.
                context = getattr(state.runtime._local, "cur", None)
                if context is None or not context.alive:
                    return codes.CONTEXT_NULL
                resolve = self._addresses.resolve
                target = resolve(dst, count)
                source = resolve(src, count)
                if target is None or source is None:
                    return codes.RT_PARAM_INVALID
                dst_host, dst_dev, _, dst_targets = target
                src_host, src_dev, _, src_targets = source
                if dst_dev is not None and src_dev is not None and dst_dev != src_dev:
                    return codes.RT_PARAM_INVALID
                if state.queued:  # state.streams.any_pending()
                    check_pending = self._diagnostics.check_pending
                    check_pending(dst, count, access="write", what="aclrtMemcpy writes",
                                  targets=dst_targets)
                    check_pending(src, count, access="read", what="aclrtMemcpy reads",
                                  targets=src_targets)
                if state.checker is not None:
                    self._diagnostics.check_bounds(dst, count, "aclrtMemcpy write")
                    self._diagnostics.check_bounds(src, count, "aclrtMemcpy read")
                # Pageable memory (no targets: not the fake's) must be proven usable; two
                # pageable sides are a host-to-host copy the driver makes (§8.10).
                untrusted = _UNTRUSTED[not dst_targets, not src_targets]
                if count <= LOCKED_COPY_LIMIT and (not untrusted or all(
                        vouched(dst if side == "dst" else src, count) for side in untrusted)):
                    # A small copy of memory needing no proof moves its bytes under the
                    # lock: that takes less time than registering it as a copy in flight,
                    # and nothing can unmap its memory meanwhile.
                    ctypes.memmove(dst_host, src_host, count)
                    return codes.SUCCESS
                token = threading.get_ident()
                state.copies[token] = (dst, src, count)
            # The bytes move with the lock released (and the GIL, in ctypes.memmove), so
            # other threads allocate and copy meanwhile; memory under a running copy is
            # not unmapped (see wait_for_copies). Pageable memory is proven usable first
            # (or copied by the kernel), outside the lock too: it is not the fake's.
            # Both sides: the source first; a copy made by the kernel checks the
            # destination too, and a proven source lets the destination's probe write the
            # bytes the copy puts there anyway.
            for side in untrusted:
                found = prove_untrusted(dst_host, src_host, count, side)
                if found != PROVEN:
                    return codes.SUCCESS if found == COPIED else codes.RT_PARAM_INVALID
            ctypes.memmove(dst_host, src_host, count)
            return codes.SUCCESS
        finally:
            if token:
                state.copies.pop(token, None)

    def aclrtMemset(self, devPtr: int, maxCount: int, value: int, count: int) -> int:
        if count == 0 and self._zero_count_ok:  # 9.1.0: before any other check
            return codes.SUCCESS
        if devPtr == 0:
            return codes.INVALID_PARAM
        if count == 0:  # before 9.1.0 the runtime refuses count 0
            return codes.RT_PARAM_INVALID
        state = self._state
        with state.lock:
            if state.runtime.current() is None:
                return codes.CONTEXT_NULL
            if count > maxCount:
                return codes.RT_PARAM_INVALID
            target = self._addresses.resolve(devPtr, count)
            if target is None:
                return codes.RT_PARAM_INVALID
            if not target[3]:
                # Pageable host memory: the driver sets it like any host memory (§3.11).
                return self._memset_pageable(devPtr, value, count)
            if state.streams.any_pending():
                self._diagnostics.check_pending(devPtr, count, access="write",
                                                what="aclrtMemset writes", targets=target[3])
            if state.checker is not None:
                self._diagnostics.check_bounds(devPtr, count, "aclrtMemset")
            ctypes.memset(target[0], value & 0xFF, count)
            return codes.SUCCESS

    @staticmethod
    def _memset_pageable(address: int, value: int, count: int) -> int:
        """Set memory that is not the fake's, proven writable first: an unmapped or
        read-only page is 107000, never a crash."""
        if vouched(address, count):
            ctypes.memset(address, value & 0xFF, count)
            return codes.SUCCESS
        pattern = ctypes.create_string_buffer(bytes([value & 0xFF]) * count, count)
        source = ctypes.addressof(pattern)
        found = prove_untrusted(address, source, count, "dst")
        if found == PROVEN:
            ctypes.memmove(address, source, count)
        return codes.RT_PARAM_INVALID if found == REFUSED else codes.SUCCESS
