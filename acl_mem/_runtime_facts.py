"""Facts about the runtime behind a backend that the Pythonic layer and the error hints
both need: its CANN release and the padding aclrtMalloc adds. Each is asked once per
backend object and cached weakly, so a replaced backend (and its memory) is not kept."""

from __future__ import annotations

import weakref

from . import _backend
from .sizes import soc_padding

__all__ = ["padding_of", "release_of"]

_PADDING: weakref.WeakKeyDictionary[_backend.Backend, int] = weakref.WeakKeyDictionary()
_RELEASE: weakref.WeakKeyDictionary[_backend.Backend, str] = weakref.WeakKeyDictionary()


def padding_of(backend: _backend.Backend) -> int:
    """The padding aclrtMalloc adds on the backend's SoC and CANN release (a fixed 32 before
    9.1.0, docs/runtime-model.md §3.5); cached once the SoC is known."""
    padding = _PADDING.get(backend)
    if padding is None:
        soc = backend.soc_name()
        padding = soc_padding(soc, release_of(backend))
        if soc:
            _PADDING[backend] = padding
    return padding


def release_of(backend: _backend.Backend) -> str:
    """The backend's CANN release (aclsysGetVersionStr("runtime")); "" when it cannot say,
    which counts as the newest release."""
    release = _RELEASE.get(backend)
    if release is None:
        try:
            rc, release = backend.aclsysGetVersionStr("runtime")
        except Exception:  # a library without the call, or one that fails oddly: assume new
            rc, release = -1, ""
        release = release if rc == 0 else ""
        _RELEASE[backend] = release
    return release
