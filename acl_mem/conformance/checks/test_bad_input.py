"""Bad input to every public call: TypeError, ValueError or AclError, never a crash or a
silent success, on every backend.

The raw layer checks C types before the backend sees anything (docs/runtime-model.md §3: every
argument is a C integer of a fixed width), so non-ints raise TypeError and out-of-range ints raise
ValueError that is *not* an AclError (the backend was never called). The Pythonic layer
adds bounds, liveness and device checks on top.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import acl_mem
from acl_mem import raw
from acl_mem.enums import MallocPolicy, MemAttr, MemcpyKind
from acl_mem.errors import (
    AclError,
    BackendError,
    DeviceNotCurrentError,
    FreedBufferError,
    InvalidDeviceIdError,
    InvalidParamError,
    RtParamInvalidError,
)

from .helpers import need_dvpp_memory, need_two_devices

# Each raw call: its arguments in C order as (name, C type, a harmless valid value).
# The valid values make a call that fails cleanly or does nothing (NULL pointers, count 0),
# so even a value that slipped past the checks could not touch memory.
SIZE, PTR, U32, I32, U64 = "size_t", "void *", "uint32_t", "int32_t", "uint64_t"
STRUCT = "struct"
SIGNATURES: dict[str, list[tuple[str, str, object]]] = {
    "aclInit": [],  # configPath is a path, tested on its own
    "aclFinalize": [],
    "aclrtSetDevice": [("deviceId", I32, 0)],
    "aclrtResetDevice": [("deviceId", I32, 0)],
    "aclrtResetDeviceForce": [("deviceId", I32, 0)],
    "aclrtGetDevice": [],
    "aclrtGetDeviceCount": [],
    "aclrtGetRunMode": [],
    "aclrtGetSocName": [],
    "aclrtGetVersion": [],
    "aclrtGetLastError": [("level", I32, 0)],
    "aclrtPeekAtLastError": [("level", I32, 0)],
    "aclsysGetVersionStr": [],  # pkgName is a string, tested on its own
    "aclrtMalloc": [("size", SIZE, 64), ("policy", U32, 0)],
    "aclrtMallocAlign32": [("size", SIZE, 64), ("policy", U32, 0)],
    "aclrtMallocCached": [("size", SIZE, 64), ("policy", U32, 0)],
    "aclrtFree": [("devPtr", PTR, 0)],
    "aclrtMallocHost": [("size", SIZE, 64)],
    "aclrtFreeHost": [("hostPtr", PTR, 0)],
    "acldvppMalloc": [("size", SIZE, 64)],
    "acldvppFree": [("devPtr", PTR, 0)],
    "hi_mpi_dvpp_malloc": [("dev_id", U32, 0), ("size", SIZE, 64)],
    "hi_mpi_dvpp_free": [("dev_ptr", PTR, 0)],
    "aclrtMemcpy": [("dst", PTR, 0), ("destMax", SIZE, 0), ("src", PTR, 0), ("count", SIZE, 0),
                    ("kind", U32, 0)],
    "aclrtMemset": [("devPtr", PTR, 0), ("maxCount", SIZE, 0), ("value", I32, 0),
                    ("count", SIZE, 0)],
    "aclrtGetMemInfo": [("attr", U32, 1)],
    "aclrtMemGetAddressRange": [("ptr", PTR, 0)],
    "aclrtPointerGetAttributes": [("ptr", PTR, 0)],
    "aclrtCreateStream": [],
    "aclrtDestroyStream": [("stream", PTR, 0)],
    "aclrtDestroyStreamForce": [("stream", PTR, 0)],
    "aclrtSynchronizeStream": [("stream", PTR, 0)],
    "aclrtSynchronizeDevice": [],
    "aclrtMemcpyAsync": [("dst", PTR, 0), ("destMax", SIZE, 0), ("src", PTR, 0),
                         ("count", SIZE, 0), ("kind", U32, 0), ("stream", PTR, 0)],
    "aclrtMemsetAsync": [("devPtr", PTR, 0), ("maxCount", SIZE, 0), ("value", I32, 0),
                         ("count", SIZE, 0), ("stream", PTR, 0)],
    # Virtual memory (docs/runtime-model.md §4); struct arguments are NULL (None) in the control
    # call.
    "aclrtReserveMemAddress": [("size", SIZE, 0), ("alignment", SIZE, 0), ("expectPtr", PTR, 0),
                               ("flags", U64, 0)],
    "aclrtReleaseMemAddress": [("virPtr", PTR, 0)],
    "aclrtMallocPhysical": [("size", SIZE, 0), ("prop", STRUCT, None), ("flags", U64, 0)],
    "aclrtFreePhysical": [("handle", PTR, 0)],
    "aclrtMapMem": [("virPtr", PTR, 0), ("size", SIZE, 0), ("offset", SIZE, 0),
                    ("handle", PTR, 0), ("flags", U64, 0)],
    "aclrtUnmapMem": [("virPtr", PTR, 0)],
    "aclrtMemGetAllocationGranularity": [("prop", STRUCT, None), ("option", U32, 0)],
    "aclrtMemSetAccess": [("virPtr", PTR, 0), ("size", SIZE, 0), ("desc", STRUCT, None),
                          ("count", SIZE, 0)],
    "aclrtMemExportToShareableHandle": [("handle", PTR, 0), ("handleType", U32, 0),
                                        ("flags", U64, 0)],
    "aclrtMemImportFromShareableHandle": [("shareableHandle", U64, 0), ("deviceId", I32, 0)],
    "aclrtMemSetPidToShareableHandle": [("shareableHandle", U64, 0), ("pid", STRUCT, None),
                                        ("pidNum", SIZE, 0)],
    "aclrtMemRetainAllocationHandle": [("virPtr", PTR, 0)],
    "aclrtMemGetAllocationPropertiesFromHandle": [("handle", PTR, 0)],
    # Contexts and events (docs/runtime-model.md §3.3, §3.15): NULL handles fail cleanly.
    "aclrtCreateContext": [("deviceId", I32, -1)],
    "aclrtDestroyContext": [("context", PTR, 0)],
    "aclrtSetCurrentContext": [("context", PTR, 0)],
    "aclrtGetCurrentContext": [],
    "aclrtCreateEvent": [],
    "aclrtCreateEventWithFlag": [("flag", U32, 0)],
    "aclrtCreateEventExWithFlag": [("flag", U32, 0)],
    "aclrtDestroyEvent": [("event", PTR, 0)],
    "aclrtRecordEvent": [("event", PTR, 0), ("stream", PTR, 0)],
    "aclrtResetEvent": [("event", PTR, 0), ("stream", PTR, 0)],
    "aclrtStreamWaitEvent": [("stream", PTR, 0), ("event", PTR, 0)],
    "aclrtSynchronizeEvent": [("event", PTR, 0)],
    "aclrtQueryEventStatus": [("event", PTR, 0)],
    "aclrtQueryEvent": [("event", PTR, 0)],
    "aclrtEventElapsedTime": [("startEvent", PTR, 0), ("endEvent", PTR, 0)],
}
#: The struct classes themselves, not calls.
_STRUCTS = {"aclrtPhysicalMemProp", "aclrtMemLocation", "aclrtMemAccessDesc"}

#: Calls whose harmless valid arguments can be run as a control (no init/finalize/reset).
_CONTROL_SKIP = {"aclInit", "aclFinalize", "aclrtResetDevice", "aclrtResetDeviceForce"}

WRONG_TYPES = ["0", None, 1.5, True, False, 1.0, b"\x00", [0], 1 + 0j]

_OUT_OF_RANGE = {
    SIZE: [-1, 2**64, 2**64 + 1, -(2**63)],
    PTR: [-1, 2**64, 2**70],
    U32: [-1, 2**32, 2**64],
    I32: [2**31, 2**31 + 5, -(2**31) - 1, 2**32, 2**64],
    U64: [-1, 2**64],
}

INT_ARGS = [(name, arg, ctype) for name, args in SIGNATURES.items() for arg, ctype, _ in args
            if ctype != STRUCT]


def _call(name: str, **overrides: object) -> object:
    kwargs: dict[str, object] = {arg: value for arg, _, value in SIGNATURES[name]}
    if name == "aclsysGetVersionStr":
        kwargs["pkgName"] = "runtime"
    kwargs.update(overrides)
    return getattr(raw, name)(**kwargs)


# -- the table itself ------------------------------------------------------------------------------
def test_table_covers_every_public_raw_function():
    """Every function in acl_mem.raw.__all__ (PtrAttributes is a struct) is exercised here."""
    public = set(raw.__all__) - {"PtrAttributes"} - _STRUCTS
    assert set(SIGNATURES) == public


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_table_matches_the_c_parameter_names(name):
    """docs/runtime-model.md §3: the raw layer keeps the C parameter names, in C order."""
    params = list(inspect.signature(getattr(raw, name)).parameters)
    expected = [arg for arg, _, _ in SIGNATURES[name]]
    if name == "aclInit":
        expected = ["configPath"]
    if name == "aclsysGetVersionStr":
        expected = ["pkgName"]
    assert params == expected


#: Calls a release lacks (docs/runtime-model.md §0.1): their control runs where they exist.
_SINCE = {"aclrtMemGetAddressRange": ("9.0.1", "9.1.0")}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.cann(*_SINCE[name])) if name in _SINCE else name
    for name in sorted(set(SIGNATURES) - _CONTROL_SKIP)])
def test_valid_values_pass_the_type_checks(dev, name):
    """Control: the table's valid values reach the backend (success or an AclError)."""
    try:
        _call(name)
    except AclError:
        pass
    except BackendError as exc:  # a native side library (libacl_dvpp*) may be absent
        pytest.skip(f"{name}: {exc}")


# -- raw layer: wrong types -> TypeError -----------------------------------------------------------
@pytest.mark.parametrize("bad", WRONG_TYPES, ids=repr)
@pytest.mark.parametrize(("name", "arg", "ctype"), INT_ARGS)
def test_raw_wrong_type_is_type_error(dev, name, arg, ctype, bad):
    """Every int argument of every raw call rejects non-ints (bool included) with TypeError."""
    with pytest.raises(TypeError):
        _call(name, **{arg: bad})


@pytest.mark.parametrize(("name", "arg", "ctype"), INT_ARGS)
def test_raw_wrong_type_works_without_a_context(backend, name, arg, ctype):
    """The type check runs before anything else: no device needed to get TypeError."""
    with pytest.raises(TypeError):
        _call(name, **{arg: "1"})


# -- raw layer: out of the C range -> ValueError (not an AclError) ---------------------------------
@pytest.mark.parametrize(
    ("name", "arg", "ctype", "bad"),
    [(n, a, c, v) for n, a, c in INT_ARGS for v in _OUT_OF_RANGE[c]],
)
def test_raw_out_of_range_is_value_error(dev, name, arg, ctype, bad):
    """Negative or >= 2**64 sizes/pointers, >= 2**32 uint32, beyond int32 -> ValueError."""
    with pytest.raises(ValueError) as e:
        _call(name, **{arg: bad})
    assert not isinstance(e.value, AclError), "the backend must not have been called"


@pytest.mark.parametrize("name", ["aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached"])
def test_raw_malloc_size_t_max_overflows_to_100000(dev, name):
    """docs/runtime-model.md §3.5 step 3: SIZE_MAX is a valid size_t but the rounding overflows ->
    100000."""
    with pytest.raises(InvalidParamError) as e:
        getattr(raw, name)(2**64 - 1, MallocPolicy.HUGE_FIRST)
    assert e.value.code == 100000


def test_raw_dvpp_malloc_size_t_max_overflows_to_100000(dev):
    """docs/runtime-model.md §3.8: acldvppMalloc overflow -> 100000."""
    with pytest.raises(InvalidParamError) as e:
        raw.acldvppMalloc(2**64 - 1)
    assert e.value.code == 100000


@pytest.mark.parametrize("name", ["aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached",
                                  "aclrtMallocHost"])
def test_raw_malloc_size_0_is_100000(dev, name):
    """docs/runtime-model.md §3.5 step 2 / §3.7: size 0 -> 100000 (an AclError, never a silent
    success)."""
    with pytest.raises(InvalidParamError) as e:
        _call(name, size=0)
    assert e.value.code == 100000


@pytest.mark.parametrize("name", ["aclrtSetDevice", "aclrtResetDevice", "aclrtResetDeviceForce"])
@pytest.mark.parametrize("device", [-1, 2**31 - 1, -(2**31)])
def test_raw_int32_device_outside_device_range_is_107001(dev, name, device):
    """docs/runtime-model.md §3.2: a valid int32 outside [0, count) reaches the runtime ->
    107001."""
    with pytest.raises(InvalidDeviceIdError) as e:
        getattr(raw, name)(device)
    assert e.value.code == 107001


def test_raw_numpy_and_enum_integers_are_accepted(dev):
    """Control: numpy integers and IntEnums are ints (operator.index) and are accepted."""
    ptr = raw.aclrtMalloc(np.uint64(64), MallocPolicy.NORMAL_ONLY)
    raw.aclrtMemset(np.int64(ptr), np.uint32(64), np.int32(7), np.uint8(64))
    assert raw.aclrtGetMemInfo(np.int16(MemAttr.HBM_MEM))[1] > 0
    raw.aclrtFree(np.uint64(ptr))


@pytest.mark.parametrize("name", ["aclFinalize", "aclrtGetDevice", "aclrtGetDeviceCount",
                                  "aclrtGetSocName", "aclrtGetVersion"])
def test_raw_no_arg_calls_reject_arguments(dev, name):
    """Calls without C parameters reject any argument with TypeError."""
    with pytest.raises(TypeError):
        getattr(raw, name)(0)


@pytest.mark.parametrize("bad", [None, 5, b"runtime", object()], ids=repr)
def test_raw_version_str_package_name_wrong_type(backend, bad):
    """aclsysGetVersionStr takes the package name as a str; anything else -> TypeError."""
    with pytest.raises(TypeError):
        raw.aclsysGetVersionStr(bad)


@pytest.mark.parametrize("bad", [5, 1.5, True, [b"x"], object()], ids=repr)
def test_raw_acl_init_config_path_wrong_type(backend, bad):
    """docs/runtime-model.md §3.1: configPath is a path or None; anything else -> TypeError."""
    with pytest.raises(TypeError):
        raw.aclInit(bad)


@pytest.mark.parametrize("bad", ["a\0b", b"a\0b"], ids=repr)
def test_raw_acl_init_config_path_with_nul_is_value_error(backend, bad):
    """A path with a NUL byte cannot be passed to C -> ValueError before the backend."""
    with pytest.raises(ValueError) as e:
        raw.aclInit(bad)
    assert not isinstance(e.value, AclError)


# -- Pythonic layer: Device ------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["0", None, 1.5, True, b"0"], ids=repr)
def test_device_wrong_type_is_type_error(backend, bad):
    """Device(id) takes an int32 device id; Device("0") -> TypeError."""
    with pytest.raises(TypeError):
        acl_mem.Device(bad)


@pytest.mark.parametrize("bad", [2**31, -(2**31) - 1, 2**64])
def test_device_out_of_int32_is_value_error(backend, bad):
    with pytest.raises(ValueError) as e:
        acl_mem.Device(bad)
    assert not isinstance(e.value, AclError)


@pytest.mark.parametrize("device", [-1, 2**31 - 1])
def test_device_set_current_outside_range_is_107001(backend, device):
    """docs/runtime-model.md §3.2: Device(-1).set_current() -> 107001 (an AclError, no crash)."""
    with pytest.raises(InvalidDeviceIdError) as e:
        acl_mem.Device(device).set_current()
    assert e.value.code == 107001


def test_device_set_current_at_device_count_is_107001(backend):
    """docs/runtime-model.md §3.2: the id equal to the device count is outside [0, count) ->
    107001."""
    count = acl_mem.Device.count()
    with pytest.raises(InvalidDeviceIdError) as e:
        acl_mem.Device(count).set_current()
    assert e.value.code == 107001


_ALLOCATORS = ["malloc", "malloc_align32", "malloc_cached", "malloc_host", "dvpp_malloc"]


@pytest.mark.parametrize("method", _ALLOCATORS)
@pytest.mark.parametrize("bad", [-1, 2**64, 2**65])
def test_device_malloc_out_of_range_is_value_error(dev, method, bad):
    """dev.malloc(-1) / dev.malloc(2**64) -> ValueError before the runtime is called."""
    before = dev.mem_info(MemAttr.HBM_MEM).free
    with pytest.raises(ValueError) as e:
        getattr(dev, method)(bad)
    assert not isinstance(e.value, AclError)
    assert dev.mem_info(MemAttr.HBM_MEM).free == before


@pytest.mark.parametrize("method", _ALLOCATORS)
@pytest.mark.parametrize("bad", [None, "64", 64.0, True], ids=repr)
def test_device_malloc_wrong_type_is_type_error(dev, method, bad):
    """dev.malloc(None) -> TypeError."""
    with pytest.raises(TypeError):
        getattr(dev, method)(bad)


@pytest.mark.parametrize("method", ["malloc", "malloc_align32", "malloc_cached"])
@pytest.mark.parametrize("bad", [None, "0", 1.5], ids=repr)
def test_device_malloc_policy_wrong_type_is_type_error(dev, method, bad):
    with pytest.raises(TypeError):
        getattr(dev, method)(64, bad)


@pytest.mark.parametrize("method", ["malloc", "malloc_align32", "malloc_cached", "malloc_host"])
def test_device_malloc_size_0_is_100000(dev, method):
    """docs/runtime-model.md §3.5/§3.7: size 0 -> InvalidParamError 100000."""
    with pytest.raises(InvalidParamError) as e:
        getattr(dev, method)(0)
    assert e.value.code == 100000


@pytest.mark.parametrize("bad", [None, "0", 1.5], ids=repr)
def test_device_mem_info_wrong_type_is_type_error(dev, bad):
    with pytest.raises(TypeError):
        dev.mem_info(bad)


def test_device_dvpp_malloc_unknown_api_is_value_error(dev):
    with pytest.raises(ValueError):
        dev.dvpp_malloc(64, api="aclrtMalloc")
    with pytest.raises(ValueError):
        dev.dvpp_malloc(64, api="no_such_call")


@pytest.mark.parametrize(
    "call",
    [
        lambda d: d.malloc(64),
        lambda d: d.malloc_align32(64),
        lambda d: d.malloc_cached(64),
        lambda d: d.malloc_host(64),
        lambda d: d.dvpp_malloc(64),
        lambda d: d.mem_info(MemAttr.HBM_MEM),
    ],
    ids=["malloc", "malloc_align32", "malloc_cached", "malloc_host", "dvpp_malloc", "mem_info"],
)
def test_other_device_while_device_0_is_current(dev, call):
    """Device(1).malloc while device 0 is current -> DeviceNotCurrentError, nothing allocated."""
    need_two_devices()
    before = dev.mem_info(MemAttr.HBM_MEM)
    with pytest.raises(DeviceNotCurrentError):
        call(acl_mem.Device(1))
    assert dev.mem_info(MemAttr.HBM_MEM) == before


# -- Pythonic layer: buffers -----------------------------------------------------------------------
@pytest.mark.parametrize("bad", [7, None, "abcd", 1.5, object()], ids=repr)
def test_copy_from_non_buffer_is_type_error(dev, bad):
    """copy_from an int / None / str -> TypeError."""
    buf = dev.malloc(16)
    with pytest.raises(TypeError):
        buf.copy_from(bad)


@pytest.mark.parametrize("bad", [7, None, "abcd", 1.5], ids=repr)
def test_copy_to_non_buffer_is_type_error(dev, bad):
    buf = dev.malloc(16)
    with pytest.raises(TypeError):
        buf.copy_to(bad)


def test_copy_from_non_contiguous_numpy_is_value_error(dev):
    """A strided numpy view has no single address range -> ValueError, nothing copied."""
    buf = dev.malloc(16)
    buf.memset(0)
    strided = np.arange(32, dtype=np.uint8)[::2]
    with pytest.raises(ValueError) as e:
        buf.copy_from(strided)
    assert not isinstance(e.value, AclError)
    assert buf.read() == bytes(16)


def test_copy_to_non_contiguous_numpy_is_value_error(dev):
    buf = dev.malloc(16)
    buf.memset(1)
    target = np.zeros(32, dtype=np.uint8)
    with pytest.raises(ValueError) as e:
        buf.copy_to(target[::2])
    assert not isinstance(e.value, AclError)
    assert target.tobytes() == bytes(32)


@pytest.mark.parametrize(
    "make",
    [lambda: bytes(16), lambda: memoryview(bytes(16)), lambda: _readonly_array(16)],
    ids=["bytes", "memoryview-of-bytes", "readonly-numpy"],
)
def test_copy_to_read_only_target_is_value_error(dev, make):
    """copy_to a bytes object (read-only) -> ValueError."""
    buf = dev.malloc(16)
    buf.memset(0xAA)
    target = make()
    with pytest.raises(ValueError) as e:
        buf.copy_to(target)
    assert not isinstance(e.value, AclError)
    assert bytes(target) == bytes(16)


def _readonly_array(n: int) -> np.ndarray:
    arr = np.zeros(n, dtype=np.uint8)
    arr.flags.writeable = False
    return arr


@pytest.mark.parametrize(
    ("op", "kwargs"),
    [
        ("copy_from", {"src": bytearray(10), "count": 11}),  # beyond the source
        ("copy_from", {"src": bytearray(32)}),  # default count 32 beyond a 16-byte buffer
        ("copy_from", {"src": bytearray(10), "offset": 10}),  # 10 + 10 > 16
        ("copy_from", {"src": bytearray(10), "src_offset": 11}),
        ("copy_from", {"src": bytearray(10), "src_offset": 4, "count": 7}),
        ("copy_to", {"dst": bytearray(4)}),  # 16 bytes into 4
        ("copy_to", {"dst": bytearray(32), "count": 17}),  # beyond the buffer
        ("copy_to", {"dst": bytearray(32), "offset": 10, "count": 7}),
        ("copy_to", {"dst": bytearray(32), "dst_offset": 20}),  # 20 + 16 > 32
    ],
    ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}" for k in v),
)
def test_copy_count_beyond_either_side_is_value_error(dev, op, kwargs):
    """Counts and offsets are checked against both sides' requested sizes -> ValueError."""
    buf = dev.malloc(16)
    buf.memset(0x5A)
    with pytest.raises(ValueError) as e:
        getattr(buf, op)(**kwargs)
    assert not isinstance(e.value, AclError)
    assert buf.read() == b"\x5a" * 16
    other = kwargs.get("dst")
    if other is not None:
        assert bytes(other) == bytes(len(other))


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"count": -1}, ValueError),
        ({"offset": -1}, ValueError),
        ({"count": "1"}, TypeError),
        ({"offset": 1.5}, TypeError),
        ({"count": None, "offset": None}, TypeError),
    ],
)
def test_copy_bad_count_or_offset(dev, kwargs, error):
    buf = dev.malloc(16)
    with pytest.raises(error) as e:
        buf.copy_from(bytearray(16), **kwargs)
    assert not isinstance(e.value, AclError)


@pytest.mark.parametrize(("count", "offset"), [(17, 0), (1, 16), (8, 9), (None, 17)])
def test_read_beyond_the_buffer_is_value_error(dev, count, offset):
    buf = dev.malloc(16)
    with pytest.raises(ValueError) as e:
        buf.read(count, offset)
    assert not isinstance(e.value, AclError)


@pytest.mark.parametrize("value", [256, -1, 0x1AB, 2**64])
def test_memset_value_outside_a_byte_is_value_error(dev, value):
    """Buffer.memset takes a byte 0-255: 256 -> ValueError, nothing written."""
    buf = dev.malloc(16)
    buf.memset(0x11)
    with pytest.raises(ValueError) as e:
        buf.memset(value)
    assert not isinstance(e.value, AclError)
    assert buf.read() == b"\x11" * 16


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ((0, 17), {}, ValueError),
        ((0, 8), {"offset": 9}, ValueError),
        ((0,), {"offset": 17}, ValueError),
        (("0",), {}, TypeError),
        ((None,), {}, TypeError),
        ((1.0,), {}, TypeError),
        ((0, 1.5), {}, TypeError),
    ],
)
def test_memset_bad_arguments(dev, args, kwargs, error):
    buf = dev.malloc(16)
    buf.memset(0x22)
    with pytest.raises(error) as e:
        buf.memset(*args, **kwargs)
    assert not isinstance(e.value, AclError)
    assert buf.read() == b"\x22" * 16


_BUFFER_USES = {
    "ptr": lambda b: b.ptr,
    "copy_from": lambda b: b.copy_from(b"x"),
    "copy_to": lambda b: b.copy_to(bytearray(16)),
    "read": lambda b: b.read(),
    "memset": lambda b: b.memset(0),
    "address_range": lambda b: b.address_range(),
    "attributes": lambda b: b.attributes(),
}
_HOST_USES = {"view": lambda b: b.view(), "numpy": lambda b: b.numpy()}


@pytest.mark.parametrize("kind", ["malloc", "malloc_align32", "malloc_cached", "dvpp_malloc",
                                  "malloc_host"])
@pytest.mark.parametrize("use", sorted(set(_BUFFER_USES) | set(_HOST_USES)))
def test_freed_buffer_raises_freed_buffer_error(dev, kind, use):
    """Any method on a freed buffer -> FreedBufferError; free() again does nothing."""
    if use in _HOST_USES and kind != "malloc_host":
        pytest.skip("view()/numpy() exist on HostBuffer only")
    if kind == "dvpp_malloc":
        need_dvpp_memory()  # Ascend950 has none (docs/runtime-model.md §3.8)
    try:
        buf = getattr(dev, kind)(16)
    except BackendError as exc:  # a native side library (libacl_dvpp*) may be absent
        if kind != "dvpp_malloc":
            raise
        pytest.skip(f"no DVPP library here: {exc}")
    buf.free()
    assert buf.freed
    with pytest.raises(FreedBufferError):
        {**_BUFFER_USES, **_HOST_USES}[use](buf)
    buf.free()


@pytest.mark.parametrize("direction", ["as-src", "as-dst"])
def test_freed_buffer_as_copy_peer_raises(dev, direction):
    """A freed buffer passed to another buffer's copy -> FreedBufferError, nothing copied."""
    live = dev.malloc(16)
    live.memset(0x33)
    dead = dev.malloc(16)
    dead.free()
    with pytest.raises(FreedBufferError):
        if direction == "as-src":
            live.copy_from(dead)
        else:
            live.copy_to(dead)
    assert live.read() == b"\x33" * 16


def test_buffer_of_a_reset_device_is_freed(dev):
    """docs/runtime-model.md §3.2: resetting a device to zero references releases its memory ->
    FreedBufferError."""
    need_two_devices()
    with acl_mem.Device(1) as one:
        buf = one.malloc(16)
    assert buf.freed
    with pytest.raises(FreedBufferError):
        buf.read()
    buf.free()


def test_copy_between_devices_0_and_1_is_value_error(dev):
    """DeviceBuffer copies between devices 0 and 1 -> ValueError (no peer access)."""
    need_two_devices()
    b0 = dev.malloc(16)
    b0.memset(0x10)
    one = acl_mem.Device(1).set_current()
    try:
        b1 = one.malloc(16)
        b1.memset(0x20)
    finally:
        dev.set_current()
    try:
        for call in (lambda: b0.copy_from(b1), lambda: b0.copy_to(b1),
                     lambda: b1.copy_from(b0), lambda: b1.copy_to(b0)):
            with pytest.raises(ValueError) as e:
                call()
            assert not isinstance(e.value, AclError)
        assert b0.read() == b"\x10" * 16
    finally:
        b1.free()
        one.reset()
        dev.reset()


def test_raw_copies_between_devices_0_and_1_are_107000_sync_and_async(dev):
    """docs/runtime-model.md §3.10 (docs/fidelity.md row 4): device memory of two devices in one
    copy -> 107000,
    queued or not; nothing is copied."""
    need_two_devices()
    b0 = dev.malloc(16)
    b0.memset(0x10)
    one = acl_mem.Device(1).set_current()
    try:
        b1 = one.malloc(16)
        b1.memset(0x20)
    finally:
        dev.set_current()
    stream = dev.stream()
    try:
        with pytest.raises(RtParamInvalidError):
            raw.aclrtMemcpy(b0.ptr, 16, b1.ptr, 16, MemcpyKind.DEVICE_TO_DEVICE)
        with pytest.raises(RtParamInvalidError):
            raw.aclrtMemcpyAsync(b0.ptr, 16, b1.ptr, 16, MemcpyKind.DEVICE_TO_DEVICE,
                                 stream.handle)
        stream.synchronize()
        assert b0.read() == b"\x10" * 16
    finally:
        stream.destroy()
        b1.free()
        one.reset()
        dev.reset()
