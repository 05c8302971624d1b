"""pytest plugin behind the conformance checks: one check, every backend.

The ``backend`` fixture runs each check once per backend: ``fake`` always, ``native``
when the native provider loads one (``ACL_MEM_REQUIRE_NATIVE=1`` turns its absence
into a failure). ``@pytest.mark.fake_only("reason")`` limits a check to the fake and
says why; ``@pytest.mark.open_question(n)`` marks the fake's answer to docs/runtime-model.md §8
question *n*. With ``--acl-report`` every check's outcome is printed per behaviour.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

import acl_mem

from .. import _backend
from .._fake import FakeBackend
from .._fake.config import current_profile, set_profile
from .._lifecycle import state
from .providers import native_provider

_SECTION = re.compile(r"§\s*(\d+(?:\.\d+)*)")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acl_mem")
    group.addoption("--acl-backend", choices=("fake", "native", "all"), default="all",
                    help="run the conformance checks on this backend only")
    group.addoption("--acl-report", action="store_true",
                    help="print runtime-model section, expected and observed outcome per check")
    group.addoption("--acl-json", metavar="FILE", help="write the per-check outcomes as JSON")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fake_only(reason): only the fake can show this; "
                            "the reason is required")
    config.addinivalue_line("markers", "open_question(number): the fake's choice for "
                            "docs/runtime-model.md §8 question <number>; unconfirmed on hardware")
    config.stash[_RESULTS] = []


def pytest_report_header(config: pytest.Config) -> list[str]:
    backend, source = native_provider().load()
    native = f"native: {source}" if backend is not None else f"native: unavailable ({source})"
    return [f"acl_mem backends: fake, {native}"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--acl-backend")
        names = ["fake", "native"] if chosen == "all" else [chosen]
        metafunc.parametrize("backend", names, indirect=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("fake_only")
        if marker is not None and not (marker.args and isinstance(marker.args[0], str)):
            raise pytest.UsageError(f"{item.nodeid}: fake_only needs a reason string")


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
            if os.environ.get("ACL_MEM_REQUIRE_NATIVE") == "1":
                pytest.fail(f"ACL_MEM_REQUIRE_NATIVE=1 but native is unavailable: {source}")
            pytest.skip(f"native backend unavailable: {source}")
        provider.before_test()
        chosen: _backend.Backend = native
    else:
        set_profile(None)
        chosen = FakeBackend(current_profile())
    state.teardown()
    previous = _backend._install(chosen, f"{request.param}: installed by the conformance checks")
    try:
        yield chosen
    finally:
        _release_everything()
        _backend._install(previous)
        if request.param == "native":
            provider.after_test()


@pytest.fixture
def fake(backend: _backend.Backend) -> FakeBackend:
    """The fake backend (only in checks marked ``fake_only``)."""
    assert isinstance(backend, FakeBackend), "the fake fixture needs the fake_only marker"
    return backend


@pytest.fixture
def dev(backend: _backend.Backend) -> Iterator[acl_mem.Device]:
    """Device 0, current in this thread for the check."""
    with acl_mem.Device(0) as device:
        yield device


# -- per-behaviour report --------------------------------------------------------------------------
_RESULTS = pytest.StashKey[list[dict[str, Any]]]()


def _rule_of(item: pytest.Item) -> str:
    function = getattr(item, "function", None)
    doc = (getattr(function, "__doc__", None) or "").strip()
    first = " ".join(doc.split("\n\n")[0].split()) if doc else item.name
    return first


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        rule = _rule_of(item)
        section = _SECTION.search(rule) or _SECTION.search(item.name.replace("_", "."))
        callspec = getattr(item, "callspec", None)
        observed = "as expected"
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            observed = crash.message.splitlines()[0] if crash is not None else str(report.longrepr)
        elif report.skipped:
            observed = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else "skipped"
        item.config.stash[_RESULTS].append({
            "check": item.nodeid,
            "backend": callspec.params.get("backend", "-") if callspec is not None else "-",
            "spec": f"§{section.group(1)}" if section else "-",
            "expected": rule,
            "observed": observed,
            "outcome": report.outcome,
        })


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    results = config.stash[_RESULTS]
    if config.getoption("--acl-report"):
        write = terminalreporter.write_line
        terminalreporter.section("acl_mem conformance, per behaviour")
        for row in results:
            mark = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[row["outcome"]]
            write(f"{mark} {row['backend']:<6} {row['spec']:<8} {row['check']}")
            write(f"       expected: {row['expected']}")
            if row["outcome"] != "passed":
                write(f"       observed: {row['observed']}")
    path = config.getoption("--acl-json")
    if path:
        with open(path, "w") as handle:
            json.dump(results, handle, indent=1)
