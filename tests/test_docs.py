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


@pytest.mark.parametrize("script", ["readme", "tour"])
def test_example_runs(script):
    code = (_readme_python_blocks()[0] if script == "readme"
            else (ROOT / "examples" / "tour.py").read_text())
    env = {**os.environ, "ACL_MEM_BACKEND": "fake"}
    env.pop("ACL_MEM_FAKE_PROFILE", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    if script == "readme":
        assert "4194304 4194336" in done.stdout
        assert "100000 ACL_ERROR_INVALID_PARAM" in done.stdout
