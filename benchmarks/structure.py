"""The package's structure in two numbers: import cycles, and modules reading ``HYDE_LC_*``.

* **Import cycles**: groups of hyde_lc modules that import each other in a circle,
  function-local imports included (grimp, the graph import-linter checks), each listed.
* **Readers of the environment**: modules whose code reads a ``HYDE_LC_*`` variable
  (``os.environ``, ``os.getenv``, ``environ.get``, or a helper named ``env_*`` given the
  variable's name; a name held by a module-level string constant counts too), or reads
  the environment by a name computed at run time (shown as ``?``: it may be any).

Runs on any checkout of the package: ``PYTHONPATH=/path/to/checkout`` measures that one.

    python benchmarks/structure.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp

import hyde_lc

PACKAGE = Path(hyde_lc.__file__).resolve().parent


def import_cycles() -> list[list[str]]:
    """Strongly connected groups of more than one hyde_lc module (Tarjan's algorithm)."""
    graph = grimp.build_graph("hyde_lc", cache_dir=None)
    modules = sorted(m for m in graph.modules if m.startswith("hyde_lc."))
    edges = {
        m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules} for m in modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in edges[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    return cycles


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def environment_readers() -> dict[str, list[str]]:
    """Module (relative path) -> the ``HYDE_LC_*`` variables its code reads itself."""
    readers: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        found: set[str] = set()
        for node in ast.walk(tree):
            key: ast.AST | None = None
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                environ = isinstance(func, ast.Attribute) and _is_environ(func.value)
                if environ or called == "getenv" or called.startswith("env_"):
                    key = node.args[0]
            elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                name = key.value
            elif isinstance(key, ast.Name):
                name = constants.get(key.id, "?")
            elif key is not None:
                name = "?"
            else:
                continue
            if name.startswith("HYDE_LC_") or name == "?":
                found.add(name)
        if found:
            readers[path.relative_to(PACKAGE).as_posix()] = sorted(found)
    return readers


def main() -> None:
    cycles = import_cycles()
    print(f"{len(cycles)} import cycles among hyde_lc modules (function-local imports included)")
    for group in cycles:
        print(f"  {len(group)} modules: {', '.join(group)}")
    readers = environment_readers()
    print(f"{len(readers)} modules read HYDE_LC_* variables")
    for module, names in readers.items():
        print(f"  {module}: {', '.join(names)}")


if __name__ == "__main__":
    main()
