"""The native cdef's function sections parsed into C prototypes (shared by the stand-in
generator, stubs/gen_stand_in.py, and the shim's engine, acl_mem/shim/_engine.py).

Each section is one library: 1 libascendcl.so, 2 libacl_dvpp.so, 3 libacl_dvpp_mpi.so.
"""

from __future__ import annotations

import re

from .._native.cdef import DVPP_FUNCTIONS, FUNCTIONS, MPI_FUNCTIONS

__all__ = ["LIBRARIES", "Decl", "arg_names", "function_names", "parse", "sections",
           "table_declaration"]

#: Library number -> soname, in the order the sections are generated.
LIBRARIES = {1: "libascendcl.so", 2: "libacl_dvpp.so", 3: "libacl_dvpp_mpi.so"}
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


def table_declaration(tag: str = "acl_mem_stand_in_table") -> str:
    """A C struct with one function pointer per bound function, typed as the cdef types it."""
    lines = [f"struct {tag} {{"]
    for _, _, decls in sections():
        lines += [f"    {ret} (*{name})({args});" for ret, name, args in decls]
    lines.append("};")
    return "\n".join(lines)


def function_names() -> list[str]:
    """Every function the native backend binds, in section order."""
    return [name for _, _, decls in sections() for _, name, _ in decls]


def arg_names(args: str) -> str:
    """The parameter names of an argument list, comma-separated (for a forwarding call)."""
    if args == "void":
        return ""
    return ", ".join(re.findall(r"(\w+)\s*(?:\[\])?$", a.strip())[0] for a in args.split(","))
