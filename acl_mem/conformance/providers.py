"""Where the conformance checks get their backends from.

By default the native backend is the real libascendcl. A test suite without
hardware installs another NativeProvider (the project's: acl_mem's own fake library) with
set_native_provider() before the checks run.
"""

from __future__ import annotations

from typing import Protocol

from .._backend import Backend
from ..errors import BackendError

__all__ = ["LibascendclProvider", "NativeProvider", "brief", "native_provider",
           "set_native_provider"]


class NativeProvider(Protocol):
    #: Python source a child interpreter runs first to reach the same native library.
    subprocess_prelude: str

    def load(self) -> tuple[Backend | None, str]:
        """The backend (or None) and where it comes from, or why it is unavailable.

        The reason may span several lines (the loader lists every path it tried);
        brief() makes one line of it.
        """
        ...

    def before_test(self) -> None:
        """Reset whatever the backend keeps between checks (real hardware: nothing)."""
        ...

    def after_test(self) -> None:
        """Raise if the provider saw something go wrong during the check."""
        ...


class LibascendclProvider:
    """The real library, found the way the native backend always finds it."""

    subprocess_prelude = ""

    def __init__(self) -> None:
        self._loaded: tuple[Backend | None, str] | None = None

    def load(self) -> tuple[Backend | None, str]:
        if self._loaded is None:
            from .._native import load_native_backend

            try:
                backend = load_native_backend()
                self._loaded = (backend, backend.path)
            except BackendError as exc:
                # The whole message: its later lines are the paths tried and why.
                self._loaded = (None, str(exc))
        return self._loaded

    def before_test(self) -> None:
        return None

    def after_test(self) -> None:
        return None


def brief(reason: str) -> str:
    """The first line of a (possibly multi-line) reason, saying how much it leaves out.

    The loader's message says how many places it tried, ends its first line with
    "Tried:" and lists one attempt per following line; that list is dropped.
    """
    first, *rest = reason.strip().splitlines() or [""]
    first = first.rstrip()
    if not rest:
        return first
    if first.endswith("Tried:"):
        return first[: -len("Tried:")].rstrip()
    return f"{first} (+{len(rest)} more line(s))"


_provider: NativeProvider = LibascendclProvider()


def native_provider() -> NativeProvider:
    return _provider


def set_native_provider(provider: NativeProvider) -> None:
    global _provider
    _provider = provider
