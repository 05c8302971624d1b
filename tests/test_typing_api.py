"""Types a user's mypy sees: a pool's segments pass on as DeviceBuffer (HostBuffer for an
aclrtMallocHost pool), copies take buffers and refuse an int, VMM objects read and write.

tests/typing_snippets/api_accepts.py must pass ``mypy --strict``; each line of
api_refuses.py marked ``# error: <code>`` must be exactly one error of that code.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = Path(__file__).resolve().parent / "typing_snippets"


def test_api_types_accept_and_refuse(tmp_path):
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    accepts, refuses = SNIPPETS / "api_accepts.py", SNIPPETS / "api_refuses.py"
    # From elsewhere, as a user's project: acl_mem is found through its installation.
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
                           "--cache-dir", str(ROOT / ".mypy_cache"), str(accepts), str(refuses)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "import-not-found" not in done.stdout, done.stdout
    found = {(Path(name).name, int(line), code) for name, line, code in re.findall(
        r"^(.+?):(\d+): error: .*\[([a-z-]+)\]$", done.stdout, flags=re.M)}
    expected = {(refuses.name, number, match.group(1))
                for number, text in enumerate(refuses.read_text().splitlines(), start=1)
                if (match := re.search(r"# error: ([a-z-]+)", text))}
    assert len(expected) == 3
    assert found == expected, done.stdout + done.stderr
