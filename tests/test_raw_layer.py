"""Raw-layer behaviour that no runtime-model rule pins: values a newer runtime may return,
caches."""

import gc
import weakref

import pytest

import acl_mem
from acl_mem import raw
from acl_mem._fake.engine_fake import EngineFake


class ManagedMemoryFake(EngineFake):
    """A runtime newer than the header: reports location type 3 (MANAGED, docs/runtime-model.md §2
    HEAD)."""

    def aclrtPointerGetAttributes(self, ptr, null_outputs=0):
        return 0, 3, 0, 4096


def test_unknown_location_type_is_returned_as_int_not_an_error():
    with acl_mem.using_backend(ManagedMemoryFake(acl_mem.fake.profile())):
        attributes = raw.aclrtPointerGetAttributes(0x1000)
        assert attributes.type == 3
        assert not isinstance(attributes.type, acl_mem.MemLocationType)


def test_padding_cache_does_not_keep_a_replaced_backend_alive():
    """allocated_size caches the SoC padding per backend, weakly."""
    fake = acl_mem.fake.make_backend()
    with acl_mem.using_backend(fake), acl_mem.Device(0) as dev:
        buf = dev.malloc(100)
        assert buf.allocated_size == 160
        buf.free()
        del buf
    ref = weakref.ref(fake)
    del fake
    gc.collect()
    assert ref() is None


def test_set_and_reset_keep_the_mirror_in_step_under_threads():
    """Concurrent set/reset on one device leave no live token on released memory."""
    import threading

    with acl_mem.using_backend(acl_mem.fake.make_backend()):
        errors: list[BaseException] = []

        def churn() -> None:
            try:
                for _ in range(200):
                    with acl_mem.Device(0) as dev:
                        dev.malloc(64).free()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=churn) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        with pytest.raises(acl_mem.ContextNullError):
            raw.aclrtGetDevice()
