"""The imports inside amnet/core point one way (docs/design.md §1, "Inside core").

Every import counts, also one inside a function (a late import that dodges a cycle at import
time is still a cycle in the design), except those under ``if TYPE_CHECKING:``.
"""

import ast
from pathlib import Path

import amnet.core

CORE = Path(amnet.core.__file__).resolve().parent
PKG = "amnet.core"


def _module_name(path: Path) -> str:
    return PKG if path.name == "__init__.py" else f"{PKG}.{path.stem}"


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node of ``tree``, skipping ``if TYPE_CHECKING:`` bodies
    (their ``else:`` branches still count)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _resolve(node: ast.ImportFrom, importer: str) -> str:
    """The absolute module an ImportFrom names (before its ``import`` part)."""
    if not node.level:
        return node.module or ""
    parts = importer.split(".")
    if importer != PKG:  # a module's package is its name less the last part
        parts = parts[:-1]
    base = parts[:len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """amnet.core module -> the amnet.core modules it imports."""
    modules = {_module_name(p): p for p in sorted(CORE.glob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    # C extensions (amnet.core._hot): leaves here, as they import no Python module of the core
    native = {f"{PKG}.{p.name.split('.')[0]}" for p in CORE.iterdir()
              if p.suffix in (".c", ".so", ".pyd")}
    known = modules.keys() | native
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = _resolve(node, mod)
                # ``from . import x``: x is a module when there is one of that name
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                           for a in node.names]
            graph[mod].update(t for t in targets if t in modules and t != mod)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        colour[m] = GREY
        path.append(m)
        for n in sorted(graph[m]):
            if colour[n] == GREY:
                return [*path[path.index(n):], n]
            if colour[n] == WHITE:
                found = visit(n)
                if found:
                    return found
        path.pop()
        colour[m] = BLACK
        return None

    for m in sorted(graph):
        if colour[m] == WHITE:
            found = visit(m)
            if found:
                return found
    return None


def test_the_graph_sees_the_core():
    graph = import_graph()
    assert "amnet.core._engine" in graph and "amnet.core.endpoint" in graph
    assert "amnet.core._wire" in graph["amnet.core._engine"]  # ``from . import _wire as W``
    assert any(graph.values())


def test_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_core_imports_have_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, ("amnet/core imports form a cycle (function-level imports count): "
                           + " -> ".join(m.removeprefix(PKG + ".") for m in cycle))
