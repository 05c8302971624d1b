"""acl-mem conformance's report: progress, the summary per runtime-model section, every
failure, -v rows, --json rows, and nothing written to the current directory.

The shipped checks run in a child process (a handful of them, selected with -k); the
report's handling of failures is shown on synthetic checks run through the same runner.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers import ROOT, clean_env

from acl_mem.conformance import runner
from acl_mem.conformance.providers import native_provider
from acl_mem.conformance.runner import cache_dir, run_checks, usable_cache_dir

#: Two shipped checks: a Hypothesis state machine (it writes to Hypothesis's storage) and
#: a fake-only check (skipped on native); with --backend all, four rows.
_SELECTION = "test_pool_state_machine or test_inject_fault_rejects_unknown_calls"
_HEADER = ["section", "checks", "passed", "failed", "skipped"]

_SYNTHETIC = '''
import pytest


@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("the teardown broke")


def test_holds(backend):
    """docs/runtime-model.md §3.5: a rule that holds."""


def test_breaks(backend):
    """docs/runtime-model.md §3.10: a rule that does not hold; ``markup`` is dropped."""
    assert 1 + 1 == 3, "one and one made three"


@pytest.mark.fake_only("only the fake can show this")
def test_fake_only(backend):
    """docs/runtime-model.md §4.2: a rule only the fake can show."""


def test_without_section():
    """This check cites no section."""


def test_spec_3_4_named_after_its_section():
    pass


def test_teardown_breaks(broken_teardown):
    """docs/runtime-model.md §3.6: passes, then its teardown fails."""
'''


def _summary_table(out: str) -> dict[str, tuple[int, int, int, int]]:
    """The summary's rows: section -> (checks, passed, failed, skipped), "total" included."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() == _HEADER)
    table: dict[str, tuple[int, int, int, int]] = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        *name, checks, passed, failed, skipped = line.split()
        table[" ".join(name)] = (int(checks), int(passed), int(failed), int(skipped))
    return table


def _counts(rows: list[dict[str, str]]) -> tuple[int, int, int, int]:
    found = Counter(row["outcome"] for row in rows)
    return len(rows), found["passed"], found["failed"], found["skipped"]


def _assert_summary_adds_up(out: str, rows: list[dict[str, str]]) -> None:
    table = _summary_table(out)
    total = table.pop("total")
    assert total == _counts(rows)
    assert tuple(map(sum, zip(*table.values(), strict=True))) == total
    by_rule: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_rule.setdefault(row["rule"] if row["rule"] != "-" else "no section", []).append(row)
    assert table == {rule: _counts(found) for rule, found in by_rule.items()}
    for checks, passed, failed, skipped in table.values():
        assert checks == passed + failed + skipped


def _pytest_counts(out: str) -> Counter[str]:
    last = out.strip().splitlines()[-1]
    return Counter({word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped)",
                                                           last)})


def test_shipped_checks_leave_the_current_directory_empty(tmp_path):
    """A run in an empty directory leaves it empty: Hypothesis's storage goes to
    $XDG_CACHE_HOME/acl_mem/hypothesis, pytest's cache is off. The summary's counts
    add up and agree with the --json rows and with pytest's own count."""
    work, cache, home = tmp_path / "work", tmp_path / "cache", tmp_path / "home"
    for folder in (work, cache, home):
        folder.mkdir()
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "acl_mem", "conformance", "-v", "-k", _SELECTION,
         "--json", str(report)],
        env=clean_env(XDG_CACHE_HOME=str(cache), HOME=str(home)), cwd=str(work),
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.listdir(work) == []
    assert os.listdir(home) == []
    storage = cache / "acl_mem" / "hypothesis"
    assert any(path.is_file() for path in storage.rglob("*")), "nothing in the cache"

    rows = json.loads(report.read_text())
    assert len(rows) == 4
    for row in rows:
        assert set(row) == {"check", "backend", "rule", "spec", "expected", "observed",
                            "outcome"}
        assert row["rule"] == row["spec"]
    _assert_summary_adds_up(proc.stdout, rows)
    _, passed, failed, skipped = _counts(rows)
    assert _pytest_counts(proc.stdout) == Counter(
        {k: v for k, v in (("passed", passed), ("failed", failed), ("skipped", skipped)) if v})
    # -v: one row per check.
    table = proc.stdout[proc.stdout.index("per behaviour"):
                        proc.stdout.index("acl_mem conformance summary")]
    marks = [line for line in table.splitlines() if re.match(r"(PASS|FAIL|SKIP) ", line)]
    assert sorted(line.split()[3] for line in marks) == sorted(row["check"] for row in rows)
    # Progress: one line per check file, not one character per check.
    files = {row["check"].split("::")[0] for row in rows}
    progress = re.findall(r"^\[\s*\d+%\] (\S+) ", proc.stdout, re.MULTILINE)
    assert sorted(progress) == sorted(files)
    assert "....." not in proc.stdout


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    """A folder with one check file, named after the test: pytest imports it in this
    process, where a second test_synthetic.py from another folder would clash."""
    folder = tmp_path / "checks"
    folder.mkdir()
    name = re.sub(r"\W", "_", tmp_path.name)
    (folder / f"test_synthetic_{name}.py").write_text(_SYNTHETIC)
    return folder


def _native_loads() -> bool:
    return native_provider().load()[0] is not None


def test_failures_are_reported_in_full_and_counted(synthetic, tmp_path, capsys, monkeypatch):
    """A failing check: a FAILED line as it happens, its traceback (pytest's FAILURES), and
    its rule, expected and observed outcome at the end; a broken teardown fails the check."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    report = tmp_path / "report.json"
    assert run_checks("all", str(report), checks=synthetic) == 1
    out = capsys.readouterr().out
    rows = {row["check"]: row for row in json.loads(report.read_text())}
    native = _native_loads()
    file = next(synthetic.glob("test_*.py")).name
    expected = {
        f"{file}::test_holds[fake]": ("§3.5", "passed"),
        f"{file}::test_holds[native]": ("§3.5", "passed" if native else "skipped"),
        f"{file}::test_breaks[fake]": ("§3.10", "failed"),
        f"{file}::test_breaks[native]": ("§3.10", "failed" if native else "skipped"),
        f"{file}::test_fake_only[fake]": ("§4.2", "passed"),
        f"{file}::test_fake_only[native]": ("§4.2", "skipped"),
        f"{file}::test_without_section": ("-", "passed"),
        f"{file}::test_spec_3_4_named_after_its_section": ("§3.4", "passed"),
        f"{file}::test_teardown_breaks": ("§3.6", "failed"),
    }
    assert {check: (row["rule"], row["outcome"]) for check, row in rows.items()} == expected
    assert "one and one made three" in rows[f"{file}::test_breaks[fake]"]["observed"]
    assert "``" not in rows[f"{file}::test_breaks[fake]"]["expected"]
    _assert_summary_adds_up(out, list(rows.values()))

    failed = [check for check, (_, outcome) in expected.items() if outcome == "failed"]
    summary_at = out.index("acl_mem conformance summary")
    # As it happens, before the summary ...
    for check in failed:
        assert re.search(rf"^FAILED \S+ §[\d.]+ {re.escape(check)}: ", out[:summary_at],
                         re.MULTILINE), check
    # ... in full (pytest's traceback, the failing line included) ...
    assert "assert 1 + 1 == 3" in out[:summary_at]
    assert "RuntimeError: the teardown broke" in out[:summary_at]
    # ... and listed with rule, expected and observed at the end.
    tail = out[summary_at:]
    for check in failed:
        assert re.search(rf"^FAIL +\S+ +§[\d.]+ +{re.escape(check)}$", tail, re.MULTILINE)
    assert tail.count("expected: ") == tail.count("observed: ") == len(failed)


def test_verbose_lists_every_row(synthetic, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    report = tmp_path / "report.json"
    run_checks("fake", str(report), checks=synthetic, verbose=True)
    out = capsys.readouterr().out
    rows = json.loads(report.read_text())
    table = out[out.index("per behaviour"):out.index("acl_mem conformance summary")]
    marks = [line for line in table.splitlines() if re.match(r"(PASS|FAIL|SKIP) ", line)]
    assert [line.split()[3] for line in marks] == [row["check"] for row in rows]
    _assert_summary_adds_up(out, rows)


def test_no_check_selected_exits_two(synthetic, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert run_checks("fake", checks=synthetic, keyword="nothing_is_called_this") == 2
    out = capsys.readouterr()
    assert out.err.startswith("acl-mem conformance: ")
    assert "acl_mem conformance summary" not in out.out


def test_hypothesis_storage_is_restored_after_a_run(synthetic, tmp_path, capsys, monkeypatch):
    """The checks' storage directory does not outlive the run (in-process callers)."""
    from hypothesis import configuration

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    before = getattr(configuration, "__hypothesis_home_directory", None)
    run_checks("fake", checks=synthetic, keyword="holds")
    capsys.readouterr()
    assert getattr(configuration, "__hypothesis_home_directory", None) == before


# -- the cache directory ---------------------------------------------------------------------------


def test_cache_dir_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "acl_mem" / "hypothesis"
    # The XDG specification: a relative path is ignored.
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    assert cache_dir() == tmp_path / "home" / ".cache" / "acl_mem" / "hypothesis"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == tmp_path / "home" / ".cache" / "acl_mem" / "hypothesis"


def test_unusable_cache_dir_falls_back_to_a_temporary_one(tmp_path, monkeypatch, capsys):
    """A cache path that cannot be a directory: this run uses a temporary directory,
    removed afterwards, and says so on stderr."""
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with usable_cache_dir() as directory:
        assert directory.is_dir()
        assert blocker not in directory.parents
    assert not directory.exists()
    assert capsys.readouterr().err.startswith("acl-mem conformance: ")
    assert os.listdir(tmp_path) == ["not_a_directory"]


def test_runner_needs_pytest_and_hypothesis(monkeypatch, capsys):
    """Without them: exit status 2 and how to install them, nothing run."""
    monkeypatch.setattr(runner.importlib.util, "find_spec",
                        lambda name, *a: None if name == "hypothesis" else object())
    assert run_checks("fake") == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith("acl-mem conformance: ")


def test_checks_are_shipped_in_the_package():
    """The runner's default checks are the package's own, with the ini beside them."""
    assert (runner.HERE / "checks" / "test_malloc.py").is_file()
    assert (runner.HERE / "conformance.ini").is_file()
    assert runner.HERE.is_relative_to(ROOT)
