"""Standard output that takes nothing more (a full disk, a pipe whose reader left): every
acl-mem command ends with one line on standard error, or none for a closed pipe, and
status 1, never a traceback (acl_mem/cli.py main)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, clean_env

TRACE = {"type": "header", "format": "acl_mem.trace", "version": 1, "backend": "fake"}
CALL = {"t": 1, "th": 1, "dev": 0, "call": "aclrtMalloc", "size": 512, "policy": 0, "rc": 0}


def _trace(path: Path) -> str:
    """A trace whose summary fills more than one buffer of output (8 KiB)."""
    lines = [TRACE] + [{**CALL, "t": i, "ptr": 4096 * (i + 1)} for i in range(300)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def _commands(tmp_path: Path) -> list[list[str]]:
    trace = _trace(tmp_path / "t.jsonl")
    return [["info", "--backend", "fake"], ["info", "--backend", "fake", "--json"],
            ["trace", "summary", trace], ["trace", "summary", "--json", trace]]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_full_standard_output_is_one_line_and_status_one(tmp_path):
    for command in _commands(tmp_path):
        with open("/dev/full", "w") as full:
            done = subprocess.run([sys.executable, "-m", "acl_mem", *command], stdout=full,
                                  stderr=subprocess.PIPE, text=True, env=clean_env(),
                                  cwd=str(ROOT), timeout=60)
        assert done.returncode == 1, command
        assert done.stderr.splitlines() == [
            "acl-mem: cannot write the output: No space left on device"], command


def test_a_closed_pipe_ends_quietly(tmp_path):
    for command in _commands(tmp_path):
        reader, writer = os.pipe()
        os.close(reader)  # nobody reads: the first write fails with EPIPE
        try:
            done = subprocess.run([sys.executable, "-m", "acl_mem", *command],
                                  stdout=writer, stderr=subprocess.PIPE, text=True,
                                  env=clean_env(), cwd=str(ROOT), timeout=60)
        finally:
            os.close(writer)
        assert (done.returncode, done.stderr) == (1, ""), command


def test_a_closed_standard_output_is_one_line_and_status_one(tmp_path):
    """`acl-mem info >&-`: no traceback (Python gives the program no sys.stdout at all)."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash to start a program with its output closed")
    env = {**os.environ, "ACL_MEM_BACKEND": "fake"}
    done = subprocess.run([bash, "-c", f'"{sys.executable}" -m acl_mem info >&-'], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
