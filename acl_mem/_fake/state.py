"""The state every part of the fake engine shares, declared in one place.

:class:`EngineState` is built once per :class:`~acl_mem._fake.backend.FakeBackend` and
handed to each part (device memory, copies, streams, VMM, diagnostics, address map).
Parts keep no copy of what is here: they read it through the state on every call, so
a forked child's fresh lock, stream table and pinned-host index (:meth:`after_fork`)
are what every part sees next.

Beside the data it holds the few operations that are about the shared state itself:
the fault plan's countdown, the wait for copies in flight, and releasing a device
(queued work dropped, the checker told, the device emptied).
"""

from __future__ import annotations

import mmap
import sys
import threading
import time
from collections import deque
from types import CodeType, FrameType

from .checker import Checker
from .device import FakeDevice
from .extents import Block, BlockIndex
from .profiles import Profile
from .runtime import Context, FakeRuntime
from .streams import Hazards, Marker, Op, StreamTable
from .versions import CannVersion
from .vmm_space import ReservationIndex

__all__ = ["COPY_WAIT_LIMIT", "EngineState"]

#: Seconds a copy holds back for a free waiting to unmap memory it touches (the free
#: itself waits for running copies as long as they take).
COPY_WAIT_LIMIT = 5.0


class EngineState:
    """Profile, runtime (devices, contexts, the lock), streams, hazards, checker, fault
    plan, copies in flight, pinned host memory and the VMM reservations."""

    def __init__(self, profile: Profile, *, hazards: str, check: bool,
                 cann: CannVersion) -> None:
        self.profile = profile
        #: The CANN release whose observable behaviour the fake plays (versions.py).
        self.cann = cann
        self.streams = StreamTable()
        self.hazards = Hazards(hazards)
        self.runtime = FakeRuntime(profile, self.release_device, self.end_context)
        #: The runtime's lock: every part takes it around its checks and changes.
        self.lock: threading.RLock = self.runtime.lock
        self.checker: Checker | None = Checker(hazards) if check else None
        #: Planned failures: call name -> [countdown, code] (inject_fault).
        self.faults: dict[str, list[int]] = {}
        #: Copies moving bytes with the lock released, by thread; unmapping host memory
        #: waits for them (a copy into memory unmapped under it would crash the process).
        #: Copies moving bytes outside the lock, by thread: (dst, src, count) as the caller
        #: gave them (pinned and VMM addresses are what frees and unmaps name too).
        self.copies: dict[int, CopyRanges] = {}
        #: Code of the calls that move bytes outside the lock (registered by the parts).
        self.copy_codes: set[CodeType] = set()
        #: Threads waiting in wait_for_copies to unmap a host range.
        self.draining: dict[int, tuple[int, int]] = {}
        self.copies_done = threading.Condition(self.lock)
        #: The queued ops of every stream (shared with the stream table): empty = no
        #: hazard can arise, the common case tested first.
        self.queued: dict[Op, None] = self.streams.pending.ops
        #: aclrtMallocHost blocks, and the anonymous mapping behind each.
        self.pinned = BlockIndex()
        self.pinned_maps: dict[int, mmap.mmap] = {}
        #: Pinned mappings a fork left behind (views of them may still exist).
        self.orphaned_maps: list[mmap.mmap] = []
        #: Freed pinned blocks whose mapping is kept a while, emptied, oldest first: a
        #: view that outlived aclrtFreeHost lands there, not in a later allocation.
        self.pinned_quarantine: deque[tuple[Block, mmap.mmap]] = deque()
        #: The same blocks by address: copies through them fail as before the free.
        self.pinned_freed = BlockIndex()
        self.reservations = ReservationIndex()

    def after_fork(self) -> None:
        """Forked child: fresh locks, no contexts, empty devices, no streams or pinned
        blocks (the mappings stay, unregistered), no reservations, no planned faults."""
        self.runtime.after_fork()
        self.lock = self.runtime.lock
        self.copies = {}
        self.draining = {}
        self.copies_done = threading.Condition(self.lock)
        self.streams = StreamTable()
        self.queued = self.streams.pending.ops
        for device in self.runtime.devices:
            device.release_all()
            device.pools.reset()
        self.orphaned_maps += self.pinned_maps.values()
        self.orphaned_maps += [host_map for _, host_map in self.pinned_quarantine]
        self.pinned_maps = {}
        self.pinned_quarantine = deque()
        self.pinned_freed = BlockIndex()
        self.pinned = BlockIndex()
        self.reservations = ReservationIndex()
        if self.checker is not None:
            self.checker = Checker(self.checker.mode)
        self.faults = {}

    def set_modes(self, *, hazards: str | None = None, check: bool | None = None) -> None:
        """Change how hazards are reported and whether the memory checker runs, keeping
        every allocation. Blocks allocated while the checker was off carry no canaries and
        are not verified; turning it off gives the quarantined addresses back."""
        with self.lock:
            if hazards is not None:
                checked = Hazards(hazards)  # validates the name before anything changes
                self.hazards.mode = checked.mode
                if self.checker is not None:
                    self.checker.mode = checked.mode
            if check is None or check == (self.checker is not None):
                return
            if check:
                self.checker = Checker(self.hazards.mode)
                return
            checker, self.checker = self.checker, None
            assert checker is not None
            while checker.quarantine:
                device, start, extent = checker.quarantine.popleft()
                device.release_address(start, extent)  # type: ignore[attr-defined]

    def fault(self, call: str) -> int:
        """The code a planned failure of ``call`` returns now, or 0 (call with the lock)."""
        if not self.faults:
            return 0
        plan = self.faults.get(call)
        if plan is None:
            return 0
        plan[0] -= 1
        if plan[0] > 0:
            return 0
        del self.faults[call]
        return plan[1]

    def wait_for_copies(self, start: int = 0, end: int = 1 << 64) -> None:
        """Block until no other thread moves bytes of ``[start, end)`` (pinned or VMM
        addresses) outside the lock (call with the lock held, before unmapping it).

        However long the copy takes: unmapping under it would crash the process. An
        entry whose thread is no longer inside a copy (an interrupt hit the line that
        removes it, or the thread is gone) is dropped; threads are looked at through
        ``sys._current_frames()``, which also sees threads that ``threading`` does not
        know (started by ``_thread`` or by C code).
        """
        me = threading.get_ident()
        # Copies into the range hold back while we wait (see wait_for_drains), or a busy
        # copier could keep us waiting for ever.
        self.draining[me] = (start, end)
        try:
            while True:
                others = [ident for ident, ranges in list(self.copies.items())
                          if ident != me and _touches(ranges, start, end)]
                if not others:
                    return
                frames = sys._current_frames()
                for ident in others:
                    frame = frames.get(ident)
                    if frame is None or not self._inside_copy(frame):
                        self.copies.pop(ident, None)
                # A timeout, so a copier that finished between our check and our wait
                # is noticed without it having to notify.
                self.copies_done.wait(0.01)
        finally:
            self.draining.pop(me, None)

    def _inside_copy(self, frame: FrameType | None) -> bool:
        while frame is not None:
            if frame.f_code in self.copy_codes:
                return True
            frame = frame.f_back
        return False

    def wait_for_drains(self, ranges: CopyRanges) -> None:
        """Before a copy through ``ranges`` starts (lock held): frees waiting to unmap
        memory it touches go first."""
        me = threading.get_ident()
        deadline = time.monotonic() + COPY_WAIT_LIMIT
        while time.monotonic() < deadline and any(
                ident != me and _touches(ranges, *drained)
                for ident, drained in list(self.draining.items())):
            self.copies_done.wait(0.01)

    def release_device(self, device: FakeDevice) -> None:
        """The device closed: its default context lost its last reference (reset or
        finalize) and no created context holds it open."""
        self.wait_for_copies()
        if self.checker is not None:
            self.checker.forget_device(device)
        device.release_all()

    def end_context(self, context: Context) -> None:
        """A context ended (reset, destroy, finalize): its streams go, with their work."""
        dropped = self.streams.drop_context(context)
        lost = [op for op in dropped if isinstance(op, Op)]
        for marker in dropped:
            if isinstance(marker, Marker):
                marker.finish()  # events recorded there complete: nobody waits for ever
        if lost:
            # Reported after the effect: in raise mode the HazardError comes with it done.
            if context.primary:
                self.hazards.report("reset-with-pending-work",
                                    f"device {context.device} released with {len(lost)} "
                                    "queued operation(s) never synchronised; they never ran")
            else:
                self.hazards.report("destroy-context-with-pending-work",
                                    f"context {context.handle:#x} destroyed with {len(lost)} "
                                    "queued operation(s) never synchronised; they never ran")


#: The host bytes one copy moves: ``(dst, src, count)``.
CopyRanges = tuple[int, int, int]


def _touches(ranges: CopyRanges, start: int, end: int) -> bool:
    dst, src, count = ranges
    return (dst < end and start < dst + count) or (src < end and start < src + count)
