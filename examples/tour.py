"""A short tour of acl_mem; runs on a laptop (fake backend) and on an Atlas host alike."""

import acl_mem
from acl_mem import Device, MallocPolicy, MemAttr, raw, sizes

print(f"backend: {acl_mem.backend_name()} (`acl-mem info` says why)")
print(f"devices: {Device.count()}, SoC {raw.aclrtGetSocName()}")

with Device(0) as dev:
    before = dev.mem_info(MemAttr.HBM_MEM_HUGE)

    # aclrtMalloc pads: 100 bytes really take ALIGN_UP(100, 32) + 32 = 160.
    with dev.malloc(100) as small:
        print(f"malloc(100): allocated_size={small.allocated_size}, "
              f"range={small.address_range()}")

    # More than 1 MiB with HUGE_FIRST comes from the 2 MiB huge-page pool.
    with dev.malloc(3 << 20, MallocPolicy.HUGE_FIRST) as big:
        used = before.free - dev.mem_info(MemAttr.HBM_MEM_HUGE).free
        print(f"malloc(3 MiB): huge pool used {used >> 20} MiB")

        # Pinned host memory is viewable in place; copies infer their direction.
        with dev.malloc_host(16) as host:
            view = host.view()
            view[:] = b"acl_mem tour ok!"
            big.copy_from(host, 16)
            del view
        print(f"read back: {big.read(16)!r}")

    # Errors carry the runtime's code.
    try:
        dev.malloc(0)
    except acl_mem.InvalidParamError as exc:
        print(f"malloc(0) -> {exc.name} ({exc.code})")

# Planning a carve-up without a device (docs/runtime-model.md §3.14).
offsets, total = sizes.plan_segments([100, 4000, 33], sizes.AllocApi.MALLOC)
print(f"segments at {offsets}, block of {total} bytes needed")
