"""The Pythonic layer: Device as a context manager and the owning buffers.

Sizes follow docs/runtime-model.md §3.5 / §3.7-§3.9 / §7, copies §3.10, memset §3.11, address
queries §4.8-§4.9, device references §3.2. Expected numbers are written out by hand.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import acl_mem
from acl_mem import raw
from acl_mem.enums import MallocPolicy, MemAttr, MemcpyKind, MemLocationType
from acl_mem.errors import (
    ContextNullError,
    ContextReleaseError,
    DeviceNotCurrentError,
    FeatureNotSupportError,
    FreedBufferError,
    InvalidParamError,
)
from acl_mem.sizes import AllocApi

from .helpers import (
    has_giant_pages,
    in_fresh_thread,
    need_dvpp_api,
    padding,
    raise_from_fresh_thread,
)

MiB = 1 << 20
H2H, H2D, D2H, D2D = 0, 1, 2, 3


def _padding() -> int:
    """aclrtMalloc's padding here: the SoC's from CANN 9.1.0, a fixed 32 before
    (docs/runtime-model.md §3.5)."""
    return padding()


def _catch(fn: Callable[..., Any], *args: Any) -> BaseException | None:
    try:
        fn(*args)
    except BaseException as exc:  # the caller inspects it
        return exc
    return None


def _pattern(n: int, seed: int = 7) -> bytes:
    return bytes((seed + 31 * i) % 251 for i in range(n))


def _dvpp_malloc(dev: acl_mem.Device, size: int, **kwargs: Any) -> acl_mem.DeviceBuffer:
    """dvpp_malloc, skipping on SoCs without separate DVPP memory (Ascend950,
    docs/runtime-model.md §3.8) or, for hi_mpi_dvpp_malloc, without DVPP V2 (Ascend310, §3.9),
    where test_host_dvpp.py checks the 207000 they answer; a SoC that has the call must serve
    it."""
    need_dvpp_api(kwargs.get("api", "acldvppMalloc"))
    return dev.dvpp_malloc(size, **kwargs)


def _kinds(spy: Any) -> list[int]:
    """The ``kind`` argument of every aclrtMemcpy the backend saw."""
    return [int(call.args[4]) for call in spy.call_args_list]


# -- Device ----------------------------------------------------------------------------------------


def test_device_context_manager_sets_and_resets_for_calling_thread_spec_3_2(backend):
    """docs/runtime-model.md §3.2: ``with Device(0)`` sets device 0 in this thread and resets it at
    exit."""

    def body() -> tuple[Any, ...]:
        before = _catch(raw.aclrtGetDevice)
        device = acl_mem.Device(0)
        with device as entered:
            inside = raw.aclrtGetDevice()
            current = acl_mem.Device.current()
        after = _catch(raw.aclrtGetDevice)
        second_reset = _catch(raw.aclrtResetDevice, 0)
        return before, entered is device, inside, current, after, second_reset

    before, same, inside, current, after, second_reset = raise_from_fresh_thread(body)
    assert isinstance(before, ContextNullError)
    assert before.code == 107002
    assert same
    assert inside == 0
    assert current == acl_mem.Device(0)
    assert isinstance(after, ContextNullError)
    assert after.code == 107002
    # The `with` block dropped its reference: nothing is left to reset (507007).
    assert isinstance(second_reset, ContextReleaseError)
    assert second_reset.code == 507007


def test_device_context_manager_is_per_thread_spec_3_2(dev):
    """docs/runtime-model.md §3.2: a thread with no device of its own gets 107002 while another
    holds one."""
    _, error = in_fresh_thread(raw.aclrtGetDevice)
    assert isinstance(error, ContextNullError)
    assert error.code == 107002
    assert raw.aclrtGetDevice() == 0


def test_nested_device_blocks_keep_the_device_spec_3_2(dev):
    """docs/runtime-model.md §3.2: an inner ``with Device(0)`` adds a reference; its exit keeps the
    memory."""
    with acl_mem.Device(0) as inner:
        buf = inner.malloc(100)
        buf.memset(0x5A)
    assert not buf.freed
    assert raw.aclrtGetDevice() == 0
    assert buf.read() == b"\x5a" * 100
    buf.free()


def test_allocating_on_a_device_that_is_not_current_raises(dev):
    """docs/runtime-model.md §3.2: allocation runs in the current context; another device must not
    be used."""
    if acl_mem.Device.count() < 2:
        pytest.skip("needs two devices")
    other = acl_mem.Device(1)
    with pytest.raises(DeviceNotCurrentError):
        other.malloc(100)
    with pytest.raises(DeviceNotCurrentError):
        other.mem_info(MemAttr.HBM_MEM)


def test_malloc_without_current_device_makes_it_current_spec_3_2(backend):
    """docs/runtime-model.md §3.2: raw aclrtMalloc in a thread with no device gets 107002; a
    Device call there makes the device current (one reference, however many calls follow),
    and one reset releases it with the memory made since."""

    def body() -> tuple[Any, ...]:
        raw_error = _catch(raw.aclrtMalloc, 100, 0)
        device = acl_mem.Device(0)
        buf = device.malloc(100)
        current = raw.aclrtGetDevice()
        device.malloc(64).free()
        assert device.use() is device
        device.mem_info(MemAttr.HBM_MEM)
        live_before = buf.size
        device.reset()
        after = _catch(raw.aclrtGetDevice)
        freed = _catch(lambda: buf.ptr)
        second_reset = _catch(raw.aclrtResetDevice, 0)
        return raw_error, current, live_before, after, freed, second_reset

    raw_error, current, live_before, after, freed, second_reset = raise_from_fresh_thread(body)
    assert isinstance(raw_error, ContextNullError)
    assert raw_error.code == 107002
    assert current == 0
    assert live_before == 100
    assert isinstance(after, ContextNullError)
    assert after.code == 107002
    assert isinstance(freed, FreedBufferError)
    assert isinstance(second_reset, ContextReleaseError)
    assert second_reset.code == 507007


def test_use_keeps_the_device_past_a_with_block_spec_3_2(backend):
    """docs/runtime-model.md §3.2: use() holds a reference of its own, so memory made inside a
    `with Device(0)` block survives the block's reset; reset() drops it."""

    def body() -> tuple[Any, ...]:
        device = acl_mem.Device(0)
        with device:
            device.use()
            buf = device.malloc(256)
        kept = raw.aclrtGetDevice(), buf.size
        device.reset()
        return kept, _catch(lambda: buf.ptr)

    kept, freed = raise_from_fresh_thread(body)
    assert kept == (0, 256)
    assert isinstance(freed, FreedBufferError)


def test_malloc_size_checks_spec_3_5(dev):
    """docs/runtime-model.md §3.5: size 0 -> 100000; sizes that are not a size_t never reach the
    runtime."""
    with pytest.raises(InvalidParamError) as e:
        dev.malloc(0)
    assert e.value.code == 100000
    with pytest.raises(InvalidParamError) as e:
        dev.malloc_host(0)
    assert e.value.code == 100000
    with pytest.raises(ValueError):
        dev.malloc(-1)
    with pytest.raises(TypeError):
        dev.malloc(1.5)
    with pytest.raises(TypeError):
        dev.malloc(True)


# -- identity and sizes ----------------------------------------------------------------------------

# (method, size, policy, {SoC padding: allocated bytes}) — docs/runtime-model.md §3.5, §3.7-§3.9,
# §7.
_SIZES = [
    ("malloc", 100, MallocPolicy.HUGE_FIRST, {32: 160, 16: 128, 0: 128}),
    ("malloc", 1, MallocPolicy.HUGE_FIRST, {32: 64, 16: 32, 0: 32}),
    ("malloc", 32, MallocPolicy.HUGE_FIRST, {32: 64, 16: 64, 0: 32}),
    ("malloc", 33, MallocPolicy.NORMAL_ONLY, {32: 96, 16: 64, 0: 64}),
    ("malloc_cached", 100, MallocPolicy.HUGE_FIRST, {32: 160, 16: 128, 0: 128}),
    ("malloc_align32", 100, MallocPolicy.HUGE_FIRST, {32: 128, 16: 128, 0: 128}),
    ("malloc_align32", 1, MallocPolicy.HUGE_FIRST, {32: 32, 16: 32, 0: 32}),
    ("malloc_align32", 33, MallocPolicy.HUGE_FIRST, {32: 64, 16: 64, 0: 64}),
    # OR-ed flags are not an error and keep the padding (docs/runtime-model.md §3.5, §3.13).
    ("malloc", 100, MallocPolicy.HUGE_FIRST | MallocPolicy.TYPE_HIGH_BAND_WIDTH,
     {32: 160, 16: 128, 0: 128}),
    # The HUGE1G_ONLY_P2P value drops the padding for aclrtMallocCached too, although
    # Cached then allocates with the default policy (docs/runtime-model.md §3.5).
    ("malloc_cached", 100, MallocPolicy.HUGE1G_ONLY_P2P, {32: 128, 16: 128, 0: 128}),
]


@pytest.mark.parametrize(("method", "size", "policy", "expected"), _SIZES)
def test_device_buffer_identity_and_allocated_size_spec_3_5(dev, method, size, policy, expected):
    """docs/runtime-model.md §3.5/§7: aclrtMalloc(100) -> 160 on padding-32 SoCs, Align32(100) ->
    128."""
    api = {"malloc": AllocApi.MALLOC, "malloc_cached": AllocApi.MALLOC_CACHED,
           "malloc_align32": AllocApi.MALLOC_ALIGN32}[method]
    buf = getattr(dev, method)(size, policy)
    try:
        assert isinstance(buf, acl_mem.DeviceBuffer)
        assert isinstance(buf.ptr, int)
        assert buf.ptr != 0
        assert buf.ptr % 64 == 0  # documented start alignment (docs/runtime-model.md §3.5)
        assert buf.size == size
        assert buf.allocated_size == expected[_padding()]
        assert buf.api is api
        assert buf.api == api.value
        assert buf.device == dev
        assert buf.device.id == 0
        assert not buf.freed
    finally:
        buf.free()


def test_huge1g_policy_has_no_padding_spec_3_5(dev):
    """docs/runtime-model.md §3.5: HUGE1G_ONLY drops the SoC padding: aclrtMalloc(100) -> 128;
    a device without 1 GiB pages (aclrtGetMemInfo(ACL_HBM_MEM_HUGE1G) answers 207000; Atlas A2
    and A3 have them, §3.13) answers 207000 to the allocation too."""
    if not has_giant_pages():
        with pytest.raises(FeatureNotSupportError) as e:
            dev.malloc(100, MallocPolicy.HUGE1G_ONLY)
        assert e.value.code == 207000
        return
    buf = dev.malloc(100, MallocPolicy.HUGE1G_ONLY)
    try:
        assert buf.allocated_size == 128
    finally:
        buf.free()


def test_host_buffer_identity_and_allocated_size_spec_3_7(dev):
    """docs/runtime-model.md §3.7: aclrtMallocHost rounds to 32 without padding: 100 -> 128, 1 ->
    32."""
    with dev.malloc_host(100) as host, dev.malloc_host(1) as tiny:
        assert isinstance(host, acl_mem.HostBuffer)
        assert host.ptr % 64 == 0
        assert host.size == 100
        assert host.allocated_size == 128
        assert tiny.allocated_size == 32
        assert host.api is AllocApi.MALLOC_HOST
        assert host.device == dev


@pytest.mark.parametrize(
    ("api", "free_call"),
    [("acldvppMalloc", "acldvppFree"), ("hi_mpi_dvpp_malloc", "hi_mpi_dvpp_free")],
)
def test_dvpp_malloc_spec_3_8_3_9(dev, backend, mocker, api, free_call):
    """docs/runtime-model.md §3.8/§3.9: DVPP memory is ALIGN_UP(size,32)+32 bytes, 128-byte
    aligned."""
    spy = mocker.spy(backend, free_call)
    buf = _dvpp_malloc(dev, 100, api=api)
    assert isinstance(buf, acl_mem.DeviceBuffer)
    assert buf.api is AllocApi(api)
    assert buf.size == 100
    assert buf.allocated_size == 160
    assert buf.ptr % 128 == 0
    assert buf.device == dev
    buf.memset(0x3C)
    assert buf.read() == b"\x3c" * 100
    buf.free()
    assert spy.call_count == 1


def test_dvpp_malloc_default_api_and_one_byte_spec_3_8(dev):
    """docs/runtime-model.md §3.8: acldvppMalloc is the default; 1 byte -> 64."""
    with _dvpp_malloc(dev, 1) as buf:
        assert buf.api is AllocApi.DVPP_MALLOC
        assert buf.allocated_size == 64


def test_dvpp_malloc_rejects_non_dvpp_api(dev):
    """docs/runtime-model.md §3.8/§3.9: dvpp_malloc allocates media memory only."""
    with pytest.raises(ValueError):
        dev.dvpp_malloc(100, api="aclrtMalloc")
    with pytest.raises(ValueError):
        dev.dvpp_malloc(100, api="nonsense")


# -- lifetime --------------------------------------------------------------------------------------


def test_free_is_idempotent_spec_3_6(dev, backend, mocker):
    """docs/runtime-model.md §3.6: free() calls aclrtFree once; a second free() does nothing."""
    spy = mocker.spy(backend, "aclrtFree")
    buf = dev.malloc(100)
    buf.free()
    buf.free()
    assert buf.freed
    assert spy.call_count == 1


def test_with_block_frees_at_exit_spec_3_6(dev):
    """docs/runtime-model.md §3.6/§3.12: the pool's free bytes return to their start value after the
    block."""
    start = dev.mem_info(MemAttr.HBM_MEM).free
    with dev.malloc(3 * MiB) as buf:
        assert dev.mem_info(MemAttr.HBM_MEM).free <= start - buf.allocated_size
    assert buf.freed
    assert dev.mem_info(MemAttr.HBM_MEM).free == start


def test_freed_buffer_raises_freed_buffer_error(dev):
    """docs/runtime-model.md §3.6: a freed pointer must not be used; the buffer says so."""
    buf = dev.malloc(100)
    buf.free()
    with pytest.raises(FreedBufferError):
        _ = buf.ptr
    with pytest.raises(FreedBufferError):
        buf.read()
    with pytest.raises(FreedBufferError):
        buf.copy_from(b"abc")
    with pytest.raises(FreedBufferError):
        buf.copy_to(bytearray(10), 10)
    with pytest.raises(FreedBufferError):
        buf.memset(0)
    with pytest.raises(FreedBufferError):
        buf.address_range()
    with pytest.raises(FreedBufferError):
        buf.attributes()
    with dev.malloc(100) as other, pytest.raises(FreedBufferError):
        other.copy_from(buf)
    assert issubclass(FreedBufferError, ValueError)


def test_freed_host_buffer_raises_freed_buffer_error(dev):
    """docs/runtime-model.md §3.7: a freed host buffer gives no view and no data."""
    host = dev.malloc_host(64)
    host.free()
    with pytest.raises(FreedBufferError):
        host.view()
    with pytest.raises(FreedBufferError):
        host.numpy()
    with pytest.raises(FreedBufferError):
        host.read()


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no export error left to report
def test_freed_host_buffer_refuses_the_buffer_protocol_with_freed_buffer_error(dev):
    """A freed host buffer gives no memoryview, bytes or array: FreedBufferError on every
    Python (3.10 / 3.11 gave SystemError, which the buffer slot could not avoid), and the
    freed object still says what it is."""
    host = dev.malloc_host(64)
    borrowed = acl_mem.HostBuffer.from_ptr(host.ptr, 64)
    borrowed.free()
    host.free()
    for freed in (host, borrowed):
        with pytest.raises(FreedBufferError):
            memoryview(freed)
        with pytest.raises(FreedBufferError):
            bytes(freed)
        assert isinstance(freed, acl_mem.HostBuffer) and freed.freed and not freed
        assert type(freed).__name__ == "HostBuffer"
        freed.free()  # a second free still does nothing


def test_forgotten_buffer_is_freed_by_finalizer_spec_3_6(dev, backend, mocker):
    """docs/runtime-model.md §3.6: a dropped buffer is freed on collection and its pages come
    back."""
    start = dev.mem_info(MemAttr.HBM_MEM).free
    spy = mocker.spy(backend, "aclrtFree")
    buf = dev.malloc(3 * MiB)
    assert dev.mem_info(MemAttr.HBM_MEM).free < start
    del buf
    gc.collect()
    assert spy.call_count == 1
    assert dev.mem_info(MemAttr.HBM_MEM).free == start


def test_buffer_after_device_reset_reports_freed_spec_3_2(backend, mocker):
    """docs/runtime-model.md §3.2: resetting the device to zero references releases its memory."""
    spy = mocker.spy(backend, "aclrtFree")
    device = acl_mem.Device(0)
    with device:
        start = device.mem_info(MemAttr.HBM_MEM).free
        buf = device.malloc(3 * MiB)
        kept = device.malloc(100)
    assert buf.freed
    assert kept.freed
    with pytest.raises(FreedBufferError):
        _ = buf.ptr
    buf.free()  # must not raise: the runtime already released it
    del kept
    gc.collect()
    assert spy.call_count == 0
    with device:
        assert device.mem_info(MemAttr.HBM_MEM).free == start


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_finalizer_does_nothing_in_forked_child(dev, backend, mocker):
    """docs/runtime-model.md §3.6: a forked child does not own the parent's device memory; never
    free it."""
    dropped = dev.malloc(100)
    freed_explicitly = dev.malloc(100)
    spy = mocker.spy(backend, "aclrtFree")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        status = 0
        try:
            if not (dropped.freed and freed_explicitly.freed):
                status |= 4
            freed_explicitly.free()
            if spy.call_count:
                status |= 1
            del dropped
            gc.collect()
            if spy.call_count:
                status |= 2
        except BaseException:  # report through the exit status
            status |= 8
        finally:
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wait_status)
    assert code & 1 == 0, "free() in the child called the backend's aclrtFree"
    assert code & 2 == 0, "the finalizer in the child called the backend's aclrtFree"
    assert code & 4 == 0, "buffers in the child did not report themselves freed"
    assert code == 0
    assert spy.call_count == 0
    assert not dropped.freed
    dropped.free()
    freed_explicitly.free()
    assert spy.call_count == 2


# -- copies ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["bytes", "bytearray", "memoryview", "numpy"])
def test_copy_from_host_object_is_h2d_spec_3_10(dev, backend, mocker, source):
    """docs/runtime-model.md §3.10: copy from host objects with offsets and counts, kind H2D (1)."""
    data = _pattern(64, seed=3)
    src = {
        "bytes": lambda: data,
        "bytearray": lambda: bytearray(data),
        "memoryview": lambda: memoryview(bytearray(data)),
        "numpy": lambda: np.frombuffer(data, dtype=np.uint8).copy(),
    }[source]()
    with dev.malloc(100) as buf:
        buf.memset(0)
        spy = mocker.spy(backend, "aclrtMemcpy")
        buf.copy_from(src, 20, offset=30, src_offset=5)
        assert _kinds(spy) == [H2D]
        expected = bytearray(100)
        expected[30:50] = data[5:25]
        assert buf.read(100) == bytes(expected)
        buf.copy_from(src)  # all of src, at offset 0
        expected[0:64] = data
        assert buf.read() == bytes(expected)


@pytest.mark.parametrize("target", ["bytearray", "memoryview", "numpy"])
def test_copy_to_host_object_is_d2h_spec_3_10(dev, backend, mocker, target):
    """docs/runtime-model.md §3.10: copy to writable host objects with offsets and counts, kind D2H
    (2)."""
    data = _pattern(100, seed=11)
    storage = bytearray(b"\xee" * 64)
    dst = {
        "bytearray": lambda: storage,
        "memoryview": lambda: memoryview(storage),
        "numpy": lambda: np.frombuffer(storage, dtype=np.uint8),
    }[target]()
    with dev.malloc(100) as buf:
        buf.copy_from(data)
        spy = mocker.spy(backend, "aclrtMemcpy")
        buf.copy_to(dst, 16, offset=40, dst_offset=8)
        assert _kinds(spy) == [D2H]
    expected = bytearray(b"\xee" * 64)
    expected[8:24] = data[40:56]
    assert storage == expected


def test_copy_between_device_buffers_is_d2d_spec_3_10(dev, backend, mocker):
    """docs/runtime-model.md §3.10: device to device copies pass kind D2D (3)."""
    data = _pattern(200, seed=5)
    with dev.malloc(200) as src, dev.malloc_align32(150) as dst:
        src.copy_from(data)
        dst.memset(0x77)
        spy = mocker.spy(backend, "aclrtMemcpy")
        dst.copy_from(src, 50, offset=10, src_offset=100)
        src.copy_to(dst, 20, offset=0, dst_offset=120)
        assert _kinds(spy) == [D2D, D2D]
        expected = bytearray(b"\x77" * 150)
        expected[10:60] = data[100:150]
        expected[120:140] = data[0:20]
        assert dst.read() == bytes(expected)


def test_copies_with_host_buffers_pick_the_kind_spec_3_10(dev, backend, mocker):
    """docs/runtime-model.md §3.10: HostBuffer is host memory: H2D, D2H and H2H as the sides say."""
    data = _pattern(96, seed=13)
    with dev.malloc_host(96) as host, dev.malloc_host(96) as host2, dev.malloc(96) as device:
        spy = mocker.spy(backend, "aclrtMemcpy")
        host.copy_from(data)  # bytes -> pinned host
        device.copy_from(host)  # pinned host -> device
        host2.copy_from(device, 32, offset=64, src_offset=16)  # device -> pinned host
        host2.copy_from(host, 64)  # pinned host -> pinned host
        host.copy_to(device, 8, offset=0, dst_offset=88)  # pinned host -> device
        assert _kinds(spy) == [H2H, H2D, D2H, H2H, H2D]
        assert device.read() == data[:88] + data[:8]
        assert host2.read() == data[:64] + data[16:48]


def test_read_returns_bytes_spec_3_10(dev):
    """docs/runtime-model.md §3.10: read() is a D2H copy into a new bytes object."""
    data = _pattern(100, seed=17)
    with dev.malloc(100) as buf:
        buf.copy_from(data)
        whole = buf.read()
        assert type(whole) is bytes
        assert whole == data
        assert buf.read(10, 90) == data[90:100]
        assert buf.read(offset=95) == data[95:]
        assert buf.read(0) == b""
        with pytest.raises(ValueError):
            buf.read(11, 90)


def test_copy_bounds_use_the_requested_size(dev, backend, mocker):
    """docs/runtime-model.md §3.5: the padding belongs to the runtime; copies stay inside the
    requested size."""
    with dev.malloc(100) as buf:
        spy = mocker.spy(backend, "aclrtMemcpy")
        with pytest.raises(ValueError):
            buf.copy_from(bytes(101))
        with pytest.raises(ValueError):
            buf.copy_from(bytes(10), offset=95)
        with pytest.raises(ValueError):
            buf.copy_from(bytes(10), 5, src_offset=6)
        with pytest.raises(ValueError):
            buf.copy_from(bytes(10), src_offset=11)
        with pytest.raises(ValueError):
            buf.copy_to(bytearray(10), 11)
        with pytest.raises(ValueError):
            buf.copy_from(bytes(10), offset=-1)
        assert spy.call_count == 0
        buf.copy_from(bytes(10), 0)  # nothing to copy: no runtime call
        assert spy.call_count == 0


def test_copy_rejects_unusable_host_objects(dev, backend, mocker):
    """docs/runtime-model.md §3.10: only contiguous buffers; read-only objects cannot be written
    to."""
    with dev.malloc(64) as buf:
        spy = mocker.spy(backend, "aclrtMemcpy")
        with pytest.raises(ValueError):
            buf.copy_to(b"\x00" * 64)  # bytes are read-only
        with pytest.raises(ValueError):
            buf.copy_from(np.zeros((8, 8), dtype=np.uint8)[:, ::2])  # not contiguous
        with pytest.raises(TypeError):
            buf.copy_from([1, 2, 3])
        assert spy.call_count == 0


def test_copy_accepts_multibyte_numpy_arrays(dev):
    """docs/runtime-model.md §3.10: a numpy array is copied as its bytes."""
    values = np.arange(25, dtype=np.float32)
    out = np.zeros(25, dtype=np.float32)
    with dev.malloc(values.nbytes) as buf:
        buf.copy_from(values)
        buf.copy_to(out)
    np.testing.assert_array_equal(out, values)


# -- memset ----------------------------------------------------------------------------------------


def test_memset_fills_spec_3_11(dev):
    """docs/runtime-model.md §3.11: memset writes the byte value over the range."""
    with dev.malloc(100) as buf:
        buf.memset(0xAB)
        assert buf.read() == b"\xab" * 100
        buf.memset(0x11, 10, offset=5)
        assert buf.read() == b"\xab" * 5 + b"\x11" * 10 + b"\xab" * 85
        buf.memset(0x22, offset=90)
        assert buf.read(10, 90) == b"\x22" * 10
        buf.memset(0x33, 0, offset=100)
        assert buf.read(5) == b"\xab" * 5


def test_memset_checks_value_and_range_spec_3_11(dev):
    """docs/runtime-model.md §3.11: value is one byte; the range stays inside the requested size."""
    with dev.malloc(100) as buf:
        with pytest.raises(ValueError):
            buf.memset(256)
        with pytest.raises(ValueError):
            buf.memset(-1)
        with pytest.raises(ValueError):
            buf.memset(0, 11, offset=90)


def test_memset_on_host_buffer_spec_3_11(dev):
    """docs/runtime-model.md §3.11: host memory from aclrtMallocHost can be memset too."""
    with dev.malloc_host(40) as host:
        host.memset(0x42)
        assert bytes(host.view()) == b"\x42" * 40


# -- host buffers ----------------------------------------------------------------------------------


def test_host_view_is_writable_and_shared_with_numpy_spec_3_7(dev):
    """docs/runtime-model.md §3.7: pinned host memory can be used in place: numpy writes reach the
    device."""
    data = _pattern(128, seed=23)
    with dev.malloc_host(128) as host, dev.malloc(128) as device:
        view = host.view()
        assert isinstance(view, memoryview)
        assert not view.readonly
        assert view.nbytes == 128
        array = np.frombuffer(view, dtype=np.uint8)
        array[:] = np.frombuffer(data, dtype=np.uint8)
        assert host.read() == data
        device.copy_from(host)
        assert device.read() == data
        device.memset(0x07, 16, offset=32)
        host.copy_from(device)
        assert array[32:48].tolist() == [7] * 16
        assert array[:32].tobytes() == data[:32]
        view[0] = 0xFF
        assert host.read(1) == b"\xff"
        del array, view


def test_host_numpy_spec_3_7(dev):
    """docs/runtime-model.md §3.7: HostBuffer.numpy() is an array over the memory itself."""
    with dev.malloc_host(64) as host:
        array = host.numpy()
        assert isinstance(array, np.ndarray)
        assert array.dtype == np.uint8
        assert array.shape == (64,)
        array[:] = 9
        assert host.read() == b"\x09" * 64
        words = host.numpy("uint32")
        assert words.shape == (16,)
        words[0] = 0x01020304
        assert host.read(4) == (0x01020304).to_bytes(4, "little")
        del array, words


def test_host_free_with_live_view_raises_buffer_error_spec_3_7(dev):
    """docs/runtime-model.md §3.7: freeing under a live view is refused; after `del view` it
    works."""
    host = dev.malloc_host(64)
    view = host.view()
    with pytest.raises(BufferError):
        host.free()
    assert not host.freed
    view[0] = 1
    assert host.read(1) == b"\x01"
    del view
    host.free()
    assert host.freed


def test_host_free_after_view_release(dev):
    """docs/runtime-model.md §3.7: memoryview.release() ends the view as well."""
    host = dev.malloc_host(64)
    view = host.view()
    view.release()
    host.free()
    assert host.freed


def test_host_free_with_live_numpy_array_raises_buffer_error(dev):
    """docs/runtime-model.md §3.7: an array over the memory is a view too."""
    host = dev.malloc_host(64)
    array = host.numpy()
    with pytest.raises(BufferError):
        host.free()
    del array
    host.free()
    assert host.freed


def test_dropped_host_buffer_is_freed_after_its_last_view(dev, backend, mocker):
    """docs/runtime-model.md §3.7: memory of a dropped buffer stays valid while a view lives."""
    spy = mocker.spy(backend, "aclrtFreeHost")
    host = dev.malloc_host(64)
    view = host.view()
    del host
    gc.collect()
    assert spy.call_count == 0
    view[:4] = b"abcd"
    assert bytes(view[:4]) == b"abcd"
    del view
    gc.collect()
    assert spy.call_count == 1


# -- address queries -------------------------------------------------------------------------------


@pytest.mark.cann("9.0.1", "9.1.0")  # aclrtMemGetAddressRange exists from 9.0.1
def test_address_range_contains_the_buffer_spec_4_8(dev):
    """docs/runtime-model.md §4.8: the block holding ptr covers at least the allocated bytes."""
    with dev.malloc(100) as buf, dev.malloc_host(100) as host:
        for b in (buf, host):
            base, size = b.address_range()
            assert base <= b.ptr < base + size
            assert b.ptr + b.allocated_size <= base + size


@pytest.mark.cann("9.0.1", "9.1.0")
@pytest.mark.open_question(15)
def test_address_range_is_page_rounded_spec_4_8(dev):
    """docs/runtime-model.md §4.8/§8.15: psize = padded size rounded to its page (4 KiB / 2 MiB)."""
    with dev.malloc(100) as small, dev.malloc(3 * MiB) as large:
        assert small.address_range() == (small.ptr, 4096)
        # 3 MiB + padding > 1 MiB takes huge pages under HUGE_FIRST: 4 MiB.
        assert large.address_range() == (large.ptr, 4 * MiB)


@pytest.mark.cann("8.5.0")
def test_address_range_does_not_exist_on_8_5_0_spec_4_8(backend, dev):
    """docs/runtime-model.md §4.8 Releases: CANN 8.5.0 has no aclrtMemGetAddressRange, so
    Buffer.address_range() raises FunctionNotAvailableError naming the call and the release
    (not an AclError); the buffer stays usable."""
    with dev.malloc(100) as buf, dev.malloc_host(100) as host:
        for b in (buf, host):
            with pytest.raises(acl_mem.FunctionNotAvailableError) as e:
                b.address_range()
            assert (e.value.function, e.value.release) == ("aclrtMemGetAddressRange", "8.5.0")
            assert not isinstance(e.value, acl_mem.AclError)
        buf.copy_from(b"still here")
        assert buf.read(10) == b"still here"


def test_attributes_spec_4_9(dev):
    """docs/runtime-model.md §4.9: device memory reports DEVICE and the device id; host memory HOST,
    id 0."""
    with dev.malloc(100) as buf, dev.malloc_host(100) as host:
        attrs = buf.attributes()
        assert attrs.type == MemLocationType.DEVICE
        assert attrs.id == 0
        assert attrs.pageSize > 0
        host_attrs = host.attributes()
        assert host_attrs.type == MemLocationType.HOST
        assert host_attrs.id == 0


@pytest.mark.open_question(15)
def test_attributes_page_size_spec_4_9(dev):
    """docs/runtime-model.md §4.9/§8.15: pageSize 4096 for normal pages, 2 MiB for huge pages."""
    with dev.malloc(100) as small, dev.malloc(3 * MiB, MallocPolicy.HUGE_ONLY) as large:
        assert small.attributes().pageSize == 4096
        assert large.attributes().pageSize == 2 * MiB


def test_attributes_report_user_device_id_spec_4_9(backend):
    """docs/runtime-model.md §4.9: location.id is the device the memory belongs to."""
    if acl_mem.Device.count() < 2:
        pytest.skip("needs two devices")
    with acl_mem.Device(1) as device, device.malloc(100) as buf:
        assert buf.device.id == 1
        assert buf.attributes().type == MemLocationType.DEVICE
        assert buf.attributes().id == 1


# -- repr ------------------------------------------------------------------------------------------


def test_repr_of_live_and_freed_buffers(backend):
    """repr works in every state: live, freed, and released by a device reset (docs/runtime-model.md
    §3.2)."""
    device = acl_mem.Device(0)
    with device:
        live = device.malloc(100)
        host = device.malloc_host(100)
        freed = device.malloc(100)
        freed.free()
        for b in (live, host, freed):
            text = repr(b)
            assert isinstance(text, str)
            assert text
        host.free()
        assert repr(host)
    assert repr(live)  # released by the reset


def test_memcpy_kind_values_match_the_header_spec_2():
    """docs/runtime-model.md §2: the kinds the layer passes are the header's values."""
    assert (MemcpyKind.HOST_TO_HOST, MemcpyKind.HOST_TO_DEVICE, MemcpyKind.DEVICE_TO_HOST,
            MemcpyKind.DEVICE_TO_DEVICE) == (H2H, H2D, D2H, D2D)


@pytest.mark.parametrize("method", ["read", "memset"])
def test_offset_beyond_the_buffer_is_value_error(dev, method):
    """An offset past the requested size is refused before any runtime call."""
    buf = dev.malloc(64)
    call = buf.read if method == "read" else (lambda offset: buf.memset(1, offset=offset))
    with pytest.raises(ValueError) as e:
        call(offset=100)
    assert not isinstance(e.value, acl_mem.AclError)
    buf.free()
