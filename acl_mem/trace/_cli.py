"""``acl-mem trace``: the trace commands of the command line (acl_mem/cli.py hands them
over here)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ._format import TraceFormatError
from ._summary import summarize
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
lost, bad_lines. Times are nanoseconds since the recording began; sizes bytes.

exit status: 0 summary printed; 1 the file cannot be read or is not a trace;
2 usage error.
"""


def add_trace_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """Add ``trace`` and its commands to the parser's subcommands ``sub``."""
    trace = sub.add_parser("trace", help="summarise an allocation trace (ACL_MEM_TRACE)",
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
    try:
        summary = summarize(args.file, top=args.top)
    except (OSError, TraceFormatError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"acl-mem trace summary: cannot read {args.file}: {reason}", file=sys.stderr)
        return 1
    try:
        if args.json:
            print(json.dumps(summary.as_dict(), indent=2))
        else:
            print(format_summary(summary, top=args.top))
    except BrokenPipeError:
        sys.stderr.close()
    return 0
