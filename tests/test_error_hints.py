"""Errors say what went wrong and what to do: the hint the raw layer attaches to a code.

The class and code are the contract (checked everywhere else); these tests check that
the hint carries the facts a user needs: the thread, the call to make, the figures.
"""

from __future__ import annotations

import pickle
import threading

import pytest

import acl_mem
from acl_mem import raw
from acl_mem._hints import _human as human
from acl_mem.enums import MallocPolicy, MemAttr
from acl_mem.errors import (
    AclError,
    ContextNullError,
    DeviceNotCurrentError,
    InvalidDeviceIdError,
    MemoryAllocationError,
    RtParamInvalidError,
)
from acl_mem.sizes import GiB

# The hints are built by the raw layer, the same on every backend; the out-of-memory
# figures are checked against the fake's pools, which a test can exhaust safely.
pytestmark = pytest.mark.fake_only("the raw layer's hints, checked against the fake's pools")


def test_context_null_names_the_thread_and_the_call_to_make(fake):
    box: dict[str, BaseException] = {}

    def worker() -> None:
        try:
            raw.aclrtMalloc(64, 0)
        except BaseException as exc:  # handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=worker, name="loader-7")
    thread.start()
    thread.join()
    error = box["error"]
    assert isinstance(error, ContextNullError)
    assert error.code == 107002
    assert "loader-7" in error.hint
    assert "use()" in error.hint and "aclrtSetDevice" in error.hint


def test_double_free_says_not_a_live_allocation(fake, dev):
    ptr = raw.aclrtMalloc(100, 0)
    raw.aclrtFree(ptr)
    with pytest.raises(RtParamInvalidError) as e:
        raw.aclrtFree(ptr)
    assert e.value.code == 107000
    assert "not a live allocation" in e.value.hint
    assert "not a live allocation" in str(e.value)


def test_out_of_memory_carries_the_request_and_the_pools_figures(fake, dev):
    # The HBM attrs exist on every release (8.5.0 rejects the device-neutral 12-17).
    free, total = dev.mem_info(MemAttr.HBM_MEM_NORMAL)
    with pytest.raises(MemoryAllocationError) as e:
        raw.aclrtMalloc(total + 1, MallocPolicy.NORMAL_ONLY)
    assert e.value.code == 207001
    hint = e.value.hint
    assert human(total + 1) in hint
    assert f"normal-page pool {human(free)} of {human(total)}" in hint
    huge_free, huge_total = dev.mem_info(MemAttr.HBM_MEM_HUGE)
    assert f"huge-page pool {human(huge_free)} of {human(huge_total)}" in hint


@pytest.mark.parametrize(("release", "padded"), [("8.5.0", 64), ("9.1.0", 32)])
def test_out_of_memory_hint_pads_as_the_release_does(release: str, padded: int) -> None:
    """Ascend950 pads nothing from CANN 9.1.0 and a fixed 32 bytes before it: the padded size
    in the hint is the one the runtime really asked the pools for."""
    fake = acl_mem.fake.make_backend("ascend950", cann=release)
    with acl_mem.using_backend(fake, "tests/test_error_hints.py"):
        raw.aclrtSetDevice(0)
        free, _ = raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)
        fake.inject_fault("aclrtMalloc")
        with pytest.raises(MemoryAllocationError) as e:
            raw.aclrtMalloc(1, MallocPolicy.NORMAL_ONLY)
        assert f"{human(padded)} after rounding and padding" in e.value.hint
        assert raw.aclrtGetMemInfo(MemAttr.HBM_MEM_NORMAL)[0] == free
        raw.aclrtResetDevice(0)


def test_bad_device_id_names_the_valid_range(fake):
    count = raw.aclrtGetDeviceCount()
    with pytest.raises(InvalidDeviceIdError) as e:
        raw.aclrtSetDevice(count)
    assert e.value.code == 107001
    assert f"0 to {count - 1}" in e.value.hint


def test_device_not_current_names_the_thread_and_the_fix(fake, dev):
    if acl_mem.Device.count() < 2:
        pytest.skip("needs two devices")
    with pytest.raises(DeviceNotCurrentError) as e:
        acl_mem.Device(1).malloc(64)
    assert threading.current_thread().name in str(e.value)
    assert "Device(1).use()" in str(e.value)


def test_hint_survives_pickling(fake, dev):
    ptr = raw.aclrtMalloc(100, 0)
    raw.aclrtFree(ptr)
    with pytest.raises(AclError) as e:
        raw.aclrtFree(ptr)
    copy = pickle.loads(pickle.dumps(e.value))
    assert type(copy) is type(e.value)
    assert (copy.code, copy.what, copy.hint) == (e.value.code, e.value.what, e.value.hint)


def test_out_of_memory_names_what_acl_mem_has_to_free(fake, dev):
    _, total = dev.mem_info(MemAttr.HBM_MEM_NORMAL)
    with pytest.raises(MemoryAllocationError) as e:
        raw.aclrtMalloc(total + 1, MallocPolicy.NORMAL_ONLY)
    hint = e.value.hint
    # Only calls that exist: no pool has an empty_cache().
    assert "empty_cache" not in hint
    assert "release_unused()" in hint and "free()" in hint
    assert hasattr(acl_mem.SegmentPool, "release_unused")
    assert hasattr(acl_mem.ExpandablePool, "release_unused")
    assert "configure(hbm_bytes" in hint


def test_out_of_address_space_has_its_own_hint(fake, dev):
    MAX_RESERVATION = 128 * GiB  # the largest aclrtReserveMemAddress (docs/runtime-model.md)

    with pytest.raises(MemoryAllocationError) as e:
        acl_mem.vmm.VirtualRange(MAX_RESERVATION * 2)
    assert e.value.code == 207001
    hint = e.value.hint
    assert "address space" in hint and "VirtualRange.close()" in hint
    assert "page pool" in hint and "huge-page pool" not in hint  # no pool figures


def test_a_device_beyond_the_count_is_not_advised_to_be_used(fake):
    acl_mem.fake.configure(device_count=2)
    with acl_mem.Device(0):
        with pytest.raises(InvalidDeviceIdError) as e:
            acl_mem.Device(8).malloc(64)
        assert e.value.code == 107001
        assert "use()" not in e.value.hint
        assert "0 to 1" in e.value.hint and "configure(device_count=" in e.value.hint
    with pytest.raises(InvalidDeviceIdError) as e:
        acl_mem.Device(8).malloc(64)  # no device current: the runtime refuses the set
    assert "configure(device_count=" in e.value.hint


def test_physical_memory_off_the_granularity_names_the_rule(fake, dev):
    chunk = acl_mem.vmm.granularity(dev)
    with pytest.raises(RtParamInvalidError) as e:
        acl_mem.vmm.PhysicalMemory(1, device=dev)
    assert e.value.code == 107000
    hint = e.value.hint
    assert "aclrtMemGetAllocationGranularity" in hint and "multiple" in hint
    assert human(chunk) in hint and str(chunk) in hint  # the value, and 1 rounded up
