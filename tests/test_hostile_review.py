"""Regressions found by a hostile review of the exports, arrays, borrowed buffers, device
activation, VMM objects and the fake's checker: each test failed before its fix."""

from __future__ import annotations

import pytest

import acl_mem
from acl_mem import DeviceArray, DeviceBuffer, HostBuffer
from acl_mem._fake.config import set_check, set_hazard_mode
from acl_mem.pool import ExpandablePool

MiB = 1 << 20


@pytest.fixture
def restore_modes(fake):
    """The fake's modes chosen in a test must not outlive it."""
    yield
    set_hazard_mode(None)
    set_check(None)


# -- the memory checker ----------------------------------------------------------------------------


@pytest.mark.fake_only("the memory checker is the fake's")
def test_unmapped_pool_segments_are_forgotten_by_the_checker(fake, dev, restore_modes):
    """A segment freed in an ExpandablePool whose memory was then unmapped (release_unused,
    close) is no use-after-free target any more: a new mapping at the same addresses is
    someone else's memory, and writing it is no finding."""
    acl_mem.fake.configure(check=True, hazards="raise")
    pool = ExpandablePool(dev, 64 * MiB)
    segment = pool.allocate(1000)
    address = segment.ptr
    segment.free()
    pool.release_unused()
    pool.close()
    memory = acl_mem.reserve_and_map(2 * MiB)
    try:
        assert memory.address <= address < memory.address + memory.size  # the same addresses
        memory.write(b"x" * 100, address - memory.address)
        assert memory.read(3, address - memory.address) == b"xxx"
    finally:
        memory.close()
    assert acl_mem.check() == []


# -- reprs in every state --------------------------------------------------------------------------


def _half_made(cls: type, *args: object) -> object:
    """An instance whose constructor raised on ``args`` (as a debugger or pytest's
    --showlocals finds ``self`` in the failing frame)."""
    obj = cls.__new__(cls)
    with pytest.raises((TypeError, ValueError, KeyError)):
        obj.__init__(*args)
    return obj


def test_reprs_of_half_constructed_buffers_and_arrays(dev):
    np = pytest.importorskip("numpy")
    made = [
        DeviceBuffer.__new__(DeviceBuffer),
        HostBuffer.__new__(HostBuffer),
        _half_made(DeviceBuffer, 0x1000, 64, "not an api", dev),
        _half_made(DeviceArray, (2, 3), np.dtype(object), None),
        _half_made(DeviceArray, (2, 3), "f4", "not a buffer"),
        DeviceArray.__new__(DeviceArray),
    ]
    for obj in made:
        text = repr(obj)
        assert text.startswith(f"<{type(obj).__name__} ") and "not created" in text


# -- DLPack arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    {"max_version": ("1", 0)},
    {"max_version": (True, 0)},
    {"max_version": (1.0, 0)},
    {"dl_device": 5},
    {"dl_device": "cpu"},
    {"dl_device": (1,)},
    {"dl_device": (1, 0, 0)},
    {"dl_device": (1.0, 0)},
])
def test_dlpack_arguments_of_the_wrong_type_are_type_errors(dev, kwargs):
    """A max_version or dl_device that is not a pair of ints is a TypeError (before: an
    export, or a BufferError as for a device it cannot reach)."""
    with dev.malloc_host(16) as host:
        with pytest.raises(TypeError):
            host.__dlpack__(**kwargs)
        host.free()  # a refused export left nothing behind
