"""acl-mem trace plot -o OUT never hangs on OUT and never follows a symbolic link there:
a FIFO nobody reads, a link, a device are refused at once; a FIFO with a reader is
written."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from helpers import ROOT, clean_env

CALLS = [{"t": 1, "th": 1, "call": "aclrtSetDevice", "device": 0, "rc": 0},
         {"t": 2, "th": 1, "dev": 0, "call": "aclrtMalloc", "size": 4096, "policy": 0,
          "rc": 0, "ptr": 0x1000}]
HEADER = {"type": "header", "format": "acl_mem.trace", "version": 1, "backend": "fake"}


def _trace(tmp_path: Path) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in [HEADER, *CALLS]))
    return str(path)


def _plot(trace: str, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "acl_mem", "trace", "plot", trace, "-o",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=clean_env(), cwd=str(ROOT))


def test_a_fifo_nobody_reads_is_refused_at_once(tmp_path):
    fifo = tmp_path / "out.html"
    os.mkfifo(fifo)
    proc = _plot(_trace(tmp_path), fifo)
    try:
        _, err = proc.communicate(timeout=60)  # before: open() waited for a reader
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert err.strip() == f"acl-mem trace plot: cannot write {fifo}: a FIFO nobody reads"


def test_a_symbolic_link_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    link = tmp_path / "plot.html"
    link.symlink_to(victim)
    proc = _plot(_trace(tmp_path), link)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "a symbolic link: not followed" in err
    assert victim.read_text() == "keep me\n"


def test_a_regular_file_is_written_afresh_and_a_fifo_with_a_reader_too(tmp_path):
    trace = _trace(tmp_path)
    out = tmp_path / "plot.html"
    out.write_text("x" * 10_000_000)  # longer than the plot: must not leave a tail
    proc = _plot(trace, out)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.read_text().rstrip().endswith("</html>")

    fifo = tmp_path / "fifo.html"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        proc = _plot(trace, fifo)
        data = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            select.select([reader], [], [], 1)
            try:
                chunk = os.read(reader, 1 << 16)
            except BlockingIOError:
                continue
            data += chunk
            if not chunk:
                if proc.poll() is not None:
                    break
                time.sleep(0.01)  # no writer yet, or it has not exited
        proc.communicate(timeout=60)
    finally:
        os.close(reader)
    assert proc.returncode == 0
    assert data.decode().rstrip().endswith("</html>")
