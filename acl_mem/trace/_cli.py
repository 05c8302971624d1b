"""``acl-mem trace``: the trace commands of the command line (acl_mem/cli.py hands them
over here)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..fake import PROFILES
from ._format import Trace, TraceFormatError, read_trace
from ._json_out import write_json
from ._plot import FORMATS, PlotDependencyError, write_plot
from ._progress import Progress
from ._replay import POOLS, ReplayOptions, replay_trace
from ._replay_text import format_replay
from ._summary import summarize_trace
from ._text import format_summary

__all__ = ["add_trace_parser", "run_trace"]

_TRACE_DESCRIPTION = """\
Work with allocation traces: JSON Lines files of every allocation, free, VMM call,
pool segment, stream and device call of a run (docs/trace-format.md). Record one
with ACL_MEM_TRACE=FILE (the whole process) or acl_mem.trace.record(FILE).
"""

_SUMMARY_DESCRIPTION = """\
Summarise a trace: per device and page pool, the peak bytes in use and reserved
and when they were reached, the largest allocations live at the in-use peak with
their call sites (recorded with ACL_MEM_TRACE_STACK=N or stack_depth=N), the
allocations never freed, and the calls that failed.

In use: bytes the program asked for (pool segments rather than the pools' own
blocks). Reserved: runtime memory held, after the runtime's padding and rounding
to whole pages, as the SoC and CANN release in the trace's header do it.
"""

_SUMMARY_EPILOG = """\
--json prints one JSON object: path, header, calls, duration (ns), threads,
by_call, devices (per device: in_use, reserved, peak_in_use, peak_in_use_t,
peak_reserved, peak_reserved_t, pools {name: the same figures},
largest_at_peak [allocations]), never_freed [allocations], failed [{call, rc,
raised, count, first_t, first, stack}], streams_left, unknown_frees, complete,
lost, bad_lines, stacks [call sites: [[file, line, function], ...], innermost
frame first]. An allocation is {kind, call, address, size, device, pool,
reserved, in_use, t, thread, parent, stack}; its stack, and a failed call's, is
the position of its call site in stacks (null when none was recorded). Times are
nanoseconds since the recording began; sizes bytes.

Damaged lines (not JSON, longer than 1 MiB, a field of the wrong type or range)
are left out and named on standard error as FILE:LINE: what; the summary counts
the rest. Only regular files are read.

exit status: 0 summary printed; 1 the file cannot be read or is not a trace, or
lines were left out (the summary of the rest is still printed); 2 usage error.
"""


_REPLAY_DESCRIPTION = """\
Replay a trace on a fresh fake device: every recorded call is made again, in the
recorded order and thread, with recorded addresses, handles and streams mapped to
the ones the replay got. Reports the calls whose result differs from the recording
(an out-of-memory that now happens, or no longer does) with their call sites, and
the peaks in use and reserved per device, recorded and replayed.

By default the fake plays the device and CANN release the trace's header names.
--profile, --hbm, --cann and --pool ask what would happen on another device, with
more or less memory, under another release, or with the aclrtMalloc family served
from an acl_mem pool.
"""

_REPLAY_EPILOG = """\
Calls on memory allocated before the recording began, and calls on memory the
replay could not allocate, are not replayed; the report counts them.

--json prints one JSON object: path, profile, soc, cann, capacity, device_count,
pool, calls, replayed, seconds, differences, first [{number, t, thread, call,
recorded, replayed, recorded_rc, replayed_rc, stack, free, total}], skipped
{reason: count}, notes, devices {device: recorded_peak_in_use,
recorded_peak_reserved, replayed_peak_in_use, replayed_peak_reserved}, pools
{device: figures of the replay's pool}.

exit status: 0 no differences; 3 some call returned something else; 1 the file
cannot be read or is not a trace, or damaged lines were left out (named on
standard error; the rest is replayed and reported); 2 usage error.
"""


_PLOT_DESCRIPTION = """\
Draw a trace: per device (and the host's page-locked memory), the bytes in use over
time stacked by call site (recorded with ACL_MEM_TRACE_STACK=N), the bytes reserved
over them, per device and per page pool, with both peaks marked; and a map of the
address space at the in-use peak, live blocks and the holes between them.
"""

_PLOT_EPILOG = """\
The HTML file has no outside references (it opens offline) and shows details on
hover. The PNG needs matplotlib (pip install 'acl_mem[plot]').

exit status: 0 written; 1 the file cannot be read or is not a trace, OUT cannot
be written, or damaged lines were left out (named on standard error; the rest is
drawn); 2 usage error (an OUT suffix other than .html, .htm or .png; matplotlib
missing for a PNG).
"""


def add_trace_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """Add ``trace`` and its commands to the parser's subcommands ``sub``."""
    trace = sub.add_parser("trace", help="summarise, replay or plot an allocation trace "
                           "(ACL_MEM_TRACE)",
                           description=_TRACE_DESCRIPTION, formatter_class=formatter)
    commands = trace.add_subparsers(dest="trace_command", title="commands",
                                    metavar="COMMAND", required=True)
    summary = commands.add_parser("summary", help="peaks, live at the peak, never freed, "
                                  "failed calls", description=_SUMMARY_DESCRIPTION,
                                  epilog=_SUMMARY_EPILOG, formatter_class=formatter)
    summary.add_argument("file", metavar="FILE", help="the trace (JSON Lines)")
    summary.add_argument("--top", type=_count, default=10, metavar="N",
                         help="allocations to list at each peak and never freed (default 10)")
    summary.add_argument("--json", action="store_true",
                         help="print a JSON object instead of text (keys below)")
    replay = commands.add_parser("replay", help="replay the calls on the fake: what differs, "
                                 "what if the device were bigger, pooled, another release",
                                 description=_REPLAY_DESCRIPTION, epilog=_REPLAY_EPILOG,
                                 formatter_class=formatter)
    replay.add_argument("file", metavar="FILE", help="the trace (JSON Lines)")
    replay.add_argument("--profile", metavar="NAME",
                        help="fake profile or SoC family to replay on (default: the trace's "
                        "SoC): " + ", ".join(sorted(PROFILES)))
    replay.add_argument("--hbm", type=_size, metavar="SIZE",
                        help="memory per device, e.g. 32GiB, 512MiB or bytes (default: the "
                        "trace's)")
    replay.add_argument("--cann", metavar="RELEASE",
                        help="CANN release whose behaviour to play: 8.5.0, 9.0.1 or 9.1.0 "
                        "(default: the trace's)")
    replay.add_argument("--pool", choices=POOLS,
                        help="serve aclrtMalloc, aclrtMallocAlign32 and aclrtMallocCached "
                        "from an acl_mem pool per device (SegmentPool or ExpandablePool)")
    replay.add_argument("--top", type=_count, default=10, metavar="N",
                        help="differences to describe (default 10)")
    replay.add_argument("--json", action="store_true",
                        help="print a JSON object instead of text (keys below)")
    plot = commands.add_parser("plot", help="draw memory over time and the address space at "
                               "the peak (HTML or PNG)", description=_PLOT_DESCRIPTION,
                               epilog=_PLOT_EPILOG, formatter_class=formatter)
    plot.add_argument("file", metavar="FILE", help="the trace (JSON Lines)")
    plot.add_argument("-o", "--output", required=True, metavar="OUT",
                      help="OUT.html (one self-contained file) or OUT.png (needs matplotlib: "
                      "pip install 'acl_mem[plot]')")
    plot.add_argument("--sites", type=_count, default=8, metavar="N",
                      help="call sites drawn as bands of their own (default 8; the rest are "
                      "'other')")


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1000, "KIB": 1 << 10, "M": 1 << 20,
          "MB": 1000**2, "MIB": 1 << 20, "G": 1 << 30, "GB": 1000**3, "GIB": 1 << 30,
          "T": 1 << 40, "TB": 1000**4, "TIB": 1 << 40}


def _size(text: str) -> int:
    """``32GiB``, ``32G`` (binary), ``32GB`` (decimal), ``1.5GiB`` or plain bytes."""
    cleaned = text.strip().replace("_", "").upper()
    number = cleaned.rstrip("KMGTIB")
    unit = cleaned[len(number):]
    try:
        value = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(
            f"expected a size such as 32GiB, 512MiB or 1073741824, got {text!r}") from None
    if not 2 << 20 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"{text!r}: the fake needs at least 2 MiB per "
                                         "device and at most 2**64 - 1 bytes")
    return int(value)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def run_trace(args: argparse.Namespace) -> int:
    """Run ``acl-mem trace COMMAND``; the exit status."""
    if args.trace_command == "replay":
        return _run_replay(args)
    if args.trace_command == "plot":
        return _run_plot(args)
    trace = _read("summary", args.file)
    if trace is None:
        return 1
    summary = summarize_trace(trace, top=args.top)
    # (A full or closed standard output is acl_mem/cli.py main's to report.)
    if args.json:
        write_json(summary.json_report(), sys.stdout)
    else:
        print(format_summary(summary, top=args.top))
    return 1 if trace.problem_count else 0


def _run_replay(args: argparse.Namespace) -> int:
    try:
        options = ReplayOptions(args.profile, args.hbm, args.cann, args.pool)
    except ValueError as exc:
        print(f"acl-mem trace replay: {exc}", file=sys.stderr)
        return 2
    trace = _read("replay", args.file)
    if trace is None:
        return 1
    with Progress("replay", len(trace.events)) as progress:
        report = replay_trace(trace, options, keep=args.top, progress=progress)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(format_replay(report))
    return 1 if trace.problem_count else 3 if report.differences else 0


def _read(command: str, path: str) -> Trace | None:
    """The trace at ``path`` (progress on a terminal), or None after saying why not."""
    try:
        with Progress("reading", 0, unit="bytes") as progress:
            trace = read_trace(path, progress=progress)
    except (OSError, TraceFormatError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"acl-mem trace {command}: cannot read {path}: {reason}", file=sys.stderr)
        return None
    _say_problems(trace)
    return trace


def _say_problems(trace: Trace) -> None:
    """The damaged lines left out (the first few word for word, then how many)."""
    for problem in trace.problems:
        print(problem, file=sys.stderr)
    unsaid = trace.problem_count - len(trace.problems)
    if unsaid > 0:
        print(f"{trace.path}: {unsaid} more problem(s) not shown ({trace.problem_count} in "
              "all)", file=sys.stderr)


def _run_plot(args: argparse.Namespace) -> int:
    output = args.output
    if os.path.splitext(output)[1].lower() not in FORMATS:
        print(f"acl-mem trace plot: {output}: the output must end in .html, .htm or .png",
              file=sys.stderr)
        return 2
    trace = _read("plot", args.file)
    if trace is None:
        return 1
    summary = summarize_trace(trace)
    try:
        with Progress("plot", len(summary.allocations), unit="allocations") as progress:
            kind = write_plot(summary, output, top_sites=args.sites, progress=progress)
    except PlotDependencyError as exc:
        print(f"acl-mem trace plot: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"acl-mem trace plot: cannot write {output}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    print(f"wrote {output} ({kind})")
    return 1 if trace.problem_count else 0
