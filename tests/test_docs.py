"""The README's example and examples/tour.py run as written (on the fake)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _readme_python_blocks():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("script", ["readme-quick-start", "readme", "readme-streams",
                                    "readme-vmm", "readme-pool", "tour"])
def test_example_runs(script):
    blocks = _readme_python_blocks()
    code = {"readme-quick-start": blocks[0], "readme": blocks[1], "readme-streams": blocks[2],
            "readme-vmm": blocks[3], "readme-pool": blocks[4],
            "tour": (ROOT / "examples" / "tour.py").read_text()}[script]
    env = {**os.environ, "ACL_MEM_BACKEND": "fake"}
    # The README and the examples show the default device and release (the tour asks for
    # an address range, which CANN 8.5.0 lacks), whatever this run plays.
    env.pop("ACL_MEM_FAKE_PROFILE", None)
    env.pop("ACL_MEM_FAKE_CANN", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    if script == "readme-quick-start":
        assert "<DeviceArray shape=(1048576,) dtype=float32" in done.stdout
        assert "b'world'" in done.stdout
    if script == "readme":
        assert "4194304 4194336" in done.stdout
        assert "100000 ACL_ERROR_INVALID_PARAM" in done.stdout
    if script == "readme-pool":
        assert "160 192 384" in done.stdout
        assert "boundary-crossed" in done.stdout and "canary-overwritten" in done.stdout
    if script == "readme-vmm":
        assert "b'ZZZZ'" in done.stdout
    if script == "readme-streams":
        assert "caught: access-before-synchronize" in done.stdout
        assert "b'data'" in done.stdout


def test_readme_pyacl_command_runs():
    """The README's `acl-mem run` line names a program in the repository, and it runs."""
    readme = (ROOT / "README.md").read_text()
    line = next(line for line in readme.splitlines() if line.startswith("acl-mem run "))
    command = line.split("#", 1)[0].split()
    assert (ROOT / command[2]).is_file(), command
    env = {**os.environ, "ACL_MEM_BACKEND": "fake"}
    done = subprocess.run([sys.executable, "-m", "acl_mem", *command[1:]], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("round trip ok")
