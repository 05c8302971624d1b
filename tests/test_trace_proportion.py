"""What the trace commands write and hold stays in proportion to the trace read: a call
site shared by many allocations is written once, unknown fields are not kept, a file
still growing is read as it was when opened."""

from __future__ import annotations

import json
from pathlib import Path

from acl_mem.cli import main
from acl_mem.trace import summarize

HEADER = {"type": "header", "format": "acl_mem.trace", "version": 1, "backend": "fake",
          "soc": "Ascend910B1", "cann": "9.1.0", "padding": 32, "device_count": 1,
          "set_counts": {}, "current_device": None, "capacity": 1 << 30, "stack_depth": 32}
FRAMES = [["/" + "d" * 40 + ".py", i, "f" * 8] for i in range(32)]


def _shared_stack_trace(path: Path, mallocs: int) -> Path:
    """One 32-frame call site, ``mallocs`` allocations made there and never freed (the
    reviewer's gen_stackamp.py, smaller)."""
    lines = [HEADER, {"type": "thread", "th": 1, "ident": 1, "name": "M"},
             {"type": "stack", "id": 1, "frames": FRAMES},
             {"t": 1, "th": 1, "call": "aclrtSetDevice", "device": 0, "rc": 0}]
    lines += [{"t": 10 + i, "th": 1, "dev": 0, "call": "aclrtMalloc", "size": 512,
               "policy": 0, "rc": 0, "ptr": 0x180000000000 + i * 1024, "stack": 1}
              for i in range(mallocs)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_summary_json_writes_a_shared_call_site_once(tmp_path, capsys):
    """Before: every never-freed allocation repeated the 32 frames, 30 times the input."""
    trace = _shared_stack_trace(tmp_path / "t.jsonl", 3000)
    assert main(["trace", "summary", "--json", str(trace)]) == 0
    out = capsys.readouterr().out
    assert len(out) < 4 * trace.stat().st_size
    data = json.loads(out)
    assert data["stacks"] == [FRAMES]
    assert len(data["never_freed"]) == 3000
    assert {a["stack"] for a in data["never_freed"]} == {0}
    assert data["devices"]["0"]["largest_at_peak"][0]["stack"] == 0
    # What is written is what the API's as_dict gives.
    assert data == json.loads(json.dumps(summarize(trace).as_dict()))


def test_summary_text_stays_small_for_many_allocations(tmp_path, capsys):
    trace = _shared_stack_trace(tmp_path / "t.jsonl", 3000)
    assert main(["trace", "summary", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "and 2990 more" in out
    assert len(out) < trace.stat().st_size / 20


def test_summary_json_without_stacks_has_null_stacks(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps(HEADER) + "\n" + json.dumps(
        {"t": 1, "th": 1, "dev": 0, "call": "aclrtMalloc", "size": 512, "policy": 0,
         "rc": 0, "ptr": 4096}) + "\n")
    assert main(["trace", "summary", "--json", str(trace)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stacks"] == []
    assert data["never_freed"][0]["stack"] is None
