"""Trace files are untrusted input: acl-mem trace summary, replay and plot read any file
without a traceback, a hang or memory out of proportion, leave out what is damaged and
say where."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from acl_mem.cli import main
from acl_mem.fake import make_backend
from acl_mem.trace import TraceFormatError, _plot_data, _replay, read_trace, replay_trace
from acl_mem.trace._format import LINE_LIMIT, PROBLEMS_KEPT

HEADER = {"type": "header", "format": "acl_mem.trace", "version": 1, "backend": "fake",
          "soc": "Ascend910B1", "cann": "9.1.0", "padding": 32, "device_count": 1,
          "set_counts": {"0": 1}, "current_device": 0, "capacity": 1 << 30}
GOOD = {"t": 5, "th": 1, "dev": 0, "call": "aclrtMalloc", "size": 100, "policy": 0, "rc": 0,
        "ptr": 0x1000}


def _malloc(**changes: Any) -> str:
    return json.dumps({**GOOD, **changes})


#: Damaged lines, and the field each names (None: the line as a whole).
HOSTILE: list[tuple[str, str | None]] = [
    ('{"t":1,"th":1,"dev":0,"call":"aclrtMalloc","size":-Infinity,"policy":0,"rc":0,'
     '"ptr":8}', "size"),
    ('{"t":1,"th":1,"dev":0,"call":"aclrtMalloc","size":NaN,"policy":0,"rc":0,"ptr":8}',
     "size"),
    ('{"t":1,"th":1,"dev":0,"call":"aclrtMalloc","size":1e400,"policy":0,"rc":0,"ptr":8}',
     "size"),
    (_malloc(size=10 ** 400), "size"),
    (_malloc(size=-1), "size"),
    (_malloc(size=1 << 64), "size"),
    (_malloc(size="100"), "size"),
    (_malloc(size=True), "size"),
    (_malloc(size=1.5), "size"),
    (_malloc(dev=-1), "dev"),
    (_malloc(dev="0"), "dev"),
    (_malloc(th=False), "th"),
    (_malloc(t=1e400), "t"),
    (_malloc(rc=None), "rc"),
    (_malloc(stack=-3), "stack"),
    (_malloc(raised=["x"]), "raised"),
    (_malloc(call={"a": 1}), "call"),
    (_malloc(call="x" * 5000), "call"),
    (json.dumps({"t": 1, "th": 1, "call": "aclrtSetDevice", "device": -2, "rc": 0}), "device"),
    (json.dumps({"t": 1, "th": 1, "dev": 0, "call": "aclrtMallocPhysical", "size": 4096,
                 "prop": {"memAttr": "huge"}, "flags": 0, "rc": 0, "handle": 9}),
     "prop.memAttr"),
    (json.dumps({"type": "stack", "id": 1, "frames": [["a.py", -1, "f"]]}), "frames[0]"),
    (json.dumps({"type": "stack", "id": "1", "frames": []}), "id"),
    (json.dumps({"type": "thread", "th": -1}), "th"),
    (json.dumps({"type": "end", "t": 9, "calls": -1, "lost": 0}), "calls"),
    ("[" * 100_000 + "]" * 100_000, None),
    ("[1, 2, 3]", None),
    ('{"t": 1, "th": ', None),
]


def _write(path: Path, lines: list[str], header: dict[str, Any] | None = None) -> Path:
    path.write_text("\n".join([json.dumps(header or HEADER), *lines]) + "\n")
    return path


def test_each_damaged_line_is_left_out_and_named_without_its_neighbours(tmp_path, capsys):
    lines: list[str] = []
    for number, (line, _) in enumerate(HOSTILE):
        lines += [line, _malloc(t=10 + number, ptr=0x10_0000 * (number + 1))]
    path = _write(tmp_path / "hostile.jsonl", lines)
    trace = read_trace(path)
    assert trace.bad_lines == len(HOSTILE)
    assert sum("call" in e for e in trace.events) == len(HOSTILE)  # every good neighbour
    assert main(["trace", "summary", str(path), "--top", "1"]) == 1
    out, err = capsys.readouterr()
    assert f"{len(HOSTILE)} calls" in out
    said = err.splitlines()
    assert len(said) == PROBLEMS_KEPT + 1 and "more problem(s) not shown" in said[-1]
    for number, (text, (_, name)) in enumerate(zip(said[:-1], HOSTILE, strict=False)):
        match = re.match(r"(.+):(\d+): (.*)$", text)
        assert match and match.group(1) == str(path)
        assert int(match.group(2)) == 2 + 2 * number
        if name is not None:
            assert match.group(3).startswith(f"field {name}: expected ")


def test_the_message_names_file_line_field_and_value(tmp_path, capsys):
    bad = ('{"t":1,"th":1,"dev":0,"call":"aclrtMalloc","size":-Infinity,"policy":0,"rc":0,'
           '"ptr":8}')
    path = _write(tmp_path / "one.jsonl", [_malloc(), bad])
    assert main(["trace", "summary", str(path)]) == 1
    line, = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{path}:3: field size: expected an int >= 0")
    assert line.endswith("got -Infinity")


def test_binary_garbage_long_lines_and_a_cut_last_line(tmp_path, capsys):
    path = tmp_path / "garbage.jsonl"
    with path.open("wb") as handle:
        handle.write(json.dumps(HEADER).encode() + b"\n")
        handle.write(b"\xff\xfe\x00garbage\n")
        handle.write(_malloc(ptr=0x2000).encode() + b"\n")
        handle.write(b"x" * (LINE_LIMIT + 10) + b"\n")
        handle.write(b"{" * (3 * LINE_LIMIT))  # no newline at all
        handle.write(b"\n" + _malloc(t=7, ptr=0x3000).encode() + b"\n")
        handle.write(_malloc(t=8, ptr=0x4000).encode()[:-5])  # killed mid-line
    trace = read_trace(path)
    assert trace.bad_lines == 4
    assert [e["ptr"] for e in trace.events] == [0x2000, 0x3000]
    assert main(["trace", "summary", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2: not UTF-8" in err and f"{path}:4: longer than" in err
    assert f"{path}:5: longer than" in err and f"{path}:7: not JSON" in err


def test_the_header_fields_are_checked_too(tmp_path, capsys):
    header = {**HEADER, "capacity": -5, "device_count": 10 ** 30, "padding": "32",
              "set_counts": {"²": 1, "0": True}, "details": {"a": [[[[[[[[[[1]]]]]]]]]]}}
    path = _write(tmp_path / "header.jsonl", [_malloc()], header)
    trace = read_trace(path)
    assert (trace.header["capacity"], trace.header["device_count"],
            trace.header["padding"], trace.header["set_counts"],
            trace.header["details"]) == (None, None, None, {}, None)
    assert trace.problem_count == 6 and trace.bad_lines == 0
    assert main(["trace", "replay", str(path)]) == 1
    assert capsys.readouterr().err.count(f"{path}:1: field ") == 6


@pytest.mark.parametrize("command", ["summary", "replay", "plot"])
def test_fifos_devices_and_directories_are_refused_at_once(tmp_path, capsys, command):
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)  # nobody ever writes: opening it for reading must not wait
    out = ["-o", str(tmp_path / "x.html")] if command == "plot" else []
    for path in (str(fifo), "/dev/zero", str(tmp_path)):
        assert main(["trace", command, path, *out]) == 1
        assert "a trace is read only from a regular file" in capsys.readouterr().err
    with pytest.raises(TraceFormatError):
        read_trace(fifo)


@pytest.mark.parametrize("command", ["replay", "plot"])
def test_replay_and_plot_say_the_same_and_still_work(tmp_path, capsys, command):
    path = _write(tmp_path / "r.jsonl", [_malloc(size=-1), _malloc(t=9, ptr=0x5000)])
    out = ["-o", str(tmp_path / "x.html")] if command == "plot" else []
    assert main(["trace", command, str(path), *out]) == 1
    captured = capsys.readouterr()
    assert f"{path}:2: field size" in captured.err
    assert ("wrote" if command == "plot" else "differences: none") in captured.out


def test_replay_help_names_options_that_exist(capsys):
    with pytest.raises(SystemExit):
        main(["trace", "replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--profiles" not in text
    for name in ("atlas-a2", "ascend950"):
        assert name in text


# -- a trace of a million threads --------------------------------------------------------------
def _threads_trace(path: Path, threads: int) -> Path:
    lines = []
    for th in range(2, threads + 2):
        ptr = 0x1_0000 * th
        lines += [_malloc(t=2 * th, th=th, ptr=ptr),
                  json.dumps({"t": 2 * th + 1, "th": th, "call": "aclrtFree", "ptr": ptr,
                              "rc": 0})]
    return _write(path, lines)


def test_replay_starts_no_thread_per_recorded_thread(tmp_path, monkeypatch):
    """Replaying threads are reused: the threads started stay at MAX_WORKERS however
    many the trace recorded, so each recorded thread costs a call, not a thread start."""
    started: list[int] = []
    original = _replay._new_worker

    def counted(th: int) -> Any:
        started.append(th)
        return original(th)

    monkeypatch.setattr(_replay, "_new_worker", counted)
    for threads in (_replay.MAX_WORKERS + 1, 8 * _replay.MAX_WORKERS):  # (one is the caller)
        started.clear()
        report = replay_trace(read_trace(_threads_trace(tmp_path / f"{threads}.jsonl",
                                                        threads)))
        assert (report.differences, report.replayed) == (0, 2 * threads)
        assert len(started) == _replay.MAX_WORKERS


def test_a_reused_replaying_thread_starts_without_a_device(tmp_path, monkeypatch):
    """Thread 2 sets device 0; thread 3 then gets thread 2's replaying thread, and must
    find no current device there, as it had none when recorded."""
    monkeypatch.setattr(_replay, "MAX_WORKERS", 1)
    backend = make_backend("atlas-a2", private=True)
    backend.aclInit(None)
    no_device = threading_result(lambda: backend.aclrtMalloc(64, 0))[0]
    assert no_device != 0
    path = _write(tmp_path / "reuse.jsonl", [
        json.dumps({"t": 1, "th": 1, "call": "aclrtSetDevice", "device": 0, "rc": 0}),
        json.dumps({"t": 2, "th": 2, "call": "aclrtSetDevice", "device": 0, "rc": 0}),
        _malloc(t=3, th=2, ptr=0x5000),
        json.dumps({"t": 4, "th": 3, "dev": None, "call": "aclrtMalloc", "size": 64,
                    "policy": 0, "rc": no_device}),
    ], header={**HEADER, "set_counts": {}, "current_device": None})
    report = replay_trace(read_trace(path))
    assert (report.differences, report.replayed) == (0, 4)


def threading_result(work: Any) -> Any:
    """What ``work`` returns when called in a new thread."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(work()))
    thread.start()
    thread.join()
    return box[0]


# -- output in proportion to input -------------------------------------------------------------
def _long_names_trace(path: Path, allocations: int, name: int, frames: int) -> Path:
    """Allocations sharing one stack whose names are ``name`` characters long."""
    stack = json.dumps({"type": "stack", "id": 1, "frames": [
        [f"/src/{'d' * name}/train.py", 7, "f" * name]] * frames})
    lines = [stack] + [_malloc(t=i, ptr=(1 << 32) + (i << 21), size=1 << 20, stack=1,
                               rc=0 if i % 2 else 207001) for i in range(allocations)]
    return _write(path, lines)


@pytest.mark.parametrize(("allocations", "name", "frames"), [(400, 100_000, 1),
                                                             (100, 4000, 60)])
def test_what_is_written_stays_in_proportion_to_what_was_read(tmp_path, capsys,
                                                             allocations, name, frames):
    path = _long_names_trace(tmp_path / "names.jsonl", allocations, name, frames)
    size = path.stat().st_size
    for command in (["summary"], ["summary", "--json"], ["replay", "--top", "50"],
                    ["replay", "--json", "--top", "50"]):
        main(["trace", *command, str(path)])
        written = len(capsys.readouterr().out)
        assert written < 5 * size, (command, written, size)
    out = tmp_path / "names.html"
    assert main(["trace", "plot", str(path), "-o", str(out)]) == 0
    assert out.stat().st_size < 5 * size


def test_a_refused_call_keeps_what_its_caller_passed(tmp_path):
    """The runtime refused these calls, so their arguments may be anything an int
    can be; the same values in a call that succeeded are damage."""
    refused = [json.dumps({"t": 1, "th": 1, "call": "aclrtSetDevice", "device": -1,
                           "rc": 107001}),
               _malloc(t=2, size=-5, rc=207001),
               _malloc(t=3, size=None, raised="TypeError", message="size: " + "x" * 10_000)]
    trace = read_trace(_write(tmp_path / "refused.jsonl", [*refused, _malloc(size=-5)]))
    assert trace.bad_lines == 1 and len(trace.events) == 3
    assert len(trace.events[2]["message"]) <= 200


def test_a_trace_naming_thousands_of_devices_draws_a_bounded_page(tmp_path, capsys):
    lines = [_malloc(t=i, dev=i * 1000, ptr=0x1000 * (i + 1)) for i in range(1000)]
    path = _write(tmp_path / "devices.jsonl", lines)
    out = tmp_path / "devices.html"
    assert main(["trace", "plot", str(path), "-o", str(out)]) == 0
    page = out.read_text()
    assert page.count('<section class="device"') == _plot_data.MAX_DEVICES
    assert f"{1000 - _plot_data.MAX_DEVICES} more devices" in page
    assert len(page) < 2 * path.stat().st_size


def test_a_forged_starting_state_costs_no_more_than_the_replays_devices(tmp_path):
    header = {**HEADER, "set_counts": {"0": 2, **{str(d): 65_535 for d in range(1000, 1400)},
                                       "7": 1 << 20}}
    trace = read_trace(_write(tmp_path / "state.jsonl", [_malloc()], header))
    assert trace.problem_count == 1  # device 7's count: out of range
    report = replay_trace(trace)
    assert report.differences == 0
    assert any("400 device(s)" in note for note in report.notes)


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_json_output_stays_json_whatever_the_header_details_hold(tmp_path, capsys):
    """NaN or Infinity inside the header's details is refused there (named, status 1), so
    `summary --json` never writes what is not JSON."""
    header = {**HEADER, "details": {"z": float("nan"), "ok": 1}}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(header) + "\n" + _malloc() + "\n")
    assert main(["trace", "summary", "--json", str(path)]) == 1
    out = capsys.readouterr()
    _strict_json(out.out)
    assert "field details" in out.err


def test_names_that_were_not_utf8_keep_their_records_and_every_output_works(tmp_path,
                                                                             capsys):
    """A stack frame naming a file whose name was not UTF-8 (recorded with its undecodable
    bytes, an unpaired surrogate escape): the record is kept, the name shown with '?', and
    summary, its JSON and the plot all work."""
    path = tmp_path / "t.jsonl"
    stack = json.dumps({"type": "stack", "id": 1, "frames": [["/tmp/x\udcff/a.py", 3, "f"]]})
    path.write_text("\n".join([json.dumps(HEADER), stack, _malloc(stack=1)]) + "\n")
    trace = read_trace(path)
    assert trace.calls == 1 and trace.problem_count == 0
    assert trace.stacks[1][0][0] == "/tmp/x?/a.py"
    assert main(["trace", "summary", str(path)]) == 0
    capsys.readouterr()
    assert main(["trace", "summary", "--json", str(path)]) == 0
    _strict_json(capsys.readouterr().out)
    assert main(["trace", "plot", str(path), "-o", str(tmp_path / "p.html")]) == 0
    capsys.readouterr()
