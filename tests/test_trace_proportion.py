"""What the trace commands write and hold stays in proportion to the trace read: a call
site shared by many allocations is written once, unknown fields are not kept, a file
still growing is read as it was when opened."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import ROOT, clean_env

from acl_mem.cli import main
from acl_mem.trace import _cli, read_trace, summarize
from acl_mem.trace._progress import Progress

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


def _junk_trace(path: Path, lines: int, junk: int) -> Path:
    """Valid call lines each carrying an unknown field of ``junk`` empty objects (the
    reviewer's gen_amp.py: 3 bytes of file, some 60 of memory, per object)."""
    field = "[" + ",".join(["{}"] * junk) + "]"
    with path.open("w") as out:
        out.write(json.dumps(HEADER) + "\n")
        out.write(json.dumps({"type": "thread", "th": 1, "ident": 1, "name": "M",
                              "zz": [{}] * 3}) + "\n")
        for i in range(lines):
            record = json.dumps({"t": i, "th": 1, "call": "aclrtSetDevice", "device": 0,
                                 "rc": 0})
            out.write(record[:-1] + ',"zz":' + field + "}\n")
        out.write(json.dumps({"type": "end", "t": 99, "calls": lines, "lost": 0, "zz": {}})
                  + "\n")
    return path


def test_unknown_fields_are_dropped_when_read(tmp_path, capsys):
    trace = read_trace(_junk_trace(tmp_path / "t.jsonl", 3, 10))
    assert [sorted(e) for e in trace.events] == [["call", "device", "rc", "t", "th"]] * 3
    assert sorted(trace.threads[1]) == ["ident", "name", "th", "type"]
    assert trace.end is not None and "zz" not in trace.end
    assert trace.problem_count == 0  # ignored, as the format says: not a damaged line
    assert main(["trace", "summary", str(tmp_path / "t.jsonl")]) == 0
    assert "3 calls" in capsys.readouterr().out


_PEAK = """\
import resource, sys
from acl_mem.cli import main
status = main(["trace", "summary", sys.argv[1]])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(status)
"""


def _peak_kib(path: Path) -> int:
    done = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True,
                          text=True, timeout=120, check=True, env=clean_env(),
                          cwd=str(ROOT))
    return int(done.stderr.strip().splitlines()[-1])


def test_unknown_fields_do_not_pile_up_in_memory(tmp_path):
    """12 lines of 1 MiB each: every one kept took some 25 MB (300 MB in all); one at a
    time, the peak stays near that of the same trace without them."""
    plain = _peak_kib(_junk_trace(tmp_path / "plain.jsonl", 12, 0))
    junk = _peak_kib(_junk_trace(tmp_path / "junk.jsonl", 12, 340_000))
    assert junk - plain < 100_000, (plain, junk)


def test_memory_error_is_one_line_and_status_one(monkeypatch, tmp_path, capsys):
    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(_cli, "summarize_trace", exhausted)
    trace = _junk_trace(tmp_path / "t.jsonl", 1, 0)
    assert main(["trace", "summary", str(trace)]) == 1
    assert capsys.readouterr().err == "acl-mem: out of memory\n"


class _Appender(Progress):
    """Told of every line read: appends another to the file, as a recording still
    running would (at most ``limit``, so that a reader that follows the file ends)."""

    def __init__(self, path: Path, limit: int) -> None:
        super().__init__("reading", 0, enabled=False)
        self.out = path.open("a")
        self.limit = limit
        self.appended = 0

    def update(self, done: int, *, label: str | None = None) -> None:
        if self.appended < self.limit:
            self.appended += 1
            self.out.write(json.dumps({"t": 1000 + self.appended, "th": 1,
                                       "call": "aclrtSetDevice", "device": 0, "rc": 0})
                           + "\n")
            self.out.flush()


def test_a_growing_file_is_read_as_it_was_when_opened(tmp_path):
    path = _junk_trace(tmp_path / "t.jsonl", 50, 0)
    with path.open("a") as out:
        out.write('{"t":2000,"th":1,"call":"aclrt')  # a line being written
    appender = _Appender(path, 5000)
    trace = read_trace(path, progress=appender)
    appender.out.close()
    assert appender.appended > 0  # the file did grow while it was read
    assert trace.calls == 50
    assert trace.bad_lines == 1
    assert "cut short" in trace.problems[0]
