"""The drop-in's copies of the toolkit's ACL headers, written from headers.json.

headers.json (stubs/gen_shim_surface.py, from the real headers) holds each header's
items in order: includes, macros, enums with their values, structs and unions with
their fields, typedefs, constants and where its functions are declared. From it each
header is written here in this project's layout, with the functions' prototypes of
surface.json, so that a program including ``acl/acl_rt.h`` (or any other) gets what it
gets from the toolkit's header of that name: tests/test_shim_headers.py compares every
value, size and field offset against the real headers.

Each compiles as C11 and as C++17, except those that are C++ only in the toolkit too
(cplusplus_only(): ``acl/super_kernel.h``, whose structs hold enums of a fixed
underlying type), which declare nothing for C; the scoped enums of
``acl/acl_platform.h``, which its functions do not use, are declared for C++ only, so
the rest of that header serves C.

Left out: the C++ inline wrappers of ``acl/acl_rt_api.h`` (code, not declarations: the
header only includes ``acl/acl_rt.h``) and the functions of libraries the drop-in does
not build (``acldumpRegCallback``, ``acldumpUnregCallback``): those do not compile.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["ATTRIBUTES", "cplusplus_only", "full_headers", "load_headers"]

#: The toolkit's export and deprecation macros (defined per compiler there), as GCC and
#: Clang read them; each only if the program has not defined it.
ATTRIBUTES = {
    "ACL_FUNC_VISIBILITY": ("", ""),
    "GE_FUNC_VISIBILITY": ("", ""),
    "MSVP_PROF_API": ("", '__attribute__((visibility("default")))'),
    "ACL_DUMP_API": ("", '__attribute__((visibility("default")))'),
    "ACL_DEPRECATED": ("", "__attribute__((deprecated))"),
    "ACL_DEPRECATED_MESSAGE": ("(message)", "__attribute__((deprecated(message)))"),
}


@cache
def load_headers() -> dict[str, list[dict[str, Any]]]:
    """headers.json: header path under include/ -> its items."""
    text = resources.files(__package__).joinpath("headers.json").read_text()
    data: dict[str, list[dict[str, Any]]] = json.loads(text)["headers"]
    return data


@cache
def cplusplus_only() -> frozenset[str]:
    """The headers that need C++: an enum with a fixed underlying type (C23) that is not
    scoped, or a field of a scoped enum's type."""
    found = set()
    for path, items in load_headers().items():
        enums = [i for i in items if i["kind"] == "enum"]
        scoped = {i["tag"] for i in enums if i["scoped"]}
        fields = json.dumps([i.get("fields", []) for i in items])
        if any(i["base"] and not i["scoped"] for i in enums) or any(
                re.search(rf"\b{tag}\b", fields) for tag in scoped):
            found.add(path)
    return frozenset(found)


def _guard(path: str) -> str:
    return "ACL_MEM_SHIM_" + "".join(c if c.isalnum() else "_" for c in path).upper()


def _members(fields: list[Any], indent: str) -> list[str]:
    out = []
    for field in fields:
        if isinstance(field, str):
            out.append(f"{indent}{field};")
            continue
        head = " ".join(w for w in (field["kind"], field["tag"]) if w)
        out += [f"{indent}{head} {{", *_members(field["fields"], indent + "    "),
                f"{indent}}}{' ' + field['name'] if field['name'] else ''};"]
    return out


def _aggregate(item: dict[str, Any], whole_cxx: bool) -> list[str]:
    kind, tag, name = item["kind"], item["tag"], item["typedef"]
    if item["kind"] == "enum":
        head = "enum class" if item["scoped"] else "enum"
        base = f" : {item['base']}" if item["base"] else ""
        body = [f"    {e['name']} = {e['value']}," for e in item["enumerators"]]
    else:
        head, base, body = kind, "", _members(item["fields"], "    ")
    opening = " ".join(w for w in ("typedef" if name else "", head, tag) if w)
    out = [f"{opening}{base} {{", *body, f"}}{' ' + name if name else ''};"]
    if item.get("scoped") and not whole_cxx:
        # C++ only (as in the toolkit): hidden from C, so the rest of its header serves C.
        return ["#ifdef __cplusplus", *out, "#endif"]
    if not name and tag and not item.get("scoped"):
        # The header names it without the tag (valid C++ only): the typedef makes it C too.
        out.append(f"typedef {kind} {tag} {tag};")
    return out


def _system(name: str) -> list[str]:
    if not name.startswith("c") or name.endswith(".h"):
        return [f"#include <{name}>"]
    # A C++ name of a C header (<cstdint>): the C one for C, so the header serves both.
    return ["#ifdef __cplusplus", f"#include <{name}>", "#else", f"#include <{name[1:]}.h>",
            "#endif"]


def _item(item: dict[str, Any], prototypes: dict[str, str], whole_cxx: bool = False
          ) -> list[str]:
    kind = item["kind"]
    if kind in ("enum", "struct", "union"):
        return _aggregate(item, whole_cxx)
    if kind == "define":
        line = f"#define {item['name']}{item['params']} {item['value']}".rstrip()
        return [f"#ifndef {item['name']}", line, "#endif"] if item["default"] else [line]
    if kind == "attribute":
        params, value = ATTRIBUTES[item["name"]]
        return [f"#ifndef {item['name']}", f"#define {item['name']}{params} {value}".rstrip(),
                "#endif"]
    if kind == "ifndef":
        return [f"#ifndef {item['name']}", f"#define {item['name']}"]
    if kind == "endif":
        return ["#endif"]
    if kind == "const":
        return [f"static const {item['type']} {item['name']} = {item['value']};"]
    if kind == "typedef":
        return [f"{item['text']};"]
    if kind == "function":
        return [prototypes[item["name"]]]
    return []  # "absent": a function of a library the drop-in does not build


def _header(path: str, items: list[dict[str, Any]], prototypes: dict[str, str]) -> str:
    guard = _guard(path)
    top = ["/* Generated by acl_mem/shim/_headers.py from headers.json: the declarations",
           f"   of the CANN toolkit's {path}, for acl_mem's drop-in libraries. */",
           f"#ifndef {guard}", f"#define {guard}"]
    top += [line for i in items if i["kind"] == "system" for line in _system(i["path"])]
    top += [f'#include "{i["path"]}"' for i in items if i["kind"] == "include"]
    # The export macros come first: the included headers' prototypes may use them.
    body = [line for i in items if i["kind"] == "attribute" for line in _item(i, prototypes)]
    whole_cxx = path in cplusplus_only()
    declarations = [line for i in items if i["kind"] not in ("system", "include", "attribute")
                    for line in _item(i, prototypes, whole_cxx)]
    if declarations and whole_cxx:
        body += ["", "#ifdef __cplusplus", 'extern "C" {', "", *declarations, "", "}",
                 "#endif"]
    elif declarations:
        body += ["", "#ifdef __cplusplus", 'extern "C" {', "#endif", "", *declarations, "",
                 "#ifdef __cplusplus", "}", "#endif"]
    return "\n".join([*top, *body, "", f"#endif /* {guard} */"]) + "\n"


def full_headers(functions: list[dict[str, Any]]) -> dict[str, str]:
    """Relative path under include/ -> text, for every header of headers.json;
    ``functions`` are surface.json's (their prototypes as the real headers write them)."""
    prototypes = {str(f["name"]): f"{f['ret']} {f['name']}({f['params'] or 'void'});"
                  for f in functions}
    return {path: _header(path, items, prototypes) for path, items in load_headers().items()}
