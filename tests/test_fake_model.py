"""What only the device model can show: sparse backing, its address space, profiles.

On hardware these are properties of the chip, not observable rules, hence fake_only.
"""

import pytest

import acl_mem
from acl_mem import raw
from acl_mem._host_memory import host_range_mapped
from acl_mem.enums import MallocPolicy, MemAttr

GiB = 1 << 30
MiB = 1 << 20


def _address(buffer: bytearray) -> int:
    import ctypes

    return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))


@pytest.mark.fake_only("host RAM use of the simulated device is a property of the fake")
def test_device_memory_is_backed_sparsely(fake, dev):
    """A 60 GiB allocation costs host RAM only for the bytes written (issue: sparse backing)."""
    before = fake.resident_bytes()
    buffers = [dev.malloc(GiB) for _ in range(60)]
    chunk = b"\xa5" * MiB
    for buf in buffers:
        buf.copy_from(chunk)
    grown = fake.resident_bytes() - before
    assert grown < 256 * MiB
    assert buffers[-1].read(16) == b"\xa5" * 16
    for buf in buffers:
        buf.free()


@pytest.mark.fake_only("freed device pages are returned to the host only in the fake")
def test_freed_device_memory_returns_host_ram(fake, dev):
    buf = dev.malloc(64 * MiB)
    before = fake.resident_bytes()
    buf.copy_from(bytes(32 * MiB))
    buf.memset(1)
    assert fake.resident_bytes() - before >= 32 * MiB
    buf.free()
    assert fake.resident_bytes() - before < 16 * MiB


@pytest.mark.fake_only("freed device pages are returned to the host only in the fake")
def test_many_small_freed_blocks_return_host_ram(fake, dev):
    """Small blocks keep their host pages for a while after the free (a system call per
    free would cost more); thousands of them written and freed give their RAM back."""
    before = fake.resident_bytes()
    ptrs = [raw.aclrtMalloc(4096, 0) for _ in range(8192)]  # 8 KiB extents: 64 MiB
    for ptr in ptrs:
        raw.aclrtMemset(ptr, 4096, 1, 4096)
    assert fake.resident_bytes() - before >= 32 * MiB
    for ptr in ptrs:
        raw.aclrtFree(ptr)
    assert fake.resident_bytes() - before < 16 * MiB
    # Written again after all that: the bytes are the new ones, the pages came back.
    ptr = raw.aclrtMalloc(4096, 0)
    raw.aclrtMemset(ptr, 4096, 7, 4096)
    out = bytearray(4096)
    raw.aclrtMemcpy(_address(out), 4096, ptr, 4096, 2)
    assert out == b"\x07" * 4096
    raw.aclrtFree(ptr)


@pytest.mark.fake_only("freed device pages are returned to the host only in the fake")
def test_only_the_last_freed_large_block_keeps_its_pages(fake, dev):
    """The last freed block of up to 32 MiB keeps its host pages (a buffer freed and
    allocated again in a loop does not fault them in anew); the next such free returns
    them, so at most that much freed memory stays resident."""
    before = fake.resident_bytes()
    first, second = dev.malloc(16 * MiB), dev.malloc(16 * MiB)
    first.memset(1)
    second.memset(2)
    assert fake.resident_bytes() - before >= 30 * MiB
    first.free()
    second.free()  # returns the first's pages, keeps its own
    assert fake.resident_bytes() - before < 20 * MiB
    third = dev.malloc(2 * MiB)
    third.free()  # returns the second's
    assert fake.resident_bytes() - before < 6 * MiB


@pytest.mark.fake_only("device addresses are reserved away from the host only by the fake")
def test_device_addresses_are_never_host_addresses(fake, dev):
    buf = dev.malloc(4096)
    assert fake.address_space_reserved
    # Reserved PROT_NONE: mapped (so no host allocation lands there) but never readable.
    assert host_range_mapped(buf.ptr, 1)
    # An address in the device window that no block covers is not host memory either.
    with pytest.raises(acl_mem.RtParamInvalidError) as info:
        raw.aclrtMemcpy(buf.ptr, 64, buf.ptr + (1 << 40) * 8, 64, 1)
    assert info.value.code == 107000


@pytest.mark.fake_only("chooses the fake's profile")
def test_configure_profile_and_size(backend):
    profile = acl_mem.fake.configure("atlas-inference", device_count=2, hbm_bytes=8 * GiB)
    assert profile.soc_name.startswith("Ascend310P")
    assert raw.aclrtGetDeviceCount() == 2
    with acl_mem.Device(1) as dev:
        total = dev.mem_info(MemAttr.DDR_MEM).total
        assert total == 8 * GiB
        with pytest.raises(acl_mem.FeatureNotSupportError):
            dev.malloc(16, MallocPolicy.HUGE1G_ONLY)


@pytest.mark.fake_only("chooses the fake's profile")
def test_configure_rejects_bad_values(backend):
    with pytest.raises(ValueError):
        acl_mem.fake.configure("atlas-z9")
    with pytest.raises(ValueError):
        acl_mem.fake.configure(device_count=0)
    with pytest.raises(ValueError):
        acl_mem.fake.configure(hbm_bytes=1024)
    with pytest.raises(TypeError):
        acl_mem.fake.configure(device_count="8")
