"""The drop-in's ACL_MEM_SHIM_* settings follow acl_mem/_env.py's rules (blank is the
default, any letter case, anything else is refused naming the variable), and loading the
library into a Python process leaves that process's sys.path as it was.

A refused setting makes aclInit (every call) return 500000 with one line on stderr.
Uses the session's build (tests/conftest.py ``shim_libdir``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from shim_support import skip_without_a_build

from acl_mem.shim import _build
from acl_mem.shim._csource import START_FAILED

ROOT = Path(__file__).resolve().parent.parent

skip_without_a_build()


@pytest.fixture(scope="module")
def program(shim_libdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("settings") / "main"
    done = subprocess.run([*_build.compiler(), "-std=c11", "-Wall", "-Werror",
                           f"-I{shim_libdir.parent / 'include'}",
                           str(ROOT / "tests" / "cann_project" / "main.c"),
                           f"-L{shim_libdir}", "-lascendcl", "-o", str(binary)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return binary


def _run(program: Path, libdir: Path, tmp_path: Path, **settings: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACL_MEM_SHIM_")}
    env.update(LD_LIBRARY_PATH=str(libdir), **settings)
    return subprocess.run([str(program)], env=env, cwd=tmp_path, capture_output=True,
                          text=True)


@pytest.mark.parametrize(("name", "value"), [
    ("ACL_MEM_SHIM_SYS_PATH", ":"),
    ("ACL_MEM_SHIM_SYS_PATH", "relative/dir"),
    ("ACL_MEM_SHIM_SYS_PATH", "/usr/lib::/usr/share"),
    ("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", "maybe"),
    ("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", "2"),
    ("ACL_MEM_SHIM_LIBPYTHON", "libpython3.so"),
])
def test_an_unusable_setting_fails_every_call_with_one_line_naming_it(
        program, shim_libdir, tmp_path, name, value):
    done = _run(program, shim_libdir, tmp_path, **{name: value})
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == f"FAIL aclInit -> {START_FAILED}"
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert name in lines[0] and str(START_FAILED) in lines[0] and "Traceback" not in lines[0]


@pytest.mark.parametrize(("name", "value"), [
    ("ACL_MEM_SHIM_SYS_PATH", ""),
    ("ACL_MEM_SHIM_SYS_PATH", "   "),
    ("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", " Yes "),
    ("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", "OFF"),
    ("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", ""),
    ("ACL_MEM_SHIM_LIBPYTHON", " "),
])
def test_blank_or_any_case_settings_are_accepted(program, shim_libdir, tmp_path, name, value):
    done = _run(program, shim_libdir, tmp_path, **{name: value})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""


def test_the_library_path_of_the_build_is_accepted(program, shim_libdir, tmp_path):
    import json

    recorded = json.loads((shim_libdir.parent / _build.STAMP).read_text())["libpython"]
    done = _run(program, shim_libdir, tmp_path, ACL_MEM_SHIM_LIBPYTHON=recorded)
    assert done.returncode == 0, done.stdout + done.stderr


_HOST = """
import ctypes, os, sys
before = list(sys.path)
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
pointer = ctypes.c_void_p()
assert lib.aclrtSetDevice(0) == 0
print("same sys.path:", sys.path == before)
print("engine ran:", "acl_mem" in sys.modules)
assert lib.aclrtMalloc(ctypes.byref(pointer), 4096, 0) == 0
assert lib.aclrtFree(pointer) == 0
assert lib.aclrtResetDevice(0) == 0
print("calls after:", "ok")
"""


def test_loading_the_library_leaves_the_host_s_sys_path_alone(shim_libdir, tmp_path):
    """A Python process without site-packages on sys.path (-S) loads the library: the
    engine finds acl_mem and cffi by the build's paths for its imports, then gives the
    process its own sys.path back; later calls still work."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACL_MEM_", "PYTHON"))}
    done = subprocess.run([sys.executable, "-I", "-S", "-c", _HOST,
                           str(shim_libdir / "libascendcl.so")], env=env, cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["same sys.path: True", "engine ran: True",
                                        "calls after: ok"]


def test_an_unusable_abort_switch_is_named_by_unsupported_calls_too(shim_libdir, tmp_path):
    """A program that calls only unsupported functions never starts the engine: the
    library itself names the variable (once) and does not abort."""
    source = tmp_path / "unsupported.c"
    source.write_text('#include <stdio.h>\n#include "acl/acl.h"\n'
                      "int main(void)\n{\n"
                      '    printf("%d\\n", (int)aclmdlLoadFromFile("m.om", NULL));\n'
                      '    printf("%d\\n", (int)aclmdlLoadFromFile("m.om", NULL));\n'
                      "    return 0;\n}\n")
    binary = tmp_path / "unsupported"
    done = subprocess.run([*_build.compiler(), "-std=c11", "-Wall", "-Werror",
                           f"-I{shim_libdir.parent / 'include'}", str(source),
                           f"-L{shim_libdir}", "-lascendcl", "-o", str(binary)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = _run(binary, shim_libdir, tmp_path, ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED="sometimes")
    assert run.returncode == 0 and run.stdout.split() == ["200006", "200006"]
    assert sum("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED" in line
               for line in run.stderr.splitlines()) == 1
