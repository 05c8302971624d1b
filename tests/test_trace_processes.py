"""acl_mem.trace across processes: ACL_MEM_TRACE, forked children and multiprocessing workers
each write their own file, never the parent's (docs/trace-format.md)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import acl_mem
from acl_mem import raw
from acl_mem.trace import _recorder, read_trace, record

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _sizes(path: Path) -> list[int]:
    return [e["size"] for e in read_trace(path).events if e.get("call") == "aclrtMalloc"]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _environment(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in (_recorder.ENV_PATH, _recorder.ENV_OWNER, _recorder.ENV_STACK)}
    env.update(ACL_MEM_BACKEND="fake", **variables)
    env.pop("ACL_MEM_FAKE_PROFILE", None)
    return env


def test_a_forked_child_records_into_its_own_file(tmp_path):
    path = tmp_path / "run.jsonl"
    with acl_mem.using_backend("fake"), record(path) as recorder:
        acl_mem.Device(0).use()
        raw.aclrtFree(raw.aclrtMalloc(64))
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                acl_mem.Device(0).use()  # a forked child starts with no device
                raw.aclrtFree(raw.aclrtMalloc(128))
                recorder.stop()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        raw.aclrtFree(raw.aclrtMalloc(256))
        quiet = os.fork()
        if quiet == 0:  # pragma: no cover - a child that records nothing
            recorder.stop()
            os._exit(0)
        os.waitpid(quiet, 0)
    assert _sizes(path) == [64, 256]
    child = tmp_path / f"run.jsonl.{pid}"
    lines = _lines(child)
    assert lines[0]["pid"] == pid and lines[0]["parent_pid"] == os.getpid()
    assert lines[0]["backend"] == "fake" and lines[0]["set_counts"] == {}
    assert _sizes(child) == [128] and lines[-1]["type"] == "end"
    assert not (tmp_path / f"run.jsonl.{quiet}").exists()


def _worker() -> None:  # pragma: no cover - runs in the worker
    acl_mem.Device(0).use()
    raw.aclrtMalloc(512)


def test_a_multiprocessing_worker_finishes_its_file(tmp_path):
    path = tmp_path / "run.jsonl"
    with acl_mem.using_backend("fake"), record(path):
        process = multiprocessing.get_context("fork").Process(target=_worker)
        process.start()
        process.join(timeout=30)
        assert process.exitcode == 0
    lines = _lines(tmp_path / f"run.jsonl.{process.pid}")
    assert lines[-1]["type"] == "end"  # the worker ended with os._exit: stopped before
    assert _sizes(tmp_path / f"run.jsonl.{process.pid}") == [512]
    assert _sizes(path) == []


def test_the_environment_variable_records_the_process_and_its_children(tmp_path):
    path = tmp_path / "run.jsonl"
    script = textwrap.dedent("""
        import subprocess, sys
        import acl_mem
        from acl_mem import raw
        acl_mem.Device(0).use()
        raw.aclrtFree(raw.aclrtMalloc(64))
        child = "import acl_mem; acl_mem.Device(0).use(); acl_mem.raw.aclrtMalloc(32)"
        subprocess.run([sys.executable, "-c", child], check=True)
        print(acl_mem.memory_summary(0))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=_environment(ACL_MEM_TRACE=str(path), ACL_MEM_TRACE_STACK="2"),
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "from the recording" in done.stdout
    trace = read_trace(path)
    assert trace.header["argv"] == ["-c"] and trace.end is not None
    calls = [e for e in trace.events if "call" in e]
    assert [c["call"] for c in calls[:3]] == ["aclrtSetDevice", "aclrtMalloc", "aclrtFree"]
    assert trace.stacks[calls[1]["stack"]][0][:2] == ("<string>", 6)
    children = list(tmp_path.glob("run.jsonl.*"))
    assert len(children) == 1 and _sizes(children[0]) == [32]
    summary = acl_mem.trace.summarize(children[0])
    assert [a.size for a in summary.never_freed] == [32]


def test_a_path_that_cannot_be_written_leaves_the_program_running(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", "import acl_mem; acl_mem.raw.aclrtSetDevice(0); print('ran')"],
        capture_output=True, text=True, timeout=60,
        env=_environment(ACL_MEM_TRACE=str(tmp_path / "missing" / "run.jsonl")))
    assert done.returncode == 0 and done.stdout == "ran\n"
    assert "ACL_MEM_TRACE" in done.stderr and "not recording" in done.stderr


def test_a_child_whose_pid_names_a_file_left_by_an_earlier_run_records_beside_it(tmp_path):
    """pids repeat (in a container, from one run to the next): FILE.<pid> left by an
    earlier run is neither written nor emptied; the child records into FILE.<pid>.1, and
    its header's run is the parent's, which the stale file's is not."""
    path = tmp_path / "run.jsonl"
    with acl_mem.using_backend("fake"), record(path) as recorder:
        acl_mem.Device(0).use()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                Path(f"{path}.{os.getpid()}").write_text("stale\n")  # as if left before
                acl_mem.Device(0).use()
                raw.aclrtMalloc(128)
                recorder.stop()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert Path(f"{path}.{pid}").read_text() == "stale\n"
    child = read_trace(f"{path}.{pid}.1")
    parent = read_trace(path)
    assert _sizes(Path(f"{path}.{pid}.1")) == [128]
    assert child.header["parent_pid"] == parent.header["pid"] == os.getpid()
    assert child.header["run"] == parent.header["run"] == recorder.run
    assert len(recorder.run or "") == 16


def test_children_started_with_the_environment_variable_share_the_run(tmp_path):
    path = tmp_path / "run.jsonl"
    script = textwrap.dedent("""
        import os, subprocess, sys
        import acl_mem
        acl_mem.Device(0).use()
        child = "import acl_mem; acl_mem.Device(0).use(); acl_mem.raw.aclrtMalloc(32)"
        for _ in range(2):
            subprocess.run([sys.executable, "-c", child], check=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=_environment(ACL_MEM_TRACE=str(path)), timeout=60)
    assert done.returncode == 0, done.stderr
    runs = {read_trace(p).header["run"] for p in [path, *tmp_path.glob("run.jsonl.*")]}
    assert len(list(tmp_path.glob("run.jsonl.*"))) == 2
    assert len(runs) == 1 and None not in runs


def test_a_program_reaping_every_child_does_not_wait_for_the_writer(tmp_path):
    """The writer process is no child of the recorded program: a program that waits for
    any child until none is left ends, and its trace is complete."""
    path = tmp_path / "reap.jsonl"
    script = textwrap.dedent("""
        import os
        import acl_mem.raw as raw
        raw.aclrtSetDevice(0)
        raw.aclrtFree(raw.aclrtMalloc(64))
        for _ in range(2):
            if os.fork() == 0:
                os._exit(0)
        reaped = 0
        while True:
            try:
                os.wait()
            except ChildProcessError:
                break
            reaped += 1
        print(reaped)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=_environment(ACL_MEM_TRACE=str(path)), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2"]
    assert read_trace(path).end is not None


def test_a_program_exec_ing_another_keeps_its_trace(tmp_path):
    """The recording process execs another program (same pid, the variables inherited):
    the new image records into FILE.<pid> of the same run, and FILE keeps what the first
    image recorded."""
    path = tmp_path / "exec.jsonl"
    second = "import acl_mem.raw as raw; raw.aclrtSetDevice(0); raw.aclrtFree(raw.aclrtMalloc(7))"
    script = textwrap.dedent(f"""
        import os, sys
        import acl_mem.raw as raw
        from acl_mem.trace import _recorder
        raw.aclrtSetDevice(0)
        for _ in range(50):
            raw.aclrtFree(raw.aclrtMalloc(64))
        for recorder in list(_recorder._recorders):
            recorder.sync()
        os.execv(sys.executable, [sys.executable, "-c", {second!r}])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=_environment(ACL_MEM_TRACE=str(path)), timeout=60)
    assert done.returncode == 0, done.stderr
    first = read_trace(path)
    assert first.calls >= 101
    images = list(tmp_path.glob("exec.jsonl.*"))
    assert len(images) == 1
    exec_d = read_trace(images[0])
    assert _sizes(images[0]) == [7]
    assert exec_d.header["run"] == first.header["run"] is not None


def test_a_relative_trace_path_is_one_place_for_children_elsewhere(tmp_path):
    """ACL_MEM_TRACE=run.jsonl, and a child started in another directory: its file is
    beside the parent's, not beside a relative name in its own directory."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = textwrap.dedent(f"""
        import subprocess, sys
        import acl_mem.raw as raw
        raw.aclrtSetDevice(0)
        child = ("import acl_mem.raw as raw; raw.aclrtSetDevice(0); "
                 "raw.aclrtFree(raw.aclrtMalloc(5))")
        subprocess.run([sys.executable, "-c", child], cwd={str(elsewhere)!r}, check=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, env=_environment(ACL_MEM_TRACE="run.jsonl"),
                          timeout=60)
    assert done.returncode == 0, done.stderr
    children = list(tmp_path.glob("run.jsonl.*"))
    assert len(children) == 1 and _sizes(children[0]) == [5]
    assert list(elsewhere.iterdir()) == []
