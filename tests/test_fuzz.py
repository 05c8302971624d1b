"""Fuzz: every ``acl_mem.raw`` call with wild arguments, on the fake, in a child process.

The child (tests/fuzz_cases.py) draws arguments with a fixed seed: wrong types, negative,
zero and huge numbers, wild, freed and foreign pointers, read-only, unmapped and
truncated host memory. It must exit normally (no signal, no hang), and every exception
must be an acl_mem exception or a TypeError / ValueError / OverflowError raised by
acl_mem's argument checks. ``ACL_MEM_FUZZ_CALLS`` and ``ACL_MEM_FUZZ_SEED`` run it longer
or elsewhere (e.g. ``ACL_MEM_FUZZ_CALLS=50000 pytest tests/test_fuzz.py``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fuzz_cases
import pytest
from helpers import clean_env

from acl_mem import _env, raw

WORKER = Path(fuzz_cases.__file__)
CALLS = _env.whole_number("ACL_MEM_FUZZ_CALLS", 2000, minimum=1, maximum=10**9)
SEED = _env.raw("ACL_MEM_FUZZ_SEED")
#: A run takes well under a second; this only bounds a hang.
TIMEOUT = 60 + CALLS // 500


@dataclass
class Run:
    returncode: int
    summary: dict[str, Any]
    stderr: str
    last_call: str

    def explain(self) -> str:
        """What went wrong, naming the call it went wrong in."""
        lines = []
        if self.returncode < 0:
            lines.append(f"child killed by {signal.Signals(-self.returncode).name} during: "
                         f"{self.last_call}")
        elif self.returncode:
            lines.append(f"child exited with {self.returncode}; last call: {self.last_call}")
        for violation in self.summary.get("violations", []):
            lines.append(f"{violation['call']}\n  raised {violation['exception']}: "
                         f"{violation['message']}\n  " + "  ".join(violation["traceback"]))
        if self.stderr:
            lines.append("stderr:\n" + self.stderr[-3000:])
        return "\n".join(lines)


def run_worker(tmp_path: Path, *args: str, **env: str) -> Run:
    log = tmp_path / "calls.log"
    share = tmp_path / "share"  # the fake creates it, mode 0700
    environment = clean_env(**{"ACL_MEM_BACKEND": "fake", "ACL_MEM_HAZARDS": "count",
                               "ACL_MEM_FAKE_SHARE_DIR": str(share), **env})
    try:
        done = subprocess.run([sys.executable, str(WORKER), *args, "--log", str(log)],
                              env=environment, capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang: no exit within {TIMEOUT} s; last call: {_last_line(log)}")
    lines = done.stdout.strip().splitlines()
    summary = json.loads(lines[-1]) if done.returncode == 0 and lines else {}
    return Run(done.returncode, summary, done.stderr, _last_line(log))


def _last_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no call made)"
    return lines[-1] if lines else "(no call made)"


def assert_clean(run: Run) -> None:
    """No crash, no hang, only acl_mem's own exceptions."""
    assert run.returncode == 0 and run.summary.get("violation_count") == 0, run.explain()


# -- the fuzz, one child per API family ------------------------------------------------------------


def test_fuzz_covers_every_raw_callable() -> None:
    callables = {name for name in raw.__all__ if callable(getattr(raw, name))}
    fuzzed = {name for family in fuzz_cases.FAMILIES.values() for name in family}
    assert fuzzed == callables == set(fuzz_cases.SIGNATURES)


@pytest.mark.parametrize("desc_or_pid", [5, 1.5, object(), "ab", b"\x01"],
                         ids=["int", "float", "object", "str", "bytes"])
def test_array_arguments_that_are_no_sequence_are_argument_errors(desc_or_pid: object) -> None:
    """The fuzz found these raising TypeError from ``enumerate`` (or taking bytes as pids)."""
    wild: Any = desc_or_pid
    with pytest.raises(TypeError) as caught:
        raw.aclrtMemSetAccess(0, 0, wild, 0)
    assert fuzz_cases.classify(caught.value) == ("TypeError", True)
    with pytest.raises(TypeError) as caught:
        raw.aclrtMemSetPidToShareableHandle(0, wild, 0)
    assert fuzz_cases.classify(caught.value) == ("TypeError", True)


def test_the_fuzz_tells_argument_checks_from_accidents() -> None:
    with pytest.raises(TypeError) as caught:
        len(5)  # type: ignore[arg-type]
    assert fuzz_cases.classify(caught.value) == ("TypeError(not an acl_mem check)", False)
    with pytest.raises(TypeError) as caught:
        raw.aclrtFree(None)  # type: ignore[arg-type]
    assert fuzz_cases.classify(caught.value) == ("TypeError", True)
    assert fuzz_cases.classify(MemoryError()) == ("MemoryError", False)


@pytest.mark.parametrize("family", ["runtime", "alloc", "copy", "vmm", "copy-checked",
                                    "events"])
def test_fuzz_family(family: str, tmp_path: Path) -> None:
    args = [family, "--calls", str(CALLS)]
    if SEED is not None:
        args += ["--seed", SEED]
    env = {"ACL_MEM_CHECK": "1", "ACL_MEM_HAZARDS": "raise"} if family == "copy-checked" else {}
    run = run_worker(tmp_path, *args, **env)
    assert_clean(run)
    summary = run.summary
    calls = summary["calls"]
    assert isinstance(calls, int) and calls >= CALLS * 0.8
    by_function = summary["by_function"]
    assert isinstance(by_function, dict)
    assert set(fuzz_cases.FAMILIES[family]) <= set(by_function)
    # The fuzz reached the backend: calls succeeded and calls failed with aclError codes.
    outcomes = summary["outcomes"]
    assert isinstance(outcomes, dict)
    assert outcomes.get("ok", 0) > 0
    assert any(label.endswith(")") and label[:-1].rsplit("(", 1)[-1].isdigit()
               for label in outcomes), outcomes
    skipped = summary["skipped"]
    assert isinstance(skipped, dict)
    assert sum(skipped.values()) < CALLS * 0.1, skipped
    warned = summary["warnings"]
    assert isinstance(warned, dict)
    assert all(name.startswith("acl_mem.") for name in warned), warned
    invariants = summary["invariants"]
    assert isinstance(invariants, dict)
    assert all(invariants.values()), invariants


def test_host_memory_a_copy_must_refuse(tmp_path: Path) -> None:
    """Read-only, munmap'ed and PROT_NONE host memory, and a truncated file mapping up to
    1 MiB, on either side of a copy: 107000, at every size."""
    run = run_worker(tmp_path, "case", "host-edges")
    assert_clean(run)
    assert set(run.summary["outcomes"]) == {"RtParamInvalidError(107000)"}


# -- regressions: these died with SIGBUS / raised MemoryError before the kernel-checked
# copies of the fake's host-memory code.


def test_known_copy_over_1mib_into_truncated_file_mapping(tmp_path: Path) -> None:
    run = run_worker(tmp_path, "case", "truncated-d2h")
    assert_clean(run)
    assert set(run.summary["outcomes"]) == {"RtParamInvalidError(107000)"}


def test_known_copy_over_1mib_from_truncated_file_mapping(tmp_path: Path) -> None:
    run = run_worker(tmp_path, "case", "truncated-h2d")
    assert_clean(run)
    assert set(run.summary["outcomes"]) == {"RtParamInvalidError(107000)"}


def test_known_huge_count_from_pageable_pointer(tmp_path: Path) -> None:
    run = run_worker(tmp_path, "case", "huge-count-pageable")
    assert_clean(run)
    assert run.summary["outcomes"] == {"RtParamInvalidError(107000)": 5}
