"""The suite's own plumbing: the backend fixture installs what the test uses."""

import acl_mem


def test_backend_fixture_installs_the_backend(backend):
    assert acl_mem.backend_name() == backend.name


def test_device_fixture_sets_device_zero(dev):
    assert acl_mem.raw.aclrtGetDevice() == 0
