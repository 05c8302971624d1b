"""ACL_MEM_TRACE is untrusted input: the recording never follows a symlink, never writes
or truncates a file the user did not ask for, never blocks on a FIFO, and says once when
the trace cannot be written."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acl_mem import raw
from acl_mem.trace import _lines, _open, _recorder, read_trace, record

pytestmark = pytest.mark.skipif(not hasattr(os, "O_NOFOLLOW"), reason="needs O_NOFOLLOW")


def _environment(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in (_recorder.ENV_PATH, _recorder.ENV_OWNER, _recorder.ENV_STACK)}
    env.update(ACL_MEM_BACKEND="fake", **variables)
    return env


def _import_acl_mem(**variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import acl_mem; print('ran')"],
                          capture_output=True, text=True, timeout=60,
                          env=_environment(**variables))


def test_the_environment_cannot_point_the_recording_at_other_files(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(victim)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)  # nobody reads it: today's open waits for ever
    for target in (link, fifo, tmp_path, Path("/dev/null")):
        done = _import_acl_mem(ACL_MEM_TRACE=str(target))
        assert done.returncode == 0 and done.stdout == "ran\n"
        said = done.stderr.splitlines()
        assert len(said) == 1 and "ACL_MEM_TRACE" in said[0] and "not recording" in said[0]
    assert victim.read_text() == "precious\n"


def test_a_childs_own_file_is_always_a_new_one(tmp_path, monkeypatch, capsys):
    """FILE.<pid> left by an earlier run (pids repeat) is not written, emptied or
    followed (a link there neither): the child records into the first free
    FILE.<pid>.<n>, with the run its owner handed down."""
    path = tmp_path / "run.jsonl"
    mine = Path(f"{path}.{os.getpid()}")
    mine.write_text("an older run's file\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    Path(f"{mine}.1").symlink_to(victim)
    monkeypatch.setenv(_recorder.ENV_PATH, str(path))
    monkeypatch.setenv(_recorder.ENV_OWNER, "1:0123456789abcdef")  # another process's
    monkeypatch.delenv(_recorder.ENV_STACK, raising=False)
    recorder = _recorder.start_from_environment()
    assert recorder is not None
    recorder.stop()
    assert recorder.path == f"{mine}.2"
    assert read_trace(recorder.path).header["run"] == "0123456789abcdef"
    assert mine.read_text() == "an older run's file\n" and not path.exists()
    assert victim.read_text() == "precious\n"
    assert capsys.readouterr().err == ""


def test_a_file_of_another_user_is_not_written(tmp_path, monkeypatch):
    path = tmp_path / "theirs.jsonl"
    path.write_text("theirs\n")
    monkeypatch.setattr(_open, "_user", lambda: os.geteuid() + 1)
    with pytest.raises(OSError) as refused:
        record(path)
    assert refused.value.errno == errno.EPERM
    assert path.read_text() == "theirs\n"


def test_the_users_own_file_is_started_afresh(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("x" * 10_000 + "\n")
    with record(path):
        pass
    assert read_trace(path).bad_lines == 0


@pytest.mark.parametrize("in_process", [True, False])
def test_a_full_disk_is_said_once_and_the_program_goes_on(tmp_path, monkeypatch, capfd,
                                                           in_process):
    if in_process:
        monkeypatch.setattr(_recorder, "use_writer_process", False)

        def full(fd: int, data: bytes) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(_lines, "write_all", full)
        path = tmp_path / "full.jsonl"
    else:
        path = Path("/dev/full")  # refused: not a regular file
    import acl_mem

    with acl_mem.Device(0):
        try:
            recorder = record(path)
        except OSError as exc:
            assert not in_process and exc.errno == errno.EINVAL
            return
        for _ in range(5):
            raw.aclrtFree(raw.aclrtMalloc(64))
            recorder.sync()
        recorder.stop()
        raw.aclrtFree(raw.aclrtMalloc(64))  # still running
    said = [line for line in capfd.readouterr().err.splitlines() if "cannot write" in line]
    assert len(said) == 1 and str(path) in said[0]


@pytest.mark.parametrize("value", ["abc", "-1", "+3", "٣", "1e3"])
def test_a_bad_stack_depth_is_one_line_naming_the_variable(tmp_path, value):
    path = tmp_path / "run.jsonl"
    done = _import_acl_mem(ACL_MEM_TRACE=str(path), ACL_MEM_TRACE_STACK=value)
    assert done.returncode == 0 and done.stdout == "ran\n"
    said = done.stderr.splitlines()
    assert len(said) == 1 and "ACL_MEM_TRACE_STACK" in said[0]
    assert not path.exists()


def test_a_blank_stack_depth_means_none(tmp_path, monkeypatch):
    monkeypatch.setenv(_recorder.ENV_PATH, str(tmp_path / "run.jsonl"))
    monkeypatch.setenv(_recorder.ENV_STACK, "  ")
    monkeypatch.delenv(_recorder.ENV_OWNER, raising=False)
    recorder = _recorder.start_from_environment()
    assert recorder is not None
    recorder.stop()
    assert recorder.stack_depth == 0
