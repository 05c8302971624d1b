"""The exported surface (surface.json, generated from the real headers by
stubs/gen_shim_surface.py): every function of the toolkit's headers with its exact
prototype, the library exporting it and its header; read by stubs/gen_engine_api.py (the
C library's exports and the prefix's headers) and by the tests that check the exports.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["COMPANIONS", "HI_TYPES", "LIBRARIES", "exported_by", "library_functions",
           "load_surface"]

#: The hi_* types of ``hi_type.h`` (not in the wheel's headers).
HI_TYPES = """typedef int hi_s32;
typedef unsigned int hi_u32;
typedef unsigned long long hi_u64;
typedef void hi_void;"""

#: surface.json's library numbers -> soname of every library exporting functions.
LIBRARIES = {1: "libascendcl.so", 2: "libacl_dvpp.so", 3: "libacl_dvpp_mpi.so",
             4: "libmsprofiler.so", 5: "libacl_rt.so"}
#: Libraries whose functions are chosen by name (acl_rt_exports.txt), not by surface.json's
#: library number: libacl_rt.so holds a subset of libascendcl.so's functions.
_BY_NAME = {5: "acl_rt_exports.txt"}
#: Sonames of the toolkit's libraries for parts of the headers that libascendcl.so
#: exports here (operator compiling, CBLAS, tensor channels and queues).
COMPANIONS = ("libacl_op_compiler.so", "libacl_cblas.so", "libacl_tdt_channel.so",
              "libacl_tdt_queue.so", "libacl_rt_impl.so")


@cache
def load_surface() -> dict[str, Any]:
    """The committed surface (functions, header-free types, macros)."""
    text = resources.files(__package__).joinpath("surface.json").read_text()
    surface: dict[str, Any] = json.loads(text)
    return surface


@cache
def exported_by(lib: int) -> frozenset[str]:
    """The names a library listed in _BY_NAME exports (those surface.json has)."""
    text = resources.files(__package__).joinpath(_BY_NAME[lib]).read_text()
    listed = {line.strip() for line in text.splitlines()
              if line.strip() and not line.startswith("#")}
    return frozenset(f["name"] for f in load_surface()["functions"] if f["name"] in listed)


def library_functions(lib: int) -> list[dict[str, Any]]:
    """surface.json's functions that library ``lib`` (LIBRARIES) exports."""
    functions = load_surface()["functions"]
    if lib in _BY_NAME:
        names = exported_by(lib)
        return [f for f in functions if f["name"] in names]
    return [f for f in functions if f["lib"] == lib]
