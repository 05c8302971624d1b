"""What every pyACL function of acl_mem.pyacl shares: argument parsing and return codes.

pyACL is a C extension whose functions parse their arguments with ``PyArg_ParseTuple``
and, when parsing fails, replace the error with ``TypeError("acl.rt.malloc args parse
failed")`` (its ``CHECK_NULL`` macro). The helpers here apply the same format units the
same way (checked against CPython 3.11's ``PyArg_ParseTuple``):

* ``k`` (pointers, sizes, handles): an ``int`` (bool included, numpy integers not),
  wrapped to 64 bits without any range check, so ``-1`` becomes ``2**64 - 1``;
* ``i`` (device ids, policies, kinds, attributes, memset values): anything with
  ``__index__`` (numpy integers too, floats not) in the C ``int`` range;
* ``s`` (paths, package names): a ``str`` without NUL characters.

Runtime errors are never raised: an :class:`~acl_mem.AclError` becomes its ``.code``.
See docs/pyacl.md.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable
from typing import NoReturn, TypeVar

from ..errors import AclError

__all__ = [
    "ACL_HOST",
    "MEMORY_ONLY",
    "NOT_YET",
    "UnsupportedError",
    "as_int",
    "as_int32",
    "as_str",
    "as_uint32",
    "as_ulong",
    "code_of",
    "define_stubs",
    "parse_failed",
    "stub",
    "with_code",
]

T = TypeVar("T")

#: aclrtRunMode: acl_mem runs where the host drives the device (EP mode).
ACL_HOST = 1

_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


class UnsupportedError(NotImplementedError):
    """A pyACL function that acl_mem.pyacl has as a name but does not implement.

    Raised at the first call, so that a program stops there instead of going on with a
    result it never got. ``function`` is the pyACL name (``"acl.mdl.load_from_file"``).
    """

    def __init__(self, function: str, reason: str) -> None:
        self.function = function
        super().__init__(f"{function}: {reason}")


UnsupportedError.__module__ = "acl_mem.pyacl"  # where users find it


def parse_failed(call: str, detail: str) -> NoReturn:
    """Raise what pyACL raises when ``PyArg_ParseTuple`` refuses an argument."""
    raise TypeError(f"{call} args parse failed: {detail}")


def as_ulong(value: object, call: str, name: str) -> int:
    """Format unit ``k``: an int, wrapped to 64 bits (no range check)."""
    if not isinstance(value, int):
        parse_failed(call, f"{name} must be int, not {type(value).__name__}")
    return value & _U64


def as_uint32(value: object, call: str, name: str) -> int:
    """Format unit ``I``: an integer (``__index__``), wrapped to 32 bits."""
    return _index(value, call, name) & _U32


def as_int(value: object, call: str, name: str) -> int:
    """Format unit ``i``: an integer (``__index__``) in the C int range."""
    number = _index(value, call, name)
    if not _INT_MIN <= number <= _INT_MAX:
        parse_failed(call, f"{name}={number} is outside the C int range")
    return number


def as_str(value: object, call: str, name: str) -> str:
    """Format unit ``s``: a str without NUL characters (None is refused)."""
    if not isinstance(value, str):
        parse_failed(call, f"{name} must be str, not {type(value).__name__}")
    if "\0" in value:
        parse_failed(call, f"{name} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        parse_failed(call, f"{name} cannot be encoded as UTF-8")
    return value


def _index(value: object, call: str, name: str) -> int:
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        parse_failed(call, f"{name} must be an integer, not {type(value).__name__}")


def as_int32(code: int) -> int:
    """An aclError as pyACL returns it (``Py_BuildValue("i")``)."""
    code &= _U32
    return code - (1 << 32) if code > _INT_MAX else code


#: Each thread's text of its last failed call (acl.get_recent_err_msg).
_recent = threading.local()


def failed_with(exc: AclError) -> int:
    """The code pyACL returns for ``exc``; its text becomes the thread's recent error."""
    _recent.text = str(exc)
    return as_int32(exc.code)


def recent_error() -> str:
    """The calling thread's last failed call, as text; "" while none failed."""
    text: str = getattr(_recent, "text", "")
    return text


def code_of(action: Callable[[], object]) -> int:
    """Run ``action``; 0, or the code of the :class:`AclError` it raised."""
    try:
        action()
    except AclError as exc:
        return failed_with(exc)
    return 0


def with_code(action: Callable[[], T], failed: T) -> tuple[T, int]:
    """``(result, 0)``, or ``(failed, code)`` when ``action`` raised an :class:`AclError`."""
    try:
        return action(), 0
    except AclError as exc:
        return failed, failed_with(exc)


#: Why a name of pyACL is not implemented, by kind.
MEMORY_ONLY = ("acl_mem covers memory only (pyACL's memory, device, context, stream, event "
               "and data buffer calls); {what} are not available, so acl_mem.pyacl stops "
               "the program here")
NOT_YET = ("not yet supported by acl_mem.pyacl ({what} come in a later release); "
           "acl_mem.pyacl stops the program here")


def stub(module: str, name: str, reason: str) -> Callable[..., NoReturn]:
    """A function named like pyACL's ``module.name`` that raises :class:`UnsupportedError`."""
    function = f"{module}.{name}"

    def unsupported(*args: object, **kwargs: object) -> NoReturn:
        raise UnsupportedError(function, reason)

    unsupported.__name__ = unsupported.__qualname__ = name
    unsupported.__module__ = module
    unsupported.__doc__ = f"pyACL's {function}: not implemented by acl_mem.pyacl ({reason})."
    return unsupported


def define_stubs(namespace: dict[str, object], module: str, names: str, reason: str) -> None:
    """Add a :func:`stub` to ``namespace`` for each whitespace-separated name not defined."""
    for name in names.split():
        if name not in namespace:
            namespace[name] = stub(module, name, reason)
