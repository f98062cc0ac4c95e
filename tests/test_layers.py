"""The package's layers, checked: data at the bottom, commands on top, no import upward, no cycle.

Every import in weightcheck/ (at module level or inside a function; not those under
``if TYPE_CHECKING:``, which never run) is an edge. A module may import its own layer or a lower
one; commands never import each other (only within one command's own package); the graph has no
cycle. The root ``weightcheck/__init__.py`` is the public facade and stays out of the layers.
"""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

PKG = pathlib.Path(__file__).resolve().parent.parent / "weightcheck"

# lowest first; a module's layer is that of the longest prefix listed
LAYERS = [
    (
        "base",
        [
            "weightcheck.errors",
            "weightcheck.record",
            "weightcheck.expr",
            "weightcheck.mappings",
            "weightcheck.schema",
            "weightcheck.terminal",
            "weightcheck.requests",
            "weightcheck.progress",
        ],
    ),
    ("storage", ["weightcheck.storage"]),
    ("sources", ["weightcheck.sources"]),
    ("model", ["weightcheck.model"]),
    ("engines", ["weightcheck.engines"]),
    # the trainers' initialization replayed (mappings/trainers/): read by the training gate
    ("trainers", ["weightcheck.trainers"]),
    ("rules", ["weightcheck.rules"]),
    ("eval", ["weightcheck.eval"]),  # the drafter's forward and the metric (torch inside)
    ("reports", ["weightcheck.reports"]),  # what the commands return
    ("commands", ["weightcheck.commands"]),
    (
        "interface",
        [
            "weightcheck.api",
            "weightcheck.output",
            "weightcheck.schemagen",
            "weightcheck.cli",
            "weightcheck.__main__",
        ],
    ),
]


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py")) if "_mappings" not in p.parts}


def layer_of(mod: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for pre in prefixes:
            if (mod == pre or mod.startswith(pre + ".")) and len(pre) > best:
                best, rank = len(pre), i
    if rank is None:
        raise AssertionError(f"{mod} is in no layer: add it to LAYERS")
    return rank


def _type_checking_block(node) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def imports_of(mod: str) -> set[str]:
    """The weightcheck modules ``mod`` imports (a ``from pkg import name`` that is a module counts
    as that module)."""
    tree = ast.parse(MODULES[mod].read_text())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking_block(node):
            skip.update(id(n) for n in ast.walk(node))
    out = set()
    is_pkg = MODULES[mod].name == "__init__.py"
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("weightcheck"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = mod.split(".") if is_pkg else mod.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            if not base.startswith("weightcheck"):
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in MODULES else base)
    out.discard(mod)
    return out


GRAPH = {m: imports_of(m) for m in MODULES if m != "weightcheck"}


@pytest.mark.parametrize("mod", sorted(GRAPH))
def test_no_import_upward(mod):
    mine = layer_of(mod)
    for dep in GRAPH[mod]:
        if dep == "weightcheck":  # the facade's __version__
            continue
        assert layer_of(dep) <= mine, (
            f"{mod} ({LAYERS[mine][0]}) imports {dep} ({LAYERS[layer_of(dep)][0]}), a higher layer"
        )


def test_commands_never_import_each_other():
    for mod, deps in GRAPH.items():
        if not mod.startswith("weightcheck.commands."):
            continue
        own = ".".join(mod.split(".")[:3])  # weightcheck.commands.<command>
        for dep in deps:
            if dep.startswith("weightcheck.commands.") and not dep.startswith(own):
                raise AssertionError(f"{mod} imports {dep}: commands share through lower layers")


def test_no_cycle():
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, ()):
            if w not in GRAPH:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not sccs, f"import cycles: {sccs}"


def test_the_checker_sees_imports():
    """The walk is not vacuous: known edges are found, including imports inside functions."""
    assert "weightcheck.rules.apply" in GRAPH["weightcheck.commands.check"]
    assert "weightcheck.commands.check" in GRAPH["weightcheck.api"]  # inside check()
    assert "weightcheck.sources.hub" in GRAPH["weightcheck.sources"]  # inside open_source()
    assert len(GRAPH) > 30


def test_every_package_says_its_job():
    """Each package's __init__ docstring names its job (the README's "Layout of the code")."""
    for p in sorted(PKG.rglob("__init__.py")):
        if "_mappings" in p.parts:
            continue
        doc = ast.get_docstring(ast.parse(p.read_text()))
        assert doc and len(doc.split()) >= 6, f"{p.relative_to(PKG.parent)} has no docstring"


def test_the_instrumentation_imports_the_standard_library_only():
    """engines/instrument.py is loaded by its path inside the engines' side venvs, where weightcheck
    is not installed (tests/engine/oracle_common.py): it may import no weightcheck module, nor
    anything outside the standard library."""
    tree = ast.parse(MODULES["weightcheck.engines.instrument"].read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add((node.module or "").split(".")[0])
    assert names - {"__future__"} <= set(sys.stdlib_module_names), names
