"""A toy model server's memory, to show allocation traces (README, "Allocation traces").

It loads weights, keeps a key/value cache in a pool that grows with the sessions it
serves, and allocates activations for each batch. Record it, then look at the trace:

    ACL_MEM_TRACE=run.jsonl ACL_MEM_TRACE_STACK=3 python examples/serving_trace.py
    acl-mem trace summary run.jsonl
    acl-mem trace replay run.jsonl --hbm 16GiB
    acl-mem trace plot run.jsonl -o run.html

Runs on the fake (nothing is written to the memory, so it needs little RAM) and on an
Atlas host alike.
"""

from __future__ import annotations

import acl_mem
from acl_mem import raw
from acl_mem.sizes import GiB, MiB

#: Prompt lengths of the batches served, in thousands of tokens.
BATCHES = [1, 2, 4, 2, 8, 3, 6, 12, 5, 2, 9, 16, 4, 1, 7]


def load_weights(dev: acl_mem.Device) -> list[acl_mem.DeviceBuffer]:
    return [dev.malloc(size) for size in (3 * GiB, 2 * GiB, 1536 * MiB, 512 * MiB)]


def activations(dev: acl_mem.Device, tokens: int) -> list[acl_mem.DeviceBuffer]:
    # Three layers' activations live at once; bigger prompts need bigger buffers.
    return [dev.malloc(tokens * 96 * MiB) for _ in range(3)]


def serve(dev: acl_mem.Device, cache: acl_mem.SegmentPool) -> list[acl_mem.Buffer]:
    sessions: list[acl_mem.Buffer] = []
    for number, tokens in enumerate(BATCHES):
        sessions.append(cache.allocate(tokens * 160 * MiB))
        layers = activations(dev, tokens)
        for layer in layers:
            layer.free()
        if number % 3 == 2:  # every third batch, the oldest session ends
            sessions.pop(0).free()
    return sessions


def main() -> None:
    with acl_mem.Device(0) as dev:
        staging = dev.malloc_host(64 * MiB)
        weights = load_weights(dev)
        cache = acl_mem.SegmentPool(dev, block_size=1 * GiB)
        with dev.stream() as stream:
            sessions = serve(dev, cache)
            stream.synchronize()
        print(f"served {len(BATCHES)} batches; {len(sessions)} sessions still open; pool "
              f"peak {cache.stats().peak_reserved / GiB:.1f} GiB reserved")
        for session in sessions:
            session.free()
        cache.close()
        for weight in weights:
            weight.free()
        staging.free()
        # A forgotten staging buffer (raw pointers have no finalizer): the trace summary
        # lists it under "never freed", with this line as its call site.
        raw.aclrtMallocHost(8 * MiB)


if __name__ == "__main__":
    main()
