"""One lock per virtual-memory object (acl_mem.vmm): what uses an object (a copy, a map,
a grow) and what ends or moves its memory (close, offload, restore, shrink) never
interleave, so a copy that passed the object's "still open" check is done before another
thread's close() gives the addresses back, never after, when they may be someone else's.

Objects inside another (a MappedMemory's range, physical memory and mapping; an
ExpandableSegment's chunks) are taken after it; a range before the mappings in it; the
release steps' lock (vmm.py, _steps_lock) last.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from typing_extensions import Self

__all__ = ["Locked", "locked"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T", bound="Locked")

#: Every object with a lock, so that a forked child gets new ones.
_objects: weakref.WeakSet[Locked] = weakref.WeakSet()


class Locked:
    """Gives each object ``_lock`` (reentrant) as it is made."""

    _lock: threading.RLock

    def __new__(cls, *args: object, **kwargs: object) -> Self:
        self = super().__new__(cls)
        self._lock = threading.RLock()
        _objects.add(self)
        return self


def locked(method: Callable[Concatenate[_T, _P], _R]) -> Callable[Concatenate[_T, _P], _R]:
    """``method`` run holding its object's lock."""
    def holding(obj: _T, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with obj._lock:
            return method(obj, *args, **kwargs)

    functools.update_wrapper(holding, method)
    return holding


def _new_locks_in_child() -> None:
    # A thread of the parent may have held one at the fork: it does not exist in the
    # child, which would wait for it for ever.
    for obj in list(_objects):
        obj._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_in_child)
