"""The engine spec of a checked ``MATCH_RECOGNIZE``: :func:`build_spec`.

Columns are matched to the input's case-insensitively (as Spark does) and written in the input's spelling in
the spec.  The engine receives per row: the partition and ORDER BY columns, the columns DEFINE and MEASURES
read, the RowExpr columns (for ALL ROWS PER MATCH every input column), then the hidden event time ``__ts``.

Output columns (the standard's order): ONE ROW PER MATCH: the partition columns, then the measures. ALL ROWS
PER MATCH: the partition columns, the ORDER BY columns, the measures, then the other input columns in input
order (never ``__ts`` nor the RowExpr columns).  A measure named like another output column is refused.

WITHIN is converted to the units of ``__ts``: epoch microseconds for a TIMESTAMP (or DATE) time column; for a
numeric one the column's own units: a bare number as is, an INTERVAL through ``ts_unit`` (``"ms"``, ``"s"``,
... as for the pattern language's numeric timestamps), refused without one.
"""

from __future__ import annotations

import re
from dataclasses import replace

from sparkcep.compiler.recognize.analysis import find_span, pattern_variables, walk
from sparkcep.compiler.recognize.types import INTEGRAL, check_engine_types, expr_type, is_numeric
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import TS_UNITS_NS, Attr, Func, map_nodes
from sparkcep.ir.errors import CEPSemanticError, Span
from sparkcep.ir.limits import deeply

__all__ = ["build_spec", "TIME_TYPES"]

#: Time column types whose ``__ts`` is epoch microseconds.
TIME_TYPES = ("timestamp", "timestamp_ntz", "date")
TS = "__ts"
#: The functions whose value Spark widens to the common type of their values (``if``: of its second and third)
WIDENED = ("coalesce", "if", "greatest", "least")


class _Builder:
    def __init__(self, q: rx.Recognize, schema: dict[str, str], ts_unit: str | None):
        self.q, self.schema, self.ts_unit, self.text = q, dict(schema), ts_unit, q.text
        self.schema.pop(TS, None)
        self.lower = {name.lower(): name for name in self.schema}

    def fail(self, message: str, span: Span | None):
        raise CEPSemanticError(message, span, self.text)

    def column(self, name: str, span: Span | None) -> str:
        found = self.lower.get(name.lower())
        if found is None:
            shown = ", ".join(c for c in self.schema if not c.startswith("__rx")) or "none"
            self.fail(f"unknown column {name} (the input has: {shown})", span or self.q.span)
        return found

    def resolve(self, e: object) -> object:
        def fix(node):
            if isinstance(node, Attr):
                return replace(node, attr=self.column(node.attr, node.span))
            if isinstance(node, rx.RowExpr) and node.column not in self.schema:
                self.fail(f"no type given for the per-row column {node.column} ({node.sql})", node.span)
            return node

        return map_nodes(e, fix)

    def widened(self, e: object) -> object:
        """``e`` with each ``coalesce``, ``if``, ``greatest`` and ``least`` whose Spark type is DOUBLE while one
        of its values is an integer wrapped in ``double(...)``: Spark widens every value to the common type
        first (``coalesce(A.x, B.d) * 4611686018427387904`` over a BIGINT ``x`` is a DOUBLE product, not a
        BIGINT overflow), and so do the evaluators (:mod:`sparkcep.ir.kinds`' rule for the pattern language)."""
        def fix(node):
            if isinstance(node, Func) and node.name in WIDENED:
                values = node.args[1:] if node.name == "if" else node.args
                if (expr_type(node, self.schema, self.text) == "double"
                        and any(expr_type(v, self.schema, self.text) in INTEGRAL for v in values)):
                    return Func("double", (node,), span=node.span)
            return node

        return map_nodes(e, fix)

    def build(self) -> rx.RecognizeSpec:
        q = self.q
        if not q.order_by:
            self.fail("ORDER BY is required in MATCH_RECOGNIZE: its first column is the event time", q.span)
        computed = self.computed_windows()
        partition = tuple(self.column(c, find_span(self.text, rf"(?<![\w`]){re.escape(c)}(?![\w`])", r"PARTITION\s+BY")
                                      or q.span) for c in q.partition_by)
        order = tuple(replace(o, column=self.column(o.column, o.span)) for o in q.order_by)
        defines = tuple((v, self.widened(self.resolve(c))) for v, c in q.defines)
        measures = tuple(replace(m, expr=self.widened(self.resolve(m.expr))) for m in q.measures)
        for e in [c for _, c in defines] + [m.expr for m in measures]:
            check_engine_types(e, self.schema, self.text)
        time_type = self.schema[order[0].column]
        if time_type not in TIME_TYPES and not is_numeric(time_type):
            self.fail(f"the first ORDER BY column is the event time: {order[0].column} is a {time_type}, not a "
                      "TIMESTAMP, DATE or number", order[0].span)
        referenced: set[str] = set()
        row_columns: list[str] = []
        for e in [c for _, c in defines] + [m.expr for m in measures]:
            for node in walk(e):
                if isinstance(node, Attr):
                    referenced.add(node.attr)
                elif isinstance(node, rx.RowExpr):
                    referenced.add(node.column)
                    if node.column not in row_columns:
                        row_columns.append(node.column)
        all_rows = q.rows_per_match != rx.ONE_ROW
        lead = list(dict.fromkeys([*partition, *(o.column for o in order)]))
        own = {w.name for w in computed}  # counted by the engine, not input columns
        referenced |= {w.type_column for w in computed}
        referenced |= {n.attr for w in computed for n in walk(w.condition) if isinstance(n, Attr)}
        referenced |= {c for w in computed for pair in w.pairs for c in pair}
        rest = [c for c in self.schema if c not in lead and c not in own and (all_rows or c in referenced)]
        columns = tuple(dict.fromkeys([*lead, *rest, TS]))
        types = {m.name: expr_type(m.expr, self.schema, self.text) for m in measures}
        hidden = set(row_columns) | own | {c for c in self.schema if c.startswith("__rx")}
        if all_rows:
            head = list(dict.fromkeys([*partition, *(o.column for o in order)]))
            tail = [c for c in self.schema if c not in head and c not in hidden]
            taken = {c.lower(): c for c in [*head, *tail]}
            for m in measures:
                if m.name.lower() in taken:
                    self.fail(f"the measure {m.name} has the name of the input column {taken[m.name.lower()]}, which "
                              "ALL ROWS PER MATCH outputs too", m.span)
            output = [*head, *(m.name for m in measures), *tail]
        else:
            for m in measures:
                if m.name.lower() in {c.lower() for c in partition}:
                    self.fail(f"the measure {m.name} has the name of a partition column", m.span)
            output = [*partition, *(m.name for m in measures)]
        output_types = tuple(types[c] if c in types else self.schema[c] for c in output)
        return rx.RecognizeSpec(
            pattern=q.pattern,
            variables=pattern_variables(q.pattern),
            defines=defines,
            subsets=q.subsets,
            measures=measures,
            rows_per_match=q.rows_per_match,
            skip=q.skip,
            partition_by=partition,
            order_by=order,
            columns=columns,
            output=tuple(output),
            output_types=output_types,
            time_column=TS,
            within=self.within(time_type),
            windows=computed,
        )

    def computed_windows(self) -> tuple[rx.WindowCount, ...]:
        """The statement's window counts the input lacks (a stream's): the engine counts them, DEFINEs read them
        as BIGINT columns."""
        computed = tuple(replace(w, type_column=self.column(w.type_column, self.q.span),
                                 condition=None if w.condition is None else self.widened(self.resolve(w.condition)),
                                 pairs=tuple((self.column(a, self.q.span), self.column(b, self.q.span))
                                             for a, b in w.pairs))
                         for w in self.q.windows if w.name.lower() not in self.lower)
        if computed and self.q.within is None:
            self.fail("window counts need WITHIN", self.q.span)
        for w in computed:  # a count, or (pairs) the ts of the nearest such row
            self.schema[w.name] = self.schema[self.column(self.q.order_by[0].column, None)] if w.pairs else "bigint"
            self.lower[w.name.lower()] = w.name
        return computed

    def within(self, time_type: str) -> float | None:
        w = self.q.within
        if w is None:
            return None
        if time_type in TIME_TYPES:
            if w.unit is None:
                self.fail(f"WITHIN needs an INTERVAL for a {time_type.upper()} time column, e.g. INTERVAL '10' SECOND",
                          w.span)
            return w.in_ms() * 1000
        if w.unit is None:
            return w.value
        if self.ts_unit is None:
            self.fail("WITHIN INTERVAL over a numeric time column needs its unit (ts_unit, --ts-unit), or write "
                      "WITHIN with a number in the column's own units", w.span)
        if self.ts_unit not in TS_UNITS_NS:
            self.fail(f"unknown ts_unit {self.ts_unit!r}: one of {', '.join(TS_UNITS_NS)}", w.span)
        return w.in_ms() * 1_000_000 / TS_UNITS_NS[self.ts_unit]


@deeply
def build_spec(q: rx.Recognize, schema: dict[str, str], *, ts_unit: str | None = None) -> rx.RecognizeSpec:
    """The engine spec of ``q`` over input columns ``schema`` (name -> Spark ``simpleString``, in input order,
    the RowExpr columns included, ``__ts`` not needed); :class:`CEPSemanticError` for an unknown column, a
    type without a meaning here, a clashing measure name or a WITHIN without units."""
    return _Builder(q, schema, ts_unit).build()
