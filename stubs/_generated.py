"""What the generators in stubs/ share: write their output, or check it is current."""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(output: Path, text: str, *, check: bool, command: str) -> int:
    """Write ``text`` to ``output`` (exit status 0), or with ``check`` only compare: 1 and
    a line naming ``command`` on stderr when the committed file differs."""
    if not check:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        return 0
    if (output.read_text() if output.exists() else "") != text:
        print(f"{output} is out of date: run {command}", file=sys.stderr)
        return 1
    return 0
