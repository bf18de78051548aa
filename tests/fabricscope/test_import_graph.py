"""The project's modules import each other without cycles, and each room imports only the rooms
docs/ARCHITECTURE.md allows.

The graph is read with :mod:`ast` from the source (nothing is imported): an edge A -> B for
every import statement of A, at module level (also inside a top-level ``try``/``if``) and
inside functions alike, but not under ``if TYPE_CHECKING``: an import deferred into a function
still ties the two modules together, so it may not close a cycle either. ``from pkg import
name`` points at ``pkg.name`` when that is a module, else at ``pkg``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO

ROOMS = ("schemas", "producers", "diagnose", "streams", "sinks", "fabricscope", "bench", "infra")


def module_files(repo: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under the rooms."""
    out = {}
    for room in ROOMS:
        for p in sorted((repo / room).rglob("*.py")):
            parts = list(p.relative_to(repo).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


def _load_time_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            test = node.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
            ):
                yield from _load_time_imports(node.orelse)
                continue
            yield from _load_time_imports(node.body)
            yield from _load_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _load_time_imports(block)
        elif isinstance(node, ast.With):
            yield from _load_time_imports(node.body)


def _all_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of the module, in functions too, except those under ``if TYPE_CHECKING``."""
    typing_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
        ):
            typing_only |= {id(n) for b in node.body for n in ast.walk(b)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in typing_only:
            yield node


def import_graph(sources: dict[str, str], packages: frozenset[str] = frozenset(),
                 in_functions: bool = True) -> dict[str, set[str]]:
    """Edges between the modules of ``sources`` (dotted name -> source text).

    ``packages`` names the modules that are packages (``__init__.py``), for relative imports;
    ``in_functions`` counts imports inside functions too (else only those run at load time).
    """
    graph: dict[str, set[str]] = {m: set() for m in sources}
    for mod, text in sources.items():
        tree = ast.parse(text)
        for node in (_all_imports(tree) if in_functions else _load_time_imports(tree.body)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:  # from . import x: relative to the package holding ``mod``
                    anchor = mod.split(".") if mod in packages else mod.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names]
            for t in targets:
                while t and t not in sources:  # `import a.b.c` of a non-module name: its nearest module
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None when the graph is acyclic (iterative DFS)."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    for root in sorted(graph):
        if state.get(root):
            continue
        stack = [(root, iter(sorted(graph[root])))]
        path = [root]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
                path.append(nxt)
    return None


def test_cycle_finder_on_hand_made_graphs():
    acyclic = {"a": {"b", "c"}, "b": {"c"}, "c": set()}
    assert find_cycle(acyclic) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    src = {
        "p": "from p import q\n",  # a package importing its own submodule: p -> p.q
        "p.q": "import p.r\n",
        "p.r": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.q\ndef f():\n    import p.q\n",
    }
    g = import_graph(src, in_functions=False)
    assert g == {"p": {"p.q"}, "p.q": {"p.r"}, "p.r": set()}
    # the import inside f() closes a cycle p.q -> p.r -> p.q; the TYPE_CHECKING one alone would not
    assert find_cycle(import_graph(src)) == ["p.q", "p.r", "p.q"]
    src["p.r"] = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.q\n"
    assert find_cycle(import_graph(src)) is None
    src["p.r"] = "try:\n    from p.q import thing\nexcept ImportError:\n    pass\n"
    assert find_cycle(import_graph(src)) == ["p.q", "p.r", "p.q"]
    src["p.r"] = "from . import q\n"  # relative: p.r -> p.q
    assert import_graph(src, frozenset({"p"}))["p.r"] == {"p.q"}


def test_project_has_no_import_cycle_counting_imports_in_functions():
    files = module_files()
    assert {"streams.runtime.app", "schemas.inventory", "producers.sim.engine", "diagnose.registry"} <= set(files)
    packages = frozenset(m for m, p in files.items() if p.name == "__init__.py")
    graph = import_graph({m: p.read_text() for m, p in files.items()}, packages)
    cycle = find_cycle(graph)
    if cycle:
        pytest.fail("import cycle: " + " -> ".join(cycle) + "; move the shared part to a module both may import")


# Which rooms each room may import (any import, also inside functions); docs/ARCHITECTURE.md says why.
STREAMS = {"streams.pingmesh", "streams.hostping", "streams.runtime"}
MAY_IMPORT: dict[str, set[str]] = {
    "schemas": set(),
    "producers": {"schemas"},
    "diagnose": {"schemas", "producers"},
    "streams.pingmesh": {"schemas"},
    "streams.hostping": {"schemas"},
    "streams.runtime": {"schemas", "streams.pingmesh", "streams.hostping"},
    "sinks": {"schemas"},
    "infra": {"schemas", "producers"},
    "fabricscope": {"schemas", "producers", "diagnose", *STREAMS, "sinks", "infra", "bench"},
    "bench": {"schemas", "producers", "diagnose", *STREAMS, "sinks", "infra", "fabricscope"},
}


def room(module: str) -> str:
    """``schemas.probe_rows.decompose`` -> ``streams.pingmesh``; ``producers.sim.engine`` -> ``producers``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "streams" and len(parts) > 1 else parts[0]


def test_rooms_import_only_what_they_may():
    files = module_files()
    wrong = []
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for name in names:
                if name.split(".")[0] not in ROOMS or room(name) == room(mod) or name == "streams":
                    continue
                if room(name) not in MAY_IMPORT[room(mod)]:
                    wrong.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert not wrong, "imports across rooms that docs/ARCHITECTURE.md does not allow:\n" + "\n".join(wrong)
