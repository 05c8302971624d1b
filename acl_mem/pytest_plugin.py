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
from typing import Any

import pytest


@pytest.fixture
def acl_mem_no_leaks() -> Iterator[None]:
    """Fail the test if allocations it made on the fake are still live at its end."""
    from acl_mem import _backend
    from acl_mem._fake import is_fake

    backend: Any = _backend.get()
    if not is_fake(backend):
        yield
        return
    before = {block.start for block in backend.live_blocks()}
    held_before = set(backend.live_vmm())
    yield
    gc.collect()  # buffers dropped without free() are released by their finalizers
    leaked = [block for block in backend.live_blocks() if block.start not in before]
    held = [item for item in backend.live_vmm() if item not in held_before]
    if leaked or held:
        lines = [f"{len(leaked) + len(held)} acl_mem allocation(s) made by this test were "
                 "not freed:"]
        for block in leaked:
            lines.append(f"  {block.api} {block.start:#x}: {block.requested} bytes"
                         + (f", device {block.device}" if block.device is not None else ""))
            lines.append("".join(block.stack or ("    (run with ACL_MEM_CHECK=1 for the "
                                                 "allocating stack)\n",)).rstrip())
        # Virtual memory: reservations, physical handles not freed, mappings (no stacks).
        for item in held:
            lines.append(f"  {item.api} {item.address:#x}: {item.size} bytes"
                         + (f", device {item.device}" if item.device is not None else ""))
        pytest.fail("\n".join(lines), pytrace=False)
