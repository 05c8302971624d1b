"""Error classes by code (docs/runtime-model.md §1.1) and enum values as in the header
(docs/runtime-model.md §2)."""

import pickle

import pytest

import acl_mem
from acl_mem import errors
from acl_mem.enums import MallocPolicy, MemAttr, MemcpyKind, MemLocationType

CODES = {
    100000: (acl_mem.InvalidParamError, "ACL_ERROR_INVALID_PARAM"),
    100002: (acl_mem.RepeatInitializeError, "ACL_ERROR_REPEAT_INITIALIZE"),
    100037: (acl_mem.RepeatFinalizeError, "ACL_ERROR_REPEAT_FINALIZE"),
    107000: (acl_mem.RtParamInvalidError, "ACL_ERROR_RT_PARAM_INVALID"),
    107001: (acl_mem.InvalidDeviceIdError, "ACL_ERROR_RT_INVALID_DEVICEID"),
    107002: (acl_mem.ContextNullError, "ACL_ERROR_RT_CONTEXT_NULL"),
    107016: (acl_mem.InvalidMemoryTypeError, "ACL_ERROR_RT_INVALID_MEMORY_TYPE"),
    107017: (acl_mem.InvalidHandleError, "ACL_ERROR_RT_INVALID_HANDLE"),
    207000: (acl_mem.FeatureNotSupportError, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT"),
    207001: (acl_mem.MemoryAllocationError, "ACL_ERROR_RT_MEMORY_ALLOCATION"),
    507007: (acl_mem.ContextReleaseError, "ACL_ERROR_RT_CONTEXT_RELEASE_ERROR"),
    507899: (acl_mem.DrvInternalError, "ACL_ERROR_RT_DRV_INTERNAL_ERROR"),
}


@pytest.mark.parametrize("code", sorted(CODES))
def test_acl_error_picks_the_subclass_for_the_code(code):
    """docs/runtime-model.md §1.1: one class per code, with .code and the header name."""
    cls, name = CODES[code]
    exc = acl_mem.AclError(code, "aclrtSomething(x=1)")
    assert type(exc) is cls
    assert exc.code == code
    assert exc.name == name
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is cls and copy.code == code


def test_unknown_code_stays_a_plain_acl_error():
    exc = acl_mem.AclError(999999)
    assert type(exc) is acl_mem.AclError
    assert exc.code == 999999


def test_check_raises_only_on_non_zero():
    errors.check(0, "aclrtFree(devPtr=0x1)")
    with pytest.raises(acl_mem.MemoryAllocationError) as info:
        errors.check(207001, "aclrtMalloc(size=1)")
    assert info.value.code == 207001


def test_out_of_memory_is_also_a_memory_error():
    assert issubclass(acl_mem.MemoryAllocationError, MemoryError)
    assert issubclass(acl_mem.InvalidParamError, ValueError)


def test_enum_values_match_acl_rt_h():
    """docs/runtime-model.md §2: values as in acl_rt.h of ACL 1.17."""
    assert [int(p) for p in MallocPolicy] == [0, 1, 2, 3, 4, 5, 6, 7, 0x100, 0x1000, 0x100000]
    assert [int(k) for k in MemcpyKind] == list(range(8))
    assert [int(a) for a in MemAttr] == list(range(18))
    assert MemAttr.HBM_MEM_HUGE1G == 10 and MemAttr.MEM_P2P_HUGE1G == 17
    assert [int(t) for t in MemLocationType] == [0, 1, 2, 4]


def test_subclasses_can_be_constructed_directly():
    exc = acl_mem.MemoryAllocationError(207001, "pool")
    assert type(exc) is acl_mem.MemoryAllocationError and exc.code == 207001
