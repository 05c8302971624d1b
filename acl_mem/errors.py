"""Exceptions raised by acl_mem.

Every non-zero ``aclError`` becomes an :class:`AclError`; the subclass is chosen by
the code (docs/runtime-model.md §1.1), so ``except MemoryAllocationError`` works on both backends
and tests compare class and :attr:`AclError.code`, never the message.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "AclError",
    "AclInternalError",
    "BackendError",
    "ContextNullError",
    "ContextReleaseError",
    "DestroyedStreamError",
    "DeviceNotCurrentError",
    "DrvInternalError",
    "EventTimestampInvalidError",
    "FeatureNotSupportError",
    "FreedBufferError",
    "FunctionNotAvailableError",
    "HazardError",
    "HazardWarning",
    "InternalError",
    "InvalidDeviceIdError",
    "InvalidFileError",
    "InvalidHandleError",
    "InvalidMemoryTypeError",
    "InvalidParamError",
    "MemoryAllocationError",
    "MemoryCheckError",
    "MemoryCheckWarning",
    "MemoryFreeError",
    "NoDeviceError",
    "NoStreamResourceError",
    "ParseFileError",
    "RepeatFinalizeError",
    "RepeatInitializeError",
    "RtParamInvalidError",
    "SettingError",
    "StreamContextError",
    "UninitializeError",
    "check",
]

_BY_CODE: dict[int, type[AclError]] = {}


class AclError(Exception):
    """A non-zero aclError returned by the runtime (or by the fake in its place).

    ``AclError(code, what)`` returns an instance of the subclass registered for
    ``code``; unknown codes stay plain :class:`AclError`.
    """

    code: int
    name: str
    CODE: ClassVar[int | None] = None
    NAME: ClassVar[str] = "ACL_ERROR_UNKNOWN"

    def __new__(cls, code: int, what: str = "", hint: str = "") -> AclError:
        target = _BY_CODE.get(code, cls) if cls is AclError else cls
        # Exception.__new__, not super(): MemoryError.__new__ refuses subclasses that mix in.
        return Exception.__new__(target)

    def __init__(self, code: int, what: str = "", hint: str = "") -> None:
        self.code = int(code)
        self.name = _BY_CODE[code].NAME if code in _BY_CODE else f"ACL_ERROR_UNKNOWN({code})"
        #: The call and its arguments, e.g. ``"aclrtFree(devPtr=0x...)"``.
        self.what = what
        #: What the code most likely means for this call and what to do about it.
        self.hint = hint
        text = f"{self.name} ({self.code})"
        message = f"{what}: {text}" if what else text
        super().__init__(f"{message}. {hint}" if hint else message)

    def __reduce__(self) -> tuple[type[AclError], tuple[int, str, str]]:
        return (AclError, (self.code, self.what, self.hint))

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.CODE is not None:
            _BY_CODE[cls.CODE] = cls


class InvalidParamError(AclError, ValueError):
    """100000: the ACL layer rejected a parameter (docs/runtime-model.md §1.2 layer 1)."""

    CODE = 100000
    NAME = "ACL_ERROR_INVALID_PARAM"


class UninitializeError(AclError):
    """100001: not initialised (no memory API returns it, docs/runtime-model.md §1.1)."""

    CODE = 100001
    NAME = "ACL_ERROR_UNINITIALIZE"


class RepeatInitializeError(AclError):
    """100002: aclInit called while already initialised (docs/runtime-model.md §3.1); harmless."""

    CODE = 100002
    NAME = "ACL_ERROR_REPEAT_INITIALIZE"


class InvalidFileError(AclError, ValueError):
    """100003: aclInit's config file does not exist, cannot be opened, is not a regular file
    or is over 10 MiB (docs/runtime-model.md §3.1.1)."""

    CODE = 100003
    NAME = "ACL_ERROR_INVALID_FILE"


class ParseFileError(AclError, ValueError):
    """100006: aclInit's config file is not JSON, or nests brackets more than 10 deep
    (docs/runtime-model.md §3.1.1)."""

    CODE = 100006
    NAME = "ACL_ERROR_PARSE_FILE"


class AclInternalError(AclError):
    """500000: an internal error of the ACL layer (e.g. a version query for a package that
    is not installed)."""

    CODE = 500000
    NAME = "ACL_ERROR_INTERNAL_ERROR"


class RepeatFinalizeError(AclError):
    """100037: aclFinalize called while already finalised (docs/runtime-model.md §3.1)."""

    CODE = 100037
    NAME = "ACL_ERROR_REPEAT_FINALIZE"


class RtParamInvalidError(AclError, ValueError):
    """107000: the runtime or driver rejected a value (docs/runtime-model.md §1.2 layers 2-3)."""

    CODE = 107000
    NAME = "ACL_ERROR_RT_PARAM_INVALID"


class InvalidDeviceIdError(AclError, ValueError):
    """107001: device id outside ``[0, device count)`` (docs/runtime-model.md §3.2)."""

    CODE = 107001
    NAME = "ACL_ERROR_RT_INVALID_DEVICEID"


class ContextNullError(AclError):
    """107002: the calling thread has no current context (no aclrtSetDevice)."""

    CODE = 107002
    NAME = "ACL_ERROR_RT_CONTEXT_NULL"


class StreamContextError(AclError):
    """107003: stream not in the current context."""

    CODE = 107003
    NAME = "ACL_ERROR_RT_STREAM_CONTEXT"


class EventTimestampInvalidError(AclError):
    """107006: an event's record has not completed yet, so it has no timestamp (elapsed
    time before synchronising, docs/runtime-model.md §3.15)."""

    CODE = 107006
    NAME = "ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID"


class InvalidMemoryTypeError(AclError, ValueError):
    """107016: aclrtMemAttr outside 0..17 in aclrtGetMemInfo (docs/runtime-model.md §3.12)."""

    CODE = 107016
    NAME = "ACL_ERROR_RT_INVALID_MEMORY_TYPE"


class InvalidHandleError(AclError, ValueError):
    """107017: destroyed or wrong-type handle."""

    CODE = 107017
    NAME = "ACL_ERROR_RT_INVALID_HANDLE"


class FeatureNotSupportError(AclError):
    """207000: the chip, driver or mode does not support the request."""

    CODE = 207000
    NAME = "ACL_ERROR_RT_FEATURE_NOT_SUPPORT"


class MemoryAllocationError(AclError, MemoryError):
    """207001: out of memory in the requested page pool."""

    CODE = 207001
    NAME = "ACL_ERROR_RT_MEMORY_ALLOCATION"


class MemoryFreeError(AclError):
    """207002: free error (defined by the header; no memory path emits it)."""

    CODE = 207002
    NAME = "ACL_ERROR_RT_MEMORY_FREE"


class NoStreamResourceError(AclError):
    """207008: no stream resource left (the per-device stream limit, docs/runtime-model.md §3.4)."""

    CODE = 207008
    NAME = "ACL_ERROR_RT_NO_STREAM_RESOURCE"


class NoDeviceError(AclError):
    """207004: no device."""

    CODE = 207004
    NAME = "ACL_ERROR_RT_NO_DEVICE"


class InternalError(AclError):
    """507000: runtime internal error."""

    CODE = 507000
    NAME = "ACL_ERROR_RT_INTERNAL_ERROR"


class ContextReleaseError(AclError):
    """507007: aclrtResetDevice on a device that is not set (docs/runtime-model.md §3.2)."""

    CODE = 507007
    NAME = "ACL_ERROR_RT_CONTEXT_RELEASE_ERROR"


class DrvInternalError(AclError):
    """507899: a driver error the runtime does not translate."""

    CODE = 507899
    NAME = "ACL_ERROR_RT_DRV_INTERNAL_ERROR"


def error_name(code: int) -> str:
    """The header name of ``code`` (``"ACL_SUCCESS"`` for 0)."""
    if code == 0:
        return "ACL_SUCCESS"
    cls = _BY_CODE.get(code)
    return cls.NAME if cls is not None else f"ACL_ERROR_UNKNOWN({code})"


def check(rc: int, what: str) -> None:
    """Raise the :class:`AclError` subclass for ``rc`` unless it is 0.

    ``what`` names the call and its arguments; it becomes the message prefix.
    """
    if rc != 0:
        raise AclError(rc, what)


class FreedBufferError(ValueError):
    """A buffer was used after :meth:`free` (or after its device was reset)."""


class DestroyedStreamError(ValueError):
    """A :class:`~acl_mem.Stream` was used after destroy() (or after its device was reset)."""


class DeviceNotCurrentError(RuntimeError):
    """A :class:`~acl_mem.Device` method ran on a thread where another device is current."""


class FunctionNotAvailableError(RuntimeError):
    """The runtime in use has no such function (a CANN release older than the function).

    Calling it in a C program would fail to link or to load; acl_mem raises this instead,
    naming the function and the release. ``function`` and ``release`` are attributes.
    """

    def __init__(self, function: str, release: str, since: str = "") -> None:
        self.function = function
        self.release = release
        added = f" (added in CANN {since})" if since else ""
        super().__init__(f"{function} does not exist in CANN {release}{added}: use a newer "
                         f"runtime, or avoid the call on this release")


class SettingError(ValueError):
    """An ``ACL_MEM_*`` environment variable holds a value acl_mem does not accept.

    ``variable``, ``value`` and ``accepted`` (what the variable takes) are attributes;
    the message names all three. Unset or blank variables never raise: they mean the default.
    """

    def __init__(self, variable: str, value: str, accepted: str) -> None:
        self.variable = variable
        self.value = value
        self.accepted = accepted
        shown = repr(value) if len(value) <= 200 else \
            f"{value[:200]!r}... ({len(value)} characters)"
        super().__init__(f"{variable}={shown} is not a value acl_mem understands: it takes "
                         f"{accepted} (unset or empty means the default)")


class BackendError(RuntimeError):
    """A backend could not be loaded or chosen; the message lists every attempt."""


class HazardWarning(RuntimeWarning):
    """The fake saw a use that races with queued asynchronous work (docs/runtime-model.md §3.4,
    §3.6)."""


class HazardError(RuntimeError):
    """A hazard, raised instead of warned when the fake runs in strict mode."""


class MemoryCheckWarning(RuntimeWarning):
    """The fake's memory checker found an overwrite, a boundary crossing or a leak."""


class MemoryCheckError(RuntimeError):
    """A memory-checker finding, raised instead of warned in strict mode."""
