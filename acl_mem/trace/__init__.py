"""Allocation traces: record every memory call of a run, then summarise it.

``with acl_mem.trace.record("run.jsonl"):`` (or ``ACL_MEM_TRACE=run.jsonl`` for the whole
process) writes every allocation, free, host and DVPP allocation, VMM call, pool segment,
stream and device call of the active backend, with its time, thread, current device,
arguments, return code and outputs, to a JSON Lines file (docs/trace-format.md).
Recording works the same on the fake and the native backend, and never changes what a
call returns. ``acl-mem trace summary run.jsonl`` (or :func:`summarize`) reports peaks per
device and page pool, what was live at the peak, what was never freed and what failed;
``acl-mem trace replay`` (:func:`replay`) makes the calls again on the fake, on the
recorded device or another; ``acl-mem trace plot`` (:func:`write_plot`) draws them.
"""

from __future__ import annotations

from ._figures import Allocation, DeviceFigures, FailedCalls, PoolFigures, TraceSummary
from ._format import FORMAT_NAME, FORMAT_VERSION, Trace, TraceFormatError, read_trace
from ._plot import PlotDependencyError, write_plot
from ._recorder import Recorder, active, flush, record
from ._replay import Difference, ReplayOptions, ReplayReport, replay, replay_trace
from ._summary import summarize, summarize_trace
from ._text import format_summary

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "Allocation", "DeviceFigures", "Difference",
           "FailedCalls", "PlotDependencyError", "PoolFigures", "Recorder", "ReplayOptions",
           "ReplayReport", "Trace", "TraceFormatError", "TraceSummary", "active", "flush",
           "format_summary", "read_trace", "record", "replay", "replay_trace", "summarize",
           "summarize_trace", "write_plot"]
