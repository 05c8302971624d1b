# Each line marked below must be a mypy error (tests/test_typing_api.py).
from acl_mem import Device, HostBuffer, SegmentPool


def run(dev: Device) -> None:
    buf = dev.malloc(64)
    buf.copy_to(5)  # error: arg-type
    buf.copy_from(3.5)  # error: arg-type
    host: HostBuffer = SegmentPool(dev).allocate(64)  # error: assignment
    print(host)
