"""Reading acl_mem's ``ACL_MEM_*`` environment variables, one way for all of them.

The rules, the same for every variable (README, "Environment variables", lists them all):

- unset, empty or only blanks: the variable's default, as if it were not set;
- letters are not case-sensitive (``ACL_MEM_CHECK=Yes``, ``ACL_MEM_BACKEND=FAKE``);
- any other value the variable does not know raises :class:`~acl_mem.errors.SettingError`
  naming the variable, the value and what it accepts. Nothing is guessed.

Paths are read with :func:`secure_path`, which ignores the environment in a process whose
real and effective ids differ (``secure_getenv``'s rule), so a set-id program cannot be
steered to a file by whoever started it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .errors import SettingError

__all__ = ["choice", "flag", "raw", "secure_path", "whole_number"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def raw(name: str) -> str | None:
    """The variable's text with blanks stripped, or None when unset or blank."""
    value = os.environ.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def flag(name: str, default: bool = False) -> bool:
    """A yes/no variable: 1/true/yes/on or 0/false/no/off."""
    value = raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise SettingError(name, value, "1, true, yes or on to enable; 0, false, no or off "
                                    "to disable")


def choice(name: str, options: Sequence[str], default: str) -> str:
    """One of a fixed set of words, returned in lower case."""
    value = raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in options:
        return lowered
    raise SettingError(name, value, "one of " + ", ".join(options))


def whole_number(name: str, default: int, minimum: int = 0, maximum: int = 1 << 20) -> int:
    """A whole number in [minimum, maximum], written in decimal."""
    value = raw(name)
    if value is None:
        return default
    if value.isascii() and value.isdigit() and len(value) <= 20:
        number = int(value)
        if minimum <= number <= maximum:
            return number
    raise SettingError(name, value, f"a whole number from {minimum} to {maximum}")


def _set_id() -> bool:
    return os.getuid() != os.geteuid() or os.getgid() != os.getegid()


def secure_path(name: str) -> str | None:
    """A path from the environment, or None when unset, blank or the process is set-id."""
    if _set_id():
        return None
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    if "\0" in value:
        raise SettingError(name, value, "a path without NUL characters")
    return value
