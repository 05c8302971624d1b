"""``ACL_MEM_LEAK_REPORT=1``: the fake's leak report, printed when the process exits.

The exit hook is registered when the first fake backend is made (the backend is chosen on
first use), so every program that ran on the fake gets the report: one that only called
``acl_mem.raw`` or the Pythonic layer as much as one that imported ``acl_mem.fake``.
Importing acl_mem alone stays free of backend code, and a native-only program has no
fake to report on.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from .. import _env

__all__ = ["arm", "report_leaks_at_exit"]

_NO_STACK = "(stack recorded only with check=True)"


def _no_backend() -> Any:
    return None


#: The active backend when the process exits: acl_mem._backend, which sits above the
#: fakes that arm the report, sets it when it makes a fake active.
active_backend: Callable[[], Any] = _no_backend

_armed = False
_arm_lock = threading.Lock()


def _fresh_arm_lock_in_child() -> None:
    global _arm_lock
    _arm_lock = threading.Lock()  # a parent thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_arm_lock_in_child)


def arm() -> None:
    """Register the exit report once per process, if ACL_MEM_LEAK_REPORT asks for it."""
    global _armed
    if _armed:
        return
    with _arm_lock:
        if _armed:
            return
        # Read before marking: a bad setting raises now and again at the next fake.
        wanted = _env.flag("ACL_MEM_LEAK_REPORT")
        _armed = True
        if wanted:
            atexit.register(report_leaks_at_exit)


def report_leaks_at_exit() -> None:
    """Print the active fake's leaks, each block with its allocation stack when the checker
    recorded one."""
    from . import is_fake

    active: Any = active_backend()
    if active is None or not is_fake(active):
        return
    blocks = active.live_blocks()
    held = active.live_vmm()
    if not blocks and not held:
        return
    print(f"acl_mem: {len(blocks) + len(held)} allocation(s) never freed:", file=sys.stderr)
    for block in blocks:
        stack = "".join(block.stack or ()) or _NO_STACK
        print(f"  {block.api} {block.start:#x} ({block.requested} bytes, device "
              f"{block.device})\n{stack}", file=sys.stderr)
    for item in held:
        print(f"  {item.api} {item.address:#x} ({item.size} bytes, device {item.device})",
              file=sys.stderr)
