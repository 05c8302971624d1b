"""The drop-in's yes/no settings (ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED, ACL_MEM_LEAK_REPORT,
ACL_MEM_CHECK) follow acl_mem/_env.py's rules: blank is the default, any letter case
and blanks around the word are accepted, anything else is refused naming the variable.

A refused setting makes every modelled call fail (the variable named once on stderr and
in the call's text for aclGetRecentErrMsg); unsupported calls still return 200006 and
say the setting too, without aborting.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: What a call returns while a setting is unusable: ACL_ERROR_RT_INTERNAL_ERROR.
SETTING_REFUSED = 507000


def _compiler() -> str:
    found = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if found is None:
        pytest.skip("no C compiler")
    return found


@pytest.fixture(scope="module")
def program(shim_libdir: Path, headers: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Path:
    binary = tmp_path_factory.mktemp("settings") / "main"
    done = subprocess.run([_compiler(), "-std=c11", "-Wall", "-Werror", f"-I{headers}",
                           str(ROOT / "tests" / "cann_project" / "main.c"),
                           f"-L{shim_libdir}", "-lascendcl", "-o", str(binary)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return binary


def _run(program: Path, libdir: Path, tmp_path: Path, **settings: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACL_MEM_")}
    env.update(LD_LIBRARY_PATH=str(libdir), **settings)
    return subprocess.run([str(program)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize(("name", "value"), [
    ("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", "maybe"),
    ("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", "2"),
    ("ACL_MEM_LEAK_REPORT", "yes please"),
    ("ACL_MEM_CHECK", "-1"),
])
def test_an_unusable_setting_fails_every_call_with_one_line_naming_it(
        program, shim_libdir, tmp_path, name, value):
    done = _run(program, shim_libdir, tmp_path, **{name: value})
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == f"FAIL aclInit -> {SETTING_REFUSED}"
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert f"{name}={value}" in lines[0]


@pytest.mark.parametrize(("name", "value"), [
    ("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", " Yes "),
    ("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", "OFF"),
    ("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED", ""),
    ("ACL_MEM_LEAK_REPORT", "   "),
    ("ACL_MEM_CHECK", "False"),
])
def test_blank_or_any_case_settings_are_accepted(program, shim_libdir, tmp_path, name, value):
    done = _run(program, shim_libdir, tmp_path, **{name: value})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""


def test_an_unusable_abort_switch_is_named_by_unsupported_calls_too(shim_libdir, headers,
                                                                    tmp_path):
    """A program that calls only unsupported functions: they return 200006, the variable
    is named once, and nothing aborts."""
    source = tmp_path / "unsupported.c"
    source.write_text('#include <stdio.h>\n#include "acl/acl.h"\n'
                      "int main(void)\n{\n"
                      '    printf("%d\\n", (int)aclmdlLoadFromFile("m.om", NULL));\n'
                      '    printf("%d\\n", (int)aclmdlLoadFromFile("m.om", NULL));\n'
                      "    return 0;\n}\n")
    binary = tmp_path / "unsupported"
    done = subprocess.run([_compiler(), "-std=c11", "-Wall", "-Werror", f"-I{headers}",
                           str(source), f"-L{shim_libdir}", "-lascendcl", "-o", str(binary)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = _run(binary, shim_libdir, tmp_path, ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED="sometimes")
    assert run.returncode == 0 and run.stdout.split() == ["200006", "200006"]
    assert sum("ACL_MEM_SHIM_ABORT_ON_UNSUPPORTED" in line
               for line in run.stderr.splitlines()) == 1
