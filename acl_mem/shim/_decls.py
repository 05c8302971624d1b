"""The native cdef's function sections parsed into C prototypes (for the C library's
generated sources, stubs/gen_engine_api.py, and the surface generator).

Each section is one library: 1 libascendcl.so, 2 libacl_dvpp.so, 3 libacl_dvpp_mpi.so.
"""

from __future__ import annotations

import re

from .._native.cdef import DVPP_FUNCTIONS, FUNCTIONS, MPI_FUNCTIONS

__all__ = ["Decl", "function_names", "parse", "sections"]

#: ``(return type, name, argument list)``; the argument list is "void" when empty.
Decl = tuple[str, str, str]
_DECL = re.compile(r"^(?P<ret>[\w\s\*]+?)\s*(?P<star>\**)(?P<name>\w+)\((?P<args>[^)]*)\);", re.M)


def parse(functions: str) -> tuple[list[str], list[Decl]]:
    """``(typedef lines, [(return type, name, argument list)])`` of a cdef section."""
    flat = re.sub(r"\s*\n\s+", " ", functions.strip())
    typedefs = [line for line in flat.splitlines() if line.startswith("typedef")]
    decls = []
    for match in _DECL.finditer(flat):
        ret = (match["ret"].strip() + " " + match["star"]).strip()
        args = match["args"].strip()
        decls.append((ret, match["name"], "void" if args in ("", "void") else args))
    return typedefs, decls


def sections() -> list[tuple[int, list[str], list[Decl]]]:
    """``(library number, typedef lines, declarations)`` of each library's section."""
    texts = [(1, FUNCTIONS), (2, DVPP_FUNCTIONS), (3, MPI_FUNCTIONS)]
    return [(lib, *parse(text)) for lib, text in texts]


def function_names() -> list[str]:
    """Every function the native backend binds, in section order."""
    return [name for _, _, decls in sections() for _, name, _ in decls]
