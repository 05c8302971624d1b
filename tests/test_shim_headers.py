"""The drop-in's headers (acl_mem/shim/_headers.py, from headers.json) as programs use
them: every declaration of the toolkit's headers with the same value, size, layout and
type (checked against the real headers where ACL_MEM_HEADERS_DIR has them), and each
header usable on its own from C11 and C++17 under -Wall -Wextra -Werror.
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from header_probe import is_cplusplus_only, probe_source, usage_source
from shim_support import compiler

from acl_mem._fake.library import PREFIX
from acl_mem.shim._headers import load_headers

#: What a program like the CANN runtime's examples writes: enumerators, macros, error
#: codes, structs with fields (zero-initialised, designated), typedefs.
_PROGRAM = r"""#include "acl/acl.h"
#include <string.h>

static aclError use(aclrtStream stream, void *device)
{
    aclrtErrorInfo errorInfo;
    aclrtPhysicalMemProp prop;
    aclrtMemLocation location;
    aclrtAllocatorBlock block = NULL;
    aclrtAllocatorAddr addr = NULL;
    aclrtDeviceTaskAbortCallback callback = NULL;
    aclrtMemMallocPolicy policy = ACL_MEM_MALLOC_HUGE_FIRST;
    memset(&errorInfo, 0, sizeof errorInfo);
    memset(&prop, 0, sizeof prop);
    location.id = 0;
    location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = location;
    (void)block;
    (void)addr;
    (void)callback;
    (void)policy;
    if (ACL_SUCCESS != 0 ||
        ACL_ERROR_RT_PARAM_INVALID != 107000 || ACL_ERROR_GE_PARAM_INVALID != 145000U) {
        return ACL_ERROR_INVALID_PARAM;
    }
    (void)ACL_RT_THREAD_LEVEL;
    return aclrtValueWait(device, 1, ACL_STREAM_WAIT_VALUE_EQ, stream);
}

int main(void)
{
    return use(NULL, NULL) == ACL_ERROR_FEATURE_UNSUPPORTED ? 0 : 1;
}
"""


@pytest.fixture(scope="module")
def include() -> Path:
    return PREFIX / "include"


def _cxx() -> str:
    found = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if found is None:
        pytest.skip("no C++ compiler")
    return found


def _compile(source: str, include: Path, out: Path, *, cxx: bool,
             syntax_only: bool = True) -> subprocess.CompletedProcess[str]:
    path = out.with_suffix(".cpp" if cxx else ".c")
    path.write_text(source)
    command = [_cxx(), "-std=c++17"] if cxx else [*compiler(), "-std=c11"]
    target = ["-fsyntax-only"] if syntax_only else ["-o", str(out)]
    return subprocess.run([*command, "-Wall", "-Wextra", "-Werror", f"-I{include}", *target,
                           str(path)], capture_output=True, text=True)


@pytest.mark.parametrize("cxx", [False, True], ids=["c11", "cxx17"])
def test_a_program_using_the_runtime_s_declarations_compiles(include, tmp_path, cxx):
    """Enumerators, macros, error codes, structs with their fields and typedefs of the
    runtime headers, as the toolkit's examples use them, through acl/acl.h."""
    done = _compile(_PROGRAM, include, tmp_path / "program", cxx=cxx)
    assert done.returncode == 0, done.stderr[:3000]


@pytest.mark.parametrize("cxx", [False, True], ids=["c11", "cxx17"])
def test_each_header_alone_gives_its_declarations(include, tmp_path, cxx):
    """Every header, included alone, declares its first enumerator, macro, constant,
    struct, union and typedef (a C++-only header, as in the toolkit, only as C++)."""
    failures = []
    for header in load_headers():
        if not cxx and is_cplusplus_only(header):
            continue
        done = _compile(usage_source(header), include, tmp_path / "usage", cxx=cxx)
        if done.returncode != 0:
            failures.append(f"{header}: {done.stderr[:1500]}")
    assert not failures, "\n".join(failures)


def _probe(include: Path, tmp_path: Path, name: str) -> str:
    binary = tmp_path / name
    built = subprocess.run([_cxx(), "-std=c++17", "-w", f"-I{include}", "-x", "c++", "-",
                            "-o", str(binary)], input=probe_source(), capture_output=True,
                           text=True)
    assert built.returncode == 0, f"{name}: {built.stderr[:3000]}"
    return subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout


def test_every_declaration_matches_the_real_headers(include, real_headers, tmp_path):
    """Every enumerator, macro and constant has the real value, size and signedness;
    every struct, union and typedef the real size, alignment and type; every field the
    real offset, size and type; every function the real return and parameter types."""
    real = _probe(real_headers, tmp_path, "real")
    shipped = _probe(include, tmp_path, "shipped")
    assert real.count("\n") > 2000
    assert shipped == real, "\n".join(difflib.unified_diff(
        real.splitlines(), shipped.splitlines(), "real", "shipped", lineterm="", n=1))


def test_headers_json_leaves_no_declaration_of_the_real_headers_out(real_headers):
    """An independent, cruder reading of the real headers (every macro, constant,
    typedef name and enumerator-like line) finds nothing headers.json lacks, so the
    comparison above covers every declaration, not only those the generator saw."""
    text = "\n".join(re.sub(r"/\*.*?\*/|//[^\n]*", " ", p.read_text(errors="replace"),
                            flags=re.S)
                     for p in sorted((real_headers / "acl").rglob("*.h")))
    names = set(re.findall(r"#\s*define\s+(\w+)", text))
    names -= {n for n in names if re.search(r"_H_*$", n)}  # include guards
    names |= set(re.findall(r"static const \w+ (\w+)", text))
    names |= set(re.findall(r"\btypedef\b[^;{]*?(\w+)\s*;", text))
    names |= set(re.findall(r"}\s*(\w+)\s*;", text))
    names |= set(re.findall(r"^\s*([A-Z][A-Z0-9_]+)\s*(?:=[^,\n]*)?,?\s*$", text, re.M))
    known = set(re.findall(r"\w+", json.dumps(load_headers())))
    assert len(names) > 1200
    assert sorted(names - known) == []
