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
from acl_mem.arrays import DeviceArray, empty, to_device
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


@pytest.mark.parametrize("kind", ["HostBuffer", "HostSegment", "from_ptr"])
def test_memoryview_of_a_freed_buffer_is_refused(dev, kind):
    pool = None
    if kind == "HostSegment":
        pool = acl_mem.SegmentPool(dev, api="aclrtMallocHost")
        host = pool.allocate(16)
    elif kind == "from_ptr":
        owner = dev.malloc_host(16)
        host = acl_mem.HostBuffer.from_ptr(owner.ptr, 16, device=dev)
    else:
        host = dev.malloc_host(16)
    host.free()
    # Before 3.12 too: a freed buffer's slot is a C function that raises (freed_variant).
    with pytest.raises(FreedBufferError):
        memoryview(host)
    with pytest.raises(FreedBufferError):
        host.view()
    host.free()  # a second free does nothing, whatever the class became
    assert isinstance(host, getattr(acl_mem, kind) if kind != "from_ptr" else acl_mem.HostBuffer)
    if pool is not None:
        pool.close()
    if kind == "from_ptr":
        owner.free()


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
        with pytest.raises(FreedBufferError):
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


# -- typed device arrays ---------------------------------------------------------------------------

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128", ">i4", "<f8", "S5",
          "U3", "datetime64[ns]", "timedelta64[s]", [("a", "<i2"), ("b", "<f4")], "V6"]
SHAPES = [(), (1,), (7,), (3, 4), (2, 3, 4), (1, 1, 1, 1, 5), (0,), (0, 3), (4, 0)]


def _sample(shape: tuple[int, ...], dtype: Any) -> np.ndarray[Any, Any]:
    """Distinct, deterministic bytes of that shape and dtype."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    return np.frombuffer(_pattern(n), dtype=dt).reshape(shape).copy()


def _dtype_id(dtype: Any) -> str:
    return str(np.dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_id)
def test_round_trip_keeps_dtype_and_bytes(dev, dtype):
    x = _sample((3, 5), dtype)
    with to_device(dev, x) as d:
        y = d.copy_to_host()
    assert y.dtype == x.dtype
    assert y.shape == x.shape
    assert y.tobytes() == x.tobytes()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_round_trip_keeps_shape(dev, shape):
    x = _sample(shape, np.float32)
    with to_device(dev, x) as d:
        assert d.shape == shape
        y = d.copy_to_host()
    assert y.shape == shape
    assert np.array_equal(x, y)


@pytest.mark.parametrize("view", ["every other", "transposed", "fortran", "reversed"])
def test_non_contiguous_sources_round_trip(dev, view):
    base = np.arange(60, dtype=np.int32).reshape(6, 10)
    x = {"every other": base[::2, ::3], "transposed": base.T,
         "fortran": np.asfortranarray(base), "reversed": base[::-1]}[view]
    with to_device(dev, x) as d:
        assert d.strides == np.ascontiguousarray(x).strides
        assert np.array_equal(d.copy_to_host(), x)


def test_array_likes_go_through_numpy_asarray(dev):
    with to_device(dev, [[1, 2], [3, 4]]) as d:
        assert d.dtype == np.asarray([[1, 2], [3, 4]]).dtype
        assert d.copy_to_host().tolist() == [[1, 2], [3, 4]]
    with to_device(dev, 2.5) as scalar:
        assert scalar.shape == ()
        assert scalar.copy_to_host()[()] == 2.5


def test_properties(dev):
    x = np.zeros((2, 3, 4), dtype=np.float64)
    with to_device(dev, x) as d:
        assert (d.shape, d.dtype, d.size, d.ndim, d.itemsize) == ((2, 3, 4), x.dtype, 24, 3, 8)
        assert d.nbytes == x.nbytes == 192
        assert d.strides == x.strides == (96, 32, 8)
        assert isinstance(d.buffer, acl_mem.DeviceBuffer)
        assert d.buffer.size == 192
        assert d.device == dev
        assert not d.freed
        text = repr(d)
        assert "(2, 3, 4)" in text and "float64" in text and hex(d.buffer.ptr) in text
    assert d.freed
    assert "freed" in repr(d)


def test_empty_allocates_its_bytes(dev):
    before = dev.mem_info(acl_mem.MemAttr.HBM_MEM).free
    d = empty(dev, (1024, 1024), np.float32)
    assert d.nbytes == 4 << 20
    assert dev.mem_info(acl_mem.MemAttr.HBM_MEM).free < before
    d.copy_from_host(np.ones((1024, 1024), np.float32))
    assert d.copy_to_host().sum() == 1 << 20
    d.free()
    assert dev.mem_info(acl_mem.MemAttr.HBM_MEM).free == before


def test_empty_takes_an_int_shape(dev):
    with empty(dev, 5, "int16") as d:
        assert d.shape == (5,)


def test_zero_size_arrays_allocate_nothing(dev):
    before = dev.mem_info(acl_mem.MemAttr.HBM_MEM).free
    d = to_device(dev, np.empty((0, 3), np.float32))
    assert dev.mem_info(acl_mem.MemAttr.HBM_MEM).free == before
    assert d.buffer is None
    assert d.nbytes == 0
    assert d.device == dev
    assert "zero-size" in repr(d)
    out = d.copy_to_host()
    assert out.shape == (0, 3)
    assert out.dtype == np.float32
    d.copy_from_host(np.empty((0, 3), np.float32))
    d.free()
    assert d.freed
    with pytest.raises(FreedBufferError):
        d.copy_to_host()
    assert empty(dev, (4, 0), "u1").buffer is None


def test_copy_to_host_into_out(dev):
    x = np.arange(10, dtype=np.int64)
    with to_device(dev, x) as d:
        out = np.empty(10, np.int64)
        assert d.copy_to_host(out) is out
        assert np.array_equal(out, x)


@pytest.mark.parametrize(("out", "error"), [
    (np.empty(11, np.int64), ValueError),
    (np.empty((2, 5), np.int64), ValueError),
    (np.empty(10, np.int32), TypeError),
    (np.empty(10, np.float64), TypeError),
    (np.empty(20, np.int64)[::2], ValueError),
    (np.frombuffer(bytes(80), np.int64), ValueError),
    ([0] * 10, TypeError),
    (bytearray(80), TypeError),
], ids=["longer", "other shape", "int32", "float64", "strided", "read-only", "list",
        "bytearray"])
def test_copy_to_host_checks_out(dev, out, error):
    with to_device(dev, np.arange(10, dtype=np.int64)) as d, pytest.raises(error):
        d.copy_to_host(out)


@pytest.mark.parametrize(("source", "error"), [
    (np.zeros(10, np.float32), TypeError),
    (np.zeros(11, np.int64), ValueError),
    (np.zeros((10, 1), np.int64), ValueError),
    (np.zeros(10, ">i8"), TypeError),
], ids=["dtype", "length", "shape", "byte order"])
def test_copy_from_host_checks_the_source(dev, source, error):
    with to_device(dev, np.arange(10, dtype=np.int64)) as d:
        with pytest.raises(error):
            d.copy_from_host(source)
        assert np.array_equal(d.copy_to_host(), np.arange(10))


def test_device_memory_is_not_a_host_source(dev):
    with to_device(dev, np.arange(4)) as d, to_device(dev, np.arange(4)) as e:
        with pytest.raises(TypeError):
            d.copy_from_host(e)
        with pytest.raises(TypeError):
            d.copy_from_host(e.buffer)
        with pytest.raises(TypeError):
            to_device(dev, e)
        with pytest.raises(TypeError):
            np.asarray(d)


def test_a_pinned_host_array_is_a_source_and_a_destination(dev):
    with dev.malloc_host(64) as host:
        pinned = np.frombuffer(host, np.float64).reshape(2, 4)
        pinned[:] = np.arange(8).reshape(2, 4)
        with to_device(dev, pinned) as d:
            pinned[:] = 0
            d.copy_to_host(pinned)
            assert pinned.tolist() == np.arange(8).reshape(2, 4).tolist()
        del pinned


def test_freed_arrays_refuse_copies(dev):
    d = to_device(dev, np.arange(4))
    d.free()
    d.free()  # a second free does nothing
    with pytest.raises(FreedBufferError):
        d.copy_to_host()
    with pytest.raises(FreedBufferError):
        d.copy_from_host(np.arange(4))
    assert d.buffer is not None and d.buffer.freed


def test_a_device_reset_releases_the_array(backend):
    device = acl_mem.Device(0)
    with device:
        d = to_device(device, np.arange(4))
    assert d.freed
    assert "released" in repr(d)
    with pytest.raises(FreedBufferError):
        d.copy_to_host()


def test_arrays_refuse_copy_and_pickle(dev):
    import copy
    import pickle

    with to_device(dev, np.arange(4)) as d:
        for duplicate in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError):
                duplicate(d)
        assert np.array_equal(d.copy_to_host(), np.arange(4))


def test_async_round_trip_on_a_stream(dev):
    x = np.arange(1000, dtype=np.float32)
    with dev.stream() as stream:
        d = to_device(dev, x, stream=stream)
        y = d.copy_to_host(stream=stream)
        stream.synchronize()
        assert np.array_equal(x, y)
        d.free()


@pytest.mark.fake_only("the fake defers queued copies to page-locked memory until synchronise")
def test_async_copy_to_pinned_memory_lands_at_synchronize(fake, dev, monkeypatch):
    """docs/runtime-model.md §3.4: a queued D2H into page-locked memory is done only after
    synchronise; reading earlier is a race (and is stale on the fake)."""
    monkeypatch.setattr(fake.hazards, "mode", "count")
    with dev.stream() as stream, dev.malloc_host(32) as host:
        d = to_device(dev, np.full(8, 7, np.int32))
        pinned = np.frombuffer(host, np.int32)
        pinned[:] = -1
        d.copy_to_host(pinned, stream=stream)
        assert pinned.tolist() == [-1] * 8  # queued, not done
        stream.synchronize()
        assert pinned.tolist() == [7] * 8
        del pinned
        d.free()


def test_streams_are_checked(dev):
    with to_device(dev, np.arange(4)) as d:
        with pytest.raises(TypeError):
            d.copy_to_host(stream=0)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            d.copy_from_host(np.arange(4), stream="default")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            to_device(dev, np.arange(4), stream=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(("args", "error"), [
    ((0, (4,), "f4"), TypeError),
    (("dev", (4,), "f4"), TypeError),
    ((None, (-1,), "f4"), ValueError),
    ((None, (2, -3), "f4"), ValueError),
    ((None, (2.0,), "f4"), TypeError),
    ((None, (True,), "f4"), TypeError),
    ((None, "abc", "f4"), TypeError),
    ((None, (4,), object), TypeError),
    ((None, (4,), [("a", object)]), TypeError),
    ((None, (4,), "not a dtype"), TypeError),
    ((None, (4,), "S0"), ValueError),
], ids=["device int", "device str", "negative", "negative inner", "float dim", "bool dim",
        "string shape", "object dtype", "object field", "bad dtype", "sizeless dtype"])
def test_empty_checks_its_arguments(dev, args, error):
    device, shape, dtype = args
    with pytest.raises(error) as e:
        empty(dev if device is None else device, shape, dtype)
    assert not isinstance(e.value, acl_mem.AclError)


def test_object_arrays_are_refused(dev):
    with pytest.raises(TypeError):
        to_device(dev, np.array([object(), object()]))


def test_device_array_constructor_wraps_a_buffer(dev):
    before = dev.mem_info(acl_mem.MemAttr.HBM_MEM).free
    buf = dev.malloc(64)
    buf.copy_from(np.arange(16, dtype=np.float32))
    d = DeviceArray((4, 4), np.float32, buf)
    assert d.buffer is buf
    assert d.copy_to_host().ravel().tolist() == list(range(16))
    d.free()  # the array took the buffer over
    assert buf.freed
    assert dev.mem_info(acl_mem.MemAttr.HBM_MEM).free == before


def test_device_array_constructor_checks(dev):
    with dev.malloc(16) as small, dev.malloc_host(64) as host:
        with pytest.raises(ValueError):
            DeviceArray((5,), np.float32, small)
        with pytest.raises(TypeError):
            DeviceArray((4,), np.float32, host)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            DeviceArray((4,), np.float32)
        with pytest.raises(TypeError):
            DeviceArray((0,), np.float32)
        with pytest.raises(ValueError):
            DeviceArray((4,), np.float32, small, device=acl_mem.Device(1))
        assert DeviceArray((0,), np.float32, device=dev).buffer is None
    with pytest.raises(FreedBufferError):
        DeviceArray((4,), np.float32, small)


@pytest.mark.parametrize("use", ["to_device", "empty", "DeviceArray", "copy_to_host"])
def test_without_numpy_the_error_says_to_install_it(dev, monkeypatch, use):
    d = empty(dev, (2,), np.int8)
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` raises ImportError
    calls: dict[str, Callable[[], object]] = {
        "to_device": lambda: to_device(dev, [1, 2]),
        "empty": lambda: empty(dev, (2,), "int8"),
        "DeviceArray": lambda: DeviceArray((0,), "int8", device=dev),
        "copy_to_host": d.copy_to_host,
    }
    with pytest.raises(ImportError, match="pip install numpy"):
        calls[use]()
    monkeypatch.undo()
    d.free()


def test_importing_acl_mem_and_its_arrays_does_not_import_numpy():
    import subprocess

    code = ("import sys, acl_mem, acl_mem.arrays; acl_mem.use_backend('fake'); "
            "d = acl_mem.Device(0); d.set_current(); d.malloc(8).free(); "
            "print('numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "False"
