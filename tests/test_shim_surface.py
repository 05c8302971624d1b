"""The shim's exported surface against the real ACL headers (acl_mem/shim/surface.json).

A prototype that differs from the header's is a silent ABI bug in a drop-in library, so
the generated C source is compiled together with the real headers under -Werror: as C
with every header that C accepts, and as C++ with all of them (acl_tdt.h and
super_kernel.h are C++ only); a redefinition with other types is an error in both. The
header-free types the shipped build uses instead must have the real types' size and
alignment. Headers come from ACL_MEM_HEADERS_DIR, as in tests/test_native_headers.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from acl_mem.shim._csource import FRONT_LIBRARIES, config_header, front_source, load_surface
from acl_mem.shim._decls import function_names

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def headers(real_headers: Path) -> Path:
    return real_headers  # only the real ones: these tests check the shim against them


def _compiler(language: str) -> list[str]:
    names = ("cc", "gcc", "clang") if language == "c" else ("c++", "g++", "clang++")
    found = next((shutil.which(n) for n in names if shutil.which(n)), None)
    if found is None:
        pytest.skip(f"no {language} compiler")
    return [found]


def _syntax_ok(language: str, source: str, headers: Path, tmp_path: Path,
               *flags: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "acl_mem_shim_config.h").write_text(
        config_header(libpython="libpython.so", py_version="3.11", engine="engine.so"))
    path = tmp_path / f"check.{'c' if language == 'c' else 'cpp'}"
    path.write_text(source)
    standard = "-std=c11" if language == "c" else "-std=c++17"
    return subprocess.run([*_compiler(language), standard, "-Wall", "-Werror", "-fsyntax-only",
                           f"-I{headers}", f"-I{tmp_path}", *flags, str(path)],
                          capture_output=True, text=True)


def _header_files() -> list[str]:
    return sorted({f["header"] for f in load_surface()["functions"] if f["lib"] in (1, 4)})


def test_surface_is_current(headers):
    """Regenerating acl_mem/shim/surface.json and headers.json from the headers changes
    nothing."""
    done = subprocess.run([sys.executable, str(ROOT / "stubs" / "gen_shim_surface.py"),
                           "--headers", str(headers), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("lib", sorted(FRONT_LIBRARIES))
def test_exports_compile_against_the_real_headers_as_c(headers, tmp_path, lib):
    c_headers = [h for h in _header_files()
                 if _syntax_ok("c", f'#include "{h}"\n', headers, tmp_path).returncode == 0]
    assert "acl/acl_rt.h" in c_headers and "acl/acl_mdl.h" in c_headers
    done = _syntax_ok("c", front_source(c_headers), headers, tmp_path,
                      f"-DACL_MEM_SHIM_LIB={lib}")
    assert done.returncode == 0, done.stderr[:4000]


@pytest.mark.parametrize("lib", sorted(FRONT_LIBRARIES))
def test_exports_compile_against_every_real_header_as_cxx(headers, tmp_path, lib):
    done = _syntax_ok("c++", front_source(_header_files()), headers, tmp_path,
                      f"-DACL_MEM_SHIM_LIB={lib}")
    assert done.returncode == 0, done.stderr[:4000]


def test_a_wrong_prototype_would_not_compile(headers, tmp_path):
    """The check above can fail: one parameter type changed is an error."""
    source = front_source(_header_files()).replace(
        "aclError aclrtMalloc(void **devPtr, size_t size,",
        "aclError aclrtMalloc(void **devPtr, uint32_t size,")
    assert "uint32_t size," in source
    assert _syntax_ok("c++", source, headers, tmp_path, "-DACL_MEM_SHIM_LIB=1").returncode != 0


def test_header_free_types_have_the_real_size_and_alignment(headers, tmp_path):
    types: dict[str, str] = load_surface()["types"]
    rename = re.compile(r"\b(" + "|".join(map(re.escape, types)) + r")\b")
    lines = [f'#include "{h}"' for h in _header_files()]
    checked = 0
    for name, text in types.items():
        lines.append(rename.sub(r"acl_mem_abi_\1", text))
        if re.fullmatch(r"typedef (struct|union) \w+ \w+;", text):
            continue  # opaque: passed by pointer only (a by-value use does not compile)
        checked += 1
        for what in ("sizeof", "alignof"):
            lines.append(f'static_assert({what}(acl_mem_abi_{name}) == {what}({name}), '
                         f'"{what} {name}");')
    assert checked > 100
    done = _syntax_ok("c++", "\n".join(lines) + "\n", headers, tmp_path)
    assert done.returncode == 0, done.stderr[:4000]


def test_surface_holds_every_bound_function_once():
    """No headers needed: the committed surface covers what the native backend binds."""
    functions = load_surface()["functions"]
    names = [f["name"] for f in functions]
    assert len(names) == len(set(names))
    assert set(function_names()) <= set(names)
    by_lib = {lib: sorted(f["name"] for f in functions if f["lib"] == lib) for lib in (2, 3)}
    assert by_lib == {2: ["acldvppFree", "acldvppMalloc"],
                      3: ["hi_mpi_dvpp_free", "hi_mpi_dvpp_malloc"]}
    assert json.loads((ROOT / "acl_mem" / "shim" / "surface.json").read_text())["functions"]


def test_minimal_header_constants_match_the_real_headers(headers, tmp_path):
    """The error codes and aclDataType values the minimal acl/acl.h adds for programs
    (acl_mem/shim/_extra.py) are the real headers' values."""
    from acl_mem.shim._extra import DATA_TYPES, HEADER_CONSTANTS

    lines = ['#include "acl/acl.h"']
    for name, value in {**HEADER_CONSTANTS, **DATA_TYPES}.items():
        lines.append(f'static_assert({name} == {value}, "{name}");')
    done = _syntax_ok("c++", "\n".join(lines) + "\n", headers, tmp_path)
    assert done.returncode == 0, done.stderr[:4000]
    # Every aclDataType enumerator of the real header is listed.
    text = (headers / "acl" / "acl_base_rt.h").read_text()
    enum = re.search(r"typedef enum \{([^}]*)\} aclDataType;", text)
    assert enum is not None
    assert set(re.findall(r"(ACL_\w+)\s*=", enum[1])) == set(DATA_TYPES)
