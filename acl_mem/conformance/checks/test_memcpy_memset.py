"""Conformance: synchronous aclrtMemcpy (docs/runtime-model.md §3.10) and aclrtMemset
(docs/runtime-model.md §3.11).

Every expected code and byte is written out by hand from the runtime model; the check order
of §3.10 on 9.1.0 is: count 0 (success) -> NULL (100000) -> kind (100000) -> destMax 0 /
count > destMax (107000) -> dst == src (success) -> context (107002) -> driver. 8.5.0 and
9.0.1 check NULL -> kind in the ACL layer and refuse count 0 in the runtime (107000, with
the destMax checks); checks whose expectation depends on the release say so with the
``cann`` marker or fixture (docs/runtime-model.md §0.1).
"""

from __future__ import annotations

import ctypes

import cffi
import numpy as np
import pytest
from typing_extensions import Buffer

from acl_mem import raw
from acl_mem.enums import MallocPolicy, MemcpyKind
from acl_mem.errors import (
    ContextNullError,
    InvalidParamError,
    RtParamInvalidError,
)

from .helpers import in_fresh_thread, need_two_devices, since

_ffi = cffi.FFI()

H2H = MemcpyKind.HOST_TO_HOST
H2D = MemcpyKind.HOST_TO_DEVICE
D2H = MemcpyKind.DEVICE_TO_HOST
D2D = MemcpyKind.DEVICE_TO_DEVICE


# -- helpers ---------------------------------------------------------------------------------------
def addr_of(obj: Buffer) -> int:
    """Raw address of a writable buffer-protocol object (bytearray, numpy array)."""
    return int(_ffi.cast("uintptr_t", _ffi.from_buffer(obj, require_writable=True)))


def pattern(n: int, seed: int = 1) -> np.ndarray:
    return ((np.arange(n, dtype=np.uint32) * 7 + seed) % 251).astype(np.uint8)


def device_bytes(ptr: int, n: int) -> bytes:
    """Read ``n`` device bytes back through a D2H copy into a fresh numpy array."""
    out = np.zeros(n, dtype=np.uint8)
    raw.aclrtMemcpy(out.ctypes.data, n, ptr, n, D2H)
    return out.tobytes()


def upload(ptr: int, data: np.ndarray) -> None:
    raw.aclrtMemcpy(ptr, data.nbytes, data.ctypes.data, data.nbytes, H2D)


# -- §3.10 check order -----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [6, 7, 8, 0xFFFFFFFF])
@pytest.mark.parametrize("count", [0, 16])
def test_memcpy_kind_out_of_range_is_100000_even_with_count_0(dev, cann, kind, count):
    """docs/runtime-model.md §3.10 step 1: kind 6/7 (and anything > 5) -> 100000; on 9.1.0
    count 0 is checked first and succeeds, on older releases it reaches the runtime after
    the kind check."""
    a = np.zeros(16, dtype=np.uint8)
    b = np.zeros(16, dtype=np.uint8)
    for dst, src in [(0, 0), (a.ctypes.data, b.ctypes.data)]:
        if count == 0 and since(cann, "9.1.0"):
            raw.aclrtMemcpy(dst, 16, src, count, kind)
            continue
        with pytest.raises(InvalidParamError) as e:
            raw.aclrtMemcpy(dst, 16, src, count, kind)
        assert e.value.code == 100000


@pytest.mark.cann("9.1.0")
@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4, 5])
def test_memcpy_count_0_succeeds_with_null_pointers(dev, kind):
    """docs/runtime-model.md §3.10 step 1 (9.1.0): count 0 -> success, nothing done, even for
    NULL dst/src."""
    raw.aclrtMemcpy(0, 0, 0, 0, kind)
    raw.aclrtMemcpy(0, 16, 0, 0, kind)


@pytest.mark.cann("8.5.0", "9.0.1")
@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4, 5])
def test_memcpy_count_0_with_null_pointers_is_100000_before_9_1(dev, kind):
    """docs/runtime-model.md §3.10 Releases: before 9.1.0 the ACL layer checks NULL dst/src
    first and does not look at the count -> 100000."""
    for dest_max in (0, 16):
        with pytest.raises(InvalidParamError) as e:
            raw.aclrtMemcpy(0, dest_max, 0, 0, kind)
        assert e.value.code == 100000


def test_memcpy_count_0_touches_nothing(dev, cann):
    """docs/runtime-model.md §3.10: count 0 with real pointers copies nothing: a success on
    9.1.0, 107000 from the runtime on 8.5.0 and 9.0.1 (destMax 0 too)."""
    src = pattern(32)
    dst = np.zeros(32, dtype=np.uint8)
    for dest_max in (32, 0):
        if since(cann, "9.1.0"):
            raw.aclrtMemcpy(dst.ctypes.data, dest_max, src.ctypes.data, 0, H2H)
        else:
            with pytest.raises(RtParamInvalidError) as e:
                raw.aclrtMemcpy(dst.ctypes.data, dest_max, src.ctypes.data, 0, H2H)
            assert e.value.code == 107000
    assert dst.tobytes() == bytes(32)


@pytest.mark.cann("8.5.0", "9.0.1")
def test_memcpy_count_0_is_refused_with_the_runtime_checks_before_9_1(dev):
    """docs/runtime-model.md §3.10 Releases: before 9.1.0 count 0 is one of the runtime's
    checks: after NULL and kind (100000), together with destMax 0 (107000), before dst == src
    (so a count-0 copy onto itself is 107000 too)."""
    ptr = raw.aclrtMalloc(64)
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtMemcpy(ptr, 64, ptr, 0, 6)
    assert e.value.code == 100000
    for dst, src in [(ptr, ptr), (ptr + 32, ptr)]:
        with pytest.raises(RtParamInvalidError) as e2:
            raw.aclrtMemcpy(dst, 32, src, 0, D2D)
        assert e2.value.code == 107000


@pytest.mark.parametrize("which", ["dst", "src", "both"])
def test_memcpy_null_pointer_is_100000(dev, which):
    """docs/runtime-model.md §3.10 step 3: NULL dst or src with count > 0 -> 100000."""
    ptr = raw.aclrtMalloc(64)
    dst = 0 if which in ("dst", "both") else ptr
    src = 0 if which in ("src", "both") else ptr
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtMemcpy(dst, 64, src, 64, D2D)
    assert e.value.code == 100000


def test_memcpy_null_beats_destmax_checks(dev):
    """docs/runtime-model.md §3.10: the ACL NULL check (100000) runs before the runtime destMax
    check (107000)."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtMemcpy(0, 0, 0, 64, H2D)
    assert e.value.code == 100000


def test_memcpy_destmax_0_is_107000(dev):
    """docs/runtime-model.md §3.10 step 4: destMax 0 (count > 0) -> 107000."""
    ptr = raw.aclrtMalloc(64)
    host = pattern(64)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemcpy(ptr, 0, host.ctypes.data, 64, H2D)
    assert e.value.code == 107000


@pytest.mark.parametrize("direction", ["H2D", "D2H", "D2D"])
def test_memcpy_count_above_destmax_is_107000_and_copies_nothing(dev, direction):
    """docs/runtime-model.md §3.10 step 4: count > destMax -> 107000 and nothing is copied."""
    a = raw.aclrtMalloc(64)
    b = raw.aclrtMalloc(64)
    raw.aclrtMemset(a, 64, 0, 64)
    raw.aclrtMemset(b, 64, 0x11, 64)
    host = pattern(64)
    if direction == "H2D":
        dst, src, kind = a, host.ctypes.data, H2D
    elif direction == "D2H":
        host[:] = 0
        dst, src, kind = host.ctypes.data, b, D2H
    else:
        dst, src, kind = a, b, D2D
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemcpy(dst, 63, src, 64, kind)
    assert e.value.code == 107000
    if direction == "D2H":
        assert host.tobytes() == bytes(64)
    else:
        assert device_bytes(a, 64) == bytes(64)


def test_memcpy_destmax_is_not_compared_with_the_block_size(dev):
    """docs/runtime-model.md §3.10: only count <= destMax is checked; a huge destMax is fine
    (vllm-ascend)."""
    ptr = raw.aclrtMalloc(64)
    data = pattern(64, seed=9)
    raw.aclrtMemcpy(ptr, 2**63, data.ctypes.data, 64, H2D)
    assert device_bytes(ptr, 64) == data.tobytes()


def test_memcpy_dst_equal_src_succeeds(dev):
    """docs/runtime-model.md §3.10 step 4: dst == src -> 0 without copying (device and host
    pointers)."""
    ptr = raw.aclrtMalloc(64)
    data = pattern(64)
    upload(ptr, data)
    raw.aclrtMemcpy(ptr, 64, ptr, 64, D2D)
    assert device_bytes(ptr, 64) == data.tobytes()
    host = pattern(64, seed=3)
    raw.aclrtMemcpy(host.ctypes.data, 64, host.ctypes.data, 64, H2H)
    assert host.tobytes() == pattern(64, seed=3).tobytes()


def test_memcpy_dst_equal_src_is_decided_before_the_address_check(dev):
    """docs/runtime-model.md §3.10 step 4: dst == src returns 0 without copying, so no address is
    touched."""
    raw.aclrtMemcpy(0x1000, 64, 0x1000, 64, H2H)


def test_memcpy_destmax_check_precedes_dst_equal_src(dev):
    """docs/runtime-model.md §3.10 step 4: destMax 0 / count > destMax (107000) come before dst ==
    src."""
    ptr = raw.aclrtMalloc(64)
    for dest_max in (0, 63):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemcpy(ptr, dest_max, ptr, 64, D2D)
        assert e.value.code == 107000


def test_memcpy_without_context_is_107002(dev):
    """docs/runtime-model.md §3.10 step 5: a valid copy from a thread with no context -> 107002."""
    ptr = raw.aclrtMalloc(64)
    host = pattern(64)
    _, error = in_fresh_thread(lambda: raw.aclrtMemcpy(ptr, 64, host.ctypes.data, 64, H2D))
    assert isinstance(error, ContextNullError)
    assert error.code == 107002


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ((0, 16, 0, 16, 6), 100000),  # kind 6
        ((0, 16, 0, 4, 7), 100000),  # kind 7 with NULL pointers
        ((0, 16, 0, 16, 1), 100000),  # NULL pointers
    ],
)
def test_memcpy_parameter_errors_win_over_missing_context(backend, args, code):
    """docs/runtime-model.md §1.2/§3.10: ACL-layer errors are reported before the context lookup."""
    _, error = in_fresh_thread(lambda: raw.aclrtMemcpy(*args))
    assert isinstance(error, InvalidParamError)
    assert error.code == code


@pytest.mark.parametrize(("dest_max", "count"), [(0, 16), (15, 16)])
def test_memcpy_destmax_errors_win_over_missing_context(dev, dest_max, count):
    """docs/runtime-model.md §1.2/§3.10: runtime destMax checks (107000) run before the context
    lookup."""
    ptr = raw.aclrtMalloc(64)
    host = pattern(64)
    _, error = in_fresh_thread(
        lambda: raw.aclrtMemcpy(ptr, dest_max, host.ctypes.data, count, H2D))
    assert isinstance(error, RtParamInvalidError)
    assert error.code == 107000


def test_memcpy_count_0_and_dst_equal_src_need_no_context(dev, cann):
    """docs/runtime-model.md §3.10 steps 1 and 4 are decided before step 5 (context): count 0
    succeeds on 9.1.0; before 9.1.0 it is 100000 with NULL pointers and 107000 (runtime)
    with real ones; dst == src succeeds on every release."""
    ptr = raw.aclrtMalloc(64)
    _, error = in_fresh_thread(lambda: raw.aclrtMemcpy(0, 0, 0, 0, H2D))
    _, real = in_fresh_thread(lambda: raw.aclrtMemcpy(ptr, 64, ptr + 32, 0, D2D))
    if since(cann, "9.1.0"):
        assert error is None
        assert real is None
    else:
        assert isinstance(error, InvalidParamError) and error.code == 100000, error
        assert isinstance(real, RtParamInvalidError) and real.code == 107000, real
    _, error = in_fresh_thread(lambda: raw.aclrtMemcpy(ptr, 64, ptr, 64, D2D))
    assert error is None


# -- §3.10 copies ----------------------------------------------------------------------------------
def test_memcpy_round_trip_numpy(dev):
    """docs/runtime-model.md §3.10: H2D then D2H through numpy addresses restores the bytes."""
    n = 4096 + 100
    ptr = raw.aclrtMalloc(n)
    src = pattern(n, seed=5)
    raw.aclrtMemcpy(ptr, n, src.ctypes.data, n, H2D)
    back = np.zeros(n, dtype=np.uint8)
    raw.aclrtMemcpy(back.ctypes.data, n, ptr, n, D2H)
    assert back.tobytes() == src.tobytes()


def test_memcpy_round_trip_bytearray_via_cffi(dev):
    """docs/runtime-model.md §3.10: H2D/D2H with bytearray addresses taken through cffi."""
    data = bytearray(range(256)) * 3
    ptr = raw.aclrtMalloc(len(data))
    raw.aclrtMemcpy(ptr, len(data), addr_of(data), len(data), H2D)
    out = bytearray(len(data))
    raw.aclrtMemcpy(addr_of(out), len(out), ptr, len(out), D2H)
    assert out == data


def test_memcpy_partial_copy_at_offsets(dev):
    """docs/runtime-model.md §3.10: count bytes land at dst; neighbouring bytes are untouched."""
    ptr = raw.aclrtMalloc(256)
    raw.aclrtMemset(ptr, 256, 0, 256)
    src = pattern(50, seed=2)
    raw.aclrtMemcpy(ptr + 100, 156, src.ctypes.data, 50, H2D)
    expected = bytes(100) + src.tobytes() + bytes(106)
    assert device_bytes(ptr, 256) == expected


def test_memcpy_d2d_same_device(dev):
    """docs/runtime-model.md §3.10: D2D between two blocks of the current device, and inside one
    block."""
    a = raw.aclrtMalloc(1024)
    b = raw.aclrtMalloc(1024)
    data = pattern(1024, seed=4)
    upload(a, data)
    raw.aclrtMemcpy(b, 1024, a, 1024, D2D)
    assert device_bytes(b, 1024) == data.tobytes()
    raw.aclrtMemcpy(b + 512, 512, a, 256, D2D)
    assert device_bytes(b, 1024) == (data[:512].tobytes() + data[:256].tobytes()
                                     + data[768:].tobytes())


def test_memcpy_d2d_huge_page_block(dev):
    """docs/runtime-model.md §3.10: copies work on a huge-page block (3 MiB, HUGE_FIRST)."""
    n = 3 << 20
    a = raw.aclrtMalloc(n, MallocPolicy.HUGE_FIRST)
    b = raw.aclrtMalloc(n, MallocPolicy.HUGE_FIRST)
    data = pattern(n, seed=8)
    upload(a, data)
    raw.aclrtMemcpy(b, n, a, n, D2D)
    assert device_bytes(b, n) == data.tobytes()


@pytest.mark.parametrize("kind", [H2H, D2H, D2D, MemcpyKind.DEFAULT])
def test_memcpy_sync_ignores_kind_for_h2d(dev, kind):
    """docs/runtime-model.md §3.10: sync aclrtMemcpy decides by the addresses; H2D with another kind
    copies."""
    ptr = raw.aclrtMalloc(128)
    data = pattern(128, seed=kind + 10)
    raw.aclrtMemcpy(ptr, 128, data.ctypes.data, 128, kind)
    assert device_bytes(ptr, 128) == data.tobytes()


@pytest.mark.parametrize("kind", [H2H, H2D, D2D, MemcpyKind.DEFAULT])
def test_memcpy_sync_ignores_kind_for_d2h(dev, kind):
    """docs/runtime-model.md §3.10: a D2H copy issued with any kind 0-4 still copies device ->
    host."""
    ptr = raw.aclrtMalloc(128)
    data = pattern(128, seed=kind + 20)
    upload(ptr, data)
    out = np.zeros(128, dtype=np.uint8)
    raw.aclrtMemcpy(out.ctypes.data, 128, ptr, 128, kind)
    assert out.tobytes() == data.tobytes()


@pytest.mark.parametrize("kind", [H2H, H2D, D2H, MemcpyKind.DEFAULT])
def test_memcpy_sync_ignores_kind_for_d2d(dev, kind):
    """docs/runtime-model.md §3.10: a D2D copy issued with any kind 0-4 still copies device ->
    device."""
    a = raw.aclrtMalloc(128)
    b = raw.aclrtMalloc(128)
    data = pattern(128, seed=kind + 30)
    upload(a, data)
    raw.aclrtMemcpy(b, 128, a, 128, kind)
    assert device_bytes(b, 128) == data.tobytes()


@pytest.mark.parametrize("direction", ["H2D", "D2H"])
def test_memcpy_device_range_past_block_end_is_107000(dev, direction):
    """docs/runtime-model.md §3.10 step 6: a device range running into unallocated space -> 107000,
    nothing copied.

    aclrtMalloc(100) is one 4 KiB page (open question 15); 1 MiB from its start runs far
    past it into space no block occupies (the only block on a fresh device).
    """
    ptr = raw.aclrtMalloc(100)
    n = 1 << 20
    host = np.zeros(n, dtype=np.uint8)
    if direction == "H2D":
        host[:] = 0x5A
        dst, src, kind = ptr, host.ctypes.data, H2D
        raw.aclrtMemset(ptr, 100, 0, 100)
    else:
        upload(ptr, pattern(100))
        dst, src, kind = host.ctypes.data, ptr, D2H
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemcpy(dst, n, src, n, kind)
    assert e.value.code == 107000
    if direction == "H2D":
        assert device_bytes(ptr, 100) == bytes(100)
    else:
        assert host.tobytes() == bytes(n)


def test_memcpy_freed_device_pointer_is_107000(dev):
    """docs/runtime-model.md §3.10 step 6: a device address whose block was freed is not valid for a
    copy."""
    ptr = raw.aclrtMalloc(64)
    raw.aclrtFree(ptr)
    host = pattern(64)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemcpy(ptr, 64, host.ctypes.data, 64, H2D)
    assert e.value.code == 107000


@pytest.mark.open_question(10)
@pytest.mark.parametrize("kind", [H2H, H2D, D2H, D2D, MemcpyKind.DEFAULT])
@pytest.mark.parametrize("size", [64, 3 << 20], ids=["64B", "3MiB"])
def test_memcpy_two_unregistered_host_pointers_copies(dev, kind, size):
    """docs/runtime-model.md §3.10 / §8.10: plain host -> plain host is a host-to-host copy the
    driver makes, whatever the kind says (the runtime's own code copies from stack memory this
    way): the bytes arrive."""
    src = np.frombuffer(bytearray(pattern(size)), dtype=np.uint8)
    dst = np.zeros(size, dtype=np.uint8)
    raw.aclrtMemcpy(dst.ctypes.data, size, src.ctypes.data, size, kind)
    assert dst.tobytes() == src.tobytes()


@pytest.mark.fake_only("a wild host pointer may crash the driver on hardware")
@pytest.mark.parametrize("wild", ["src", "dst"])
@pytest.mark.parametrize("size", [64, 3 << 20], ids=["64B", "3MiB"])
def test_memcpy_plain_host_with_an_unmapped_side_is_107000(fake, dev, wild, size):
    """docs/runtime-model.md §8.10: a host-to-host copy with an unmapped side -> 107000 and the
    other side untouched, never a crash."""
    good = np.zeros(size, dtype=np.uint8)
    dst, src = (good.ctypes.data, 0x1000) if wild == "src" else (0x1000, good.ctypes.data)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemcpy(dst, size, src, size, H2H)
    assert e.value.code == 107000
    assert good.tobytes() == bytes(size)


@pytest.mark.open_question(10)
@pytest.mark.parametrize("direction", ["0->1", "1->0"])
def test_memcpy_d2d_across_devices_is_107000(dev, direction):
    """docs/runtime-model.md §3.10 / open question 10: D2D between devices 0 and 1 without peer
    access -> 107000."""
    need_two_devices()
    p0 = raw.aclrtMalloc(64)
    raw.aclrtSetDevice(1)
    try:
        p1 = raw.aclrtMalloc(64)
        raw.aclrtMemset(p1, 64, 0x22, 64)
    finally:
        raw.aclrtSetDevice(0)
    raw.aclrtMemset(p0, 64, 0x11, 64)
    dst, src = (p1, p0) if direction == "0->1" else (p0, p1)
    try:
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemcpy(dst, 64, src, 64, D2D)
        assert e.value.code == 107000
        assert device_bytes(p0, 64) == b"\x11" * 64
    finally:
        raw.aclrtFree(p1)
        raw.aclrtResetDevice(1)
        raw.aclrtResetDevice(0)


def test_memcpy_pinned_host_and_unregistered_host(dev):
    """docs/runtime-model.md §3.10: pinned (aclrtMallocHost) <-> plain host copies work both
    ways."""
    pinned = raw.aclrtMallocHost(256)
    try:
        src = pattern(256, seed=6)
        raw.aclrtMemcpy(pinned, 256, src.ctypes.data, 256, H2H)
        assert ctypes.string_at(pinned, 256) == src.tobytes()
        ctypes.memmove(pinned, bytes(range(200, 256)) * 4 + bytes(32), 256)
        out = np.zeros(256, dtype=np.uint8)
        raw.aclrtMemcpy(out.ctypes.data, 256, pinned, 256, D2H)
        assert out.tobytes() == bytes(range(200, 256)) * 4 + bytes(32)
    finally:
        raw.aclrtFreeHost(pinned)


def test_memcpy_pinned_host_and_device(dev):
    """docs/runtime-model.md §3.10: pinned host <-> device copies work both ways."""
    pinned = raw.aclrtMallocHost(512)
    ptr = raw.aclrtMalloc(512)
    try:
        data = pattern(512, seed=12)
        ctypes.memmove(pinned, data.tobytes(), 512)
        raw.aclrtMemcpy(ptr, 512, pinned, 512, H2D)
        assert device_bytes(ptr, 512) == data.tobytes()
        ctypes.memset(pinned, 0, 512)
        raw.aclrtMemcpy(pinned, 512, ptr, 512, D2H)
        assert ctypes.string_at(pinned, 512) == data.tobytes()
    finally:
        raw.aclrtFreeHost(pinned)


@pytest.mark.fake_only("a wild host pointer may crash the driver on hardware")
@pytest.mark.parametrize("side", ["dst", "src"])
def test_memcpy_wild_host_pointer_is_107000(fake, dev, side):
    """docs/runtime-model.md §3.10 step 6: an unmapped host address (0x1000) -> 107000, never a
    crash."""
    ptr = raw.aclrtMalloc(64)
    dst, src = (0x1000, ptr) if side == "dst" else (ptr, 0x1000)
    for kind in (H2H, H2D, D2H, D2D):
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemcpy(dst, 64, src, 64, kind)
        assert e.value.code == 107000


@pytest.mark.fake_only("a wild host pointer may crash the driver on hardware")
def test_memcpy_wild_host_pointer_to_host_is_107000(fake, dev):
    """docs/runtime-model.md §3.10 step 6: a wild host source into plain host memory -> 107000, dst
    untouched."""
    dst = np.zeros(64, dtype=np.uint8)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemcpy(dst.ctypes.data, 64, 0x1000, 64, H2H)
    assert e.value.code == 107000
    assert dst.tobytes() == bytes(64)


# -- §3.11 aclrtMemset -----------------------------------------------------------------------------
@pytest.mark.cann("9.1.0")
def test_memset_count_0_succeeds_even_with_null(dev):
    """docs/runtime-model.md §3.11 (9.1.0): count 0 -> 0 before any other check, even for NULL
    and maxCount 0."""
    raw.aclrtMemset(0, 0, 0, 0)
    raw.aclrtMemset(0, 16, 0x7F, 0)


@pytest.mark.cann("8.5.0", "9.0.1")
def test_memset_count_0_is_refused_before_9_1(dev):
    """docs/runtime-model.md §3.11 Releases: before 9.1.0 NULL comes first (100000), then the
    runtime refuses count 0 (107000, maxCount 0 too) and writes nothing."""
    for max_count in (0, 16):
        with pytest.raises(InvalidParamError) as e:
            raw.aclrtMemset(0, max_count, 0x7F, 0)
        assert e.value.code == 100000
    ptr = raw.aclrtMalloc(64)
    raw.aclrtMemset(ptr, 64, 0x11, 64)
    for max_count in (64, 0):
        with pytest.raises(RtParamInvalidError) as e2:
            raw.aclrtMemset(ptr, max_count, 0x7F, 0)
        assert e2.value.code == 107000
    assert device_bytes(ptr, 64) == b"\x11" * 64


def test_memset_count_0_needs_no_context(dev, cann):
    """docs/runtime-model.md §3.11: count 0 is decided before the context lookup: a success on
    9.1.0; before 9.1.0 NULL is 100000 and a real pointer 107000 (the runtime's parameter check
    comes before its context lookup)."""
    ptr = raw.aclrtMalloc(64)
    _, error = in_fresh_thread(lambda: raw.aclrtMemset(0, 0, 0, 0))
    _, real = in_fresh_thread(lambda: raw.aclrtMemset(ptr, 64, 0, 0))
    if since(cann, "9.1.0"):
        assert error is None
        assert real is None
    else:
        assert isinstance(error, InvalidParamError) and error.code == 100000, error
        assert isinstance(real, RtParamInvalidError) and real.code == 107000, real


@pytest.mark.parametrize("max_count", [16, 0])
def test_memset_null_is_100000(dev, max_count):
    """docs/runtime-model.md §3.11: devPtr NULL with count > 0 -> 100000 (before any maxCount
    check)."""
    with pytest.raises(InvalidParamError) as e:
        raw.aclrtMemset(0, max_count, 0, 16)
    assert e.value.code == 100000


def test_memset_null_wins_over_missing_context(backend):
    """docs/runtime-model.md §1.2/§3.11: the ACL NULL check (100000) comes before the context
    (107002)."""
    _, error = in_fresh_thread(lambda: raw.aclrtMemset(0, 16, 0, 16))
    assert isinstance(error, InvalidParamError)
    assert error.code == 100000


@pytest.mark.open_question(9)
@pytest.mark.parametrize("max_count", [0, 15])
def test_memset_count_above_max_count_is_107000(dev, max_count):
    """docs/runtime-model.md §3.11 / open question 9: sync count > maxCount -> 107000, nothing
    written."""
    ptr = raw.aclrtMalloc(64)
    raw.aclrtMemset(ptr, 64, 0x33, 64)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemset(ptr, max_count, 0x44, 16)
    assert e.value.code == 107000
    assert device_bytes(ptr, 64) == b"\x33" * 64


def test_memset_writes_count_bytes_only(dev):
    """docs/runtime-model.md §3.11: exactly count bytes from devPtr are set."""
    ptr = raw.aclrtMalloc(64)
    raw.aclrtMemset(ptr, 64, 0x01, 64)
    raw.aclrtMemset(ptr + 8, 56, 0xEE, 10)
    assert device_bytes(ptr, 64) == b"\x01" * 8 + b"\xee" * 10 + b"\x01" * 46


@pytest.mark.parametrize(
    ("value", "byte"),
    [(0x1AB, 0xAB), (-1, 0xFF), (0x100, 0x00), (0x7FFFFF80, 0x80), (-(2**31), 0x00), (0x5C, 0x5C)],
)
def test_memset_writes_only_the_low_byte(dev, value, byte):
    """docs/runtime-model.md §3.11: only the low byte of value is written (0x1AB -> 0xAB, -1 ->
    0xFF)."""
    ptr = raw.aclrtMalloc(100)
    raw.aclrtMemset(ptr, 100, 0x11, 100)
    raw.aclrtMemset(ptr, 100, value, 100)
    assert device_bytes(ptr, 100) == bytes([byte]) * 100


def test_memset_huge_page_block(dev):
    """docs/runtime-model.md §3.11: memset of a whole 3 MiB huge-page block."""
    n = 3 << 20
    ptr = raw.aclrtMalloc(n)
    raw.aclrtMemset(ptr, n, 0xC3, n)
    assert device_bytes(ptr, n) == b"\xc3" * n


def test_memset_pinned_host_memory(dev):
    """docs/runtime-model.md §3.11: host memory from aclrtMallocHost is accepted."""
    pinned = raw.aclrtMallocHost(128)
    try:
        ctypes.memset(pinned, 0, 128)
        raw.aclrtMemset(pinned, 128, 0x1AB, 100)
        assert ctypes.string_at(pinned, 128) == b"\xab" * 100 + bytes(28)
    finally:
        raw.aclrtFreeHost(pinned)


def test_memset_without_context_is_107002(dev):
    """docs/runtime-model.md §3.11: a valid memset from a thread with no context -> 107002."""
    ptr = raw.aclrtMalloc(64)
    raw.aclrtMemset(ptr, 64, 0, 64)
    _, error = in_fresh_thread(lambda: raw.aclrtMemset(ptr, 64, 0x77, 64))
    assert isinstance(error, ContextNullError)
    assert error.code == 107002
    assert device_bytes(ptr, 64) == bytes(64)


@pytest.mark.parametrize("size", [64, 3 << 20], ids=["64B", "3MiB"])
def test_memset_unregistered_host_pointer_sets_it(dev, size):
    """docs/runtime-model.md §3.11: host memory not from ACL (numpy, a stack struct in Huawei's
    own examples) is set like any host memory; count > maxCount still fails first."""
    host = np.zeros(size + 16, dtype=np.uint8)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemset(host.ctypes.data, size - 1, 0x55, size)
    assert e.value.code == 107000
    assert host.tobytes() == bytes(size + 16)
    raw.aclrtMemset(host.ctypes.data, size, 0x155, size)
    assert host.tobytes() == b"\x55" * size + bytes(16)


@pytest.mark.fake_only("a read-only host page may crash the driver on hardware")
def test_memset_read_only_host_memory_is_107000(fake, dev):
    """docs/runtime-model.md §3.11: pageable memory that cannot be written -> 107000, untouched,
    never a crash."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    prot_read, map_private_anonymous = 1, 0x22
    page = libc.mmap(None, 4096, prot_read, map_private_anonymous, -1, 0)
    assert page not in (None, ctypes.c_void_p(-1).value)
    try:
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemset(page, 16, 0x55, 16)
        assert e.value.code == 107000
        assert ctypes.string_at(page, 16) == bytes(16)
    finally:
        libc.munmap(page, 4096)


@pytest.mark.fake_only("a wild host pointer may crash the driver on hardware")
def test_memset_wild_host_pointer_is_107000(fake, dev):
    """docs/runtime-model.md §3.11: an unmapped address (0x1000) -> 107000 rather than a crash."""
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemset(0x1000, 64, 0, 64)
    assert e.value.code == 107000


def test_pythonic_memset_and_copy_agree_with_raw(dev):
    """docs/runtime-model.md §3.10/§3.11 through the Pythonic layer: DeviceBuffer
    copy/memset/read."""
    buf = dev.malloc(64)
    buf.memset(0xAB)
    assert buf.read() == b"\xab" * 64
    buf.copy_from(bytes(range(64)))
    assert buf.read() == bytes(range(64))
    out = bytearray(64)
    buf.copy_to(out)
    assert bytes(out) == bytes(range(64))


@pytest.mark.fake_only("a count far beyond the block could corrupt memory on hardware")
def test_memcpy_and_memset_size_max_count_is_107000(fake, dev):
    """docs/runtime-model.md §3.10 step 6 / §3.11: SIZE_MAX bytes from a 64-byte block -> 107000, no
    crash."""
    ptr = raw.aclrtMalloc(64)
    host = np.zeros(64, dtype=np.uint8)
    size_max = 2**64 - 1
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemcpy(ptr, size_max, host.ctypes.data, size_max, H2D)
    assert e.value.code == 107000
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemcpy(host.ctypes.data, size_max, ptr, size_max, D2H)
    assert e.value.code == 107000
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtMemset(ptr, size_max, 0, size_max)
    assert e.value.code == 107000


@pytest.mark.fake_only("a pointer to read-only or inaccessible host pages may crash the driver "
                       "on hardware")
@pytest.mark.parametrize("count", [64, 4 << 20])
def test_spec_8_10_unwritable_or_inaccessible_host_memory_is_107000(dev, count):
    """docs/runtime-model.md §8.10 (fake choice): a mapped but read-only or PROT_NONE host range is
    not a copy target or source: 107000, never a crash, for small and large copies alike."""
    from acl_mem._host_memory import _libc, ffi

    device = raw.aclrtMalloc(count)
    inaccessible = int(ffi.cast("uintptr_t", _libc.mmap(ffi.NULL, count, 0, 0x22, -1, 0)))
    read_only_code = ctypes.cast(ctypes.pythonapi.Py_Initialize, ctypes.c_void_p).value
    assert read_only_code is not None
    attempts = [(inaccessible, count, device, count, 2), (device, count, inaccessible, count, 1),
                (read_only_code, 64, device, 64, 2)]
    for args in attempts:
        with pytest.raises(RtParamInvalidError) as e:
            raw.aclrtMemcpy(*args)
        assert e.value.code == 107000
    raw.aclrtFree(device)
