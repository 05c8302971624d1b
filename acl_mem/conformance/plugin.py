"""pytest plugin behind the conformance checks: one check, every backend.

The ``backend`` fixture runs each check once per backend: ``fake`` always, ``native``
when the native provider loads one (``ACL_MEM_REQUIRE_NATIVE=1`` turns its absence
into a failure). ``@pytest.mark.fake_only("reason")`` limits a check to the fake and
says why; ``@pytest.mark.open_question(n)`` marks the fake's answer to docs/runtime-model.md §8
question *n*.

Reporting (each check is one row: check, backend, rule, expected, observed, outcome;
the rule is the first docs/runtime-model.md section its docstring cites):

* ``--acl-summary``: one progress line per check file instead of pytest's dots, then
  pass/fail/skip counts per runtime-model section and every failure (acl-mem conformance);
* ``--acl-report``: every row;
* ``--acl-json FILE``: the rows as JSON;
* ``--acl-cache-dir DIR``: Hypothesis's storage in DIR instead of ./.hypothesis.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import acl_mem

from .. import _backend, _env
from .._lifecycle import state
from .providers import brief, native_provider
from .runner import hypothesis_storage

_SECTION = re.compile(r"§\s*(\d+(?:\.\d+)*)")
#: Check names that carry their section: test_spec_3_4_... is §3.4.
_NAMED_SECTION = re.compile(r"(?:^|_)spec_(\d+(?:_\d+)*)")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acl_mem")
    group.addoption("--acl-backend", choices=("fake", "native", "all"), default="all",
                    help="run the conformance checks on this backend only")
    group.addoption("--acl-report", action="store_true",
                    help="print runtime-model section, expected and observed outcome per check")
    group.addoption("--acl-json", metavar="FILE", help="write the per-check outcomes as JSON")
    group.addoption("--acl-summary", action="store_true",
                    help="one progress line per check file, then pass/fail/skip counts per "
                    "runtime-model section and every failure")
    group.addoption("--acl-cache-dir", metavar="DIR",
                    help="keep Hypothesis's example database in DIR instead of ./.hypothesis")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fake_only(reason): only the fake can show this; "
                            "the reason is required")
    config.addinivalue_line("markers", "fake_library(reason): only acl_mem's fakes can show "
                            "this: the fake, and the native backend when its library is "
                            "acl_mem's own (not Huawei's); the reason is required")
    config.addinivalue_line("markers", "cann(*releases): the check's expectation holds on these "
                            "CANN releases only; elsewhere it is skipped (docs/runtime-model.md "
                            "§0.1)")
    config.addinivalue_line("markers", "open_question(number): the fake's choice for "
                            "docs/runtime-model.md §8 question <number>; unconfirmed on hardware")
    config.stash[_REPORT] = _Report()
    cache = config.getoption("--acl-cache-dir", None)
    if cache:
        stack = ExitStack()
        stack.enter_context(hypothesis_storage(Path(cache)))
        config.stash[_STORAGE] = stack


def pytest_unconfigure(config: pytest.Config) -> None:
    stack = config.stash.get(_STORAGE, None)
    if stack is not None:
        stack.close()
        del config.stash[_STORAGE]


def pytest_report_header(config: pytest.Config) -> list[str]:
    backend, source = native_provider().load()
    native = (f"native (CANN {_release_of(backend) or 'unknown'}): {source}"
              if backend is not None else f"native: unavailable ({brief(source)})")
    return [f"acl_mem backends: fake (CANN {acl_mem.fake.cann()}), {native}"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--acl-backend")
        names = ["fake", "native"] if chosen == "all" else [chosen]
        metafunc.parametrize("backend", names, indirect=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for name in ("fake_only", "fake_library"):
            marker = item.get_closest_marker(name)
            if marker is not None and not (marker.args and isinstance(marker.args[0], str)):
                raise pytest.UsageError(f"{item.nodeid}: {name} needs a reason string")


def _release_everything() -> None:
    if _backend._active is None:
        return
    for device_id in range(32):
        while state.set_count(device_id) > 0:
            try:
                acl_mem.raw.aclrtResetDevice(device_id)
            except acl_mem.AclError:
                break
    state.teardown()


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Iterator[_backend.Backend]:
    """The backend under test, installed as the active one for this check."""
    provider = native_provider()
    if request.param == "native":
        marker = request.node.get_closest_marker("fake_only")
        if marker is not None:
            pytest.skip(f"fake only: {marker.args[0]}")
        native, source = provider.load()
        if native is None:
            if _env.flag("ACL_MEM_REQUIRE_NATIVE"):
                pytest.fail(f"ACL_MEM_REQUIRE_NATIVE=1 but native is unavailable: {source}")
            pytest.skip(f"native backend unavailable: {brief(source)}")
        # Asked after loading: a provider knows only then which library it has.
        marker = request.node.get_closest_marker("fake_library")
        if marker is not None and not getattr(provider, "is_fake_library", False):
            pytest.skip(f"fake only: {marker.args[0]}")
        provider.before_test()
        chosen: _backend.Backend = native
    else:
        acl_mem.fake.forget_settings()
        chosen = acl_mem.fake.make_backend(hazards="warn", check=False)
    releases = request.node.get_closest_marker("cann")
    if releases is not None and _release_of(chosen) not in releases.args:
        if request.param == "native":
            provider.after_test()
        pytest.skip(f"expectation for CANN {', '.join(releases.args)}; this backend runs "
                    f"{_release_of(chosen) or 'an unknown release'}")
    try:
        with _backend.using_backend(chosen,
                                    f"{request.param}: installed by the conformance checks"):
            try:
                yield chosen
            finally:
                _release_everything()
    finally:
        if request.param == "native":
            provider.after_test()


def _release_of(backend: _backend.Backend) -> str:
    rc, release = backend.aclsysGetVersionStr("runtime")
    return release if rc == 0 else ""


@pytest.fixture
def cann(backend: _backend.Backend) -> str:
    """The CANN release of the backend under test (``"9.1.0"``), for checks whose
    expectation depends on it (docs/runtime-model.md §0.1)."""
    return _release_of(backend)


@pytest.fixture
def fake(backend: _backend.Backend) -> Any:
    """The fake backend (only in checks marked ``fake_only``)."""
    assert acl_mem.fake.is_fake(backend), "the fake fixture needs the fake_only marker"
    return backend


@pytest.fixture
def checking(fake: Any) -> Iterator[None]:
    """The fake with its memory checker on and hazards counted (checks marked
    ``fake_only``), back to its settings afterwards."""
    acl_mem.fake.configure(check=True, hazards="count")
    try:
        yield
    finally:
        acl_mem.fake.reset()


@pytest.fixture
def dev(backend: _backend.Backend) -> Iterator[acl_mem.Device]:
    """Device 0, current in this thread for the check."""
    with acl_mem.Device(0) as device:
        yield device


# -- per-behaviour report --------------------------------------------------------------------------
NO_SECTION = "no section"
_MARKS = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}
_ROLE = re.compile(r":[\w:]+:`~?([^`]+)`")
_LITERAL = re.compile(r"``(.+?)``")


@dataclass
class _Report:
    """The rows, and the progress of the run in summary mode."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    by_check: dict[str, dict[str, Any]] = field(default_factory=dict)
    total: int = 0
    done: int = 0
    file: str | None = None
    file_counts: Counter[str] = field(default_factory=Counter)
    live: bool = False
    drawn_at: float = 0.0


_REPORT = pytest.StashKey[_Report]()
_STORAGE = pytest.StashKey[ExitStack]()


def _plain(text: str) -> str:
    """Docstring text without reStructuredText markup (``code``, :func:`name`)."""
    return _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))


def _rule_of(item: pytest.Item) -> str:
    function = getattr(item, "function", None)
    doc = (getattr(function, "__doc__", None) or "").strip()
    return _plain(" ".join(doc.split("\n\n")[0].split())) if doc else item.name


def _section_of(rule: str, name: str) -> str:
    found = _SECTION.search(rule)
    if found:
        return f"§{found.group(1)}"
    named = _NAMED_SECTION.search(name)
    return f"§{named.group(1).replace('_', '.')}" if named else "-"


def _observed(report: pytest.TestReport) -> str:
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(report.longrepr)
        lines = text.strip().splitlines()
        observed = lines[0] if lines else "failed"
        return observed if report.when == "call" else f"{report.when}: {observed}"
    if report.skipped:
        return str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else "skipped"
    return "as expected"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    state_ = item.config.stash[_REPORT]
    row = state_.by_check.get(item.nodeid)
    if row is None and (report.when == "call" or report.outcome != "passed"):
        rule = _rule_of(item)
        section = _section_of(rule, item.name)
        callspec = getattr(item, "callspec", None)
        row = {
            "check": item.nodeid,
            "backend": callspec.params.get("backend", "-") if callspec is not None else "-",
            "rule": section,
            # The former name of "rule", kept for one release.
            "spec": section,
            "expected": rule,
            "observed": _observed(report),
            "outcome": report.outcome,
        }
        state_.rows.append(row)
        state_.by_check[item.nodeid] = row
    elif row is not None and report.when == "teardown" and report.failed \
            and row["outcome"] != "failed":
        # A check that passed (or skipped) but broke its teardown failed.
        row["observed"] = _observed(report)
        row["outcome"] = "failed"


def _summary_mode(config: pytest.Config) -> bool:
    return bool(config.getoption("--acl-summary"))


@pytest.hookimpl(hookwrapper=True)
def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Any:
    outcome = yield
    if _summary_mode(config):
        # Keep the category (pytest's counts) and the word (its short summary); drop the
        # letter: the progress lines are ours.
        category, _, word = outcome.get_result()
        outcome.force_result((category, "", word))


def _terminal(config: pytest.Config) -> Any:
    return config.pluginmanager.get_plugin("terminalreporter")


def _native_label() -> str:
    native, _ = native_provider().load()
    if native is None:
        return "native (unavailable)"
    return f"native (CANN {_release_of(native) or 'unknown'})"


def _backends_checked(config: pytest.Config) -> list[str]:
    chosen = config.getoption("--acl-backend")
    return ["fake", "native"] if chosen == "all" else [chosen]


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    terminal = _terminal(config)
    if not _summary_mode(config) or terminal is None:
        return
    report = config.stash[_REPORT]
    report.total = len(session.items)
    backends = _backends_checked(config)
    described = [f"fake (CANN {acl_mem.fake.cann()})" if name == "fake" else _native_label()
                 for name in backends]
    terminal.write_line(f"acl_mem conformance: {report.total} checks on "
                        f"{' and '.join(described)}, one line per check file")
    if "native" in backends:
        native, source = native_provider().load()
        if native is None:
            _write_wrapped(terminal, f"native backend unavailable, its checks are skipped: "
                           f"{brief(source)}")
        else:
            _write_wrapped(terminal, f"native backend: {source}")


def _write_wrapped(terminal: Any, text: str, indent: int = 2, **markup: bool) -> None:
    width = max(60, min(shutil.get_terminal_size().columns, 100)) - 1
    for line in textwrap.wrap(text, width=width, subsequent_indent=" " * indent,
                              break_on_hyphens=False, break_long_words=False):
        terminal.write_line(line, **markup)


def _progress_text(report: _Report) -> str:
    counts = report.file_counts
    done = 100 * report.done // report.total if report.total else 100
    parts = [f"{counts['passed']} passed"]
    if counts["failed"]:
        parts.append(f"{counts['failed']} FAILED")
    if counts["skipped"]:
        parts.append(f"{counts['skipped']} skipped")
    checks = sum(counts.values())
    return f"[{done:3d}%] {report.file:<24} {checks:>5} checks: {', '.join(parts)}"


def _write_progress(terminal: Any, report: _Report, final: bool) -> None:
    """On a terminal the current file's line is redrawn in place; elsewhere it is
    written once, when the file is done."""
    if bool(terminal.isatty):
        now = time.monotonic()
        if not final and now - report.drawn_at < 0.1:
            return
        report.drawn_at = now
        terminal.rewrite(_progress_text(report), erase=True)
        report.live = not final
        if final:
            terminal.write("\n", flush=True)
        else:
            terminal.flush()
    elif final:
        terminal.write_line(_progress_text(report))


def _end_live_line(terminal: Any, report: _Report) -> None:
    if report.live:
        terminal.rewrite("", erase=True)
        terminal.write("\r")
        report.live = False


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _write_failure(terminal: Any, report: _Report, row: dict[str, Any]) -> None:
    _end_live_line(terminal, report)
    terminal.write_line(f"FAILED {row['backend']} {row['rule']} {row['check']}: "
                        f"{row['observed']}", red=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    yield
    config = item.config
    terminal = _terminal(config)
    if not _summary_mode(config) or terminal is None:
        return
    report = config.stash[_REPORT]
    row = report.by_check.get(item.nodeid)
    if report.file != _file_of(item.nodeid):
        report.file = _file_of(item.nodeid)
        report.file_counts = Counter()
    report.done += 1
    if row is not None:
        report.file_counts[row["outcome"]] += 1
        if row["outcome"] == "failed":
            _write_failure(terminal, report, row)
    last_of_file = nextitem is None or _file_of(nextitem.nodeid) != report.file
    _write_progress(terminal, report, final=last_of_file)


def _section_key(section: str) -> tuple[int, tuple[int, ...]]:
    if section.startswith("§"):
        return 0, tuple(int(part) for part in section[1:].split("."))
    return 1, ()


def _skip_reason(row: dict[str, Any]) -> str:
    text = str(row["observed"])
    return text[len("Skipped: "):] if text.startswith("Skipped: ") else text


def _write_rows(terminal: Any, rows: list[dict[str, Any]]) -> None:
    write = terminal.write_line
    terminal.section("acl_mem conformance, per behaviour")
    for row in rows:
        write(f"{_MARKS[row['outcome']]} {row['backend']:<6} {row['rule']:<8} {row['check']}")
        write(f"       expected: {row['expected']}")
        if row["outcome"] != "passed":
            write(f"       observed: {row['observed']}")


def _counts(rows: list[dict[str, Any]]) -> Counter[str]:
    return Counter(str(row["outcome"]) for row in rows)


def _write_summary(terminal: Any, config: pytest.Config, rows: list[dict[str, Any]]) -> None:
    write = terminal.write_line
    terminal.section("acl_mem conformance summary")
    sections: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        name = row["rule"] if row["rule"] != "-" else NO_SECTION
        sections.setdefault(name, []).append(row)
    width = max([len(NO_SECTION), *(len(name) for name in sections)])
    write(f"{'section':<{width}}  {'checks':>6}  {'passed':>6}  {'failed':>6}  {'skipped':>7}")
    for name in sorted(sections, key=_section_key):
        counts = _counts(sections[name])
        write(f"{name:<{width}}  {len(sections[name]):>6}  {counts['passed']:>6}  "
              f"{counts['failed']:>6}  {counts['skipped']:>7}", red=bool(counts["failed"]))
    total = _counts(rows)
    write(f"{'total':<{width}}  {len(rows):>6}  {total['passed']:>6}  {total['failed']:>6}  "
          f"{total['skipped']:>7}", bold=True)
    write("")
    backends = _backends_checked(config)
    if any(row["backend"] not in backends for row in rows):
        backends.append("-")
    for backend in backends:
        counts = _counts([row for row in rows if row["backend"] == backend])
        label = "no backend fixture" if backend == "-" else backend
        write(f"{label}: {counts['passed']} passed, {counts['failed']} failed, "
              f"{counts['skipped']} skipped")
    reasons: dict[str, list[str]] = {}
    for row in rows:
        if row["outcome"] == "skipped":
            reason = _skip_reason(row)
            reasons.setdefault(reason.split(": ", 1)[0], []).append(reason)
    if reasons:
        write("skipped because:")
        for kind, found in sorted(reasons.items(), key=lambda entry: -len(entry[1])):
            distinct = sorted(set(found))
            detail = (distinct[0] if len(distinct) == 1
                      else f"{kind} ({len(distinct)} different reasons; -v shows each)")
            _write_wrapped(terminal, f"{len(found):>7}  {detail}", indent=9)
    failures = [row for row in rows if row["outcome"] == "failed"]
    if failures:
        write("")
        write(f"{len(failures)} failed (tracebacks above, under FAILURES):", red=True)
        for row in failures:
            write(f"FAIL {row['backend']:<6} {row['rule']:<8} {row['check']}", red=True)
            write(f"       expected: {row['expected']}")
            write(f"       observed: {row['observed']}")
    write("")
    _write_wrapped(terminal, "A check's section is the first docs/runtime-model.md section "
                   "its docstring cites; 'no section' checks cite none (mostly argument "
                   "checks of the Python layer). -v lists every check, --json FILE writes "
                   "them.")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    rows = config.stash[_REPORT].rows
    if config.getoption("--acl-report"):
        _write_rows(terminalreporter, rows)
    if _summary_mode(config) and rows:
        _end_live_line(terminalreporter, config.stash[_REPORT])
        _write_summary(terminalreporter, config, rows)
    path = config.getoption("--acl-json")
    if path:
        try:
            with open(path, "w") as handle:
                json.dump(rows, handle, indent=1)
        except OSError as exc:
            terminalreporter.write_line(
                f"could not write the JSON report to {path}: {exc}; choose a writable path "
                "with --json FILE", red=True)
