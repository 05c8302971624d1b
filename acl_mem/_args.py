"""Argument checks shared by the raw layer: C types, named in every message."""

from __future__ import annotations

import operator
import os

__all__ = ["c_int", "c_uint", "path_or_none"]


def _as_int(value: object, call: str, name: str, ctype: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{call}: {name} must be an int ({ctype}), got bool")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"{call}: {name} must be an int ({ctype}), got {type(value).__name__}"
        ) from None


def c_uint(value: object, call: str, name: str, bits: int = 64, ctype: str = "size_t") -> int:
    """``value`` as an unsigned C integer of ``bits`` bits, or TypeError / ValueError."""
    # Plain ints in range are by far the common case: one type test, one comparison.
    if type(value) is int and 0 <= value < (1 << bits):
        return value
    number = _as_int(value, call, name, ctype)
    if not 0 <= number < (1 << bits):
        raise ValueError(f"{call}: {name}={number} is outside {ctype} [0, 2**{bits} - 1]")
    return number


def c_int(value: object, call: str, name: str, bits: int = 32, ctype: str = "int32_t") -> int:
    """``value`` as a signed C integer of ``bits`` bits, or TypeError / ValueError."""
    number = _as_int(value, call, name, ctype)
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not low <= number <= high:
        raise ValueError(f"{call}: {name}={number} is outside {ctype} [{low}, {high}]")
    return number


def path_or_none(value: object, call: str, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes, os.PathLike)):
        path = os.fsdecode(value)
        if "\0" in path:
            raise ValueError(f"{call}: {name} contains a NUL byte")
        return path
    raise TypeError(f"{call}: {name} must be a path or None, got {type(value).__name__}")
