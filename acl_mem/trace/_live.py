"""``acl_mem.memory_summary()``: the memory the process holds now, in the layout of
``acl-mem trace summary``.

Where the figures come from, best first:

* a recording is active (``acl_mem.trace.record`` or ``ACL_MEM_TRACE``): its trace so far,
  on either backend: every allocation, pool segment and mapping live now, with call
  sites when stacks are recorded, and the peaks since the recording began;
* the fake, not recording: the fake's live blocks (aclrtMalloc family, DVPP and pinned
  host memory) and physical memory handles not freed (pool segments, mappings and peaks
  are only known while recording);
* the native backend, not recording: only what the runtime reports (aclrtGetMemInfo) for
  a device current in this thread.
"""

from __future__ import annotations

import re
from typing import Any

from .. import _backend
from .._lifecycle import state
from ..enums import MemAttr
from ..sizes import pool_of_page
from ._figures import HOST, Allocation, DeviceFigures, PoolFigures, TraceSummary
from ._recorder import active
from ._summary import summarize
from ._tap import original
from ._text import device_lines, size_text

__all__ = ["memory_summary"]

#: A frame of the fake's recorded stacks (traceback.format_list lines).
_FRAME = re.compile(r'File "([^"]*)", line (\d+), in (\S+)')


def _device_key(device: object) -> str | None:
    if device is None:
        return None
    ident = getattr(device, "id", device)
    if isinstance(ident, bool) or not isinstance(ident, int):
        raise TypeError(f"memory_summary: device must be a Device, an int or None, got "
                        f"{type(device).__name__}")
    return str(ident)


def _runtime_lines(backend: _backend.Backend, key: str) -> list[str]:
    """aclrtGetMemInfo of each pool, when the device is current in this thread."""
    if key != str(state.current_device()):
        return []
    query = original(backend, "aclrtGetMemInfo")
    lines: list[str] = []
    for attr in (MemAttr.HBM_MEM_NORMAL, MemAttr.HBM_MEM_HUGE, MemAttr.HBM_MEM_HUGE1G,
                 MemAttr.DDR_MEM_NORMAL, MemAttr.DDR_MEM_HUGE):
        try:
            rc, free, total = query(int(attr))
        except Exception:
            continue
        if rc == 0 and total:
            lines.append(f"    {attr.name:<16} free {size_text(free):>10} of "
                         f"{size_text(total):>10} (used {size_text(total - free)})")
    return ["  the runtime reports (aclrtGetMemInfo):", *lines] if lines else []


def _from_fake(backend: Any) -> TraceSummary:
    """What the fake's live blocks say (no peaks: those need a recording)."""
    devices: dict[str, DeviceFigures] = {}
    live: list[Allocation] = []
    for block in backend.live_blocks():
        key = HOST if block.device is None else str(block.device)
        pool = "pinned" if block.device is None else (pool_of_page(block.page_size) or "?")
        frames = []
        for entry in reversed(list(block.stack or ())):
            found = _FRAME.search(str(entry))
            if found:
                frames.append((found.group(1), int(found.group(2)), found.group(3)))
        a = Allocation("host" if key == HOST else "block", str(block.api), block.start,
                       block.requested, key, pool, block.extent, block.requested, 0, 0,
                       frames)
        live.append(a)
        figures = devices.setdefault(key, DeviceFigures(key))
        figures.pools.setdefault(pool, PoolFigures()).add(a.in_use, a.reserved, 0, 0)
        figures.total.add(a.in_use, a.reserved, 0, 0)
    for held in backend.live_vmm() if hasattr(backend, "live_vmm") else ():
        # Mappings and reservations hold no memory of their own; a physical handle holds
        # its memory until freed (the mapping of a freed handle until unmapped: not shown).
        if held.pool == "-":
            continue
        key = HOST if held.device is None else str(held.device)
        a = Allocation("physical", held.api, held.address, held.size, key, held.pool,
                       held.size, held.size, 0, 0, [])
        live.append(a)
        figures = devices.setdefault(key, DeviceFigures(key))
        figures.pools.setdefault(held.pool, PoolFigures()).add(a.in_use, a.reserved, 0, 0)
        figures.total.add(a.in_use, a.reserved, 0, 0)
    for figures in devices.values():
        mine = [a for a in live if a.device == figures.device]
        mine.sort(key=lambda a: (-a.in_use, a.address))
        figures.largest_at_peak = mine
    details = backend.describe()
    header = {"backend": backend.name, "capacity": details.get("capacity_per_device")}
    return TraceSummary(path="", header=header, calls=0, duration=0, threads=0,
                        by_call={}, devices=devices, never_freed=[], failed=[], live=live)


def memory_summary(device: object = None, *, top: int = 10) -> str:
    """The memory held now on ``device`` (a Device or id; None: every device with
    memory, and pinned host memory), as text: in use and reserved per page pool, the
    largest live allocations, and the runtime's own figures where it can say.

    See ``acl_mem.trace`` and docs/trace-format.md for what in use and reserved mean.
    """
    key = _device_key(device)
    backend = _backend.get()
    recorders = active()
    lines: list[str]
    if recorders:
        recorder = recorders[0]
        recorder.sync()
        summary = summarize(recorder.path, top=top)
        source = (f"from the recording {recorder.path} ({backend.name} backend): live "
                  "allocations now (made since the recording began) and the peaks since")
        with_peaks = True
    elif hasattr(backend, "live_blocks"):
        summary = _from_fake(backend)
        source = ("from the fake's live blocks (aclrtMalloc family, DVPP, pinned host) "
                  "and physical memory handles; pool segments, mappings and peaks are "
                  "known only while recording (acl_mem.trace.record)")
        with_peaks = False
    else:
        summary = None
        source = (f"{backend.name} backend, not recording: live allocations are known only "
                  "while recording (acl_mem.trace.record or ACL_MEM_TRACE)")
        with_peaks = False
    lines = [f"acl_mem memory summary, {source}"]
    keys = [key] if key is not None else (list(summary.devices) if summary else [])
    if key is None and summary is None and state.current_device() is not None:
        keys = [str(state.current_device())]
    if not keys:
        lines.append("no memory held")
    for k in keys:
        lines.append("")
        figures = summary.devices.get(k) if summary else None
        if figures is None:
            figures = DeviceFigures(k)
        live = [a for a in (summary.live if summary else []) if a.device == k and a.in_use]
        live.sort(key=lambda a: (-a.in_use, a.index))
        lines.extend(device_lines(figures, summary.header if summary else {}, top,
                                  live=live, peaks=with_peaks))
        lines.extend(_runtime_lines(backend, k))
    return "\n".join(lines)
