# Must pass mypy --strict as it is (tests/test_typing_api.py): no casts for users.
import numpy as np

import acl_mem
from acl_mem import Device, DeviceBuffer, ExpandablePool, HostBuffer, SegmentPool
from acl_mem.vmm import Mapping, PhysicalMemory, VirtualRange


def upload(buf: DeviceBuffer, data: bytes) -> None:
    buf.copy_from(data)


def run(dev: Device, api: acl_mem.AllocApi) -> None:
    with SegmentPool(dev) as pool, ExpandablePool(dev, 1 << 26) as grow:
        upload(pool.allocate(64), b"x")
        upload(grow.allocate(64), b"x")
        upload(SegmentPool(dev, api="aclrtMallocAlign32").allocate(64), b"x")
        host: HostBuffer = SegmentPool(dev, api="aclrtMallocHost").allocate(64)
        either = SegmentPool(dev, api=api).allocate(64)
        either.copy_to(np.empty(64, np.uint8))
        host.copy_to(bytearray(64))
        annotated: SegmentPool = SegmentPool(dev)
        upload(annotated.allocate(8), b"y")
    with VirtualRange(1 << 21) as rng, PhysicalMemory(1 << 21) as phys:
        mapping: Mapping = rng.map(phys)
        mapping.write(b"abc")
        rng.copy_from(np.zeros(4, np.uint8), offset=8)
        data: bytes = mapping.read(3) + rng.read(4, 8)
        mapping.copy_to(memoryview(bytearray(3)), 3)
        print(data)
