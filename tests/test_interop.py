"""Interop of the Pythonic layer: HostBuffer exports its bytes (buffer protocol, numpy,
DLPack) without copying, and free() refuses while any export is alive.

Backend-agnostic unless marked: each test runs on the fake and, when it loads, the
native backend. What must hold against the runtime itself (data seen by device copies)
is in acl_mem/conformance/checks/test_interop.py.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import acl_mem
from acl_mem import AllocApi, FreedBufferError, HazardError, HostBuffer, raw
from acl_mem._hostbuf import ffi
from acl_mem.pool import SegmentPool

PEP_688 = sys.version_info >= (3, 12)
# A private binding: setting argtypes on ctypes.pythonapi.<name> changes it process-wide.
_is_capsule = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))


def _pattern(n: int) -> bytes:
    return bytes((7 + 31 * i) % 251 for i in range(n))


def _address(array: np.ndarray[Any, Any]) -> int:
    return int(array.__array_interface__["data"][0])


class _Legacy:
    """A DLPack producer of the legacy protocol: __dlpack__(stream) and nothing more."""

    def __init__(self, inner: HostBuffer) -> None:
        self.inner = inner

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.inner.__dlpack__(stream=stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.inner.__dlpack_device__()


# Each export of a HostBuffer, as a function returning something that holds it.
EXPORTS: dict[str, Callable[[HostBuffer], object]] = {
    "memoryview": memoryview,
    "memoryview slice": lambda h: memoryview(h)[10:20],
    "numpy.frombuffer": lambda h: np.frombuffer(h, np.uint8),
    "numpy.frombuffer float32": lambda h: np.frombuffer(h, np.float32),
    "numpy.asarray": np.asarray,
    "numpy.array copy=False": lambda h: np.array(h, copy=False),
    "numpy.from_dlpack": np.from_dlpack,
    "numpy.from_dlpack legacy": lambda h: np.from_dlpack(_Legacy(h)),
    "unconsumed capsule": lambda h: h.__dlpack__(),
    "unconsumed versioned capsule": lambda h: h.__dlpack__(max_version=(1, 0)),
    "cffi from_buffer": ffi.from_buffer,
    "view()": HostBuffer.view,
    "numpy()": HostBuffer.numpy,
}


# -- buffer protocol and numpy ---------------------------------------------------------------------


def test_memoryview_is_a_writable_byte_view_of_the_memory(dev):
    with dev.malloc_host(64) as host:
        view = memoryview(host)
        assert (view.format, view.itemsize, view.ndim, view.nbytes) == ("B", 1, 1, 64)
        assert view.shape == (64,)
        assert view.readonly is False
        assert view.c_contiguous
        view[:5] = b"hello"
        assert host.read(5) == b"hello"
        host.memset(0x21, 3)
        assert bytes(view[:3]) == b"!!!"
        view.release()


def test_bytes_of_a_host_buffer_copies_its_bytes(dev):
    with dev.malloc_host(32) as host:
        host.view()[:] = _pattern(32)
        assert bytes(host) == _pattern(32)
        assert bytearray(host) == _pattern(32)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64, np.complex64])
def test_numpy_frombuffer_is_a_zero_copy_view(dev, dtype):
    with dev.malloc_host(64) as host:
        array = np.frombuffer(host, dtype)
        assert _address(array) == host.ptr
        assert array.nbytes == 64
        assert array.flags.writeable
        array[:] = np.arange(array.size).astype(dtype)
        assert host.read() == np.arange(array.size).astype(dtype).tobytes()
        del array


def test_numpy_asarray_is_zero_copy_uint8(dev):
    with dev.malloc_host(48) as host:
        array = np.asarray(host)
        assert array.dtype == np.uint8
        assert array.shape == (48,)
        assert _address(array) == host.ptr
        array[0] = 99
        assert host.read(1) == b"c"
        del array


def test_numpy_array_converts_with_a_copy(dev):
    """np.array(buf) copies (numpy's default); a dtype converts the byte values."""
    with dev.malloc_host(8) as host:
        host.view()[:] = bytes(range(8))
        copied = np.array(host)
        assert _address(copied) != host.ptr
        assert np.asarray(host, dtype=np.float32).tolist() == list(range(8))
        with pytest.raises(ValueError):
            np.asarray(host, dtype=np.float32, copy=False)
        host.free()  # nothing of it is exported any more
        assert copied.tolist() == list(range(8))


def test_a_host_segment_exports_its_own_range(dev):
    pool = SegmentPool(dev, api=AllocApi.MALLOC_HOST)
    try:
        a = pool.allocate(100)
        b = pool.allocate(100)
        view = memoryview(b)
        assert view.nbytes == 100
        view[:] = b"\x5a" * 100
        assert b.read() == b"\x5a" * 100
        assert a.read() != b.read()
        assert _address(np.frombuffer(b, np.uint8)) == b.ptr
        with pytest.raises(BufferError):
            b.free()
        view.release()
        gc.collect()
        b.free()
        a.free()
    finally:
        pool.close()


# -- free under an export --------------------------------------------------------------------------


@pytest.mark.parametrize("how", sorted(EXPORTS))
def test_free_is_refused_while_an_export_lives_and_works_after(dev, how):
    host = dev.malloc_host(256)
    host.view()[:] = _pattern(256)
    export = EXPORTS[how](host)
    with pytest.raises(BufferError):
        host.free()
    assert not host.freed
    assert host.read() == _pattern(256)  # still usable
    del export
    gc.collect()
    host.free()
    assert host.freed


@pytest.mark.fake_only("the fake lists live pinned allocations (acl_mem.fake.leaks())")
@pytest.mark.parametrize("how", sorted(EXPORTS))
def test_a_dropped_buffer_lives_until_its_last_export_dies(fake, dev, how):
    host = dev.malloc_host(256)
    address = host.ptr
    export = EXPORTS[how](host)
    del host
    gc.collect()
    assert address in [leak.address for leak in acl_mem.fake.leaks()]
    del export
    gc.collect()
    assert address not in [leak.address for leak in acl_mem.fake.leaks()]


def test_a_numpy_view_of_a_dropped_buffer_keeps_its_bytes(dev):
    host = dev.malloc_host(64)
    host.view()[:] = _pattern(64)
    array = np.frombuffer(host, np.uint8)
    del host
    gc.collect()
    assert array.tobytes() == _pattern(64)
    array[:] = 1
    assert array.sum() == 64


def test_a_released_memoryview_no_longer_holds_the_memory(dev):
    host = dev.malloc_host(16)
    with memoryview(host) as view:
        view[0] = 1
    host.free()
    assert host.freed


def test_an_export_dying_on_another_thread_releases_it(dev):
    host = dev.malloc_host(64)
    box = [np.from_dlpack(host)]
    worker = threading.Thread(target=box.clear)
    worker.start()
    worker.join()
    gc.collect()
    host.free()
    assert host.freed


# -- exports of freed or busy memory ---------------------------------------------------------------


def test_memoryview_of_a_freed_buffer_is_refused(dev):
    host = dev.malloc_host(16)
    host.free()
    if PEP_688:
        with pytest.raises(FreedBufferError):
            memoryview(host)
    else:
        # Before 3.12 the slot cannot raise: SystemError, the reason as a warning.
        with pytest.warns(RuntimeWarning), pytest.raises(SystemError):
            memoryview(host)
    with pytest.raises(FreedBufferError):
        host.view()


def test_numpy_of_a_freed_buffer_raises_freed_buffer_error(dev):
    host = dev.malloc_host(16)
    host.free()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the slot's report before 3.12
        with pytest.raises(FreedBufferError):
            np.asarray(host)
        with pytest.raises(FreedBufferError):
            np.array(host)
        with pytest.raises(FreedBufferError):
            np.from_dlpack(host)
        with pytest.raises(FreedBufferError):
            host.__dlpack__()
        with pytest.raises((FreedBufferError, SystemError)):
            np.frombuffer(host, np.uint8)


@pytest.mark.fake_only("queued-work hazards exist only in the fake")
def test_exports_of_memory_a_queued_copy_writes_are_hazards(fake, dev, monkeypatch):
    """docs/runtime-model.md §3.4: reading pinned memory before synchronising is a race;
    every export path reports it as view() does."""
    monkeypatch.setattr(fake.hazards, "mode", "count")
    with dev.stream() as stream, dev.malloc(64) as source, dev.malloc_host(64) as host:
        source.memset(0x42)
        host.copy_from_async(source, stream=stream)
        before = acl_mem.fake.hazards().get("access-before-synchronize", 0)
        for how in ("memoryview", "numpy.asarray", "numpy.from_dlpack"):
            export = EXPORTS[how](host)
            del export
        assert acl_mem.fake.hazards()["access-before-synchronize"] == before + 3
        stream.synchronize()
        assert bytes(memoryview(host)) == b"\x42" * 64


@pytest.mark.fake_only("queued-work hazards exist only in the fake")
def test_a_raised_hazard_refuses_the_export(fake, dev, monkeypatch):
    monkeypatch.setattr(fake.hazards, "mode", "raise")
    with dev.stream() as stream, dev.malloc(64) as source, dev.malloc_host(64) as host:
        host.copy_from_async(source, stream=stream)
        with pytest.raises(HazardError):
            np.from_dlpack(host)
        if PEP_688:
            with pytest.raises(HazardError):
                memoryview(host)
        stream.synchronize()
        with memoryview(host) as view:
            assert view.nbytes == 64


# -- DLPack ----------------------------------------------------------------------------------------


def test_dlpack_device_is_the_cpu(dev):
    with dev.malloc_host(8) as host:
        assert host.__dlpack_device__() == (1, 0)


def test_from_dlpack_is_a_writable_zero_copy_uint8_vector(dev):
    with dev.malloc_host(40) as host:
        host.view()[:] = _pattern(40)
        array = np.from_dlpack(host)
        assert array.dtype == np.uint8
        assert array.shape == (40,)
        assert array.flags.writeable
        assert array.flags.c_contiguous
        assert _address(array) == host.ptr
        assert array.tobytes() == _pattern(40)
        array[:2] = [1, 2]
        assert host.read(2) == b"\x01\x02"
        del array


def test_legacy_consumers_get_a_legacy_capsule(dev):
    with dev.malloc_host(16) as host:
        capsule = host.__dlpack__()
        assert _is_capsule(capsule, b"dltensor")
        versioned = host.__dlpack__(max_version=(1, 0))
        assert _is_capsule(versioned, b"dltensor_versioned")
        assert _is_capsule(host.__dlpack__(max_version=(0, 8)), b"dltensor")
        del capsule, versioned
        gc.collect()
        array = np.from_dlpack(_Legacy(host))  # legacy capsules import read-only
        assert _address(array) == host.ptr
        assert array.shape == (16,)
        del array


def test_from_dlpack_copy_true_exports_a_copy(dev):
    host = dev.malloc_host(16)
    host.view()[:] = _pattern(16)
    array = np.from_dlpack(host, copy=True)
    assert _address(array) != host.ptr
    host.free()  # the copy holds nothing of the buffer
    assert array.tobytes() == _pattern(16)


def test_from_dlpack_to_the_cpu_device(dev):
    with dev.malloc_host(16) as host:
        array = np.from_dlpack(host, device="cpu")
        assert _address(array) == host.ptr
        del array


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"stream": 0}, ValueError),
    ({"stream": 1}, ValueError),
    ({"dl_device": (2, 0)}, BufferError),
    ({"dl_device": (1, 1)}, BufferError),
    ({"max_version": 1}, TypeError),
    ({"max_version": (1, 0, 0)}, TypeError),
])
def test_dlpack_arguments_are_checked(dev, kwargs, error):
    with dev.malloc_host(16) as host:
        with pytest.raises(error):
            host.__dlpack__(**kwargs)
        host.free()  # a refused export left nothing behind


def test_dlpack_arguments_are_keyword_only(dev):
    with dev.malloc_host(16) as host, pytest.raises(TypeError):
        host.__dlpack__(None)  # type: ignore[misc]


def test_device_buffers_export_nothing(dev):
    """Device memory is not host memory: no buffer protocol, no DLPack, no numpy view."""
    with dev.malloc(16) as buf:
        with pytest.raises(TypeError):
            memoryview(buf)  # type: ignore[arg-type]
        assert not hasattr(buf, "__dlpack__")
        assert np.asarray(buf).dtype == object  # an opaque object, never its bytes


def test_a_borrowed_host_buffer_exports_too(dev):
    ptr = raw.aclrtMallocHost(32)
    try:
        host = HostBuffer.from_ptr(ptr, 32)
        array = np.frombuffer(host, np.uint8)
        assert _address(array) == ptr
        host.free()  # dropping the wrapper is allowed: the memory is not freed
        array[:] = 7
        assert bytes(array) == b"\x07" * 32
        del array
    finally:
        raw.aclrtFreeHost(ptr)
