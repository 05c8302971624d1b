"""Generate ``acl_mem/shim/surface.json``: every function the real ACL headers export.

The shim (acl_mem/shim) exports each of these with its exact prototype, so that users
need no headers: the surface is committed. It holds

- ``functions``: every declaration marked ``ACL_FUNC_VISIBILITY`` in ``acl/**/*.h``
  (return type, name, parameter list as written, header, library number 1 =
  libascendcl.so), then the DVPP memory functions the wheel's headers lack, with the
  prototypes of acl_mem/_native/cdef.py (2 = libacl_dvpp.so, 3 = libacl_dvpp_mpi.so);
- ``types``: for every type name the prototypes use, a declaration with the same ABI
  that needs no header (opaque structs stay incomplete, pointers become ``void *``,
  enums ``int``, function pointers ``void (*)(void)``); tests/test_shim_surface.py checks
  sizes and alignments against the real types;
- ``macros``: the constants the parameter lists use (array bounds).

It also writes ``acl_mem/shim/headers.json``: every header's declarations as data
(stubs/_header_items.py), from which acl_mem/shim/_headers.py writes the drop-in's
headers. Computing the enumerators' values takes a C++ compiler (``c++``).

    python stubs/gen_shim_surface.py [--headers DIR]          # rewrite the file
    python stubs/gen_shim_surface.py [--headers DIR] --check  # exit 1 if it is stale

DIR is the directory holding ``acl/acl_rt.h`` (default ``$ACL_MEM_HEADERS_DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from acl_mem.shim._decls import parse  # noqa: E402
from stubs._generated import write_or_check  # noqa: E402
from stubs._header_items import enumerator_values, header_items  # noqa: E402

OUTPUT = HERE.parent / "acl_mem" / "shim" / "surface.json"
HEADERS_OUTPUT = OUTPUT.with_name("headers.json")
SOURCE = "torch-npu 2.14.0 wheel, torch_npu/include/acl"
#: Functions of libacl_dvpp.so / libacl_dvpp_mpi.so that the wheel's headers lack.
EXTRA_HEADERS = {2: "acl/ops/acl_dvpp.h", 3: "acl/dvpp/hi_dvpp.h"}
#: The headers' export macros and the library each one's functions go to: profiling
#: (acl_prof.h) is libmsprofiler.so's, as in the toolkit.
VISIBILITY = {"ACL_FUNC_VISIBILITY": 1, "MSVP_PROF_API": 4}
#: Headers whose prototypes carry no export macro (they go to libascendcl.so).
PLAIN_PROTOTYPES = frozenset({"acl/acl_platform.h"})
_BUILTIN = frozenset([
    "void", "const", "char", "short", "int", "long", "float", "double", "signed", "unsigned",
    "bool", "_Bool", "size_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t",
    "uint16_t", "uint32_t", "uint64_t", "uintptr_t", "struct", "union", "enum"])


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _code(text: str) -> str:
    """The text without preprocessor lines (continued lines included)."""
    return re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)


def _statements(text: str, keyword: str) -> list[str]:
    """Every statement starting with ``keyword`` up to its ``;`` outside braces."""
    found = []
    for match in re.finditer(rf"\b{keyword}\b", text):
        depth, end = 0, match.start()
        while end < len(text):
            char = text[end]
            depth += 1 if char in "{(" else -1 if char in "})" else 0
            if char == ";" and depth == 0:
                break
            end += 1
        found.append(" ".join(text[match.start():end + 1].split()))
    return found


def _split_decl(decl: str) -> tuple[str, str, str]:
    match = re.fullmatch(r"(?P<ret>.*?[\s\*])(?P<name>\w+)\s*\((?P<params>.*)\)\s*;", decl)
    if match is None:
        raise ValueError(f"cannot parse declaration: {decl}")
    ret = re.sub(r"\s*\*", " *", match["ret"].strip()).replace("* *", "**")
    params = match["params"].strip()
    return ret, match["name"], params


def read_headers(headers: Path) -> tuple[list[dict[str, object]], str]:
    """``(functions, all header text without comments)`` of ``headers/acl``."""
    functions: list[dict[str, object]] = []
    texts = []
    for path in sorted((headers / "acl").rglob("*.h")):
        text = _strip_comments(path.read_text(errors="replace"))
        texts.append(text)
        header = path.relative_to(headers).as_posix()
        for macro, lib in VISIBILITY.items():
            for statement in _statements(_code(text), macro):
                if statement.startswith(f"{macro} ") and "(" in statement:
                    ret, name, params = _split_decl(statement[len(macro) + 1:])
                    functions.append({"name": name, "ret": ret, "params": params,
                                      "header": header, "lib": lib})
        if header in PLAIN_PROTOTYPES:
            for match in re.finditer(r"^[ \t]*(\w[\w \t\*]*?\bacl\w+\s*\([^;{}]*\)\s*;)",
                                     _code(text), re.M):
                ret, name, params = _split_decl(" ".join(match[1].split()))
                functions.append({"name": name, "ret": ret, "params": params,
                                  "header": header, "lib": 1})
    return functions, "\n".join(texts)


def _typedef_index(text: str) -> dict[str, str]:
    """Type name -> its ``typedef`` (or bare ``enum NAME {...}``) statement."""
    index: dict[str, str] = {}
    for statement in _statements(_code(text), "typedef"):
        pointer = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", statement)
        if pointer and not re.match(r"typedef (struct|union|enum)\b[^;]*\{", statement):
            index.setdefault(pointer[1], statement)
            continue
        name = re.search(r"(\w+)\s*(\[[^\]]*\]\s*)*;$", statement)
        if name:
            index.setdefault(name[1], statement)
    for tag in re.findall(r"(?<!typedef )\benum\s+(\w+)\s*\{", text):
        index.setdefault(tag, f"enum {tag} {{ }};")
    return index


class Lowering:
    """ABI-equal, header-free declarations of the prototypes' types, in dependency order."""

    def __init__(self, index: dict[str, str], defines: dict[str, str],
                 by_value: set[str]) -> None:
        self.index, self.defines, self.by_value = index, defines, by_value
        self.types: dict[str, str] = {}
        self.macros: dict[str, str] = {}

    def words(self, text: str) -> None:
        """Lower every type and record every macro that ``text`` names."""
        for word in re.findall(r"[A-Za-z_]\w*", text):
            if word in self.index:
                self.lower(word)
            elif word in self.defines:
                self.macros[word] = self.defines[word]

    def lower(self, name: str) -> None:
        if name not in self.types:
            lower(name, self)


def lower(name: str, how: Lowering) -> None:
    """Add to ``how.types`` a declaration of ``name`` with the real one's ABI."""
    out = how.types
    statement = how.index[name]
    body = re.sub(r"\s+", " ", statement)
    if re.search(rf"\(\s*\*\s*{name}\s*\)\s*\(", body) and "{" not in body:
        out[name] = f"typedef void (*{name})(void);"
    elif re.fullmatch(rf"typedef (struct|union) \w+ {name};", body):
        out[name] = body
    elif re.match(r"typedef (struct|union)\b", body) and "{" in body and name in how.by_value:
        # Passed by value: its fields decide how it is passed, so it is kept whole, its
        # field types lowered in turn.
        fields = body[body.index("{"):body.rindex("}") + 1]
        how.words(fields)
        kind = body.split()[1]
        out[name] = f"typedef {kind} acl_mem_shim_{name} {fields} {name};"
    elif re.match(r"typedef (struct|union)\b", body) and "{" in body:
        # Kept incomplete: the prototypes pass it by pointer only (a by-value use would
        # not compile, so the shim's own build checks this).
        out[name] = f"typedef struct acl_mem_shim_{name} {name};"
    elif body.startswith(("typedef enum", "enum ")):
        out[name] = f"typedef int {name};"
    elif re.fullmatch(rf"typedef [\w\s]*\*\s*{name};", body):
        out[name] = f"typedef void *{name};"
    else:
        words = re.fullmatch(rf"typedef ([\w\s]+?) {name};", body)
        if words is None:
            raise ValueError(f"no ABI lowering for {name}: {statement}")
        for word in words[1].split():
            if word not in _BUILTIN:
                how.lower(word)
        out[name] = body


def _by_value(functions: list[dict[str, object]]) -> set[str]:
    """Type names some prototype passes or returns by value (no ``*`` or ``[]``)."""
    found = set()
    for function in functions:
        for part in [str(function["ret"]), *str(function["params"]).split(",")]:
            if "*" not in part and "[" not in part:
                found.update(re.findall(r"[A-Za-z_]\w*", part))
    return found


def generate(headers: Path) -> str:
    functions, text = read_headers(headers)
    names = [str(f["name"]) for f in functions]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"declared twice: {duplicates}")
    from acl_mem._native.cdef import DVPP_FUNCTIONS, MPI_FUNCTIONS

    for lib, section in ((2, DVPP_FUNCTIONS), (3, MPI_FUNCTIONS)):
        for ret, name, params in parse(section)[1]:
            functions.append({"name": name, "ret": ret, "params": params,
                              "header": EXTRA_HEADERS[lib], "lib": lib})
    how = Lowering(_typedef_index(text), dict(re.findall(r"#define\s+(\w+)\s+(\S+)", text)),
                   _by_value(functions))
    for function in functions:
        if function["lib"] in (1, 4):
            how.words(f"{function['ret']} {function['params']}")
    types, macros = how.types, how.macros
    lines = ["{", f'  "source": {json.dumps(SOURCE)},',
             '  "generator": "stubs/gen_shim_surface.py",', '  "functions": [']
    lines += [f"    {json.dumps(f)}," for f in functions]
    lines[-1] = lines[-1].rstrip(",")
    lines += ["  ],", f'  "macros": {json.dumps(dict(sorted(macros.items())))},',
              '  "types": {']
    lines += [f"    {json.dumps(k)}: {json.dumps(v)}," for k, v in types.items()]
    lines[-1] = lines[-1].rstrip(",")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def generate_headers(headers: Path) -> str:
    """headers.json: each real header under ``acl/`` -> its items, one a line."""
    functions = {str(f["name"]) for f in read_headers(headers)[0]}
    found = {path.relative_to(headers).as_posix(): header_items(path, headers, functions)
             for path in sorted((headers / "acl").rglob("*.h"))}
    enumerator_values(found, headers)
    lines = ["{", f'  "source": {json.dumps(SOURCE)},',
             '  "generator": "stubs/gen_shim_surface.py",', '  "headers": {']
    for number, (path, items) in enumerate(found.items()):
        lines.append(f"    {json.dumps(path)}: [")
        lines += [f"      {json.dumps(item)}," for item in items]
        lines[-1] = lines[-1].rstrip(",")
        lines.append("    ]" + ("," if number < len(found) - 1 else ""))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--headers", default=os.environ.get("ACL_MEM_HEADERS_DIR"),
                        help="directory holding acl/acl_rt.h (default $ACL_MEM_HEADERS_DIR)")
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    args = parser.parse_args()
    if not args.headers or not (Path(args.headers) / "acl" / "acl_rt.h").is_file():
        print(f"no acl/acl_rt.h under {args.headers!r}: pass --headers", file=sys.stderr)
        return 2
    command = "python stubs/gen_shim_surface.py"
    return max(write_or_check(OUTPUT, generate(Path(args.headers)), check=args.check,
                              command=command),
               write_or_check(HEADERS_OUTPUT, generate_headers(Path(args.headers)),
                              check=args.check, command=command))


if __name__ == "__main__":
    sys.exit(main())
