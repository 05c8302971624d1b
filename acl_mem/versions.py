"""Which runtime acl_mem talks to: the CANN release and the ACL interface version."""

from __future__ import annotations

from typing import NamedTuple

from . import raw
from .errors import AclError

__all__ = ["RuntimeVersion", "runtime_version"]


class RuntimeVersion(NamedTuple):
    """The runtime in use: ``cann`` is the release (``"9.1.0"``; empty when the runtime
    package does not say), ``acl`` the interface version aclrtGetVersion reports."""

    cann: str
    acl: tuple[int, int, int]

    def __str__(self) -> str:
        acl = ".".join(map(str, self.acl))
        return f"CANN {self.cann or '(unknown)'}, ACL {acl}"


def runtime_version() -> RuntimeVersion:
    """The CANN release and ACL version of the active backend (the fake reports the
    release it plays: ``ACL_MEM_FAKE_CANN``)."""
    acl = raw.aclrtGetVersion()
    try:
        cann = raw.aclsysGetVersionStr("runtime")
    except AclError:
        cann = ""
    return RuntimeVersion(cann, acl)
