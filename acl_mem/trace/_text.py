"""The summary as text: what ``acl-mem trace summary`` and ``acl_mem.memory_summary``
print."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..sizes import format_size
from ._figures import HOST, UNKNOWN, Allocation, DeviceFigures, TraceSummary

__all__ = ["device_lines", "format_summary", "size_text"]


def size_text(n: int) -> str:
    """Bytes in binary units (``64 GiB``), as ``acl-mem info`` prints them."""
    return format_size(n)


_size = size_text


def _seconds(t: int) -> str:
    return f"{t / 1e9:.6f} s"


def _site(frames: Sequence[Sequence[object]]) -> str:
    if not frames:
        return "(no stack recorded)"
    first = frames[0]
    return f"{os.path.basename(str(first[0]))}:{first[1]} in {first[2]}"


def _device_title(figures: DeviceFigures, header: Mapping[str, Any]) -> str:
    if figures.device == HOST:
        return "host (page-locked memory)"
    if figures.device == UNKNOWN:
        return "device unknown (allocated by threads with no device the trace knows)"
    if figures.device == "-":
        return "virtual address reservations"
    capacity = header.get("capacity")
    memory = f"{header['memory']} " if header.get("memory") else ""
    tail = f" ({memory}{_size(capacity)})" if isinstance(capacity, int) and capacity else ""
    return f"device {figures.device}{tail}"


def _allocation_line(a: Allocation) -> str:
    where = f"segment of {a.parent:#x}" if a.kind == "segment" and a.parent is not None \
        else a.call
    when = f"at {_seconds(a.t)}  thread {a.thread}  " if a.thread else ""
    site = _site(a.frames) if a.thread or a.frames else ""
    return f"{_size(a.in_use or a.size):>10}  {where:<24} {a.address:#x}  {when}{site}".rstrip()


def format_summary(summary: TraceSummary, *, top: int = 10) -> str:
    """The text ``acl-mem trace summary`` prints."""
    h = summary.header
    lines = [f"trace {summary.path}"]
    backend = h.get("backend") or "(no backend used)"
    details = h.get("details") or {}
    profile = f" {details['profile']}" if isinstance(details, dict) and \
        details.get("profile") else ""
    lines.append(f"  {backend}{profile}, SoC {h.get('soc') or '?'}, CANN "
                 f"{h.get('cann') or '?'}, padding {h.get('padding')}, pid {h.get('pid')}, "
                 f"started {h.get('started')}")
    lines.append(f"  {summary.calls} calls in {_seconds(summary.duration)} from "
                 f"{summary.threads} thread(s)"
                 + ("" if summary.complete else "; no end line: the process ended without "
                    "stopping the recording (killed?)")
                 + (f"; {summary.lost} call(s) could not be recorded" if summary.lost else "")
                 + (f"; {summary.bad_lines} unreadable line(s)" if summary.bad_lines else ""))
    for figures in summary.devices.values():
        if figures.pools or figures.total.peak_reserved or figures.total.peak_in_use:
            lines.append("")
            lines.extend(device_lines(figures, h, top))
    lines.append("")
    never = summary.never_freed
    lines.append(f"never freed: {len(never)} allocation(s)"
                 + (f", {_size(sum(a.reserved for a in never))} reserved" if never else ""))
    for a in sorted(never, key=lambda a: (-max(a.in_use, a.reserved, a.size), a.index))[:top]:
        lines.append(f"  {a.kind:<11} device {a.device:<4} " + _allocation_line(a))
    if len(never) > top:
        lines.append(f"  ... and {len(never) - top} more (--top N, or --json)")
    if summary.streams_left:
        lines.append(f"streams never destroyed: {summary.streams_left}")
    if summary.unknown_frees:
        lines.append(f"frees of memory allocated before the trace began: "
                     f"{summary.unknown_frees}")
    lines.append(f"failed calls: {sum(f.count for f in summary.failed)}"
                 + (f", {len(summary.failed)} kinds" if len(summary.failed) > 1 else ""))
    for f in summary.failed[:top]:
        lines.append(f"  {f.call:<24} {f.reason}  x{f.count}  first at {_seconds(f.first_t)}: "
                     f"{f.first}  {_site(f.frames)}")
    if len(summary.failed) > top:
        lines.append(f"  ... and {len(summary.failed) - top} more kinds (--top N, or --json)")
    return "\n".join(lines)


def device_lines(figures: DeviceFigures, header: Mapping[str, Any], top: int, *,
                 live: Sequence[Allocation] | None = None, peaks: bool = True) -> list[str]:
    """A device's section: totals, one row per page pool, and the largest allocations
    live at the in-use peak (or, given ``live``, the largest live now)."""
    total = figures.total
    lines = [_device_title(figures, header)]
    if peaks:
        lines.append(f"  peak in use   {_size(total.peak_in_use):>10} at "
                     f"{_seconds(total.peak_in_use_t)}   peak reserved "
                     f"{_size(total.peak_reserved):>10} at {_seconds(total.peak_reserved_t)}")
    now = "at the end   " if live is None else "now          "
    lines.append(f"  {now} in use {_size(total.in_use)}, reserved {_size(total.reserved)}")
    if figures.pools:
        if peaks:
            lines.append(f"  {'pool':<8}{'peak in use':>14}{'peak reserved':>16}"
                         f"{'in use ' + now.strip():>18}{'reserved ' + now.strip():>20}")
        else:
            lines.append(f"  {'pool':<8}{'in use':>14}{'reserved':>16}")
    for name, pool in sorted(figures.pools.items(), key=lambda kv: _pool_order(kv[0])):
        if peaks:
            lines.append(f"  {name:<8}{_size(pool.peak_in_use):>14}"
                         f"{_size(pool.peak_reserved):>16}{_size(pool.in_use):>18}"
                         f"{_size(pool.reserved):>20}")
        else:
            lines.append(f"  {name:<8}{_size(pool.in_use):>14}{_size(pool.reserved):>16}")
    shown = figures.largest_at_peak if live is None else list(live)
    if shown:
        title = f"largest live at the in-use peak ({_seconds(total.peak_in_use_t)})" \
            if live is None else "largest live allocations"
        lines.append(f"  {title}:")
        lines.extend(f"    {_allocation_line(a)}" for a in shown[:top])
        if live is not None and len(shown) > top:
            lines.append(f"    ... and {len(shown) - top} more")
    return lines


_POOLS = ("normal", "huge", "giant", "pinned")


def _pool_order(name: str) -> tuple[int, str]:
    return (_POOLS.index(name) if name in _POOLS else len(_POOLS), name)
