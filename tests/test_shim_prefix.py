"""The drop-in as programs' build files see it: libacl_rt.so, the shipped headers and a
prefix laid out like a CANN install (acl_mem/shim/_prefix.py), checked against the
real headers where ACL_MEM_HEADERS_DIR has them.

Uses the session's build (tests/conftest.py ``shim_libdir``); the CMake project is
tests/cann_project/.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from shim_support import compiler

from acl_mem._fake.library import PREFIX
from acl_mem.shim._headers import cplusplus_only
from acl_mem.shim._prefix import headers as shipped_headers
from acl_mem.shim._surface import LIBRARIES, library_functions, load_surface

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "tests" / "cann_project"

@pytest.fixture(scope="module")
def prefix() -> Path:
    return PREFIX


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, **extra)
    env.pop("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", None)
    return env


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


def _needed_acl(binary: Path) -> list[str]:
    """The ACL libraries among the program's DT_NEEDED entries."""
    dynamic = subprocess.run([_tool("readelf"), "-d", str(binary)], capture_output=True,
                             text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
    return [n for n in needed if n.startswith(("libacl", "libascendcl"))]


def test_a_program_linked_only_with_acl_rt_runs_on_the_fake(prefix, tmp_path):
    """libacl_rt.so holds the runtime's functions itself: -lacl_rt alone links and runs."""
    binary = tmp_path / "main"
    done = subprocess.run([*compiler(), "-std=c11", "-Wall", "-Wextra", "-Werror",
                           f"-I{prefix / 'include'}", str(PROJECT / "main.c"),
                           f"-L{prefix / 'lib64'}", "-lacl_rt", "-o", str(binary)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _needed_acl(binary) == ["libacl_rt.so"]
    run = subprocess.run([str(binary)], env=_env(LD_LIBRARY_PATH=str(prefix / "lib64")),
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == "read back: hello, cmake"


def test_acl_rt_exports_the_runtime_list_and_nothing_of_other_libraries():
    """What libacl_rt.so exports: the runtime's list (acl_rt_exports.txt) within the
    surface; the runtime's own functions (aclrt*) are there, models and operators not."""
    names = {f["name"] for f in library_functions(5)}
    assert LIBRARIES[5] == "libacl_rt.so"
    assert {"aclInit", "aclFinalize", "aclrtMalloc", "aclrtFree", "aclrtSetDevice",
            "aclrtMemcpy", "aclCreateDataBuffer", "aclGetRecentErrMsg"} <= names
    assert not any(n.startswith(("aclop", "aclprof", "acltdt")) for n in names)
    assert all(f["lib"] == 1 for f in library_functions(5))


def _set_env(prefix: Path, tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = _env()
    for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "LD_LIBRARY_PATH"):
        env.pop(name, None)
    return subprocess.run([_tool("bash"), "-c", f'source "{prefix}/set_env.sh" && {script}'],
                          env=env, cwd=tmp_path, capture_output=True, text=True)


def test_set_env_points_like_cann_s_at_the_prefix(prefix, tmp_path):
    """After `source set_env.sh`: ASCEND_HOME_PATH is the prefix, its lib64 is first on
    LD_LIBRARY_PATH, and the files CANN's scripts look for are where they look."""
    done = _set_env(prefix, tmp_path, 'echo "$ASCEND_HOME_PATH"; echo "$ASCEND_TOOLKIT_HOME"; '
                    'echo "$LD_LIBRARY_PATH"; test -f "$ASCEND_HOME_PATH/lib64/libacl_rt.so"; '
                    'test -f "$ASCEND_HOME_PATH/include/acl/acl.h"')
    assert done.returncode == 0, done.stderr
    home, toolkit, library_path = done.stdout.splitlines()
    assert Path(home) == Path(toolkit) == prefix.resolve()
    assert library_path == f"{prefix.resolve()}/lib64"


@pytest.mark.parametrize(("value", "subdirectory"), [
    ("8.5.0", "/cann-8.5.0"), (" 8.5.0\t", "/cann-8.5.0"), ("9.1.0", ""), ("", ""),
    ("8. 5.0", "")])
def test_set_env_picks_the_release_library_as_the_library_reads_the_setting(
        prefix, tmp_path, monkeypatch, value, subdirectory):
    """ACL_MEM_FAKE_CANN=8.5.0 puts lib64/cann-8.5.0 first, with blanks around the value
    as the library and acl_mem's Python side read it; anything else the newest library."""
    from acl_mem._fake.library import LIBRARY_DIR, library_dir

    monkeypatch.setenv("ACL_MEM_FAKE_CANN", value)
    monkeypatch.delenv("ACL_MEM_FAKE_LIBRARY_DIR", raising=False)
    done = _set_env(prefix, tmp_path, 'echo "${LD_LIBRARY_PATH%%:*}"')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{prefix.resolve()}/lib64{subdirectory}"
    assert str(library_dir()) == f"{LIBRARY_DIR}{subdirectory}"


@pytest.mark.parametrize("library", ["acl_rt", "ascendcl"])
def test_a_cmake_project_builds_and_runs_against_the_prefix(prefix, tmp_path, library):
    """tests/cann_project, as the runtime's examples are built: its CMakeLists.txt finds
    include/ and lib64/ through $ASCEND_HOME_PATH, which set_env.sh exports."""
    cmake = _tool("cmake")
    build = tmp_path / "build"
    done = _set_env(prefix, tmp_path, f'"{cmake}" -S "{PROJECT}" -B "{build}" '
                    f'-DACL_LIBRARY={library} >/dev/null && "{cmake}" --build "{build}" '
                    f'>/dev/null && "{build}/main"')
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "read back: hello, cmake"
    assert _needed_acl(build / "main") == [f"lib{library}.so"]


def test_the_runtime_examples_scripts_find_what_they_source_and_include(prefix, tmp_path):
    """The CANN runtime's example scripts source $ASCEND_INSTALL_PATH/bin/setenv.bash and their
    CMake files include ${ASCENDC_CMAKE_DIR}/ascendc.cmake (tikcpp/ascendc_kernel_cmake)
    even without kernels: both exist, point at the prefix, and asking the module for a
    kernel library stops the configuration loudly (there is no kernel compiler)."""
    env = _env()
    for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_INSTALL_PATH",
                 "LD_LIBRARY_PATH"):
        env.pop(name, None)
    done = subprocess.run([_tool("bash"), "-c", f'source "{prefix}/bin/setenv.bash" && '
                           'echo "$ASCEND_INSTALL_PATH"; echo "$ASCEND_HOME_PATH"'],
                          env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [Path(p) for p in done.stdout.splitlines()] == [prefix.resolve()] * 2
    module = prefix / "tikcpp" / "ascendc_kernel_cmake" / "ascendc.cmake"
    project = tmp_path / "kernels"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(k C)\n"
        f'include("{module}")\nascendc_library(kernels STATIC k.cpp)\n')
    cmake = _tool("cmake")
    configured = subprocess.run([cmake, "-S", str(project), "-B", str(project / "build")],
                                env=env, capture_output=True, text=True)
    assert configured.returncode != 0
    assert "ascendc_library(kernels)" in configured.stderr


def _compile(source: str, include: Path, tmp_path: Path, *flags: str,
             cxx: bool = False) -> subprocess.CompletedProcess[str]:
    path = tmp_path / ("check.cpp" if cxx else "check.c")
    path.write_text(source)
    command = [_tool("c++"), "-std=c++17"] if cxx else [*compiler(), "-std=c11"]
    return subprocess.run([*command, "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                           f"-I{include}", *flags, str(path)], capture_output=True, text=True)


def _exported(prefix: Path) -> dict[str, set[str]]:
    nm = _tool("nm")
    out = {}
    for soname in LIBRARIES.values():
        listing = subprocess.run([nm, "-D", "--defined-only", str(prefix / "lib64" / soname)],
                                 capture_output=True, text=True, check=True).stdout
        # acl_mem_*: the control API (include/acl_mem_fake.h) and what the DVPP libraries
        # reach the engine by, no ACL function.
        out[soname] = {line.split()[-1] for line in listing.splitlines()
                       if line.split()[-2:-1] == ["T"]
                       and not line.split()[-1].startswith("acl_mem_")}
    return out


def test_every_exported_function_is_declared_by_the_header_it_comes_from(prefix, tmp_path):
    """Each exported symbol is taken by its address in a C file (C++ for a header that is
    C++ only, as in the toolkit) that includes only the header the toolkit declares it
    in (-Werror: an undeclared one is an error)."""
    surface = {f["name"]: f for f in load_surface()["functions"]}
    exported = set().union(*_exported(prefix).values())
    assert exported == set(surface)
    by_header: dict[str, list[str]] = {}
    for name in sorted(exported):
        by_header.setdefault(surface[name]["header"], []).append(name)
    assert {"acl/ops/acl_dvpp.h", "acl/dvpp/hi_dvpp.h"} <= set(by_header)
    for header, names in by_header.items():
        lines = [f'#include "{header}"', "void *acl_mem_symbols[] = {",
                 *[f"    (void *)&{name}," for name in names], "};"]
        done = _compile("\n".join(lines) + "\n", prefix / "include", tmp_path,
                        cxx=header in cplusplus_only())
        assert done.returncode == 0, f"{header}: {done.stderr[:3000]}"


def test_the_dvpp_headers_declare_exactly_their_library_s_functions(prefix):
    """acl/ops/acl_dvpp.h and acl/dvpp/hi_dvpp.h hold the DVPP memory prototypes of
    libacl_dvpp.so and libacl_dvpp_mpi.so; acl/acl.h does not (nor does the real one)."""
    texts = shipped_headers()
    for header, lib in (("acl/ops/acl_dvpp.h", 2), ("acl/dvpp/hi_dvpp.h", 3)):
        declared = set(re.findall(r"(\w+)\(", texts[header]))
        assert declared == {f["name"] for f in library_functions(lib)}, header
        assert (prefix / "include" / header).read_text() == texts[header]
        assert not declared & set(re.findall(r"(\w+)\(", texts["acl/acl.h"]))


def test_real_headers_exports_are_exported_with_the_right_soname(prefix, real_headers):
    """Every function the real headers declare with an export macro is exported by the
    library that exports it in the toolkit, whose soname is its file name; libacl_rt.so
    exports the runtime's functions among them."""
    sys.path.insert(0, str(ROOT / "stubs"))
    try:
        from gen_shim_surface import read_headers
    finally:
        sys.path.remove(str(ROOT / "stubs"))
    declared, _ = read_headers(real_headers)
    exported = _exported(prefix)
    for function in declared:
        assert function["name"] in exported[LIBRARIES[int(str(function["lib"]))]]
    runtime = {f["name"] for f in library_functions(5)}
    assert runtime <= {str(f["name"]) for f in declared} and runtime == exported["libacl_rt.so"]
    readelf = _tool("readelf")
    for soname in [*LIBRARIES.values(), "libacl_rt_impl.so", "libacl_cblas.so"]:
        dynamic = subprocess.run([readelf, "-d", str(prefix / "lib64" / soname)],
                                 capture_output=True, text=True, check=True).stdout
        assert f"Library soname: [{soname}]" in dynamic


def test_shipped_prototypes_agree_with_the_real_headers(real_headers, tmp_path):
    """The prototypes of the shipped headers, after the real headers' (C accepts a
    redeclaration only with the same types): every one that both declare agrees."""
    real = sorted({f["header"] for f in load_surface()["functions"]
                   if (real_headers / f["header"]).is_file()})
    usable = [h for h in real
              if _compile(f'#include "{h}"\n', real_headers, tmp_path).returncode == 0]
    assert "acl/acl_rt.h" in usable
    prototypes = [line for text in shipped_headers().values() for line in text.splitlines()
                  if re.match(r"^[\w][\w \*]*\b(acl|hi_mpi)\w*\(.*\);$", line)]
    ours = {f["name"] for f in load_surface()["functions"] if f["header"] in usable}
    kept = [p for p in prototypes if re.search(r"(\w+)\(", p)[1] in ours]  # type: ignore[index]
    assert len(kept) == len(ours)
    source = "\n".join([*(f'#include "{h}"' for h in usable), *kept]) + "\n"
    done = _compile(source, real_headers, tmp_path)
    assert done.returncode == 0, done.stderr[:4000]
