"""Regressions found by a hostile review of the exports, arrays, borrowed buffers, device
activation, VMM objects and the fake's checker: each test failed before its fix."""

from __future__ import annotations

import dis
import gc
import itertools
import sys
from collections.abc import Callable
from types import FrameType

import pytest
from injection import Injected, in_files, interrupted_runs, is_unsignalled

import acl_mem
from acl_mem import DeviceArray, DeviceBuffer, HostBuffer, _hints, buffers, device
from acl_mem._fake.config import set_check, set_hazard_mode
from acl_mem.pool import ExpandablePool
from acl_mem.vmm import Mapping, PhysicalMemory, VirtualRange, granularity

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


# -- VMM objects -----------------------------------------------------------------------------------


@pytest.mark.fake_only("releasing a still-mapped range is refused by the fake's choice "
                       "(docs/runtime-model.md §8.3)")
def test_a_range_collected_with_its_mapping_in_a_cycle_is_released(fake, dev):
    """A VirtualRange and its Mapping dropped together in a reference cycle: the collector
    may finalize the range first, while it is still mapped. The range is released once
    the mapping is unmapped, not leaked."""
    chunk = granularity(dev)

    class Holder:
        pass

    gc.collect()
    gc.disable()
    try:
        holder = Holder()
        holder.self = holder  # type: ignore[attr-defined]
        holder.range = VirtualRange(2 * chunk)  # type: ignore[attr-defined]
        holder.physical = PhysicalMemory(chunk, device=dev)  # type: ignore[attr-defined]
        holder.mapping = holder.range.map(holder.physical)  # type: ignore[attr-defined]
        address = holder.range.address  # type: ignore[attr-defined]
        del holder
        gc.collect()
    finally:
        gc.enable()
    with pytest.raises(acl_mem.AclError) as caught:
        acl_mem.raw.aclrtReleaseMemAddress(address)  # nothing left to release
    assert caught.value.code == 107000


def test_mapping_checks_within_before_mapping(dev):
    chunk = granularity(dev)
    with VirtualRange(2 * chunk) as reserved, PhysicalMemory(chunk, device=dev) as physical:
        with pytest.raises(TypeError):
            Mapping(reserved.address, physical, "not a range")  # type: ignore[arg-type]
        with Mapping(reserved.address, physical, reserved) as mapping:
            assert mapping.range is reserved


# -- error hints -----------------------------------------------------------------------------------


@pytest.mark.fake_only("replaces a call of the fake with a broken one")
@pytest.mark.parametrize("answer", [(0, None), (0, "4"), (0,), None])
def test_a_broken_device_count_only_shortens_the_invalid_device_hint(fake, dev, monkeypatch,
                                                                      answer):
    """The 107001 hint asks aclrtGetDeviceCount for the valid ids; a backend that answers
    nonsense there must still give the 107001 error (without that part of the hint)."""
    monkeypatch.setattr(fake, "aclrtGetDeviceCount", lambda *args: answer)
    error = _hints.error(107001, "aclrtSetDevice(deviceId=99)")
    assert isinstance(error, acl_mem.InvalidDeviceIdError)
    assert error.code == 107001


# -- interrupts ------------------------------------------------------------------------------------


@pytest.mark.fake_only("re-runs the allocation once per line; the leak check lists the "
                       "fake's live blocks")
@pytest.mark.parametrize("kind", ["device", "host"])
def test_an_allocation_interrupted_anywhere_leaks_nothing(fake, dev, kind):
    """Device.malloc / malloc_host interrupted at any line of device.py and buffers.py
    either returns a buffer or leaves nothing allocated (tests/injection.py)."""
    where = in_files(device.__file__, buffers.__file__)
    results: list[object] = []

    def setup():
        return lambda: results.append(dev.malloc(64) if kind == "device"
                                      else dev.malloc_host(64))

    for n in interrupted_runs(setup, where=lambda frame: where(frame)
                              and not is_unsignalled(frame)):
        results.clear()  # a completed allocation's buffer frees its memory here
        assert acl_mem.fake.leaks() == [], f"leaked after an interrupt at line {n}"


def _interrupted_at_opcode(operation: Callable[[], object], function: str, n: int) -> bool:
    """Run ``operation`` with Injected raised at the ``n``-th bytecode of ``function``
    (a signal lands between bytecodes, also right after a C call returned); True when
    ``function`` ran that far. A return or a no-op never takes a signal: skipped."""
    seen = 0

    def local(frame: FrameType, event: str, arg: object) -> object:
        nonlocal seen
        if event == "opcode":
            seen += 1
            opname = dis.opname[frame.f_code.co_code[frame.f_lasti]]
            if seen == n and opname not in ("RETURN_VALUE", "NOP"):
                raise Injected(f"injected at opcode {n} of {function}")
        return local

    def global_(frame: FrameType, event: str, arg: object) -> object:
        if frame.f_code.co_name != function:
            return None
        frame.f_trace_opcodes = True
        return local

    sys.settrace(global_)
    try:
        operation()
    except BaseException:  # SystemError on 3.10/3.11 when the slot fails, or Injected
        pass
    finally:
        sys.settrace(None)
    return seen >= n


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the buffer slot is a callback only "
                    "before Python 3.12")
@pytest.mark.filterwarnings("ignore:buffer export refused:RuntimeWarning")
@pytest.mark.parametrize("export", [memoryview, bytes])
def test_an_export_interrupted_in_the_buffer_slot_is_not_left_held(dev, export):
    """On Python 3.10/3.11 the buffer slot is a cffi callback filling the caller's view.
    An interrupt after the view was filled (the callback then fails) must release that
    view: the caller never will, and free() would refuse for ever."""
    for n in itertools.count(1):
        host = dev.malloc_host(64)
        delivered = _interrupted_at_opcode(lambda h=host: export(h), "getbuffer", n)
        host.free()  # BufferError if the interrupted export is still held
        if not delivered:
            break
    assert n > 10  # the slot really ran, bytecode by bytecode



# -- device arrays ---------------------------------------------------------------------------------


def test_subarray_dtypes_become_part_of_the_shape_as_in_numpy(dev):
    """numpy turns a subarray dtype into dimensions (np.empty(3, ('i4', (2, 3))) has shape
    (3, 2, 3) and dtype int32); a DeviceArray does the same, so its shape and dtype match
    the arrays it copies from and to."""
    np = pytest.importorskip("numpy")
    array = dev.empty(3, ("i4", (2, 3)))
    assert (array.shape, array.dtype, array.nbytes) == ((3, 2, 3), np.dtype("i4"), 72)
    assert array.strides == np.empty((3, 2, 3), "i4").strides
    data = np.arange(18, dtype="i4").reshape(3, 2, 3)
    array.copy_from_host(data)
    out = np.empty((3, 2, 3), "i4")
    assert array.copy_to_host(out=out) is out and np.array_equal(out, data)
    array.free()


@pytest.mark.parametrize("shape", [(1 << 62, 1 << 62, 0), ((1 << 63) - 1, 0), (1,) * 65])
def test_shapes_numpy_cannot_hold_are_refused_up_front(dev, shape):
    """A shape no numpy array can have (too many dimensions, or a size past the address
    space even with a 0 in it) is a ValueError when the array is made, not one from numpy
    at the first copy_to_host."""
    pytest.importorskip("numpy")
    with pytest.raises(ValueError):
        dev.empty(shape, "f8")


@pytest.mark.fake_only("fault injection exists only in the fake")
def test_pinned_host_out_of_memory_hint_is_about_host_memory(fake, dev):
    """aclrtMallocHost memory does not come from the device's page pools: its 207001 hint
    gives the request and says so, instead of device pages and HBM pool figures."""
    acl_mem.fake.inject_fault("aclrtMallocHost")
    with pytest.raises(acl_mem.MemoryAllocationError) as caught:
        dev.malloc_host(3 * MiB)
    assert caught.value.code == 207001
    hint = caught.value.hint
    assert "3 MiB" in hint and "host" in hint
    assert "huge-page pool" not in hint and "normal-page pool" not in hint
    assert "from huge" not in hint and "from normal" not in hint
