"""The whole-object copy shortcut (``buf.copy_from(x)`` / ``buf.copy_to(x)`` with no count
and no offsets) behaves exactly as the general copy path: the same bytes land, the same
errors are raised with the same codes, on device and pinned host buffers, live or freed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acl_mem import buffers
from acl_mem.errors import AclError

pytestmark = pytest.mark.fake_only("Pythonic-layer paths; the raw calls are shared")

BUFFER_SIZE = 64


def _hosts() -> dict[str, Callable[[int], Any]]:
    def strided(n: int) -> np.ndarray:
        return np.arange(2 * n, dtype=np.uint8)[::2]

    def readonly(n: int) -> np.ndarray:
        array = np.arange(n, dtype=np.uint8)
        array.flags.writeable = False
        return array

    return {
        "bytes": lambda n: bytes(range(n % 256)) * (n // 256) + bytes(range(n % 256)),
        "bytearray": lambda n: bytearray(b"\x07" * n),
        "uint8": lambda n: np.arange(n, dtype=np.uint8),
        "int64": lambda n: np.arange(n // 8, dtype=np.int64),
        "float32 2-D": lambda n: np.ones((2, n // 8), dtype=np.float32),
        "fortran": lambda n: np.asfortranarray(np.ones((4, n // 4), dtype=np.uint8)),
        "strided": strided,
        "read-only": readonly,
        "objects": lambda n: np.array([None, 1] * (n // 16), dtype=object),
        "memmap-like subclass": lambda n: np.arange(n, dtype=np.uint8).view(np.recarray),
        "bool": lambda n: np.zeros(n, dtype=np.bool_),
    }


HOSTS = _hosts()


def _outcome(action: Callable[[], None]) -> tuple[type[BaseException] | None, int | None]:
    try:
        action()
    except (AclError, TypeError, ValueError, BufferError, LookupError) as exc:
        return type(exc), getattr(exc, "code", None)
    return None, None


def _snapshot(host: Any) -> object:
    if isinstance(host, np.ndarray):
        return tuple(host.tolist()) if host.dtype.hasobject else host.tobytes()
    return bytes(host)


def _run(dev: Any, host_kind: str, n: int, direction: str, pinned: bool, freed: bool,
         general: bool) -> tuple[Any, ...]:
    buf = dev.malloc_host(BUFFER_SIZE) if pinned else dev.malloc(BUFFER_SIZE)
    try:
        buf.copy_from(bytes(range(100, 100 + BUFFER_SIZE)))
        host = HOSTS[host_kind](n)
        before = _snapshot(host)
        if freed:
            buf.free()
        if general:
            with mock.patch.object(buffers, "_whole_host_copy", return_value=False):
                outcome = _outcome(lambda: getattr(buf, direction)(host))
        else:
            outcome = _outcome(lambda: getattr(buf, direction)(host))
        after_host = _snapshot(host)
        after_buf = None if freed else buf.read()
        return outcome, before, after_host, after_buf
    finally:
        buf.free()


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host_kind=st.sampled_from(sorted(HOSTS)),
       n=st.sampled_from([0, 16, 32, BUFFER_SIZE, BUFFER_SIZE + 16, 4 * BUFFER_SIZE]),
       direction=st.sampled_from(["copy_from", "copy_to"]),
       pinned=st.booleans(), freed=st.booleans())
def test_the_shortcut_matches_the_general_path(fake: Any, dev: Any, host_kind: str, n: int,
                                               direction: str, pinned: bool,
                                               freed: bool) -> None:
    shortcut = _run(dev, host_kind, n, direction, pinned, freed, general=False)
    general = _run(dev, host_kind, n, direction, pinned, freed, general=True)
    assert shortcut == general


def test_the_shortcut_takes_the_common_copies(fake: Any, dev: Any) -> None:
    """A numpy array, bytes and bytearray copied whole go the short way (the general path is
    never entered), and the bytes are right."""
    data = np.arange(BUFFER_SIZE, dtype=np.uint8)
    out = np.zeros_like(data)
    buf = dev.malloc(BUFFER_SIZE)
    with mock.patch.object(buffers, "_copy", side_effect=AssertionError("general path")):
        buf.copy_from(data)
        buf.copy_to(out)
        buf.copy_from(bytes(BUFFER_SIZE))
        target = bytearray(b"\xff" * BUFFER_SIZE)
        buf.copy_to(target)
    assert np.array_equal(out, data) and target == bytes(BUFFER_SIZE)
    buf.free()


@pytest.mark.parametrize("offsets", [{"offset": False}, {"count": None, "src_offset": 0.0}])
def test_false_and_float_offsets_are_not_zero(fake: Any, dev: Any,
                                              offsets: dict[str, Any]) -> None:
    """``offset=False`` is refused as the general path refuses it (a bool is no offset),
    though ``False == 0``: the shortcut takes only the int 0."""
    buf = dev.malloc(BUFFER_SIZE)
    data = bytes(BUFFER_SIZE)
    shortcut = _outcome(lambda: buf.copy_from(data, **offsets))
    with mock.patch.object(buffers, "_whole_host_copy", return_value=False):
        general = _outcome(lambda: buf.copy_from(data, **offsets))
    assert shortcut == general and shortcut[0] is TypeError
    buf.free()
