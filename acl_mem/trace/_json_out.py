"""Writing ``--json`` reports a piece at a time.

A summary of a long trace lists every allocation never freed: built as one string (and
one dict per allocation before that) it took many times the memory of the trace read.
Here each top-level value is encoded on its own, and a value that is an iterator (not a
list) one element at a time, so the report is never held whole; the text is what
``json.dumps(value, indent=2)`` writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TextIO

__all__ = ["write_json"]

_INDENT = 2


def _encoded(value: object, depth: int) -> str:
    """``value`` as JSON, indented as if it stood ``depth`` levels deep."""
    return json.dumps(value, indent=_INDENT).replace("\n", "\n" + " " * (_INDENT * depth))


def write_json(report: Mapping[str, object], out: TextIO) -> None:
    """Write ``report`` (one JSON object, then a newline) to ``out``; its iterator values
    are written as JSON arrays, element by element."""
    out.write("{")
    pad = "\n" + " " * _INDENT
    for number, (key, value) in enumerate(report.items()):
        out.write(("," if number else "") + pad + json.dumps(key) + ": ")
        if isinstance(value, Iterator):
            _write_array(value, out)
        else:
            out.write(_encoded(value, 1))
    out.write("\n}\n" if report else "}\n")


def _write_array(items: Iterator[object], out: TextIO) -> None:
    pad = "\n" + " " * (2 * _INDENT)
    written = False
    for item in items:
        out.write(("," if written else "[") + pad + _encoded(item, 2))
        written = True
    out.write("\n" + " " * _INDENT + "]" if written else "[]")
