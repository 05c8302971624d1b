"""Ownership traps of the Pythonic layer: an owning buffer cannot be duplicated
(copy, deepcopy, pickle), ``from_ptr`` wraps memory without taking it over unless
told to, ``bool()`` says whether a buffer is usable, and reprs describe every state.

Backend-agnostic: each test runs on the fake and, when it loads, the native backend.
"""

from __future__ import annotations

import copy
import gc
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import acl_mem
from acl_mem import (
    AllocApi,
    ContextNullError,
    DeviceBuffer,
    FeatureNotSupportError,
    FreedBufferError,
    HostBuffer,
    MemAttr,
    raw,
)
from acl_mem.conformance.checks.helpers import in_fresh_thread
from acl_mem.pool import SegmentPool

DUPLICATES: dict[str, Callable[[Any], object]] = {
    "copy.copy": copy.copy,
    "copy.deepcopy": copy.deepcopy,
    **{f"pickle protocol {p}": (lambda obj, p=p: pickle.dumps(obj, protocol=p))
       for p in range(pickle.HIGHEST_PROTOCOL + 1)},
    "deepcopy inside a list": lambda obj: copy.deepcopy([obj]),
    "pickle inside a dict": lambda obj: pickle.dumps({"buf": obj}),
}
KINDS = ["malloc", "align32", "cached", "host", "dvpp", "segment", "host segment",
         "borrowed device", "borrowed host"]


def _free_bytes(dev: acl_mem.Device) -> tuple[int, int]:
    return dev.mem_info(MemAttr.HBM_MEM_NORMAL).free, dev.mem_info(MemAttr.HBM_MEM_HUGE).free


@pytest.fixture
def made(dev: acl_mem.Device) -> Iterator[Callable[[str], Any]]:
    """Make a live buffer of a kind; everything made is released at the end."""
    cleanup: list[Callable[[], object]] = []

    def make(kind: str) -> Any:
        if kind == "malloc":
            return dev.malloc(100)
        if kind == "align32":
            return dev.malloc_align32(100)
        if kind == "cached":
            return dev.malloc_cached(100)
        if kind == "host":
            return dev.malloc_host(100)
        if kind == "dvpp":
            try:
                return dev.dvpp_malloc(100)
            except FeatureNotSupportError:
                pytest.skip("this SoC has no DVPP memory")
        if kind in ("segment", "host segment"):
            api = AllocApi.MALLOC_HOST if kind == "host segment" else AllocApi.MALLOC
            pool = SegmentPool(dev, api=api)
            cleanup.append(pool.close)
            return pool.allocate(100)
        if kind == "borrowed device":
            ptr = raw.aclrtMalloc(100, 0)
            cleanup.append(lambda: raw.aclrtFree(ptr))
            return DeviceBuffer.from_ptr(ptr, 100)
        assert kind == "borrowed host"
        ptr = raw.aclrtMallocHost(100)
        cleanup.append(lambda: raw.aclrtFreeHost(ptr))
        return HostBuffer.from_ptr(ptr, 100)

    yield make
    gc.collect()
    for step in reversed(cleanup):
        step()


# -- copies and pickles are refused ----------------------------------------------------------------


@pytest.mark.parametrize("how", sorted(DUPLICATES))
@pytest.mark.parametrize("kind", KINDS)
def test_duplicating_a_buffer_is_a_type_error(made, kind, how):
    """copy.copy / deepcopy / pickle of any buffer raise TypeError; the buffer is untouched."""
    buf = made(kind)
    buf.memset(0x3C)
    with pytest.raises(TypeError):
        DUPLICATES[how](buf)
    assert not buf.freed
    assert buf.read() == b"\x3c" * 100
    buf.free()


def test_a_refused_copy_frees_nothing_twice(dev):
    """The memory goes back exactly once: the pools end where they started."""
    before = _free_bytes(dev)
    buf = dev.malloc(3 << 20)
    for duplicate in DUPLICATES.values():
        with pytest.raises(TypeError):
            duplicate(buf)
    gc.collect()
    assert not buf.freed
    buf.free()
    assert _free_bytes(dev) == before


def test_pickling_a_freed_buffer_is_refused_too(dev):
    buf = dev.malloc(64)
    buf.free()
    with pytest.raises(TypeError):
        pickle.dumps(buf)
    with pytest.raises(TypeError):
        copy.copy(buf)


# -- from_ptr --------------------------------------------------------------------------------------


def test_device_from_ptr_borrows_by_default(dev):
    """A borrowed DeviceBuffer never frees: not on free(), not when collected."""
    ptr = raw.aclrtMalloc(4096, 0)
    buf = DeviceBuffer.from_ptr(ptr, 4096)
    assert buf.ptr == ptr
    assert buf.size == 4096
    assert buf.owned is False
    assert buf.device == dev
    assert buf.api is AllocApi.MALLOC
    buf.memset(0x11)
    buf.free()
    assert buf.freed
    with pytest.raises(FreedBufferError):
        buf.read()
    again = DeviceBuffer.from_ptr(ptr, 4096)
    del again
    gc.collect()
    # Still allocated: the owner reads it and frees it.
    out = bytearray(4096)
    raw.aclrtMemcpy(acl_mem._hostbuf.host_span(out, writable=True, call="t", name="out").address,
                    4096, ptr, 4096, acl_mem.MemcpyKind.DEVICE_TO_HOST)
    assert out == b"\x11" * 4096
    raw.aclrtFree(ptr)


def test_device_from_ptr_owned_frees(dev):
    before = _free_bytes(dev)
    ptr = raw.aclrtMalloc(3 << 20, 0)
    assert _free_bytes(dev) != before
    buf = DeviceBuffer.from_ptr(ptr, 3 << 20, owned=True)
    assert buf.owned is True
    buf.free()
    assert _free_bytes(dev) == before


def test_device_from_ptr_owned_is_freed_when_collected(dev):
    before = _free_bytes(dev)
    DeviceBuffer.from_ptr(raw.aclrtMalloc(3 << 20, 0), 3 << 20, owned=True)
    gc.collect()
    assert _free_bytes(dev) == before


def test_device_from_ptr_device_argument(dev):
    ptr = raw.aclrtMalloc(64, 0)
    try:
        assert DeviceBuffer.from_ptr(ptr, 64, device=0).device == dev
        assert DeviceBuffer.from_ptr(ptr, 64, device=dev).device == dev
    finally:
        raw.aclrtFree(ptr)


def test_device_from_ptr_without_a_current_device_is_context_null(dev):
    """The default device is the current one; a thread without one gets 107002."""
    _, error = in_fresh_thread(lambda: DeviceBuffer.from_ptr(0x1000, 64))
    assert isinstance(error, ContextNullError)
    assert error.code == 107002


def test_host_from_ptr_borrows_by_default(dev):
    ptr = raw.aclrtMallocHost(256)
    buf = HostBuffer.from_ptr(ptr, 256)
    assert buf.owned is False
    view = buf.view()
    view[:3] = b"abc"
    # Dropping a borrowed wrapper frees nothing, so a live view does not stop it.
    buf.free()
    assert buf.freed
    assert bytes(view[:3]) == b"abc"
    view.release()
    raw.aclrtFreeHost(ptr)


def test_host_from_ptr_owned_refuses_free_under_a_view(dev):
    ptr = raw.aclrtMallocHost(256)
    buf = HostBuffer.from_ptr(ptr, 256, owned=True)
    view = buf.view()
    with pytest.raises(BufferError):
        buf.free()
    assert not buf.freed
    view.release()
    buf.free()
    assert buf.freed


def test_dvpp_from_ptr_owned_frees_with_the_dvpp_call(dev):
    before = _free_bytes(dev)
    try:
        ptr = raw.acldvppMalloc(1024)
    except FeatureNotSupportError:
        pytest.skip("this SoC has no DVPP memory")
    buf = DeviceBuffer.from_ptr(ptr, 1024, owned=True, api="acldvppMalloc")
    assert buf.api is AllocApi.DVPP_MALLOC
    buf.free()  # acldvppFree; aclrtFree would refuse DVPP memory
    assert _free_bytes(dev) == before


def test_constructor_still_takes_ownership(dev):
    before = _free_bytes(dev)
    buf = DeviceBuffer(raw.aclrtMalloc(3 << 20, 0), 3 << 20, AllocApi.MALLOC, dev)
    assert buf.owned is True
    buf.free()
    assert _free_bytes(dev) == before


BAD_ARGUMENTS: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"ptr": 0}, ValueError),
    ({"ptr": -1}, ValueError),
    ({"ptr": 1 << 64}, ValueError),
    ({"ptr": 4096.0}, TypeError),
    ({"ptr": "4096"}, TypeError),
    ({"ptr": True}, TypeError),
    ({"ptr": None}, TypeError),
    ({"size": 0}, ValueError),
    ({"size": -5}, ValueError),
    ({"size": 1.5}, TypeError),
    ({"size": None}, TypeError),
    ({"owned": 1}, TypeError),
    ({"owned": None}, TypeError),
    ({"device": "0"}, TypeError),
    ({"device": True}, TypeError),
]


@pytest.mark.parametrize("cls", [DeviceBuffer, HostBuffer])
@pytest.mark.parametrize(("change", "error"), BAD_ARGUMENTS,
                         ids=[repr(c) for c, _ in BAD_ARGUMENTS])
def test_from_ptr_checks_its_arguments(dev, cls, change, error):
    """Bad arguments are refused before anything is wrapped, naming the call."""
    args: dict[str, Any] = {"ptr": 0x1000, "size": 64, **change}
    ptr, size = args.pop("ptr"), args.pop("size")
    with pytest.raises(error) as e:
        cls.from_ptr(ptr, size, **args)
    assert not isinstance(e.value, acl_mem.AclError)


@pytest.mark.parametrize("api", ["aclrtMallocHost", "aclrtFree", "malloc"])
def test_device_from_ptr_refuses_other_apis(dev, api):
    with pytest.raises(ValueError):
        DeviceBuffer.from_ptr(0x1000, 64, api=api)


def test_from_ptr_positional_only_for_address_and_size(dev):
    with pytest.raises(TypeError):
        DeviceBuffer.from_ptr(0x1000, 64, 0)  # type: ignore[misc]


# -- truth value -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_bool_is_true_while_usable_and_false_once_freed(made, kind):
    buf = made(kind)
    assert buf
    assert bool(buf) is True
    buf.free()
    assert not buf
    assert bool(buf) is False


def test_bool_is_false_once_the_runtime_released_the_memory(backend):
    device = acl_mem.Device(0)
    with device:
        buf = device.malloc(64)
        host = device.malloc_host(64)
        assert buf and host
    # The device's last reference went: the runtime released its memory; page-locked
    # host memory stays until aclrtFreeHost (docs/runtime-model.md §3.7).
    assert not buf
    assert host
    host.free()
    assert not host


def test_bool_of_a_segment_is_false_once_its_pool_closed(dev):
    pool = SegmentPool(dev)
    segment = pool.allocate(64)
    assert segment
    pool.close()
    assert not segment


def test_buffers_have_no_length(dev):
    """bool() is liveness, not size: there is no len() to disagree with it."""
    with dev.malloc(64) as buf, pytest.raises(TypeError):
        len(buf)


# -- repr and context manager ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_repr_in_every_state(made, kind):
    buf = made(kind)
    address = hex(buf.ptr)
    live = repr(buf)
    assert type(buf).__name__ in live
    assert address in live
    assert "size=100" in live
    assert "device=0" in live
    assert ("borrowed" in live) is kind.startswith("borrowed")
    assert "freed" not in live
    buf.free()
    gone = repr(buf)
    assert address in gone  # the address it had
    assert ("dropped" if kind.startswith("borrowed") else "freed") in gone
    assert "size=100" in gone


def test_repr_after_a_device_reset_says_released(backend):
    device = acl_mem.Device(0)
    with device:
        buf = device.malloc(64)
        address = hex(buf.ptr)
    text = repr(buf)
    assert "released" in text
    assert address in text


@pytest.mark.parametrize("kind", KINDS)
def test_context_manager_returns_the_buffer_and_frees_it(made, kind):
    buf = made(kind)
    with buf as entered:
        assert entered is buf
    assert buf.freed
