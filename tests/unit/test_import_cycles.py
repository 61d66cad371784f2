"""No import cycle between modules of src/memoryd or of bench/ (issue 25): a short walk over
every import statement, those inside functions included (a deferred import is still a
dependency; deferring one only hides a cycle from the interpreter)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules(top: Path, prefix: str) -> dict[str, Path]:
    """Dotted name -> file, for every .py under ``top`` (a package's __init__ is the package)."""
    found = {}
    for path in sorted(top.rglob("*.py")):
        parts = list(path.relative_to(top).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([prefix, *parts] if prefix else parts)] = path
    return found


def _imported(tree: ast.AST, module: str, is_package: bool, modules: dict[str, Path]) -> Iterator[str]:
    """Every module of the tree an import statement of ``tree`` names: ``import a.b`` gives
    a.b; ``from a import b`` gives a.b when that is a module, else a (b is a name in a).
    A package's own __init__ running first is not counted: every submodule would depend on
    its package, and a package re-exporting its modules' names would be a cycle."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                yield full if full in modules else base


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the same tree it imports."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for target in _imported(ast.parse(path.read_text()), name, path.name == "__init__.py", modules):
            # The longest name that is a module of the tree (``from a import name`` is a).
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                deps.add(target)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _explain(graph: dict[str, set[str]], loops: list[list[str]]) -> str:
    lines = []
    for loop in loops:
        members = set(loop)
        lines.append(" <-> ".join(loop))
        lines += [f"    {m} imports {', '.join(sorted(graph[m] & members))}" for m in loop]
    return "\n".join(lines)


def test_no_module_of_memoryd_imports_one_that_imports_it_back() -> None:
    graph = import_graph(_modules(ROOT / "src" / "memoryd", "memoryd"))
    assert len(graph) > 100  # the walk saw the package
    loops = cycles(graph)
    assert not loops, "import cycles in src/memoryd:\n" + _explain(graph, loops)


def test_no_bench_imports_one_that_imports_it_back() -> None:
    # The benches import each other by bare name (bench/ is on sys.path when one runs).
    graph = import_graph(_modules(ROOT / "bench", ""))
    assert "recall" in graph and "studies.recall_sweep" in graph
    loops = cycles(graph)
    assert not loops, "import cycles in bench/:\n" + _explain(graph, loops)


def test_the_walk_finds_a_cycle_through_a_deferred_import(tmp_path: Path) -> None:
    """The check itself: two modules importing each other, one of them inside a function."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import thing\n")
    (pkg / "b.py").write_text("def thing():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    graph = import_graph(_modules(pkg, "pkg"))
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
