"""The stand-in library's temporary directory goes away with the process that made it
(the suite used to leave one /tmp/acl_mem_stand_in_* behind per run)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import ROOT, clean_env

# A child that makes the directory without compiling (build() is replaced), forks a
# grandchild that exits normally, checks the directory survived that, and prints it.
_CHILD = """
import os, sys
sys.path.insert(0, {tests!r})
import stand_in
stand_in.build = lambda destination: destination
root = stand_in.build_temporary(prefix={prefix!r})
assert root.is_dir()
pid = os.fork()
if pid == 0:
    sys.exit(0)
os.waitpid(pid, 0)
assert root.is_dir(), "a forked child removed its parent's directory"
print(root)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_build_temporary_is_removed_at_exit_by_its_maker_only(tmp_path):
    prefix = f"acl_mem_cleanup_test_{os.getpid()}_"
    code = _CHILD.format(tests=str(ROOT / "tests"), prefix=prefix)
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(TMPDIR=str(tmp_path)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    root = proc.stdout.strip()
    assert root.startswith(str(tmp_path))
    assert not os.path.exists(root)
    assert os.listdir(tmp_path) == []
