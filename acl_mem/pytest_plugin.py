"""pytest plugin shipped with acl_mem (auto-loaded through the ``pytest11`` entry point).

Fixture ``acl_mem_no_leaks``: the test fails if it ends with device or pinned host
allocations, or virtual memory (reservations, physical handles, mappings), that it made
and did not free, listing each; an allocation with the Python stack that allocated it
(stacks are recorded while the fake's memory checker is on: ``ACL_MEM_CHECK=1``). Leaks
are seen through the fake backend; on native the fixture only runs the test.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

#: What acl_mem.fake.leaks() lists as virtual memory rather than blocks.
_VMM_CALLS = frozenset({"aclrtReserveMemAddress", "aclrtMallocPhysical", "aclrtMapMem",
                        "aclrtMemImportFromShareableHandle"})


@pytest.fixture
def acl_mem_no_leaks() -> Iterator[None]:
    """Fail the test if allocations it made on the fake are still live at its end."""
    import acl_mem

    if not acl_mem.fake.is_fake(acl_mem._backend.get()):
        yield
        return
    before = {(a.api, a.address) for a in acl_mem.fake.leaks()}
    yield
    gc.collect()  # buffers dropped without free() are released by their finalizers
    now = [a for a in acl_mem.fake.leaks() if (a.api, a.address) not in before]
    leaked = [a for a in now if a.api not in _VMM_CALLS]
    held = [a for a in now if a.api in _VMM_CALLS]
    if leaked or held:
        lines = [f"{len(leaked) + len(held)} acl_mem allocation(s) made by this test were "
                 "not freed:"]
        for block in leaked:
            lines.append(f"  {block.api} {block.address:#x}: {block.size} bytes"
                         + (f", device {block.device}" if block.device is not None else ""))
            recorded = block.stack.startswith("  File ")
            lines.append(block.stack.rstrip() if recorded else
                         "    (run with ACL_MEM_CHECK=1 for the allocating stack)")
        # Virtual memory: reservations, physical handles not freed, mappings (no stacks).
        for item in held:
            lines.append(f"  {item.api} {item.address:#x}: {item.size} bytes"
                         + (f", device {item.device}" if item.device is not None else ""))
        pytest.fail("\n".join(lines), pytrace=False)
