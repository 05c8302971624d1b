"""One conformance suite, every available backend.

The ``backend`` fixture runs each test once per backend: ``fake`` always, ``native``
when libascendcl loads (``ACL_MEM_REQUIRE_NATIVE=1`` turns its absence into a
failure). A test marked ``fake_only(reason)`` runs on the fake alone and says why.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import acl_mem
from acl_mem import _backend
from acl_mem._fake import FakeBackend
from acl_mem._fake.config import current_profile, set_profile
from acl_mem._lifecycle import state
from acl_mem.errors import BackendError

sys.path.insert(0, str(Path(__file__).parent))
import stand_in
from stand_in import StandIn

_native_backend: object | None = None
_native_reason = ""
_native_source = ""
#: Set when the native backend runs on the stand-in library (tests/stand_in.py).
_stand_in: StandIn | None = None


def _load_native() -> object | None:
    """The real libascendcl if it loads, else the stand-in built with the C compiler."""
    global _native_backend, _native_reason, _native_source, _stand_in
    if _native_backend is not None or _native_reason:
        return _native_backend
    from acl_mem._native import load_native_backend

    try:
        _native_backend = load_native_backend()
        _native_source = "libascendcl.so"
        return _native_backend
    except BackendError as exc:
        real_failure = str(exc).splitlines()[0]
    if stand_in.compiler() is None:
        _native_reason = f"{real_failure}; no C compiler to build the stand-in"
        return None
    root = stand_in.build(Path(tempfile.mkdtemp(prefix="acl_mem_stand_in_")))
    _stand_in = stand_in.StandIn(root)
    saved = os.environ.get("ASCEND_HOME_PATH")
    os.environ["ASCEND_HOME_PATH"] = str(root)
    try:
        _native_backend = load_native_backend()
    finally:
        if saved is None:
            del os.environ["ASCEND_HOME_PATH"]
        else:
            os.environ["ASCEND_HOME_PATH"] = saved
    _native_source = f"stand-in library over the fake ({root})"
    os.environ[stand_in.ROOT_VARIABLE] = str(root)
    return _native_backend


def pytest_report_header(config: pytest.Config) -> list[str]:
    native = _load_native()
    line = (f"native: {_native_source}" if native is not None
            else f"native: unavailable ({_native_reason})")
    return [f"acl_mem backends: fake, {line}"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "open_question(number): the rule is the fake's choice "
                            "for spec §8 question <number>; unconfirmed on hardware")


def _release_everything() -> None:
    backend = _backend._active
    if backend is None:
        return
    for device_id in range(32):
        while state.set_count(device_id) > 0:
            try:
                acl_mem.raw.aclrtResetDevice(device_id)
            except acl_mem.AclError:
                break
    state.teardown()


@pytest.fixture(params=["fake", "native"])
def backend(request: pytest.FixtureRequest) -> Iterator[_backend.Backend]:
    """The backend under test, installed as the active one for this test."""
    marker = request.node.get_closest_marker("fake_only")
    if request.param == "native":
        if marker is not None:
            pytest.skip(f"fake only: {marker.args[0]}")
        native = _load_native()
        if native is None:
            if os.environ.get("ACL_MEM_REQUIRE_NATIVE") == "1":
                pytest.fail(f"ACL_MEM_REQUIRE_NATIVE=1 but native is unavailable: "
                            f"{_native_reason}")
            pytest.skip(f"native backend unavailable: {_native_reason}")
        chosen: _backend.Backend = native  # type: ignore[assignment]
        if _stand_in is not None:
            set_profile(None)
            _stand_in.target = FakeBackend(current_profile())
            _stand_in.errors.clear()
    else:
        set_profile(None)
        chosen = FakeBackend(current_profile())
    state.teardown()
    previous = _backend._install(chosen, f"{request.param}: installed by the test suite")
    try:
        yield chosen
    finally:
        _release_everything()
        _backend._install(previous)
    if _stand_in is not None and _stand_in.errors:
        raise AssertionError(f"stand-in callbacks raised: {_stand_in.errors!r}")


@pytest.fixture
def fake(backend: _backend.Backend) -> FakeBackend:
    """The fake backend (use only in tests marked ``fake_only``)."""
    assert isinstance(backend, FakeBackend), "fake fixture used without fake_only marker"
    return backend


@pytest.fixture
def dev(backend: _backend.Backend) -> Iterator[acl_mem.Device]:
    """Device 0, current in this thread for the test."""
    with acl_mem.Device(0) as device:
        yield device


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("fake_only")
        if marker is not None and not (marker.args and isinstance(marker.args[0], str)):
            raise pytest.UsageError(f"{item.nodeid}: fake_only needs a reason string")
