"""C and C++ sources that exercise the drop-in's headers (tests/test_shim_headers.py).

``probe_source`` prints, for every declaration of acl_mem/shim/headers.json, what a
compiler makes of it: each enumerator, macro and constant (value, size, signedness),
each struct, union and typedef (size, alignment, the mangled type), each field (offset,
size, mangled type) and each function (its mangled type: return and parameter types).
Compiled once against the real headers and once against the shipped ones, the two
outputs must be equal. ``usage_source`` uses one declaration of each kind per header.
"""

from __future__ import annotations

import re
from typing import Any

from acl_mem.shim._headers import cplusplus_only, load_headers

__all__ = ["probe_headers", "probe_source", "usage_source"]

_PRELUDE = r"""#include <cstddef>
#include <cstdio>
#include <type_traits>
#include <typeinfo>
static void value(const char *name, const char *v) { std::printf("%s = \"%s\"\n", name, v); }
template <class T> static void value(const char *name, T v)
{
    if constexpr (std::is_enum_v<T>) {
        value(name, static_cast<std::underlying_type_t<T>>(v));
    } else if constexpr (std::is_signed_v<T>) {
        std::printf("%s = %lld signed %zu\n", name, static_cast<long long>(v), sizeof v);
    } else {
        std::printf("%s = %llu unsigned %zu\n", name, static_cast<unsigned long long>(v),
                    sizeof v);
    }
}
#define TYPE(T) std::printf("type %s: %zu %zu %s\n", #T, sizeof(T), alignof(T), typeid(T).name())
#define FIELD(T, F) std::printf("field %s.%s: %zu %zu %s\n", #T, #F, offsetof(T, F), \
    sizeof(((T *)0)->F), typeid(((T *)0)->F).name())
#define OPAQUE(T) std::printf("opaque %s: %s\n", #T, typeid(T *).name())
#define FUNCTION(F) std::printf("function %s: %s\n", #F, typeid(F).name())
"""


def probe_headers() -> list[str]:
    """The headers the probe includes: all but acl/acl_rt_api.h, whose C++ overloads make
    a function's name ambiguous (it adds no C declaration)."""
    return [h for h in load_headers() if h != "acl/acl_rt_api.h"]


def _field_names(fields: list[Any], prefix: str = "") -> list[str]:
    """Designators of every field, nested ones included (anonymous members directly)."""
    out = []
    for field in fields:
        if isinstance(field, dict):
            inner = f"{prefix}{field['name']}." if field["name"] else prefix
            if field["name"]:
                out.append(prefix + field["name"])
            out += _field_names(field["fields"], inner)
            continue
        name = re.search(r"\(\s*\*\s*(\w+)\s*\)", field) or re.search(
            r"(\w+)\s*(?:\[[^\]]*\]\s*)*$", field)
        assert name is not None, field
        out.append(prefix + name[1])
    return out


def _typedef_name(text: str) -> str:
    found = re.search(r"\(\s*\*\s*(\w+)\s*\)", text) or re.search(r"(\w+)\s*$", text)
    assert found is not None, text
    return found[1]


def _probe_item(item: dict[str, Any]) -> list[str]:
    kind = item["kind"]
    if kind == "enum":
        scope = f"{item['tag']}::" if item["scoped"] else ""
        lines = [f'    value("{e["name"]}", {scope}{e["name"]});' for e in item["enumerators"]]
        return lines + ([f"    TYPE({item['typedef'] or item['tag']});"]
                        if item["typedef"] or item["tag"] else [])
    if kind in ("struct", "union"):
        name = item["typedef"] or item["tag"]
        return [f"    TYPE({name});",
                *[f"    FIELD({name}, {f});" for f in _field_names(item["fields"])]]
    if kind == "define" and item["value"] and not item["params"]:
        return [f'    value("{item["name"]}", {item["name"]});']
    if kind == "const":
        return [f'    value("{item["name"]}", {item["name"]});']
    if kind == "typedef":
        name = _typedef_name(item["text"])
        if re.fullmatch(r"typedef (struct|union) \w+ \w+", item["text"]):
            return [f"    OPAQUE({name});"]  # a complete one is checked where defined
        return [] if "(" in item["text"] and "(*" not in item["text"] else [f"    TYPE({name});"]
    if kind == "function":
        return [f"    FUNCTION({item['name']});"]
    return []


def probe_source() -> str:
    """A C++17 program printing a line per declaration (the same against both headers)."""
    lines = [_PRELUDE, *[f'#include "{h}"' for h in probe_headers()], "int main()", "{"]
    for header in probe_headers():
        lines.append(f'    std::printf("header {header}\\n");')
        for item in load_headers()[header]:
            lines += _probe_item(item)
    return "\n".join([*lines, "    return 0;", "}"]) + "\n"


def usage_source(header: str) -> str:
    """A program that includes only ``header`` and uses its first enumerator, macro,
    constant, struct or union (a zero-initialised variable) and typedef."""
    items = load_headers()[header]
    body = []

    def first(kind: str) -> dict[str, Any] | None:
        return next((i for i in items if i["kind"] == kind and not i.get("scoped")
                     and (kind != "define" or (i["value"] and not i["params"]))), None)

    if (enum := first("enum")) is not None:
        body.append(f"    long long enumerator = (long long){enum['enumerators'][0]['name']};")
        body.append("    (void)enumerator;")
    if (define := first("define")) is not None:
        body.append(f"    long long macro = (long long)({define['name']});")
        body.append("    (void)macro;")
    if (const := first("const")) is not None:
        body.append(f"    long long constant = (long long){const['name']};")
        body.append("    (void)constant;")
    for kind in ("struct", "union"):
        if (aggregate := first(kind)) is not None:
            name = aggregate["typedef"] or aggregate["tag"]
            body += [f"    {name} a_{kind};", f"    memset(&a_{kind}, 0, sizeof a_{kind});"]
    if (typedef := first("typedef")) is not None and "(*" not in typedef["text"]:
        body.append(f"    {_typedef_name(typedef['text'])} *typedef_pointer = NULL;")
        body.append("    (void)typedef_pointer;")
    return "\n".join([f'#include "{header}"', "#include <string.h>", "int main(void)", "{",
                      *body, "    return 0;", "}"]) + "\n"


def is_cplusplus_only(header: str) -> bool:
    return header in cplusplus_only()
