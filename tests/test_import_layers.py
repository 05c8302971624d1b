"""The package's modules import one another one way: no module imports, at run time
(at its top or inside a function), one that imports it back, directly or through
others. Imports under ``if TYPE_CHECKING:`` are for annotations only and are left out.
The README's "How acl_mem is built" names the layers this keeps apart."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "acl_mem"


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, known: set[str], package_root: Path = PACKAGE) -> set[str]:
    """The acl_mem modules ``path`` imports when it runs (package __init__ files that a
    submodule's import runs anyway are not edges)."""
    here = _module_name(path, package_root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()

    def add(name: str) -> None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != here and not here.startswith(name + "."):
            found.add(name)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.rsplit(".", child.level - 1)[0] if child.level > 1 \
                        else package
                    module = f"{base}.{child.module}" if child.module else base
                else:
                    module = child.module or ""
                if module.startswith("acl_mem"):
                    add(module)
                    for alias in child.names:  # `from . import raw`: a submodule
                        if f"{module}.{alias.name}" in known:
                            add(f"{module}.{alias.name}")
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("acl_mem"):
                        add(alias.name)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for other in graph[node]:
            if other not in order:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], order[other])
        if low[node] == order[node]:
            part = []
            while True:
                taken = stack.pop()
                part.append(taken)
                if taken == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in order:
            strong(node)
    return found


def _graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    known = {_module_name(path) for path in paths}
    return {_module_name(path): _runtime_imports(path, known) for path in paths}


def test_no_module_imports_one_that_imports_it_back():
    assert _cycles(_graph()) == []


def test_the_pythonic_objects_import_downwards_only():
    """Device makes buffers, arrays, streams and contexts; none of those imports it (a
    Device is made from a user's id through acl_mem._context)."""
    graph = _graph()
    for lower in ("acl_mem.buffers", "acl_mem.arrays", "acl_mem.stream", "acl_mem.events",
                  "acl_mem._context"):
        assert "acl_mem.device" not in graph[lower], lower
    assert {"acl_mem.buffers", "acl_mem.arrays", "acl_mem.stream",
            "acl_mem.events"} <= graph["acl_mem.device"]


def test_the_check_sees_a_function_level_import(tmp_path):
    """The graph counts an import inside a function, and leaves one under
    TYPE_CHECKING out."""
    known = {"acl_mem.a", "acl_mem.b", "acl_mem.c"}
    source = tmp_path / "acl_mem" / "a.py"
    source.parent.mkdir()
    source.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from . import c\n"
                      "def f():\n    from .b import thing\n")
    assert _runtime_imports(source, known, tmp_path / "acl_mem") == {"acl_mem.b"}
    assert _cycles({"x": {"y"}, "y": {"x"}, "z": set()}) == [["x", "y"]]
