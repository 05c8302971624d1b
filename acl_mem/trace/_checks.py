"""What a trace line may hold: every field checked for type and range as it is read, so
that the summary, the replay and the plot never meet a value they must doubt (a trace is
a file anybody can edit or forge; docs/trace-format.md, "Reading damaged or hostile
files").

A check returns None when the line is fine, else the reason it is rejected:
``field size: expected an int >= 0 and < 2**64, got -Infinity``. Strings that output
repeats (file and function names, exception names and messages) are cut to
:data:`TEXT_LIMIT` characters here, and a stack to its innermost frames, at most
:data:`FRAME_LIMIT` of them and :data:`STACK_LIMIT` characters of names: the summary,
the replay and the plot repeat a stack for every allocation made there, so what they
write stays within a constant factor of what was read.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ._lines import BY_WRITTEN

__all__ = ["FRAME_LIMIT", "STACK_LIMIT", "TEXT_LIMIT", "check_call", "check_end", "check_stack",
           "check_thread", "clean_header", "cut", "known_fields", "shown"]

#: Characters kept of a string from the trace that output repeats.
TEXT_LIMIT = 200
#: Innermost frames kept of a recorded stack, and characters of their names.
FRAME_LIMIT = 32
STACK_LIMIT = 2000
#: How deep the header's ``details`` may nest (the backend writes two levels).
_DETAILS_DEPTH = 8

_U64 = (0, 1 << 64, "an int >= 0 and < 2**64")
_DEVICE = (0, 1 << 31, "an int >= 0 and < 2**31")
_COUNT = (0, 1 << 63, "an int >= 0 and < 2**63")
_SIGNED = (-(1 << 63), 1 << 63, "an int >= -2**63 and < 2**63")
#: Anything a caller could have passed in a call the runtime refused.
_ANY_INT = (-(1 << 63), 1 << 64, "an int >= -2**63 and < 2**64")
_SMALL = (0, 1 << 20, "an int >= 0 and < 2**20")
_CALL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}")
_Range = tuple[int, int, str]


def cut(text: str, limit: int = TEXT_LIMIT, *, keep_end: bool = False) -> str:
    """``text`` with at most ``limit`` characters (a long path keeps its end, where its
    file name is)."""
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1):] if keep_end else text[:limit - 1] + "…"


def shown(value: object) -> str:
    """A short rendering of a rejected value, as JSON writes it (``-Infinity``)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return json.dumps(cut(value, 24), ensure_ascii=False)
    if type(value) is int and value.bit_length() > 80:
        digits = len(str(abs(value)))
        return f"{str(value)[:20]}… ({digits} digits)"
    try:
        return cut(json.dumps(value), 40)
    except (TypeError, ValueError):
        return type(value).__name__


def _int_problem(name: str, value: object, limits: _Range, *, null: bool = True
                 ) -> str | None:
    if type(value) is int and limits[0] <= value < limits[1]:
        return None
    if value is None and null:
        return None
    return f"field {name}: expected {limits[2]}{' or null' if null else ''}, got " \
        f"{shown(value)}"


def _text_problem(name: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return None
    return f"field {name}: expected a string or null, got {shown(value)}"


def _prop_problem(value: object) -> str | None:
    """aclrtMallocPhysical's ``prop``: null, the text the recorder wrote for something
    that was not one, or the object with the C field names."""
    if value is None or isinstance(value, str):
        return None
    if not isinstance(value, dict):
        return f"field prop: expected an object, a string or null, got {shown(value)}"
    for key in ("handleType", "allocationType", "memAttr", "reserve"):
        problem = _int_problem(f"prop.{key}", value.get(key), _ANY_INT)
        if problem:
            return problem
    location = value.get("location")
    if location is None:
        return None
    if not isinstance(location, dict):
        return f"field prop.location: expected an object or null, got {shown(location)}"
    for key in ("id", "type"):
        problem = _int_problem(f"prop.location.{key}", location.get(key), _ANY_INT)
        if problem:
            return problem
    return None


#: Per call as written: its argument and output fields and the range each takes when
#: the call succeeded (a refused call may carry whatever its caller passed).
_FIELDS: dict[str, tuple[tuple[str, _Range | str], ...]] = {
    spec.written: tuple(
        (name, "text" if name == "config" else "prop" if name == "prop"
         else _DEVICE if name in ("device", "device_id") else _U64)
        for name in (*spec.fields, *spec.outputs, "null_outputs"))
    for spec in BY_WRITTEN.values()
}


#: Per call: the fields a common record holds and (low, high, null allowed) for each;
#: a record whose fields are these (or unknown ones) in range needs no closer look.
_QUICK: dict[str, dict[str, tuple[int, int, bool]]] = {
    call: {"t": (*_SIGNED[:2], False), "th": (*_COUNT[:2], False),
           "dev": (*_DEVICE[:2], True), "stack": (*_COUNT[:2], True),
           "rc": (*_ANY_INT[:2], False),
           **{name: (*kind[:2], True) for name, kind in fields if not isinstance(kind, str)}}
    for call, fields in _FIELDS.items()
}
#: Fields whose values the quick look leaves to the full one.
_LOOK_CLOSER = frozenset({"raised", "message", "config", "prop"})


def check_call(item: dict[str, Any]) -> str | None:
    """A call record (or a ``backend`` line's time); cuts its long strings."""
    call = item.get("call")
    rules = _QUICK.get(call) if type(call) is str else None
    if rules is not None:
        for key, value in item.items():
            limits = rules.get(key)
            if limits is None:
                if key in _LOOK_CLOSER:
                    break
            elif type(value) is int:
                if not limits[0] <= value < limits[1]:
                    break
            elif value is not None or not limits[2]:
                break
        else:
            return None
    return _check_call_fully(item)


def _check_call_fully(item: dict[str, Any]) -> str | None:
    problem = _int_problem("t", item.get("t", 0), _SIGNED, null=False) or \
        _int_problem("th", item.get("th", 0), _COUNT, null=False) or \
        _int_problem("dev", item.get("dev"), _DEVICE) or \
        _int_problem("stack", item.get("stack"), _COUNT)
    if problem:
        return problem
    if "rc" in item:
        problem = _int_problem("rc", item["rc"], _ANY_INT, null=False)
        if problem:
            return problem
    for key in ("raised", "message"):
        value = item.get(key)
        if value is not None:
            if not isinstance(value, str):
                return f"field {key}: expected a string or null, got {shown(value)}"
            item[key] = cut(value)
    if "call" not in item:
        return None
    call = item["call"]
    if not isinstance(call, str) or not _CALL_NAME.fullmatch(call):
        return f"field call: expected a call name, got {shown(call)}"
    fields = _FIELDS.get(call)
    if fields is None:
        return None  # a call of a later version: its fields are not ours to judge
    failed = item.get("raised") is not None or item.get("rc", 0) != 0
    for name, kind in fields:
        if name not in item:
            continue
        value = item[name]
        if kind == "text":
            problem = _text_problem(name, value)
            if value is not None and not problem:
                item[name] = cut(value)
        elif kind == "prop":
            problem = _prop_problem(value)
            if isinstance(value, str):
                item[name] = cut(value)
        else:
            problem = _int_problem(name, value, _ANY_INT if failed else kind)  # type: ignore[arg-type]
        if problem:
            return problem
    return None


#: Fields of a call record the readers use: every record's, and per call its own.
_COMMON = frozenset({"t", "th", "dev", "call", "rc", "raised", "message", "stack",
                     "null_outputs"})
_KNOWN: dict[str, frozenset[str]] = {
    call: _COMMON | {name for name, _ in fields} for call, fields in _FIELDS.items()}
_THREAD = frozenset({"type", "th", "ident", "name"})
_END = frozenset({"type", "t", "calls", "lost"})


def known_fields(item: dict[str, Any]) -> dict[str, Any]:
    """A checked call record, ``thread`` or ``end`` line with only the fields readers
    use: an unknown one is ignored (docs/trace-format.md), and a forged line could make
    it a megabyte of objects, kept for every line while the trace is read."""
    if "call" in item:
        known = _KNOWN.get(item["call"], _COMMON)
    else:
        known = _THREAD if item.get("type") == "thread" else _END
    if item.keys() <= known:
        return item  # the common case: nothing to drop
    return {key: value for key, value in item.items() if key in known}


def check_thread(item: dict[str, Any]) -> str | None:
    """A ``thread`` line; cuts its name."""
    problem = _int_problem("th", item.get("th"), _COUNT, null=False) or \
        _int_problem("ident", item.get("ident"), _ANY_INT) or \
        _text_problem("name", item.get("name"))
    if not problem and isinstance(item.get("name"), str):
        item["name"] = cut(item["name"])
    return problem


def check_stack(item: dict[str, Any]) -> tuple[str | None, list[tuple[str, int, str]]]:
    """A ``stack`` line: the reason it is rejected, or its frames (innermost
    :data:`FRAME_LIMIT`, names cut)."""
    problem = _int_problem("id", item.get("id"), _COUNT, null=False)
    if problem:
        return problem, []
    frames = item.get("frames", [])
    if not isinstance(frames, list):
        return f"field frames: expected a list, got {shown(frames)}", []
    kept: list[tuple[str, int, str]] = []
    characters = 0
    for number, frame in enumerate(frames):
        if not (isinstance(frame, list) and len(frame) == 3 and isinstance(frame[0], str)
                and isinstance(frame[2], str) and type(frame[1]) is int
                and 0 <= frame[1] < 1 << 31):
            return (f"field frames[{number}]: expected [file, line >= 0, function], got "
                    f"{shown(frame)}"), []
        file, function = cut(frame[0], keep_end=True), cut(frame[2])
        characters += len(file) + len(function)
        if number < FRAME_LIMIT and (characters <= STACK_LIMIT or not kept):
            kept.append((file, frame[1], function))
    return None, kept


def check_end(item: dict[str, Any]) -> str | None:
    """The ``end`` line."""
    return _int_problem("t", item.get("t"), _SIGNED) or \
        _int_problem("calls", item.get("calls", 0), _COUNT, null=False) or \
        _int_problem("lost", item.get("lost", 0), _COUNT, null=False)


#: Header fields readers use and what each may hold (None is always allowed); other
#: fields are dropped, as readers ignore what they do not know.
_HEADER: dict[str, _Range | str] = {
    "pid": _COUNT, "parent_pid": _COUNT, "stack_depth": _DEVICE, "padding": _SMALL,
    "device_count": _DEVICE, "capacity": _U64, "current_device": _DEVICE,
    "backend": "text", "soc": "text", "cann": "text", "acl": "text", "memory": "text",
    "started": "text", "acl_mem": "text", "details": "details", "argv": "argv",
    "run": "text",
}
_KEPT = ("type", "format", "version")


def _has_non_finite(value: object) -> bool:
    """NaN or Infinity anywhere in ``value`` (JSON has neither; output must stay JSON)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _nested_too_deep(value: object, limit: int) -> bool:
    level: list[object] = [value]
    for _ in range(limit):
        nested: list[object] = []
        for item in level:
            if isinstance(item, dict):
                nested.extend(item.values())
            elif isinstance(item, list):
                nested.extend(item)
        if not nested:
            return False
        level = nested
    return True


def _header_problem(key: str, value: object, kind: _Range | str) -> str | None:
    if value is None:
        return None
    if kind == "text":
        return _text_problem(key, value)
    if kind == "details":
        if not isinstance(value, dict) or _nested_too_deep(value, _DETAILS_DEPTH):
            return f"field details: expected an object nested at most {_DETAILS_DEPTH} " \
                f"deep, got {shown(value)}"
        if _has_non_finite(value):
            return "field details: expected finite numbers only, got NaN or Infinity"
        return None
    if kind == "argv":
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            return f"field argv: expected a list of strings, got {shown(value)}"
        return None
    return _int_problem(key, value, kind)  # type: ignore[arg-type]


def clean_header(header: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The header (or a ``backend`` line) with each field readers use checked: one of the
    wrong type or range is set to None and named in the problems returned; long strings
    are cut; fields readers do not know are dropped."""
    problems: list[str] = []
    clean: dict[str, Any] = {key: header[key] for key in _KEPT if key in header}
    for key, kind in _HEADER.items():
        value = header.get(key)
        problem = _header_problem(key, value, kind)
        if problem:
            problems.append(problem + "; ignored")
            value = None
        elif isinstance(value, str):
            value = cut(value)
        elif kind == "argv" and isinstance(value, list):
            value = [cut(a) for a in value[:64]]
        clean[key] = value
    counts = header.get("set_counts")
    clean["set_counts"] = {}
    if isinstance(counts, dict):
        for k, v in counts.items():
            if k.isascii() and k.isdigit() and len(k) <= 10 and int(k) < 1 << 31 and \
                    type(v) is int and 0 < v < 1 << 16:
                clean["set_counts"][str(int(k))] = v
            else:
                problems.append(f"field set_counts: expected device numbers (< 2**31) "
                                f"with counts (> 0 and < 2**16), got {shown(k)}: "
                                f"{shown(v)}; ignored")
    elif counts is not None:
        problems.append(f"field set_counts: expected an object, got {shown(counts)}; "
                        "ignored")
    return clean, problems
