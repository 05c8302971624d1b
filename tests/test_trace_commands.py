"""acl-mem trace plot from the command line: what it writes and how it refuses."""

from __future__ import annotations

import pytest

import acl_mem
from acl_mem import raw
from acl_mem.cli import main
from acl_mem.trace import record


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "run.jsonl"
    with acl_mem.Device(0), record(path, stack_depth=2):
        kept = [raw.aclrtMalloc(n) for n in (1000, 5 << 20, 300)]
        raw.aclrtFree(kept[1])
    return path


def test_plot_writes_a_self_contained_html_file(trace_file, tmp_path, capsys):
    out = tmp_path / "run.html"
    assert main(["trace", "plot", str(trace_file), "-o", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    page = out.read_text()
    assert page.lstrip().lower().startswith("<!doctype html")
    assert 'class="timeline"' in page and 'class="address-map"' in page
    assert "http://" not in page and "https://" not in page.replace("https://www.w3.org", "")


def test_plot_writes_a_png(trace_file, tmp_path):
    pytest.importorskip("matplotlib", reason="the PNG needs the plot extra (matplotlib)")
    out = tmp_path / "run.png"
    assert main(["trace", "plot", str(trace_file), "-o", str(out), "--sites", "1"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_refuses_what_it_cannot_do(trace_file, tmp_path, capsys):
    assert main(["trace", "plot", str(trace_file), "-o", str(tmp_path / "run.svg")]) == 2
    assert main(["trace", "plot", str(tmp_path / "missing.jsonl"), "-o",
                 str(tmp_path / "x.html")]) == 1
    assert main(["trace", "plot", str(trace_file), "-o",
                 str(tmp_path / "no" / "such" / "dir.html")]) == 1
    assert not (tmp_path / "run.svg").exists()
    with pytest.raises(SystemExit) as usage:
        main(["trace", "plot", str(trace_file)])
    assert usage.value.code == 2
