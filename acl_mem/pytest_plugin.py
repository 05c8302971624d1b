"""pytest plugin shipped with acl_mem (auto-loaded through the ``pytest11`` entry point).

Fixture ``acl_mem_no_leaks``: the test fails if it ends with device or pinned host
allocations that it made and did not free, listing each with the Python stack that
allocated it (stacks are recorded while the fake's memory checker is on:
``ACL_MEM_CHECK=1``). Leaks are seen through the fake backend; on native the fixture
only runs the test.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture
def acl_mem_no_leaks() -> Iterator[None]:
    """Fail the test if allocations it made on the fake are still live at its end."""
    from acl_mem import _backend
    from acl_mem._fake import FakeBackend

    backend = _backend.get()
    if not isinstance(backend, FakeBackend):
        yield
        return
    before = {block.start for block in backend.live_blocks()}
    yield
    gc.collect()  # buffers dropped without free() are released by their finalizers
    leaked = [block for block in backend.live_blocks() if block.start not in before]
    if leaked:
        lines = [f"{len(leaked)} acl_mem allocation(s) made by this test were not freed:"]
        for block in leaked:
            lines.append(f"  {block.api} {block.start:#x}: {block.requested} bytes"
                         + (f", device {block.device}" if block.device is not None else ""))
            lines.append("".join(block.stack or ("    (run with ACL_MEM_CHECK=1 for the "
                                                 "allocating stack)\n",)).rstrip())
        pytest.fail("\n".join(lines), pytrace=False)
