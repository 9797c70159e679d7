"""The Python API: ``sparkcep.compile(text)`` → :class:`CompiledQuery`.

Example::

    >>> q = compile("PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 10")
    >>> print(next(line for line in q.explain().splitlines() if line.startswith("r3")))
    r3 := Partition[r2, keys=(id)]

``q.apply(df)`` runs the query on a batch or streaming DataFrame and returns the result DataFrame;
``q.job_source()`` is a standalone PySpark job doing the same from files.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sparkcep.compiler.analysis import ResolvedQuery, analyze
from sparkcep.compiler.ast import Query
from sparkcep.compiler.codegen.explain import explain_plan
from sparkcep.compiler.codegen.job import job_source
from sparkcep.compiler.codegen.sql import filter_sql
from sparkcep.compiler.optimizer import optimize
from sparkcep.compiler.optimizer.prune_columns import referenced_attributes
from sparkcep.compiler.plan.builder import build_plan
from sparkcep.compiler.plan.nodes import Node, operator_spec
from sparkcep.compiler.printer import format_query
from sparkcep.grammar import parse_query, parse_workload
from sparkcep.io import check_attributes, ts_kind_of

_view_ids = itertools.count()


@dataclass(frozen=True)
class CompiledQuery:
    """A parsed, checked query and the options it runs with.

    ``ts_unit`` is the unit of a numeric ``ts`` column (needed for ``WITHIN 10 seconds`` on numbers);
    ``ts_kind`` declares the kind of ``ts`` ("timestamp" or "numeric") where no schema tells it (explain,
    compile); ``lateness`` is the allowed lateness of streaming input, in ts units (milliseconds for
    timestamps).
    """

    query: Query
    source: str
    type_col: str = "type"
    ts_col: str = "ts"
    ts_unit: str | None = None
    ts_kind: str | None = None
    lateness: float = 0

    @property
    def name(self) -> str | None:
        return self.query.name

    def resolved(self, schema=None) -> ResolvedQuery:
        """The checked query against ``schema``'s ts kind, else the declared one (a ``ts_unit`` means numeric
        ts)."""
        ts_kind = ts_kind_of(schema, self.ts_col) or self.ts_kind or ("numeric" if self.ts_unit else None)
        return analyze(self.query, self.source, ts_kind=ts_kind, ts_unit=self.ts_unit)

    def plan(self, schema=None) -> Node:
        """The optimized logical plan (bound to ``schema`` if given: ts kind, default output columns)."""
        r = self.resolved(schema)
        attributes = tuple(schema.fieldNames()) if schema is not None else None
        return optimize(build_plan(r, type_col=self.type_col, ts_col=self.ts_col, attributes=attributes))

    def spec(self, schema=None):
        """The engine spec of the plan's sequence or trend operator (what the generated job bakes in)."""
        return operator_spec(self.plan(schema))

    def explain(self, schema=None) -> str:
        r = self.resolved(schema)
        if r.ts_kind == "timestamp" or (r.ts_kind is None and self.query.within.unit is not None):
            unit = "ms"
        else:
            unit = self.ts_unit or "ts units"
        head = f"-- {self.name or 'query'}: {r.mode} query, strategy {r.strategy}"
        return head + "\n" + explain_plan(self.plan(schema), unit)

    def sql(self, schema=None, table: str = "events") -> str:
        """The Spark SQL filter (event types, local predicates, ``_mask``)."""
        return filter_sql(self.plan(schema), table, schema.fieldNames() if schema is not None else None)

    def job_source(self, schema=None) -> str:
        """A standalone PySpark job running this query from files (see ``sparkcep compile``)."""
        r = self.resolved(schema)
        # without a schema: durations with units mean timestamp ts (ms), bare ones numeric ts
        ts_kind = r.ts_kind or ("timestamp" if self.query.within.unit is not None else "numeric")
        plan = self.plan(schema)
        return job_source(plan, query_text=format_query(self.query), explain=self.explain(schema),
                          ts_kind=ts_kind, name=self.name)

    def apply(self, df):
        """Run on a batch or streaming DataFrame with the type and ts columns and the attributes.

        Batch: ``groupBy(key).applyInPandas``.  Streaming: an event-time watermark on ``ts`` (allowed
        lateness ``self.lateness``; numeric ts run on a derived timestamp column where 1 unit is 1 ms) and
        ``groupBy(key).applyInPandasWithState`` with event-time timeouts; write the result in append mode
        with a checkpoint.
        """
        from sparkcep.runtime_udfs.spark_adapters import apply_match, engine_of, watermarked

        plan = self.plan(df.schema)
        spec = operator_spec(plan)
        engine_of(spec).check(spec)
        check_attributes(df.columns, referenced_attributes(plan))
        view = f"_sparkcep_events_{next(_view_ids)}"
        df.createOrReplaceTempView(view)
        candidates = df.sparkSession.sql(filter_sql(plan, view, df.schema.fieldNames(), pretty=False))
        if df.isStreaming:
            candidates = watermarked(candidates, self.ts_col, self.lateness)
        return apply_match(candidates, spec, ts_col=self.ts_col, type_col=self.type_col)


def compile(text: str, **options) -> CompiledQuery:  # noqa: A001 - the package's verb
    """Parse and check one query. Options: ``type_col``, ``ts_col``, ``ts_unit``, ``ts_kind``, ``lateness``."""
    q = CompiledQuery(parse_query(text), text, **options)
    q.resolved()  # check now: errors surface at compile time, with positions
    return q


def compile_workload(text: str, **options) -> list[CompiledQuery]:
    """Parse and check every query of a workload file (queries separated by ``;``)."""
    out = []
    for query in parse_workload(text).queries:
        q = CompiledQuery(query, text, **options)
        q.resolved()
        out.append(q)
    return out
