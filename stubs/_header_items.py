"""The real ACL headers as data: for each header, its items in order (includes, macros,
enums with their values, structs and unions with their fields, typedefs, constants, and
the places of its functions), for ``acl_mem/shim/headers.json``.

Only facts are kept (names, values, field and parameter declarations); comments and
layout are not, and acl_mem/shim/_headers.py writes the headers back in its own style.
Enumerator values are computed by the compiler against the real headers, so an
enumerator written as an expression or left implicit gets the value the toolkit's has.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

Item = dict[str, Any]
_DEPRECATION = re.compile(r'\bACL_DEPRECATED_MESSAGE\s*\(\s*"[^"]*"\s*\)|\bACL_DEPRECATED\b')


def _text(path: Path) -> list[str]:
    """The file's lines without comments, continued lines joined."""
    text = path.read_text(errors="replace").replace("\ufeff", "")  # a byte order mark
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text).replace("\\\n", " ")
    return text.splitlines()


def _split(text: str, separator: str) -> list[str]:
    """``text`` cut at each ``separator`` outside brackets, pieces stripped, empty dropped."""
    pieces, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += 1 if char in "{([" else -1 if char in "})]" else 0
        if char == separator and depth == 0:
            pieces.append(text[start:index])
            start = index + 1
    if text[start:].strip():
        if separator == ";":
            raise ValueError(f"unterminated statement: {text[start:].strip()[:80]}")
        pieces.append(text[start:])
    return [" ".join(p.split()) for p in pieces if p.strip()]


def _members(body: str) -> list[Any]:
    """A struct or union body: a declaration string per field, a dict per nested type."""
    out: list[Any] = []
    for member in _split(body, ";"):
        nested = re.fullmatch(r"(struct|union)\s*(\w*)\s*\{(.*)\}\s*(\w*)", member)
        if nested:
            out.append({"kind": nested[1], "tag": nested[2], "fields": _members(nested[3]),
                        "name": nested[4]})
        else:
            out.append(re.sub(r"\s*\*\s*", " *", member).replace("* *", "**"))
    return out


_AGGREGATE = re.compile(r"(typedef )?(enum(?: class)?|struct|union) ?(\w*) ?(?::\s*(\w+))?"
                        r"\s*\{(.*)\}\s*(\w*)")


def _statement(text: str, functions: set[str]) -> Item:
    aggregate = _AGGREGATE.fullmatch(text)
    if aggregate:
        is_typedef, kind, tag, base, body, name = aggregate.groups()
        item: Item = {"kind": kind.split()[0], "tag": tag, "typedef": name if is_typedef else ""}
        if kind.startswith("enum"):
            item["scoped"] = kind == "enum class"
            item["base"] = base or ""
            item["enumerators"] = [{"name": e.split("=")[0].strip()}
                                   for e in _split(body, ",")]
        else:
            item["fields"] = _members(body)
        return item
    constant = re.fullmatch(r"static const (\w+) (\w+) = ([^;]+)", text)
    if constant:
        return {"kind": "const", "type": constant[1], "name": constant[2],
                "value": constant[3].strip()}
    if text.startswith("typedef "):
        return {"kind": "typedef", "text": re.sub(r"\s*\*\s*", " *", text).replace("( *", "(*")}
    called = re.search(r"(\w+)\s*\(", text)
    if called and called[1] in functions:
        return {"kind": "function", "name": called[1]}
    if called and re.match(r"\w+_API ", text):
        # Exported by a library the drop-in does not build (acl_dump.h's libacl_dump.so):
        # not declared, so a program using it fails to compile rather than to link.
        return {"kind": "absent", "name": called[1]}
    raise ValueError(f"no item for statement: {text[:100]}")


def _code_items(code: str, functions: set[str]) -> list[Item]:
    code = _DEPRECATION.sub(" ", code)
    return [_statement(s, functions) for s in _split(code, ";")]


def header_items(path: Path, root: Path, functions: set[str]) -> list[Item]:
    """The items of one header, in order (``root`` is the include directory)."""
    lines, items, code = _text(path), [], ""
    directives = [(i, line.strip()) for i, line in enumerate(lines) if line.strip().startswith("#")]
    guard = re.fullmatch(r"#\s*ifndef\s+(\w+)", directives[0][1]) if directives else None
    stack: list[str] = []
    waiting: list[str] = []  # an #ifndef NAME whose #define NAME decides what it is
    kept = [line if not line.strip().startswith("#") else "\0" for line in lines]
    flat = "\n".join(kept).split("\0")
    for (_, line), before in zip(directives, flat, strict=False):
        if not stack or stack[-1] not in ("cplusplus", "config"):
            code += before
        elif stack[-1] == "cplusplus":
            extra = before.replace('extern "C" {', "").replace("}", "").strip()
            if extra:
                stack[-1] = "cplusplus-code"  # C++-only code: left to the real header
        if code.strip():
            items += _code_items(code, functions)
            code = ""
        word, _, rest = line[1:].strip().partition(" ")
        rest = rest.strip()
        if word == "ifndef" and guard and rest == guard[1] and not stack:
            stack.append("guard")
        elif word == "ifdef" and rest == "__cplusplus":
            stack.append("cplusplus")
        elif word == "ifndef" and not any(s.startswith(("config", "cplus")) for s in stack):
            waiting.append(rest)
            stack.append("ifndef")
        elif word in ("if", "ifdef", "ifndef"):
            stack.append("config" if not stack or stack[-1] != "cplusplus-code"
                         else "cplusplus-code")
        elif word in ("else", "elif"):
            pass
        elif word == "endif":
            done = stack.pop()
            if done == "ifndef-group":
                items.append({"kind": "endif"})
        elif word == "include":
            items.append(_include(rest, path, root))
        elif word == "define":
            _define(rest, stack, waiting, items, guard[1] if guard else "")
    code += flat[len(directives)] if len(flat) > len(directives) else ""
    if code.strip():
        items += _code_items(code, functions)
    return items


def _include(rest: str, path: Path, root: Path) -> Item:
    if rest.startswith("<"):
        return {"kind": "system", "path": rest.strip("<> ")}
    name = rest.strip('" ')
    local = path.parent / name
    found = local if local.is_file() else root / name
    return {"kind": "include", "path": found.relative_to(root).as_posix()}


def _define(rest: str, stack: list[str], waiting: list[str], items: list[Item],
            guard: str) -> None:
    match = re.fullmatch(r"(\w+)(\([^)]*\))?\s*(.*)", rest)
    assert match is not None, rest
    name, params, value = match[1], match[2] or "", " ".join(match[3].split())
    if name == guard:
        return
    if stack and stack[-1] == "config":
        if not any(i.get("name") == name and i["kind"] == "attribute" for i in items):
            items.append({"kind": "attribute", "name": name})
        return
    if stack and stack[-1] == "ifndef" and waiting and waiting[-1] == name:
        waiting.pop()
        if value:  # #ifndef NAME / #define NAME value: a default the user may override
            items.append({"kind": "define", "name": name, "params": "", "value": value,
                          "default": True})
            stack[-1] = "ifndef-default"
        else:  # #ifndef NAME / #define NAME: what follows is declared once
            items.append({"kind": "ifndef", "name": name})
            stack[-1] = "ifndef-group"
        return
    items.append({"kind": "define", "name": name, "params": params, "value": value,
                  "default": False})


def enumerator_values(headers: dict[str, list[Item]], root: Path) -> None:
    """Fill in each enumerator's ``value``: the compiler's, against the real headers."""
    lines = ["#include <cstdio>", *[f'#include "{h}"' for h in headers], "int main() {"]
    for items in headers.values():
        for item in items:
            if item["kind"] != "enum":
                continue
            for enumerator in item["enumerators"]:
                name = f"{item['tag']}::{enumerator['name']}" if item["scoped"] else \
                    enumerator["name"]
                lines.append(f'    std::printf("%lld\\n", static_cast<long long>({name}));')
    lines += ["    return 0;", "}"]
    with tempfile.TemporaryDirectory() as work:
        source, program = Path(work) / "values.cpp", Path(work) / "values"
        source.write_text("\n".join(lines) + "\n")
        subprocess.run(["c++", "-std=c++17", "-w", f"-I{root}", str(source), "-o", str(program)],
                       check=True)
        values = iter(subprocess.run([str(program)], check=True, capture_output=True,
                                     text=True).stdout.split())
    for items in headers.values():
        for item in items:
            for enumerator in item.get("enumerators", []):
                enumerator["value"] = int(next(values))
