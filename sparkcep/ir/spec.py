"""Engine specs: what the compiler hands an engine, baked into generated jobs as a JSON literal.

A spec is a frozen dataclass tree (see :mod:`sparkcep.ir.serde` for its JSON form).  Engines take
events as dicts with at least ``type``, ``ts`` (a number: epoch milliseconds for timestamp input, the raw
number otherwise) and ``_mask`` (bit k set ⇔ the event passed component k's type test and local predicates
in the Spark SQL filter; ``None`` means "not prefiltered, test it yourself").
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field, replace
from typing import ClassVar

from sparkcep.ir.ast import Attr, Expr, Func, has_strict_steps, has_until, walk
from sparkcep.ir.errors import CEPError
from sparkcep.ir.naming import default_column


@dataclass(frozen=True)
class Component:
    """One positive or negative event component of a flat sequence, in pattern order.

    ``local`` is the conjunction of predicates that read only this component (already pushed into the
    Spark SQL filter; the engine re-checks it only when an event arrives without a ``_mask``).
    """

    var: str
    types: tuple[str, ...]
    any_: bool = False
    kleene: str | None = None
    negated: bool = False
    local: Expr | None = None


@dataclass(frozen=True)
class OutputColumn:
    """One result column: its name and the expression that computes it from a match's binding."""

    name: str
    expr: Expr


@dataclass(frozen=True)
class MatchSpec:
    """A match query over a flat sequence of components (issue 2: single positive events).

    ``predicates`` are the parameterized predicates (conjuncts reading two or more components), checked
    during construction as soon as all their components are bound.  ``window`` is in ``ts`` units
    (milliseconds for timestamp input): a match holds iff ``last.ts - first.ts < window``.  ``pattern`` is
    the variable-named pattern AST (for explain and for engines of nested patterns).
    """

    components: tuple[Component, ...]
    predicates: tuple[Expr, ...]
    window: float
    outputs: tuple[OutputColumn, ...]
    strategy: str = "skip_till_any_match"
    key: tuple[str, ...] = ()
    pattern: object = None
    #: SASE++ collapsed output: one row per binding of the non-Kleene variables, with an array column of each
    #: Kleene variable's candidates instead of one row per subset (see :func:`collapsed_outputs`)
    collapsed: bool = False


@dataclass(frozen=True)
class Aggregate:
    """One trend aggregate (GRETA Theorem 9.1): ``func`` of ``var.attr``; ``var`` None is ``COUNT(*)``."""

    name: str
    func: str
    var: str | None = None
    attr: str | None = None


@dataclass(frozen=True)
class TrendSpec:
    """A trend-aggregate query: the (variable-named) pattern, its non-local predicates, sliding windows
    ``[k·slide, k·slide + window)`` and the aggregates; one output row per window and group (where
    ``having`` holds)."""

    pattern: object
    components: tuple[Component, ...]
    predicates: tuple[Expr, ...]
    window: float
    slide: float
    aggregates: tuple[Aggregate, ...]
    group_by: tuple[str, ...] = ()
    key: tuple[str, ...] = ()
    #: HAVING: a condition over the output row's columns (``Attr(None, column)``), applied to final rows (left
    #: out of the JSON while None: jobs of queries without it stay as they were)
    having: Expr | None = field(default=None, metadata={"omit_default": True})

#: The column of a timed-out partial match naming the variable of the last step it bound.
TIMEOUT_STEP = "timeout_step"


@dataclass(frozen=True)
class TimeoutSpec(MatchSpec):
    """The timed-out partial matches of a match query (:mod:`sparkcep.runtime_udfs.match.timeouts`): the
    query's :class:`MatchSpec` fields; each row is ``outputs`` over a partial binding plus :data:`TIMEOUT_STEP`."""

    @classmethod
    def of(cls, spec: MatchSpec) -> TimeoutSpec:
        """The timed-out partial matches of ``spec``'s query."""
        from dataclasses import fields

        return cls(**{f.name: getattr(spec, f.name) for f in fields(MatchSpec)})


def reads_every_event(spec) -> bool:
    """Must every event of a partition reach the engine, in input order (``_mask`` 0 for those that fill no
    component, numbered by ``_arrival``)?  Under a contiguity strategy, with a ``NEXT`` step (an event
    between the two steps breaks the link) and with a stop condition ``UNTIL`` (a stop event need not pass the
    loop's own predicates)."""
    pattern = getattr(spec, "pattern", None)
    return (getattr(spec, "strategy", None) in ("strict_contiguity", "partition_contiguity")
            or has_strict_steps(pattern) or has_until(pattern))


#: The last column of trend-aggregate results: true where an exact aggregate did not fit DECIMAL(38, 0).
OVERFLOW = "aggregate_overflow"

#: Columns the compiler adds to events; never returned as attributes.
INTERNAL_COLUMNS = ("_mask", "_event_time", "_sparkcep_all", "_seq")


def with_default_outputs(spec: MatchSpec, attributes) -> MatchSpec:
    """A match query without RETURN returns every attribute of every positive component, named
    ``<var>_<attr>`` (a Kleene variable's last event).  Its spec carries no outputs until the input's
    columns are known: this binds them (collapsed output: then collapses them, so a Kleene variable's
    candidates carry every attribute).  A spec that has outputs (or a trend spec) is returned unchanged."""
    if not isinstance(spec, MatchSpec) or spec.outputs:
        return spec
    cols = tuple(
        OutputColumn(default_column(c.var, a), Attr(c.var, a, "last" if c.kleene else None))
        for c in spec.components if not c.negated
        for a in attributes if a not in INTERNAL_COLUMNS)
    spec = replace(spec, outputs=cols)
    if spec.collapsed:
        spec = replace(spec, outputs=collapsed_outputs(spec))
    return spec


class SlotState:
    """Base of an engine's partition state whose ``__slots__`` are pickled under a version tag.

    Subclasses set ``VERSION`` (bump it when the slots change meaning) and ``ENGINE`` (named in the error a
    state of another version gets).  ``to_bytes`` is the state column Spark keeps in its checkpoints.
    """

    __slots__ = ()
    VERSION: ClassVar[int] = 1
    ENGINE: ClassVar[str] = "engine"

    def to_bytes(self) -> bytes:
        """The slots pickled under the version tag (an object referenced twice is stored once)."""
        return pickle.dumps((self.VERSION, *(getattr(self, s) for s in self.__slots__)),
                            protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes):
        """Inverse of :meth:`to_bytes`."""
        version, *values = pickle.loads(data)
        if version != cls.VERSION:
            raise CEPError(f"{cls.ENGINE} state version {version} is not supported (expected {cls.VERSION})")
        state = cls.__new__(cls)
        for name, value in zip(cls.__slots__, values, strict=True):
            setattr(state, name, value)
        return state

    def __reduce__(self):
        return (type(self).from_bytes, (self.to_bytes(),))


CANDIDATES = "candidates"

#: The function of a hidden result column, ``Func(NEWEST, (Attr(None, attr),))``: the newest (largest) value of
#: ``attr`` among the events a match binds (every variable's, a Kleene variable's each; None and NaN skipped; None
#: if none has one).  A stream's operator adds it to stamp each match, or timed-out partial match, with the
#: arrival of its own last event (``sparkcep.spark.operator.stamped_spec``).
NEWEST = "newest_of_binding"


def collapsed_outputs(spec: MatchSpec) -> tuple[OutputColumn, ...]:
    """The result columns of collapsed output (SASE++ §5.1's intermediate match ``M``).

    Every column over non-Kleene variables stays; the columns over a Kleene variable ``v`` become one column
    ``v``, the array of its candidate events, each a struct of ``ts`` and the attributes those columns read.
    A row stands for exactly the matches its candidates give: every non-empty subset, in ts order with
    strictly increasing ts, that satisfies the predicates (those on ``v[i-1]``, ``v[]``, ``v[v.len]``, ...)
    and negations.

        >>> from sparkcep.ir.ast import Attr, Func
        >>> outputs = (OutputColumn("a_ts", Attr("a", "ts")), OutputColumn("n", Func("count", (Attr("b", "x"),))))
        >>> spec = MatchSpec((Component("a", ("A",)), Component("b", ("B",), kleene="+")), (), 10, outputs)
        >>> [(o.name, [a.attr for a in o.expr.args] if isinstance(o.expr, Func) else o.expr.attr)
        ...  for o in collapsed_outputs(spec)]
        [('a_ts', 'ts'), ('b', ['ts', 'x'])]
    """
    kleene = [c.var for c in spec.components if c.kleene in ("+", "*") and not c.negated]
    keep, attrs = [], {v: ["ts"] for v in kleene}
    for o in spec.outputs:
        read = [n for n in walk(o.expr) if isinstance(n, Attr) and n.var in attrs]
        if not read:
            keep.append(o)
        for n in read:
            if n.attr not in attrs[n.var]:
                attrs[n.var].append(n.attr)
    names = {o.name for o in keep}
    for v in kleene:
        name = v if v not in names else f"{v}_candidates"
        keep.append(OutputColumn(name, Func(CANDIDATES, tuple(Attr(v, a) for a in attrs[v]))))
    return tuple(keep)
