"""Conformance checks shipped with acl_mem: the same checks the project's suite runs.

``acl-mem conformance`` runs them on the installed package (pytest and hypothesis
needed: ``pip install "acl_mem[conformance]"``) and prints, per behaviour, the runtime-model
section, the expected and the observed outcome.
"""

from __future__ import annotations

from .providers import LibascendclProvider, NativeProvider, set_native_provider

__all__ = ["LibascendclProvider", "NativeProvider", "set_native_provider"]
