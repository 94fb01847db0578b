"""Imports inside a package point one way: amnet/core (docs/design.md §1, "Inside core"),
shmem_rt (§11, "shmem_rt": its modules in shmem4py's order), amnet.aio, amnet.conduits,
upc_rt and amnet_bench; and between packages they point down the layers (§1): pshm and the
conduits import nothing of core, nothing below amnet.aio imports it, nothing imports
amnet_bench.

Every import counts, also one inside a function (a late import that dodges a cycle at import
time is still a cycle in the design), except those under ``if TYPE_CHECKING:``. Pure ast:
the checked files are parsed, not run (finding a package imports only its parents).
"""

import ast
import importlib.util
from pathlib import Path


def package_dir(pkg: str) -> Path:
    """Where package ``pkg`` (a dotted name) lives, found without importing it (a dotted
    name's parents are imported, as ``find_spec`` does)."""
    spec = importlib.util.find_spec(pkg)
    assert spec is not None and spec.submodule_search_locations, f"{pkg} is no package"
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _module_name(path: Path, pkg: str) -> str:
    return pkg if path.name == "__init__.py" else f"{pkg}.{path.stem}"


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


def _resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module an ImportFrom in ``importer`` names (before its ``import``
    part); ``is_package``: the importer is a package's ``__init__``."""
    if not node.level:
        return node.module or ""
    parts = importer.split(".")
    if not is_package:  # a module's package is its name less the last part
        parts = parts[:-1]
    base = parts[:len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(path: Path, pkg: str) -> dict[str, set[str]]:
    """Module of package ``pkg`` (its modules are the ``*.py`` files in ``path``) -> the
    modules of ``pkg`` it imports."""
    modules = {_module_name(p, pkg): p for p in sorted(path.glob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    # C extensions (amnet.core._hot): leaves here, as they import no Python module of pkg
    native = {f"{pkg}.{p.name.split('.')[0]}" for p in path.iterdir()
              if p.suffix in (".c", ".so", ".pyd")}
    known = modules.keys() | native
    for mod, file in modules.items():
        tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = _resolve(node, mod, file.name == "__init__.py")
                # ``from . import x``: x is a module when there is one of that name
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                           for a in node.names]
            graph[mod].update(t for t in targets if t in modules and t != mod)
    return graph


def package_graph(pkg: str) -> dict[str, set[str]]:
    return import_graph(package_dir(pkg), pkg)


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


def _no_cycle(pkg: str) -> None:
    cycle = find_cycle(package_graph(pkg))
    assert cycle is None, (f"{pkg}'s imports form a cycle (function-level imports count): "
                           + " -> ".join(m.removeprefix(pkg + ".") for m in cycle))


def test_the_graph_sees_the_core():
    graph = package_graph("amnet.core")
    assert "amnet.core._engine" in graph and "amnet.core.endpoint" in graph
    assert "amnet.core._wire" in graph["amnet.core._engine"]  # ``from . import _wire as W``
    assert any(graph.values())


def test_the_graph_sees_a_package_init_and_absolute_imports(tmp_path):
    (tmp_path / "__init__.py").write_text("from ._a import x\nfrom . import _b\n")
    (tmp_path / "_a.py").write_text("def f():\n    import pkg._b\n")
    (tmp_path / "_b.py").write_text("from typing import TYPE_CHECKING\n"
                                    "if TYPE_CHECKING:\n    from ._a import f\n"
                                    "from pkg import _c\n")
    (tmp_path / "_c.py").write_text("from ..other import y\n")
    assert import_graph(tmp_path, "pkg") == {"pkg": {"pkg._a", "pkg._b"},
                                             "pkg._a": {"pkg._b"}, "pkg._b": {"pkg._c"},
                                             "pkg._c": set()}


def test_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_core_imports_have_no_cycle():
    _no_cycle("amnet.core")


def test_shmem_rt_imports_have_no_cycle():
    _no_cycle("shmem_rt")


def test_aio_imports_have_no_cycle():
    _no_cycle("amnet.aio")


def test_upc_rt_imports_have_no_cycle():
    _no_cycle("upc_rt")


def test_conduits_imports_have_no_cycle():
    _no_cycle("amnet.conduits")


def test_amnet_bench_imports_have_no_cycle():
    _no_cycle("amnet_bench")


def imports_of(pkg: str) -> dict[str, set[str]]:
    """Every module of package ``pkg`` and its subpackages -> the absolute names it imports
    (``from . import x`` gives both the package and ``package.x``)."""
    root = package_dir(pkg)
    out: dict[str, set[str]] = {}
    for file in sorted(root.rglob("*.py")):
        rel = file.relative_to(root).with_suffix("")
        parts = [pkg, *rel.parts]
        is_package = parts[-1] == "__init__"
        mod = ".".join(parts[:-1] if is_package else parts)
        names: set[str] = set()
        for node in _imports(ast.parse(file.read_text(encoding="utf-8"), str(file))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            else:
                base = _resolve(node, mod, is_package)
                names.add(base)
                names.update(f"{base}.{a.name}" for a in node.names)
        out[mod] = names
    return out


def _importers(pkgs: list[str], of: str) -> list[str]:
    """``module imports name`` for each module of ``pkgs`` importing ``of`` or below it."""
    return [f"{mod} imports {name}" for pkg in pkgs for mod, names in imports_of(pkg).items()
            for name in sorted(names) if name == of or name.startswith(of + ".")]


def test_imports_of_resolves_relative_imports(tmp_path, monkeypatch):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("from .. import core\n")
    (tmp_path / "pkg" / "sub" / "_m.py").write_text("def f():\n    from ..core._x import y\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _importers(["pkg"], "pkg.core") == ["pkg.sub imports pkg.core",
                                                "pkg.sub._m imports pkg.core._x",
                                                "pkg.sub._m imports pkg.core._x.y"]


def test_pshm_and_the_conduits_import_nothing_of_core():
    assert _importers(["amnet.pshm", "amnet.conduits"], "amnet.core") == []


def test_nothing_below_aio_imports_it():
    """The core and the layers know no event loop: a handle's await asks the one hook
    (``Port.awaitable``) that amnet.aio sets."""
    below = ["amnet.core", "amnet.conduits", "amnet.pshm", "amnet.coll", "amnet.vis",
             "amnet.nbcomm", "upc_rt", "shmem_rt"]
    assert _importers(below, "amnet.aio") == []


def test_nothing_imports_amnet_bench():
    assert _importers(["amnet", "upc_rt", "shmem_rt"], "amnet_bench") == []


# shmem_rt's modules from the bottom up: first what the layers share (the heap, ``rc``, the
# per-thread context, the PE's state), then the layers in shmem4py's order (the sections of
# its shmem.py: init and threads, contexts and teams, memory, RMA, atomics, signals,
# collectives, synchronisation and ordering, locks), then the package
SHMEM_ORDER = ["_heap", "_rc", "_context", "_state",
               "_init", "_team", "_memory", "_rma", "_amo", "_signal", "_coll", "_sync",
               "_locks",
               ""]


def test_shmem_rt_modules_stand_in_shmem4py_order():
    graph = package_graph("shmem_rt")
    order = [f"shmem_rt.{m}" if m else "shmem_rt" for m in SHMEM_ORDER]
    assert sorted(graph) == sorted(order), "a module of shmem_rt missing from SHMEM_ORDER"
    for i, mod in enumerate(order):
        later = sorted(graph[mod] - set(order[:i]))
        assert not later, f"{mod} imports {later}, which stand above it in SHMEM_ORDER"

