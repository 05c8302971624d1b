"""The binding never takes an address modulo 2**64: a backend object's call given an int
past 64 bits or a negative one raises OverflowError and acts on nothing (acl_mem.raw
refuses such addresses before the backend; code driving a backend object directly, as
trace replay and tools do, gets the same protection)."""

from __future__ import annotations

import pytest

from acl_mem import _backend, raw


class _Address(int):
    """An int subclass (an IntEnum, a numpy-like scalar type) holding an address."""


@pytest.mark.parametrize("offset", [1 << 64, 1 << 70, "negative", "subclass"])
def test_an_address_out_of_64_bits_frees_nothing(dev, offset):
    backend = _backend.get()
    ptr = raw.aclrtMalloc(64)
    bad = -((1 << 64) - ptr) if offset == "negative" else \
        _Address(ptr + (1 << 64)) if offset == "subclass" else ptr + offset  # ptr mod 2**64
    with pytest.raises(OverflowError):
        backend.aclrtFree(bad)
    raw.aclrtMemset(ptr, 64, 7, 64)  # still the caller's
    assert backend.aclrtFree(ptr) == 0


def test_a_stream_handle_out_of_64_bits_is_refused(dev):
    backend = _backend.get()
    rc, stream = backend.aclrtCreateStream()
    assert rc == 0
    with pytest.raises(OverflowError):
        backend.aclrtDestroyStream(stream + (1 << 64))
    assert backend.aclrtDestroyStream(stream) == 0
