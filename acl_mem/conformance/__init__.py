"""Conformance checks shipped with acl_mem: the same checks the project's suite runs.

acl-mem conformance runs them on the installed package (pytest and hypothesis needed:
pip install "acl_mem[conformance]"), shows one progress line per check file and ends
with pass/fail/skip counts per runtime-model section and every failure; -v lists, per
check, the runtime-model section, the expected and the observed outcome.
"""

from __future__ import annotations

from .providers import LibascendclProvider, NativeProvider, set_native_provider

__all__ = ["LibascendclProvider", "NativeProvider", "set_native_provider"]
