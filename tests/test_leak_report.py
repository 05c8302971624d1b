"""ACL_MEM_LEAK_REPORT=1 prints the fake's leak report at exit for every program that ran
on the fake, whether or not it imported ``acl_mem.fake`` (the hook is registered when the
fake backend is made), and importing acl_mem alone still loads no backend."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.fake_only("the leak report is the fake's")

_RAW_ONLY = """
from acl_mem import raw
raw.aclrtSetDevice(0)
raw.aclrtMalloc(100, 0)
"""

_PYTHONIC_ONLY = """
import sys
import acl_mem
assert "acl_mem.fake" not in sys.modules
dev = acl_mem.Device(0)
kept = [dev.malloc(64), acl_mem.reserve_and_map(1 << 20)]
assert "acl_mem.fake" not in sys.modules
"""

_NOTHING_LEAKED = """
import acl_mem
with acl_mem.Device(0).malloc(64):
    pass
"""


def _run(program: str, **env: str) -> subprocess.CompletedProcess[str]:
    settings = {k: v for k, v in os.environ.items() if not k.startswith("ACL_MEM_")}
    settings.update(ACL_MEM_BACKEND="fake", **env)
    return subprocess.run([sys.executable, "-c", program], env=settings,
                          capture_output=True, text=True, timeout=120)


def _reported(stderr: str) -> list[str]:
    """The api of each reported allocation (the lines after the heading)."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("acl_mem: "))
    return [line.split()[0] for line in lines[start + 1:] if line.startswith("  ")]


def test_report_for_a_program_that_only_used_raw():
    done = _run(_RAW_ONLY, ACL_MEM_LEAK_REPORT="1")
    assert done.returncode == 0, done.stderr
    assert _reported(done.stderr) == ["aclrtMalloc"]


def test_report_for_a_program_that_never_imported_the_fake_module():
    done = _run(_PYTHONIC_ONLY, ACL_MEM_LEAK_REPORT="1")
    assert done.returncode == 0, done.stderr
    # The block, then the virtual memory of reserve_and_map: all still held at exit.
    assert _reported(done.stderr) == ["aclrtMalloc", "aclrtReserveMemAddress",
                                      "aclrtMallocPhysical", "aclrtMapMem"]


@pytest.mark.parametrize("setting", [None, "0"])
def test_no_report_unless_asked(setting):
    env = {} if setting is None else {"ACL_MEM_LEAK_REPORT": setting}
    done = _run(_RAW_ONLY, **env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_no_report_when_nothing_leaked():
    done = _run(_NOTHING_LEAKED, ACL_MEM_LEAK_REPORT="1")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_importing_acl_mem_loads_no_backend():
    done = _run("import sys, acl_mem\n"
                "loaded = [m for m in sys.modules if m.startswith(('acl_mem._fake', "
                "'acl_mem._native', 'acl_mem.fake'))]\n"
                "assert not loaded, loaded\n", ACL_MEM_LEAK_REPORT="1")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_the_no_leaks_fixture_sees_virtual_memory(tmp_path):
    test_file = tmp_path / "test_vmm_leak.py"
    test_file.write_text(
        "import acl_mem\n"
        "KEEP = []\n"
        "def test_keeps(acl_mem_no_leaks):\n"
        "    acl_mem.Device(0).use()\n"
        "    KEEP.append(acl_mem.reserve_and_map(1 << 20))\n"
        "def test_closes(acl_mem_no_leaks):\n"
        "    acl_mem.reserve_and_map(1 << 20).close()\n")
    settings = {k: v for k, v in os.environ.items() if not k.startswith("ACL_MEM_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(test_file)], capture_output=True, text=True, cwd=tmp_path,
                          env={**settings, "ACL_MEM_BACKEND": "fake"}, timeout=120)
    assert "2 passed, 1 error" in done.stdout, done.stdout
    assert "ERROR at teardown of test_keeps" in done.stdout
    for api in ("aclrtReserveMemAddress", "aclrtMallocPhysical", "aclrtMapMem"):
        assert api in done.stdout
