"""The logical plan: immutable nodes that compare and hash by structure (ibis style).

A query plan is a chain ``Source → Filter → Project → Partition → (Sequence | Trend) → Output``; optimizer
rules rewrite it (``sparkcep.compiler.optimizer``) and backends translate it node by node
(``sparkcep.compiler.codegen``).  ``format_plan`` prints it as ``r0 := …`` lines in dependency order.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from sparkcep.ir.ast import Expr
from sparkcep.ir.spec import Component, MatchSpec, OutputColumn, TrendSpec


@dataclass(frozen=True)
class Source:
    """The input events: ``type_col``/``ts_col`` names; ``ts_kind`` is "timestamp", "numeric" or None."""

    type_col: str = "type"
    ts_col: str = "ts"
    ts_kind: str | None = None
    ts_unit: str | None = None


@dataclass(frozen=True)
class Filter:
    """Keep events that may fill some component: ``_mask`` bit k ⇔ type test and local predicates of
    component k hold (Spark SQL, built as a sqlglot tree).  ``residual`` predicates (constant conjuncts)
    apply to every event."""

    input: Node
    components: tuple[Component, ...]
    residual: tuple[Expr, ...] = ()


@dataclass(frozen=True)
class Project:
    """Keep only these columns (besides type, ts and the mask): the attributes the query reads; ``computed``
    adds hidden columns ``(name, event-local expression)`` that Spark computes per event before the shuffle
    (a one-event sub-expression of a cross-event predicate or RETURN item: any Spark SQL function works there),
    read by the engines like attributes."""

    input: Node
    columns: tuple[str, ...] | None
    computed: tuple[tuple[str, Expr], ...] = ()


@dataclass(frozen=True)
class Partition:
    """Shuffle by these attributes (equivalence tests, GROUP BY); ``fixed`` pins ``attr = value`` tests."""

    input: Node
    keys: tuple[str, ...]
    fixed: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class Window:
    """``WITHIN`` as a separate check over finished matches; the ``push_window`` rule moves it into the
    sequence operator (SASE §4.3: windows pushed into sequence construction)."""

    input: Node
    window: float


@dataclass(frozen=True)
class Sequence:
    """SASE sequence scan and construction over a partition's events: one row per match."""

    input: Node
    spec: MatchSpec


@dataclass(frozen=True)
class Trend:
    """GRETA trend aggregation over a partition's events: one row per window and group."""

    input: Node
    spec: TrendSpec


@dataclass(frozen=True)
class Output:
    """The result columns, named by RETURN aliases (or ``v_attr`` for match queries without RETURN)."""

    input: Node
    columns: tuple[OutputColumn, ...]


Node = Source | Filter | Project | Partition | Window | Sequence | Trend | Output


def children(node: Node) -> tuple[Node, ...]:
    return (node.input,) if hasattr(node, "input") else ()


def chain(node: Node) -> list[Node]:
    """The nodes from the source up to ``node``."""
    out = [node]
    while children(out[-1]):
        out.append(children(out[-1])[0])
    return out[::-1]


def find(node: Node, cls) -> Node | None:
    """The first node of class ``cls`` walking down from ``node``."""
    for n in reversed(chain(node)):
        if isinstance(n, cls):
            return n
    return None


def rebuild(node: Node, fn) -> Node:
    """Apply ``fn`` bottom-up: each node is rebuilt over its rewritten input, then passed to ``fn``."""
    if children(node):
        node = replace(node, input=rebuild(node.input, fn))
    return fn(node)


def operator_spec(plan: Node):
    """The MatchSpec/TrendSpec of the plan's sequence or trend operator."""
    node = plan
    while not isinstance(node, (Sequence, Trend)):
        node = node.input
    return node.spec


def node_fields(node: Node) -> list[tuple[str, object]]:
    return [(f.name, getattr(node, f.name)) for f in fields(node) if f.name != "input"]
