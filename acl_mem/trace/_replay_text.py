"""The replay report as text: what ``acl-mem trace replay`` prints."""

from __future__ import annotations

import os

from ._replay import Difference, ReplayReport
from ._text import size_text

__all__ = ["format_replay"]


def _site_lines(d: Difference) -> list[str]:
    if not d.frames:
        return ["    (no stack recorded: record with ACL_MEM_TRACE_STACK=N to see call sites)"]
    lines = []
    for number, (file, line, function) in enumerate(d.frames):
        lead = "at" if number == 0 else "  "
        lines.append(f"    {lead} {os.path.basename(file)}:{line} in {function}  ({file})")
    return lines


def _difference_lines(d: Difference) -> list[str]:
    lines = [f"  call {d.number + 1} at {d.t / 1e9:.6f} s, thread {d.thread}: {d.call}",
             f"    recorded: {d.recorded}",
             f"    replayed: {d.replayed}"
             + (f"  (the device had {size_text(d.free)} free of {size_text(d.total)})"
                if d.free is not None and d.total is not None else "")]
    return lines + _site_lines(d)


def format_replay(report: ReplayReport) -> str:
    """The text ``acl-mem trace replay`` prints."""
    pool = f", aclrtMalloc family served by a {report.pool} pool per device" \
        if report.pool else ""
    rate = report.calls / report.seconds if report.seconds > 0 else 0.0
    lines = [f"replay of {report.path}",
             f"  on the fake: profile {report.profile} ({report.soc}), CANN {report.cann}, "
             f"{size_text(report.capacity)} per device, {report.device_count} device(s){pool}",
             f"  {report.calls:,} calls, {report.replayed:,} replayed in {report.seconds:.2f} s "
             f"({rate:,.0f} calls/s)"]
    lines.extend(f"  note: {note}" for note in report.notes)
    for reason, count in report.skipped.items():
        lines.append(f"  not replayed: {count:,} {reason}")
    lines.append("")
    if report.differences == 0:
        lines.append("differences: none (every replayed call returned what it returned when "
                     "recorded)")
    else:
        shown = len(report.first)
        lines.append(f"differences: {report.differences:,} call(s) returned something else; "
                     + ("the first:" if shown == 1 else f"the first {shown}:"))
        for d in report.first:
            lines.extend(_difference_lines(d))
    lines.append("")
    lines.append("memory per device (recorded -> replayed):")
    recorded, replayed = report.recorded_summary.devices, report.replayed_summary.devices
    for device in dict.fromkeys([*recorded, *replayed]):
        before, after = recorded.get(device), replayed.get(device)
        if before is None and after is None:
            continue
        old_use = before.total.peak_in_use if before else 0
        new_use = after.total.peak_in_use if after else 0
        old_res = before.total.peak_reserved if before else 0
        new_res = after.total.peak_reserved if after else 0
        name = "host" if device == "host" else f"device {device}"
        lines.append(f"  {name:<10} peak in use {size_text(old_use)} -> {size_text(new_use)}, "
                     f"peak reserved {size_text(old_res)} -> {size_text(new_res)}"
                     + (f" ({new_res / new_use:.2f}x in use)" if new_use else ""))
    for number, stats in sorted(report.pools.items()):
        lines.append(f"  {report.pool} pool on device {number}: peak reserved "
                     f"{size_text(stats.peak_reserved)}, peak in use "
                     f"{size_text(stats.peak_in_use)}, {stats.blocks_allocated} block(s) "
                     f"taken; at the end {size_text(stats.cached)} cached, largest free "
                     f"extent {size_text(stats.largest_free_extent)}, fragmentation "
                     f"{stats.fragmentation:.2f}")
    return "\n".join(lines)
