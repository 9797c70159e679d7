"""The package's layers import downwards only, and no module imports itself back through others.

Bottom to top (docs/architecture.md): ``ir`` (AST, engine specs, errors, serde), ``grammar``, ``compiler``;
``runtime_udfs`` (the pure engines) and ``oracles`` (the reference semantics) beside the compiler, over ``ir``;
``spark`` (the thin Spark layer) over the engines; the face (``api``, ``cli``, ``magic``, ``notebook``, ``demo``)
over everything.  Only ``spark`` and the face import pyspark.  Every import counts, function-local ones too;
an import under ``if TYPE_CHECKING:`` (annotations only, never run) counts for the directions, not for cycles.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent / "sparkcep"

#: layer -> the layers of sparkcep it may import (besides itself)
ALLOWED = {
    "ir": set(),
    "grammar": {"ir"},
    "compiler": {"ir", "grammar"},
    "runtime_udfs": {"ir"},
    "oracles": {"ir", "runtime_udfs"},
    "spark": {"ir", "runtime_udfs"},
    "face": {"ir", "grammar", "compiler", "runtime_udfs", "oracles", "spark", "face"},
}
#: layers that may import pyspark
PYSPARK = {"spark", "face"}


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] not in ALLOWED:
        return "face"  # sparkcep, sparkcep.api, sparkcep.cli, ...
    return parts[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(module: str, source: str, is_package: bool, known: set[str]) -> list[tuple[int, str, bool]]:
    """(line, imported module, only for type checking) for every import in ``source``, function-local ones
    included; ``from p import m`` names the submodule ``p.m`` when that is one of the ``known`` modules."""
    tree = ast.parse(source)
    typing_only = {id(n) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                   for stmt in block.body for n in ast.walk(stmt)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, id(node) in typing_only) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((node.lineno, sub if sub in known else target, id(node) in typing_only))
    return out


def violations(sources: dict[str, str], packages: frozenset[str] = frozenset()) -> list[str]:
    """Every forbidden import among ``sources`` (module name -> source), and every import cycle."""
    found = []
    graph = nx.DiGraph()
    for module, source in sources.items():
        graph.add_node(module)
        mine = layer(module)
        for line, target, typing_only in imports(module, source, module in packages, set(sources)):
            top = target.split(".")[0]
            if top == "pyspark" and mine not in PYSPARK:
                found.append(f"{module}:{line} imports {target}: {mine} must not import pyspark")
            if top != "sparkcep":
                continue
            theirs = layer(target)
            if theirs != mine and theirs not in ALLOWED[mine]:
                found.append(f"{module}:{line} imports {target}: {mine} must not import {theirs}")
            if target != module and target in sources and not typing_only:  # not run: no cycle at import
                graph.add_edge(module, target)
    for cycle in nx.simple_cycles(graph):
        found.append("import cycle: " + " -> ".join(cycle + cycle[:1]))
    return found


def package_sources() -> tuple[dict[str, str], frozenset[str]]:
    sources, packages = {}, set()
    for path in sorted(ROOT.rglob("*.py")):
        name = module_name(path)
        sources[name] = path.read_text(encoding="utf-8")
        if path.name == "__init__.py":
            packages.add(name)
    return sources, frozenset(packages)


def test_the_package_imports_downwards_only_and_without_cycles():
    sources, packages = package_sources()
    assert violations(sources, packages) == []


@pytest.mark.parametrize(("module", "line", "expected"), [
    ("sparkcep.compiler.codegen.explain", "from sparkcep.runtime_udfs.match import engine",
     "compiler must not import runtime_udfs"),
    ("sparkcep.compiler.plan.nodes", "    from sparkcep.spark.adapters import load_spec",  # function-local
     "compiler must not import spark"),
    ("sparkcep.runtime_udfs.match.engine", "import pyspark.sql", "runtime_udfs must not import pyspark"),
    ("sparkcep.runtime_udfs.trend.engine", "from sparkcep.compiler.plan.nodes import Node",
     "runtime_udfs must not import compiler"),
    ("sparkcep.runtime_udfs.shared.engine", "from sparkcep.spark import operator",
     "runtime_udfs must not import spark"),
    ("sparkcep.ir.spec", "from sparkcep.runtime_udfs.expr.scalar import compile_expr",
     "ir must not import runtime_udfs"),
    ("sparkcep.ir.ast", "from sparkcep.grammar import parse_query", "ir must not import grammar"),
    ("sparkcep.spark.io", "from sparkcep.compiler.codegen.sql import filter_sql", "spark must not import compiler"),
    ("sparkcep.spark.sinks", "from sparkcep.api import compile", "spark must not import face"),
    ("sparkcep.runtime_udfs.match.runs", "from ..match import engine",  # relative: the package's engine
     None),
])
def test_a_forbidden_import_is_reported(module, line, expected):
    """The checker on the package's own sources with one import added: a forbidden direction is reported."""
    sources, packages = package_sources()
    if line.startswith(" "):
        sources[module] += f"\n\ndef _injected():\n{line}\n"
    else:
        sources[module] += f"\n{line}\n"
    found = violations(sources, packages)
    if expected is None:  # runs -> engine closes a cycle (engine imports runs)
        assert any(v.startswith("import cycle:") and "sparkcep.runtime_udfs.match.runs" in v for v in found), found
    else:
        assert any(module in v and expected in v for v in found), found


def test_an_import_cycle_is_reported():
    sources = {"sparkcep.ir.a": "from sparkcep.ir.b import x\n",
               "sparkcep.ir.b": "def f():\n    from sparkcep.ir import a\n"}  # a function-local import counts
    assert [v.replace("sparkcep.ir.", "") for v in violations(sources)] in (
        ["import cycle: a -> b -> a"], ["import cycle: b -> a -> b"])
