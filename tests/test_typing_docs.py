"""The README's examples and examples/ type-check under ``mypy --strict``: what a user
copies must not need casts or ignores (``with Device(0) as dev`` is a Device, pools and
VMM objects are their own types, not Any)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_readme_and_examples_pass_mypy_strict(tmp_path):
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert blocks, "the README has Python examples"
    files = []
    for number, block in enumerate(blocks):
        path = tmp_path / f"readme_block_{number}.py"
        path.write_text(block)
        files.append(str(path))
    files += [str(path) for path in sorted((ROOT / "examples").glob("*.py"))]
    # Run from elsewhere, as a user's project would: acl_mem must be found through its
    # installation (README: editable installs in compat mode). The project's mypy cache
    # (CI runs mypy first) keeps this fast.
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
                           "--cache-dir", str(ROOT / ".mypy_cache"), *files],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "import-not-found" not in done.stdout, (
        "mypy cannot see the installed acl_mem: reinstall with "
        "pip install -e . --config-settings editable_mode=compat\n" + done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr


def test_host_buffer_numpy_is_typed(tmp_path):
    """HostBuffer.numpy() is an NDArray (uint8 by default), not Any; numpy is needed for
    the check only (acl_mem imports it for types under TYPE_CHECKING)."""
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    pytest.importorskip("numpy")
    path = tmp_path / "numpy_types.py"
    path.write_text(
        "from typing import Any\n"
        "import numpy as np\n"
        "from numpy.typing import NDArray\n"
        "from typing_extensions import assert_type\n"
        "import acl_mem\n"
        "def use(buf: acl_mem.HostBuffer) -> None:\n"
        "    assert_type(buf.numpy(), NDArray[np.uint8])\n"
        "    assert_type(buf.numpy('float32'), NDArray[Any])\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
                           "--cache-dir", str(ROOT / ".mypy_cache"), str(path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
