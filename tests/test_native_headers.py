"""The native cdef against the real ACL headers (torch-npu 2.14.0, ``torch_npu/include``).

A wrong declaration in cffi ABI mode corrupts the stack on an Atlas host instead of
failing, so every declaration is compiled against the header it was copied from:
functions are redeclared after ``#include`` (any type difference is a "conflicting
types" error under -Werror), and a small C program prints every enum value, error
code, struct size and field offset for comparison with what cffi computes.

Headers come from ``ACL_MEM_HEADERS_DIR`` (the directory holding ``acl/acl_rt.h``);
``.ci/run`` downloads the wheel and sets it, with ``ACL_MEM_REQUIRE_HEADERS=1`` so that
missing headers fail instead of skipping. DVPP headers are not in the wheel: their
prototypes are checked against docs/runtime-model.md §3.8-§3.9.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from shim_support import compiler

from acl_mem import errors
from acl_mem._native import cdef
from acl_mem._native.loader import make_ffi

SPEC_DVPP_HEADER = """
/* Prototypes as docs/runtime-model.md §3.8 (acl/ops/acl_dvpp.h) and §3.9 (acl/dvpp/hi_dvpp.h) give
them. */ typedef int hi_s32;
typedef unsigned int hi_u32;
typedef unsigned long long hi_u64;
typedef void hi_void;
aclError acldvppMalloc(void **devPtr, size_t size);
aclError acldvppFree(void *devPtr);
hi_s32 hi_mpi_dvpp_malloc(hi_u32 dev_id, hi_void **dev_ptr, hi_u64 size);
hi_s32 hi_mpi_dvpp_free(hi_void *dev_ptr);
"""


@pytest.fixture(scope="module")
def headers(real_headers: Path) -> Path:
    compiler()
    return real_headers


def _compile(source: str, directory: Path, tmp_path: Path, run: bool = False) -> str:
    c_file = tmp_path / "check.c"
    c_file.write_text(source)
    binary = tmp_path / "check"
    args = [*compiler(), "-std=c11", "-Wall", "-Werror", f"-I{directory}", str(c_file)]
    args += ["-o", str(binary)] if run else ["-fsyntax-only"]
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if not run:
        return ""
    return subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout


def test_every_function_matches_its_header_prototype(headers, tmp_path):
    """Redeclaring each cdef prototype after the header compiles only if the types agree."""
    source = "\n".join([
        '#include "acl/acl_rt.h"',
        cdef.FUNCTIONS,
        SPEC_DVPP_HEADER,
        cdef.DVPP_FUNCTIONS,
        cdef.MPI_FUNCTIONS.replace("typedef", "/* typedef checked above */ typedef"),
        "int main(void) { return 0; }",
    ])
    _compile(source, headers, tmp_path)


def _enum_and_struct_facts() -> dict[str, int]:
    ffi = make_ffi()
    facts: dict[str, int] = {}
    for enum in ("aclrtMemMallocPolicy", "aclrtMemcpyKind", "aclrtMemAttr",
                 "aclrtMemLocationType", "aclrtMemAllocationType", "aclrtMemHandleType",
                 "aclrtMemGranularityOptions", "aclrtMemAccessFlags"):
        ctype = ffi.typeof(enum)
        facts[f"sizeof({enum})"] = ffi.sizeof(ctype)
        for name, value in ctype.relements.items():
            facts[name] = value
    for struct in ("aclrtMemLocation", "aclrtPtrAttributes", "aclrtPhysicalMemProp",
                   "aclrtMemAccessDesc"):
        facts[f"sizeof({struct})"] = ffi.sizeof(struct)
        for field, _ in ffi.typeof(struct).fields:
            facts[f"offsetof({struct}, {field})"] = ffi.offsetof(struct, field)
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.AclError) and cls.CODE is not None:
            facts[cls.NAME] = cls.CODE
    return facts


def test_enum_values_codes_and_struct_layouts_match_the_header(headers, tmp_path):
    """Every enum value, error code, struct size and field offset equals the header's."""
    facts = _enum_and_struct_facts()
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "acl/acl_rt.h"',
             '#include "acl/error_codes/rt_error_codes.h"', "int main(void) {",
             '    printf("{");']
    for i, expr in enumerate(facts):
        comma = "," if i else ""
        lines.append(f'    printf("{comma}\\"%s\\": %lld", "{expr}", (long long)({expr}));')
    lines += ['    printf("}\\n");', "    return 0;", "}"]
    observed = json.loads(_compile("\n".join(lines), headers, tmp_path, run=True))
    mismatched = {k: (facts[k], observed[k]) for k in facts if facts[k] != observed[k]}
    assert not mismatched, f"cdef/acl_mem value vs header value: {mismatched}"
    assert len(observed) == len(facts)


def test_python_enums_carry_the_cdef_values():
    """acl_mem.enums and the cdef agree member for member (the header test covers the cdef)."""
    from acl_mem import enums

    ffi = make_ffi()
    pairs = [(enums.MallocPolicy, "aclrtMemMallocPolicy"), (enums.MemcpyKind, "aclrtMemcpyKind"),
             (enums.MemAttr, "aclrtMemAttr"), (enums.MemLocationType, "aclrtMemLocationType"),
             (enums.MemHandleType, "aclrtMemHandleType"),
             (enums.MemAllocationType, "aclrtMemAllocationType"),
             (enums.MemGranularityOptions, "aclrtMemGranularityOptions"),
             (enums.MemAccessFlags, "aclrtMemAccessFlags")]
    for python_enum, c_enum in pairs:
        c_values = sorted(ffi.typeof(c_enum).elements)
        assert sorted(int(member) for member in python_enum) == c_values, c_enum
        for member in python_enum:
            c_name = ffi.typeof(c_enum).elements[int(member)]
            assert c_name.endswith(member.name), (c_name, member.name)


def test_the_fast_declarations_are_the_same_functions():
    """FAST_CDEF declares a few functions again with pointers as uintptr_t and enums as
    unsigned int (the calling conventions pass them alike): nothing else may differ, and
    the enums must really be unsigned 4-byte types."""
    import cffi

    main, fast = make_ffi(), cffi.FFI()
    fast.cdef(cdef.FAST_CDEF)
    names = [key.split(" ", 1)[1] for key in fast._parser._declarations
             if key.startswith("function ")]
    assert names
    for name in names:
        real, quick = _function_type(main, name), _function_type(fast, name)
        assert len(real.args) == len(quick.args), name
        assert quick.result.cname == "int" and main.sizeof(real.result) == 4, name
        for a, b in zip(real.args, quick.args, strict=True):
            if a.kind == "pointer" and a.item.kind == "pointer":
                expected = "uintptr_t *"
            elif a.kind == "pointer":
                expected = "uintptr_t"
            elif a.kind == "enum":
                expected = "unsigned int"
                assert main.sizeof(a) == 4 and int(main.cast(a, -1)) > 0, (name, a.cname)
            else:
                expected = a.cname
            assert b.cname == expected, (name, a.cname, b.cname)


def _function_type(ffi, name: str):
    """The function type ``ffi`` declared for ``name``."""
    return ffi.typeof(ffi._parser._declarations[f"function {name}"][0].get_c_name())
