"""Copies refuse numpy object arrays as to_device does, and VirtualRange / Mapping read and
write mapped bytes with DeviceBuffer's calls, bounds and error classes."""

from __future__ import annotations

import numpy as np
import pytest

from acl_mem.errors import FreedBufferError
from acl_mem.vmm import MappedMemory, PhysicalMemory, VirtualRange, granularity

pytestmark = pytest.mark.fake_only("Pythonic-layer checks; the raw calls are shared")


def objects() -> np.ndarray:
    return np.array([1, "a", None, 2.5] * 4, dtype=object)


def test_object_arrays_are_refused_like_to_device(fake, dev):
    with pytest.raises(TypeError):
        dev.to_device(objects())
    buf = dev.malloc(objects().nbytes)
    with pytest.raises(TypeError):
        buf.copy_from(objects())
    with pytest.raises(TypeError):
        buf.copy_from(memoryview(objects()))
    with pytest.raises(TypeError):
        buf.copy_from_async(objects())
    target = objects()
    with pytest.raises(TypeError):
        buf.copy_to(target)
    assert target[1] == "a"  # nothing written over the object pointers
    with MappedMemory(granularity(dev), device=dev) as memory, pytest.raises(TypeError):
        memory.write(objects())
    buf.copy_from(np.arange(8, dtype=np.int64))  # plain arrays still copy
    buf.free()


@pytest.fixture
def mapped(fake, dev):
    chunk = granularity(dev)
    with VirtualRange(4 * chunk) as rng, PhysicalMemory(chunk, device=dev) as physical, \
            rng.map(physical, chunk) as mapping:
        yield rng, mapping, chunk


def test_mapping_and_range_read_and_write_the_same_bytes(mapped, dev):
    rng, mapping, chunk = mapped
    rng.write(b"hello", chunk + 3)
    assert mapping.read(5, 3) == b"hello"
    mapping.write(np.frombuffer(b"world", np.uint8), 10)
    assert rng.read(5, chunk + 10) == b"world"
    assert len(mapping.read()) == chunk and len(rng.read(offset=chunk + 1)) == chunk - 1
    buf = dev.malloc(16)
    buf.copy_from(b"0123456789abcdef")
    mapping.copy_from(buf, 16, offset=100)  # device to device
    out = bytearray(16)
    rng.copy_to(out, 16, offset=chunk + 100)
    assert out == b"0123456789abcdef"
    pinned = dev.malloc_host(8)
    rng.copy_from(b"12345678", offset=chunk)
    mapping.copy_to(pinned, 8)
    assert bytes(pinned.view()) == b"12345678"
    pinned.free()
    buf.free()


def test_mapped_io_is_bounds_checked_and_typed(mapped):
    rng, mapping, chunk = mapped
    with pytest.raises(ValueError):
        rng.read(4, 0)  # nothing mapped there
    with pytest.raises(ValueError):
        rng.write(b"xy", 2 * chunk - 1)  # runs past the mapping
    with pytest.raises(ValueError):
        mapping.read(10, chunk - 5)
    with pytest.raises(ValueError):
        mapping.copy_from(bytes(8), offset=chunk + 1)
    with pytest.raises(TypeError):
        mapping.copy_to(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        rng.write("text", chunk)  # type: ignore[arg-type]


def test_closed_mappings_refuse_io(fake, dev):
    chunk = granularity(dev)
    with VirtualRange(chunk) as rng, PhysicalMemory(chunk, device=dev) as physical:
        mapping = rng.map(physical)
        mapping.close()
        with pytest.raises(FreedBufferError):
            mapping.read(1)
        with pytest.raises(ValueError):
            rng.read(1)  # its only mapping is gone
    with pytest.raises(FreedBufferError):
        rng.write(b"x")
