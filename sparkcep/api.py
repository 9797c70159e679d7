"""The Python API: ``sparkcep.compile(text)`` → :class:`CompiledQuery`.

Example::

    >>> q = compile("PATTERN SEQ(A a, B b) WHERE [id] AND a.x < b.x WITHIN 10")
    >>> print(next(line for line in q.explain().splitlines() if line.startswith("r3")))
    r3 := Partition[r2, keys=(id)]

``q.apply(df)`` runs the query on a batch or streaming DataFrame and returns the result DataFrame;
``q.job_source()`` is a standalone PySpark job doing the same from files.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from dataclasses import dataclass, field, replace
from typing import Any

from sparkcep import preflight
from sparkcep.compiler.analysis import ResolvedQuery, analyze
from sparkcep.compiler.codegen.explain import explain_plan
from sparkcep.compiler.codegen.job import job_source
from sparkcep.compiler.codegen.sql import filter_sql
from sparkcep.compiler.optimizer import optimize
from sparkcep.compiler.optimizer.prune_columns import referenced_attributes
from sparkcep.compiler.plan.bind import bind
from sparkcep.compiler.plan.builder import build_plan
from sparkcep.compiler.plan.nodes import Node, Project, chain, operator_spec
from sparkcep.grammar import parse_query, parse_workload
from sparkcep.grammar.parser import without_bom
from sparkcep.ir.ast import Query
from sparkcep.ir.errors import CEPError
from sparkcep.ir.limits import deeply
from sparkcep.ir.needs import attribute_needs
from sparkcep.ir.printer import format_query
from sparkcep.ir.spec import reads_every_event
from sparkcep.runtime_udfs.describe import describe
from sparkcep.spark.io import ts_kind_of

_view_ids = itertools.count()
#: the temp view of each input DataFrame, made once (DataFrames are immutable): a view is a round trip to the JVM
_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

#: the end of the message for an attribute a streaming DataFrame lacks
STREAM_SCHEMA_HINT = ("; a stream whose first files lack an attribute needs an explicit schema "
                      "(spark.readStream.schema(...))")


def _view_of(df) -> str:
    """The name of a temp view of ``df`` in its session, created on first use."""
    view = _views.get(df)
    if view is None:
        view = f"_sparkcep_events_{next(_view_ids)}"
        df.createOrReplaceTempView(view)
        _views[df] = view
    return view


@dataclass(frozen=True)
class CompiledQuery:
    """A parsed, checked query and the options it runs with.

    ``ts_unit`` is the unit of a numeric ``ts`` column (needed for ``WITHIN 10 seconds`` on numbers);
    ``ts_kind`` declares the kind of ``ts`` ("timestamp" or "numeric") where no schema tells it (explain,
    compile); ``lateness`` is the allowed lateness of streaming input, in ts units (milliseconds for
    timestamps).  ``shedding_latency`` (seconds; also ``WITH SHEDDING LATENCY 1 s`` before the query) turns on
    gSPICE load shedding in :meth:`apply` (off by default, see docs/shedding.md); ``dropped_output`` is a
    directory for the dropped events; ``shedding_model`` is ``hash`` (gSPICE-H), ``tree`` or ``forest``
    (gSPICE-M), or a baseline of the paper, ``random`` or ``type`` (type-based), for comparisons.
    """

    query: Query
    source: str
    type_col: str = "type"
    ts_col: str = "ts"
    ts_unit: str | None = None
    ts_kind: str | None = None
    lateness: float = 0
    shedding_latency: float | None = None
    dropped_output: str | None = None
    shedding_model: str = "hash"
    #: SASE++ collapsed output (match queries with one Kleene variable): one row per binding of the other
    #: variables with the Kleene candidates as an array column, instead of one row per subset
    collapsed: bool = False
    #: streaming: hash the partition keys into this many Spark groups, each holding one engine state per key
    #: (fewer groups, less per-key cost per micro-batch; a query whose explain says ``streaming: columnar
    #: micro-batches`` runs a bucket's keys at once; see docs/architecture.md); 0: one Spark group per key; None:
    #: the grouping of the checkpoint given to :meth:`apply` if it holds state, else spark.sql.shuffle.partitions
    #: buckets where the columnar step streams the query, else one group per key (docs/operations.md,
    #: "Grouping of a streaming checkpoint").  A batch has no groups: there it is the number of partitions
    #: (None or 0: spark.sql.shuffle.partitions)
    buckets: int | None = None
    #: the match budget (docs/operations.md): the matches, and partial matches, one partition of a match query
    #: may produce before the run stops with a message naming collapsed output and trend aggregates; None: sized
    #: to the executor's memory (:func:`sparkcep.runtime_udfs.match.budget.default_max_matches`); 0: no limit
    match_budget: int | None = None
    #: the optimized plan per ts kind, made on first use (see :meth:`plan`)
    _plans: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @property
    def name(self) -> str | None:
        return self.query.name

    def _ts_kind(self, schema) -> str | None:
        return ts_kind_of(schema, self.ts_col) or self.ts_kind or ("numeric" if self.ts_unit else None)

    @deeply
    def resolved(self, schema=None) -> ResolvedQuery:
        """The checked query against ``schema``'s ts kind, else the declared one (a ``ts_unit`` means numeric
        ts), and against its column types where given (an attribute used as a condition must be BOOLEAN)."""
        types = {f.name: f.dataType.typeName() for f in schema.fields} if schema is not None else None
        return analyze(self.query, self.source, ts_kind=self._ts_kind(schema), ts_unit=self.ts_unit,
                       attr_types=types)

    def _planned(self, ts_kind: str | None) -> Node:
        """The optimized plan for a ts kind, compiled once (the query and options are frozen): analysis,
        plan building and the optimizer run here only."""
        plan = self._plans.get(ts_kind)
        if plan is None:
            r = analyze(self.query, self.source, ts_kind=ts_kind, ts_unit=self.ts_unit)
            plan = optimize(build_plan(r, type_col=self.type_col, ts_col=self.ts_col))
            plan = _collapsed(plan) if self.collapsed else plan
            self._plans[ts_kind] = plan
        return plan

    @deeply
    def plan(self, schema=None) -> Node:
        """The optimized logical plan (bound to ``schema`` if given: ts kind, default output columns).  The
        optimizer runs once per ts kind; a schema is bound to that plan (:func:`~sparkcep.compiler.plan.bind.bind`)."""
        plan = self._planned(self._ts_kind(schema))
        if schema is None:
            return plan
        self.resolved(schema)  # the checks that need the input's column types (analysis only, no planning)
        return bind(plan, tuple(schema.fieldNames()))

    @deeply
    def spec(self, schema=None):
        """The engine spec of the plan's sequence or trend operator (what the generated job bakes in)."""
        return operator_spec(self.plan(schema))

    def recognize(self, schema=None):
        """An ``AFTER MATCH SKIP`` query as the MATCH_RECOGNIZE statement it runs as
        (:func:`~sparkcep.compiler.recognize.from_pattern.to_recognize`; the default output lists ``schema``'s
        columns)."""
        from sparkcep.compiler.recognize.from_pattern import to_recognize

        columns = schema.fieldNames() if schema is not None else ()
        return to_recognize(self.query, self.source, columns=columns, type_col=self.type_col, ts_col=self.ts_col)

    @deeply
    def explain(self, schema=None) -> str:
        r = self.resolved(schema)
        if self.query.skip is not None:
            from sparkcep.compiler.codegen.recognize import explain_text
            from sparkcep.compiler.recognize import build_spec
            from sparkcep.ir.ast import Attr, walk
            from sparkcep.runtime_udfs.recognize import describe_engine, describe_program

            rec = self.recognize(schema)
            if schema is not None:
                types = {f.name: f.dataType.simpleString() for f in schema.fields}
            else:  # the columns the query names; ts as the query's durations say (bare: numeric)
                timestamp = r.ts_kind == "timestamp" or (r.ts_kind is None and self.query.within.unit is not None)
                exprs = [*(c for _, c in rec.defines), *(m.expr for m in rec.measures)]
                named = [n.attr for e in exprs for n in walk(e) if isinstance(n, Attr)]
                types = dict.fromkeys([*rec.partition_by, *named], "double")
                types.update({self.type_col: "string", self.ts_col: "timestamp" if timestamp else "bigint"})
            spec = build_spec(rec, types, ts_unit=self.ts_unit)
            skip = self.query.skip
            head = (f"-- {self.name or 'query'}: {r.mode} query, strategy {r.strategy}, AFTER MATCH SKIP {skip.kind}"
                    f"{'' if skip.var is None else ' ' + skip.var}: runs as MATCH_RECOGNIZE")
            return head + "\n" + explain_text(rec, program=describe_program(spec), spec=spec,
                                               engine=describe_engine(spec))
        if r.ts_kind == "timestamp" or (r.ts_kind is None and self.query.within.unit is not None):
            unit = "ms"
        else:
            unit = self.ts_unit or "ts units"
        head = f"-- {self.name or 'query'}: {r.mode} query, strategy {r.strategy}"
        return head + "\n" + explain_plan(self.plan(schema), unit, describe)

    @deeply
    def sql(self, schema=None, table: str = "events") -> str:
        """The Spark SQL filter (event types, local predicates, ``_mask``)."""
        return filter_sql(self.plan(schema), table, schema.fieldNames() if schema is not None else None)

    @deeply
    def job_source(self, schema=None) -> str:
        """A standalone PySpark job running this query from files (see ``sparkcep compile``)."""
        r = self.resolved(schema)
        if self.query.skip is not None:  # the MATCH_RECOGNIZE job of the statement it compiles to
            from sparkcep.compiler.codegen.recognize import job_source as recognize_job

            if self.query.returns is None and schema is None:
                raise CEPError("the generated job of an AFTER MATCH SKIP query needs RETURN: without it the output "
                               "lists every column of the input, which is not known when compiling")
            from sparkcep.compiler.recognize.from_pattern import event_columns

            types = None if schema is None else {f.name: f.dataType.simpleString() for f in schema}
            return recognize_job(self.recognize(schema), explain=self.explain(schema), ts_unit=self.ts_unit,
                                 event_columns=event_columns(self.query, self.source, types, self.type_col,
                                                             self.ts_col))
        # without a schema: durations with units mean timestamp ts (ms), bare ones numeric ts
        ts_kind = r.ts_kind or ("timestamp" if self.query.within.unit is not None else "numeric")
        plan = self.plan(schema)
        shedding = (self.shedding_latency, self.shedding_model) if self.shedding_latency else None
        read_columns, needs = input_columns([self])
        return job_source(plan, query_text=format_query(self.query), explain=self.explain(schema),
                          ts_kind=ts_kind, name=self.name, shedding=shedding, read_columns=read_columns, needs=needs,
                          timeouts=timeout_spec_of(operator_spec(plan)) is not None)

    def apply(self, df, shedding_training=None, side_channel: bool = False, arrival_col: str | None = None,
              checkpoint: str | None = None, followed: str | None = None):
        """Run on a batch or streaming DataFrame with the type and ts columns and the attributes.

        ``followed`` (streaming, with shedding): the directory the stream follows when ``df`` reads another one
        fed from it (the admission control's staging directory, :func:`~sparkcep.spark.shedding.admitted_input`):
        the backlog controller counts the backlog there (:meth:`~sparkcep.spark.shedding.Shedding.follow_source`);
        by default, the directory ``df`` reads.

        ``arrival_col`` (streaming, any source): the column holding each event's arrival (Spark's rate source:
        ``timestamp``; an ingestion-time column: a timestamp or epoch ms).  The arrival of each micro-batch's
        events is then observed (the ``arrival`` metric of the query's progress), and each result row carries
        ``_arrival_ms``, the arrival of its events (:data:`~sparkcep.spark.validate.RESULT_ARRIVAL`, see
        docs/operations.md); a stream read by :func:`~sparkcep.spark.validate.read_validated` with
        ``keep_arrival=True`` carries its files' modification times the same way.

        ``side_channel`` (streaming): late events come out as rows of ``_kind`` "late" instead of being
        dropped, and the relevant events are counted (for :mod:`sparkcep.spark.sinks`, see docs/operations.md).

        Batch: :func:`~sparkcep.spark.adapters.batch_matches` (repartition by key, ``mapInArrow``).
        Streaming: an event-time watermark on every event of ``df``, before the query's filter, so that any
        event moves event time (allowed lateness ``self.lateness``; on a timestamp copy of ``ts``, where 1 unit
        of numeric ts is 1 ms; see :func:`~sparkcep.spark.adapters.watermarked`), and
        ``applyInPandasWithState`` with event-time timeouts, grouped by key or by the key hashed into
        :attr:`buckets` (by default where the columnar step streams the query); write the result in append
        mode with a checkpoint.  ``checkpoint`` (streaming): the checkpoint the result will be written with; if
        it holds state, the query resumes with the grouping it was made with, and :attr:`buckets` asking for
        another one is refused with a message.

        The result of a match query carries ``result.timeouts``: the DataFrame of its timed-out partial matches
        (the result's columns and ``timeout_step``; batch: built when first read; streaming: a second stateful
        query to start, with its own checkpoint), or None where they are not defined (a trend query; negation,
        ``OR``, repeated groups, an ``AFTER MATCH SKIP`` query; docs/language.md, "Timed-out partial matches").
        """
        from sparkcep.spark.adapters import apply_match, watermarked, with_event_time
        from sparkcep.spark.operator import engine_of
        from sparkcep.spark.validate import ARRIVAL_COL, with_arrival

        # every df.schema / df.isStreaming is a round trip to the JVM (and a schema a JSON parse): read once
        streaming = df.isStreaming
        if arrival_col is not None and streaming:
            df = with_arrival(df, arrival_col)
        df, source = _followed(df, streaming and bool(self.shedding_latency) and self.query.skip is None, followed)
        schema = df.schema
        # the arrival rides along to the operator (which stamps each result with it), unseen by the query (an
        # AFTER MATCH SKIP query's MATCH_RECOGNIZE engine too: each match its last row's, apply_recognize)
        carried = ARRIVAL_COL in schema.names
        if carried and not streaming:
            df, carried = df.drop(ARRIVAL_COL), False
            schema = df.schema
        if carried:
            from pyspark.sql.types import StructType

            schema = StructType([f for f in schema.fields if f.name != ARRIVAL_COL])
        if self.query.skip is not None:  # one preferred match per start event: MATCH_RECOGNIZE's engine
            from sparkcep.compiler.recognize import check_recognize
            from sparkcep.compiler.recognize.from_pattern import event_columns, window_negation
            from sparkcep.sql_api import apply_recognize

            rec = self.recognize(schema)
            check_recognize(rec, streaming=streaming)
            # Spark SQL functions over one event: computed by Spark as columns the statement reads
            extra = event_columns(self.query, self.source, {f.name: f.dataType.simpleString() for f in schema},
                                  self.type_col, self.ts_col)
            edge = window_negation(self.query, self.source)
            if edge is not None:
                from pyspark.sql.types import NumericType

                if streaming:  # no window functions on a stream: the engine computes them (RecognizeSpec.windows)
                    counted_by_engine = {w.name for w in rec.windows}
                    extra = [(name, sql) for name, sql in extra if name not in counted_by_engine]
                if not isinstance(schema[self.ts_col].dataType, NumericType):
                    raise CEPError(f"AFTER MATCH SKIP with a negation at the {edge} needs a numeric ts column (its "
                                   "window functions count events within WITHIN of ts)")
            if extra:
                from pyspark.sql import functions as F

                df = df.select("*", *[F.expr(sql).alias(name) for name, sql in extra])
            if side_channel:  # every event goes to the engine: all are relevant (the progress line's count)
                from sparkcep.spark.sinks import counted

                df = counted(df, "events_relevant")
            result = apply_recognize(df, rec, ts_unit=self.ts_unit, watermark_delay=self.lateness,
                                     late_rows=side_channel)
            result.timeouts = None  # MATCH_RECOGNIZE has none (TIMEOUTS_RECOGNIZE)
            return result
        plan = self.plan(schema)
        spec = operator_spec(plan)
        engine_of(spec).check(spec)
        preflight.check_columns([self], schema.fieldNames(), attributes=referenced_attributes(plan),
                                hint=STREAM_SCHEMA_HINT if streaming else "")
        timeout_spec = timeout_spec_of(spec)
        if not streaming:
            return _batch_matches(df, _view_of(df), plan, spec, schema, ts_col=self.ts_col, type_col=self.type_col,
                                  buckets=self.buckets or None, timeout_spec=timeout_spec,
                                  **self._budget_option(spec))
        # the watermark on every event of the source, before the filter: any event moves event time
        events = watermarked(df, self.ts_col, self.lateness, ts_unit=self.ts_unit)
        candidates = df.sparkSession.sql(filter_sql(plan, _view_of(events), schema.fieldNames(), pretty=False,
                                                    types=_column_types(schema),
                                                    carry=(ARRIVAL_COL,) if carried else ()))
        shedding = None
        if self.shedding_latency:  # streaming only: a batch has no latency to keep, it is never shed
            candidates, shedding = self._shed(candidates, spec, plan, shedding_training)
            if source is not None:  # a followed directory: shed on the latency and the backlog
                shedding.follow_source(source)
        candidates = with_event_time(candidates, events, self.ts_col, keep_late=side_channel, ts_unit=self.ts_unit)
        uncounted = candidates
        if side_channel:
            from sparkcep.spark.sinks import counted

            candidates = counted(candidates, "events_relevant")
        result = apply_match(candidates, spec, ts_col=self.ts_col, type_col=self.type_col, late_rows=side_channel,
                             buckets=self.buckets, ts_unit=self.ts_unit, checkpoint=checkpoint,
                             **self._budget_option(spec))
        result.timeouts = None if timeout_spec is None else apply_match(  # each stamped with its events' arrival
            uncounted, timeout_spec, ts_col=self.ts_col, type_col=self.type_col, buckets=self.buckets,
            ts_unit=self.ts_unit, **self._budget_option(spec))
        if shedding is not None:
            result.shedding = shedding  # the stage's handle: per-batch drops per type, latency, rho
        return result

    def _budget_option(self, spec) -> dict:
        """``{"max_matches": n}`` for a match query with a budget given (``match_budget``), else nothing."""
        from sparkcep.ir.spec import MatchSpec

        if self.match_budget is None or not isinstance(spec, MatchSpec):
            return {}
        if self.match_budget < 0:
            raise CEPError(f"match_budget must be 0 (no limit) or a positive number, got {self.match_budget}")
        return {"max_matches": self.match_budget}

    def _shed(self, candidates, spec, plan, training):
        """The gSPICE shedding stage before the shuffle (see :mod:`sparkcep.spark.shedding`)."""
        return shedding_stage(candidates, spec, referenced_attributes(plan), training, bound=self.shedding_latency,
                              model=self.shedding_model, type_col=self.type_col, ts_col=self.ts_col,
                              dropped_output=self.dropped_output)


def _followed(df, shedding: bool, followed: str | None = None):
    """``(df, directory)``: a shed stream whose only source is a local directory of files
    (:func:`~sparkcep.spark.io.followed_directory`) with its events' arrival observed, for the backlog
    controller (:meth:`~sparkcep.spark.shedding.Shedding.follow_source`), and the directory it follows:
    ``followed`` when given (the input a staging directory is fed from), else the one it reads; else
    ``(df, None)``: the stage keeps the batch-duration controller (another source, or no shedding)."""
    if not shedding:
        return df, None
    from sparkcep.spark.io import followed_directory, with_file_arrival

    source = followed_directory(df)
    observed = with_file_arrival(df) if source is not None else None
    return (df, None) if observed is None else (observed, followed or source)


def timeout_spec_of(spec):
    """The timed-out partial matches of a match query (:class:`~sparkcep.ir.spec.TimeoutSpec`), or None: a
    trend query, or a match query outside their definition (docs/language.md, "Timed-out partial matches")."""
    from sparkcep.ir.spec import MatchSpec, TimeoutSpec
    from sparkcep.runtime_udfs.match import timeouts

    if not isinstance(spec, MatchSpec):
        return None
    timeout_spec = TimeoutSpec.of(spec)
    try:
        timeouts.check(timeout_spec)
    except CEPError:
        return None
    return timeout_spec


def no_timeouts_reason(spec) -> str | None:
    """Why the query of ``spec`` has no timed-out partial matches (:func:`timeout_spec_of` gives None), or None."""
    from sparkcep.ir.spec import MatchSpec, TimeoutSpec
    from sparkcep.runtime_udfs.match import timeouts

    if not isinstance(spec, MatchSpec):
        return "a trend-aggregate query has no partial matches"
    try:
        timeouts.check(TimeoutSpec.of(spec))
    except CEPError as e:
        return e.message
    return None


#: ``--timeouts`` of a workload: the refusal of ``sparkcep run`` and of a generated workload job.
TIMEOUTS_ONE_QUERY = "--timeouts is for one match query: choose it with --query NAME"
#: Why a MATCH_RECOGNIZE statement (and an AFTER MATCH SKIP query, which runs as one) has no timed-out partial
#: matches (docs/language.md, "Timed-out partial matches").
TIMEOUTS_RECOGNIZE = ("SQL:2016 defines no partial-match output for MATCH_RECOGNIZE, and Flink's and Trino's "
                      "MATCH_RECOGNIZE report none")


def checked_timeout_spec(spec):
    """:func:`timeout_spec_of` ``spec``, refused with one message where they are not defined (``sparkcep run
    --timeouts`` and a generated job's ``--timeouts``)."""
    timeout_spec = timeout_spec_of(spec)
    if timeout_spec is None:
        raise CEPError(f"--timeouts: {no_timeouts_reason(spec)}")
    return timeout_spec


def _batch_matches(df, view: str, plan: Node, spec, schema, *, ts_col: str, type_col: str,
                   buckets: int | None, timeout_spec=None, **options):
    """A batch run: :func:`~sparkcep.spark.adapters.batch_matches` (repartition by key,
    ``mapInArrow``) over the Spark SQL filter, with Spark's fixed cost per job cut: the filter and the column
    pruning are one SQL query, and the operator's input schema is derived here instead of asked from the JVM.
    ``buckets``, if set, is the number of partitions; ``options`` (``max_matches``) go to the operator.
    ``timeout_spec``: the result's ``timeouts`` is its rows over the same candidates (else None)."""
    from sparkcep.spark.adapters import batch_matches

    arrival = reads_every_event(spec)
    drop, candidate_schema = _candidate_schema(plan, spec, schema, ts_col, type_col)
    candidates = df.sparkSession.sql(filter_sql(plan, view, schema.fieldNames(), pretty=False, arrival=arrival,
                                                drop=drop, types=_column_types(schema)))
    if any(n.computed for n in chain(plan) if isinstance(n, Project)):  # hidden columns: Spark knows their types
        candidate_schema = candidates.schema
    result = batch_matches(candidates, spec, candidate_schema, partitions=buckets, ts_col=ts_col, type_col=type_col,
                           **options)
    if timeout_spec is None:
        result.timeouts = None
        return result
    # the timed-out partial matches over the same candidates (the same SQL filter: no second query to analyse),
    # built when first asked for: building a DataFrame costs the driver an analysis of its plan (a keyless query in
    # time ranges: about 0.1-0.2 s of CPU), which most callers, who never read them, would pay for nothing
    return _with_lazy_timeouts(result, lambda: batch_matches(
        candidates, timeout_spec, candidate_schema, partitions=buckets, ts_col=ts_col, type_col=type_col, **options))


@functools.cache
def _lazy_timeouts_class(cls: type) -> type:
    """``cls`` (a DataFrame class) with a ``timeouts`` built on first read by the instance's ``_build_timeouts``."""

    class Result(cls):  # type: ignore[misc, valid-type]
        __slots__ = ()  # the same layout as ``cls``: an instance's class can be switched to it

        @functools.cached_property
        def timeouts(self):  # noqa: ANN202 - a DataFrame
            return self._build_timeouts()

    Result.__name__, Result.__qualname__, Result.__module__ = cls.__name__, cls.__qualname__, cls.__module__
    return Result


def _with_lazy_timeouts(result, build):
    """``result`` whose ``result.timeouts`` is ``build()``, called on first read (then kept)."""
    result._build_timeouts = build
    result.__class__ = _lazy_timeouts_class(type(result))
    return result


def _column_types(schema) -> dict[str, str]:
    """Column name → Spark type name: the SQL filter casts a string column that meets a number
    (:func:`~sparkcep.compiler.codegen.sql.to_sql_expr`)."""
    return {f.name: f.dataType.simpleString() for f in schema.fields}


def _candidate_schema(plan: Node, spec, schema, ts_col: str, type_col: str):
    """``(dropped columns, schema)`` of the batch filter's output over an input of
    ``schema``, derived without the JVM: the input's columns as they are, minus those the engine never reads
    (:func:`~sparkcep.spark.adapters.unread_columns`), ``_mask`` an INT (a sum of INT CASEs) and,
    under a contiguity strategy, ``_arrival`` a BIGINT."""
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    from sparkcep.compiler.codegen.sql import ARRIVAL, filter_columns
    from sparkcep.compiler.plan.builder import MASK
    from sparkcep.spark.adapters import unread_columns

    arrival = reads_every_event(spec)
    columns = [*filter_columns(plan, schema.fieldNames()), MASK, *([ARRIVAL] if arrival else [])]
    drop = tuple(unread_columns(spec, columns, ts_col, type_col))
    fields = {f.name: f for f in schema.fields}
    derived = {MASK: StructField(MASK, IntegerType(), False), ARRIVAL: StructField(ARRIVAL, LongType(), False)}
    return drop, StructType([fields.get(c) or derived[c] for c in columns if c not in drop])


def shedding_stage(candidates, spec, attributes, training, *, bound: float, model: str = "hash",
                   type_col: str = "type", ts_col: str = "ts", dropped_output: str | None = None,
                   weighted=None):
    """``(kept candidates, Shedding handle)``: the gSPICE stage (:func:`sparkcep.spark.shedding.install`) on
    the filtered events before the shuffle, its utility model (``hash``, ``tree`` or ``forest``) learnt from
    ``training`` (a batch DataFrame, pandas DataFrame or event dicts) over the numeric ``attributes`` the query
    reads that decide its matches (:func:`~sparkcep.runtime_udfs.shedding.base.condition_attributes`: not
    those only RETURN reads; ``random`` and ``type``: the paper's baselines, for comparisons).  Used by
    :meth:`CompiledQuery.apply` and by generated jobs with shedding.  ``weighted``: the
    ``(spec, weight)`` of every query a workload's one stage serves (an event's utility sums its contributions
    to each query's matches, weighted), instead of ``spec`` alone."""
    from pyspark.sql.types import NumericType

    from sparkcep.runtime_udfs.shedding.base import condition_attributes
    from sparkcep.runtime_udfs.shedding.shedder import fit_shedder
    from sparkcep.spark.shedding import install, training_events

    if training is None:
        raise CEPError("load shedding learns event utilities from a sample of the input: pass "
                       "apply(df, shedding_training=<batch DataFrame, pandas DataFrame or event dicts>)")
    numeric = [f.name for f in candidates.schema.fields if isinstance(f.dataType, NumericType)]
    # the utility features: the numeric attributes that decide matches (not those only RETURN reads)
    decide = condition_attributes([s for s, _ in weighted] if weighted else [spec])
    attributes = [a for a in dict.fromkeys([*attributes, *decide]) if a in decide and a in numeric and a != ts_col]
    events = training_events(training, spec, ts_col=ts_col, type_col=type_col)
    shedder = fit_shedder(list(weighted) if weighted else [(spec, 1.0)], events, attributes=attributes, kind=model)
    return install(candidates, shedder, bound=bound, type_col=type_col, ts_col=ts_col, dropped_output=dropped_output)


def shedding_spec(q: CompiledQuery, spec):
    """The :class:`~sparkcep.ir.spec.MatchSpec` whose matches a shedding stage learns ``q``'s utilities from:
    a match query's own; a trend-aggregate query's trends are the matches of its pattern under
    skip_till_any_match (LANGUAGE.md §6), enumerated only on the training sample, so a Kleene trend query
    (2^n trends) is refused."""
    from sparkcep.ir.spec import MatchSpec, TrendSpec

    if isinstance(spec, MatchSpec):
        return spec
    if not isinstance(spec, TrendSpec) or any(c.kleene for c in spec.components):
        raise CEPError(f"load shedding learns event utilities from matches: query {q.name or q.query.name!r} "
                       "aggregates Kleene trends, which are not enumerated to learn them; run the workload "
                       "without WITH SHEDDING LATENCY")
    return MatchSpec(spec.components, spec.predicates, spec.window, (), key=spec.key, pattern=spec.pattern)


def report_shedding(shedding, query) -> None:
    """Never a silent drop: the per-type counts of a finished streaming ``query``'s shedding stage, on stderr
    (nothing if ``shedding`` is None)."""
    import sys

    if shedding is None:
        return
    # the listener runs asynchronously: it sees the last batches (a stopped query's), then it is removed
    shedding.detach(timeout=0 if query.isActive else 30)
    per_type = ", ".join(f"{t}={n}" for t, n in sorted(shedding.dropped.items())) or "none"
    worst = max((b["latency"] for b in shedding.batches if b["latency"] is not None), default=0.0)
    expired = getattr(shedding, "expired_per_type", None) or {}
    whole = (f"; {sum(expired.values())} more in files shed whole, unread, past the expiry age (per type: "
             + ", ".join(f"{t}={n}" for t, n in sorted(expired.items())) + ")") if expired else ""
    ctl = shedding.controller
    over = getattr(ctl, "over_budget", 0)
    floor = (f"; in {over} micro-batches the fixed cost and reading alone (up to {ctl.floor:.1f} s) left no room "
             f"within the bound: it cannot be kept by shedding there") if over else ""
    fit = getattr(ctl, "fitted", None)  # the backlog controller's last cost fit: what shedding saves, and not
    cost = (f"; micro-batch cost fitted as {fit[0]:.2f} s + {fit[1] * 1e6:.0f} µs per event read + "
            f"{fit[2] * 1e6:.0f} µs per event kept") if fit else ""
    print(f"sparkcep: load shedding dropped {sum(shedding.dropped.values())} of {shedding.offered} events "
          f"({shedding.drop_ratio:.1%}; per type: {per_type}){whole}; latency bound {ctl.bound:g} s, "
          f"worst batch latency {worst:.2f} s{floor}{cost}", file=sys.stderr)


def _collapsed(plan: Node) -> Node:
    """SASE++'s collapsed output: one row per binding of the non-Kleene variables, each Kleene variable's
    candidates as an array column (:func:`sparkcep.ir.spec.collapsed_outputs`)."""
    from dataclasses import replace

    from sparkcep.compiler.optimizer._spec import with_spec
    from sparkcep.compiler.plan.nodes import Output, rebuild
    from sparkcep.ir.errors import CEPError
    from sparkcep.ir.spec import MatchSpec, collapsed_outputs

    spec = operator_spec(plan)
    if not isinstance(spec, MatchSpec):
        raise CEPError("collapsed output is for match queries, not trend aggregates")
    # without RETURN and without a schema the default columns are bound with the input's columns, in
    # with_default_outputs, which collapses them then
    spec = replace(spec, collapsed=True, outputs=collapsed_outputs(spec) if spec.outputs else ())
    plan = with_spec(plan, spec)
    return rebuild(plan, lambda n: replace(n, columns=spec.outputs) if isinstance(n, Output) else n)


def check_runnable(q: CompiledQuery) -> ResolvedQuery:
    """What ``sparkcep check`` promises: the query is checked, planned, and the engine that will run it accepts
    its spec.  An engine's refusal (a feature it does not implement) becomes a positioned error here, at the
    conjunct or RETURN item it names (else the whole query), instead of at explain, compile or run time."""
    from sparkcep.compiler.recognize.from_pattern import check_skip_query, has_reluctant
    from sparkcep.ir.errors import CEPSemanticError
    from sparkcep.ir.printer import format_expr
    from sparkcep.ir.spec import TrendSpec
    from sparkcep.runtime_udfs.match import engine as match_engine
    from sparkcep.runtime_udfs.match.conjuncts import EngineUnsupportedError
    from sparkcep.runtime_udfs.trend import engine as trend_engine

    r = q.resolved()
    if q.query.skip is not None or has_reluctant(q.query):
        from sparkcep.compiler.recognize import check_recognize

        check_skip_query(q.query, q.source, r)
        check_recognize(q.recognize(), streaming=False)
        return r
    try:
        spec = q.spec()
        (trend_engine if isinstance(spec, TrendSpec) else match_engine).check(spec)
    except CEPError as err:
        if err.span is not None:
            raise CEPSemanticError(err.message, err.span, err.source or q.source) from None
        nodes = [p.expr for p in r.predicates] + [i.expr for i in r.returns or ()]
        span = next((n.span for n in nodes if n.span is not None and format_expr(n) in err.message),
                    q.query.span)
        kind = EngineUnsupportedError if isinstance(err, EngineUnsupportedError) else CEPSemanticError
        raise kind(f"not supported: {err.message}", span, q.source) from None
    return r


@deeply
def compile(text: str, **options) -> CompiledQuery:  # noqa: A001 - the package's verb
    """Parse and check one query. Options: ``type_col``, ``ts_col``, ``ts_unit``, ``ts_kind``, ``lateness``,
    ``shedding_latency`` (seconds), ``dropped_output``, ``shedding_model``, ``collapsed``, ``buckets``,
    ``match_budget`` (the matches one partition may produce; None: sized to memory, 0: no limit)."""
    text = without_bom(text)
    workload = parse_workload(text)
    if workload.shedding_latency is not None and options.get("shedding_latency") is None:
        options["shedding_latency"] = workload.shedding_latency.in_ms() / 1000
    q = CompiledQuery(parse_query(text) if len(workload.queries) != 1 else workload.queries[0], text, **options)
    check_runnable(q)  # check now: errors surface at compile time, with positions
    return q


@deeply
def compile_workload(text: str, **options) -> list[CompiledQuery]:
    """Parse and check every query of a workload file (queries separated by ``;``)."""
    text = without_bom(text)
    out = []
    workload = parse_workload(text)
    if workload.shedding_latency is not None and options.get("shedding_latency") is None:
        options["shedding_latency"] = workload.shedding_latency.in_ms() / 1000
    for query in workload.queries:
        q = CompiledQuery(query, text, **options)
        check_runnable(q)
        out.append(q)
    return out


@dataclass(frozen=True)
class CompiledWorkload:
    """A workload (queries separated by ``;``) with its Sharon sharing plan (see docs/sharing.md).

    ``plan`` is the optimizer's :class:`~sparkcep.compiler.optimizer.sharing.ir.WorkloadPlan`: candidates,
    conflicts, pruned candidates and the chosen plan.  Queries outside the shared executor's scope (see
    :mod:`sparkcep.compiler.optimizer.sharing.scope`) keep their own operator.

    Example::

        >>> w = compile_shared_workload("a: RETURN COUNT(*) PATTERN SEQ(A, B, C) WHERE [id] WITHIN 10;"
        ...                             "b: RETURN COUNT(*) PATTERN SEQ(A, B, D) WHERE [id] WITHIN 10;"
        ...                             "c: RETURN COUNT(*) PATTERN SEQ(A, B) WHERE [id] WITHIN 10")
        >>> [(c.name, c.pattern, c.benefit) for c in w.plan.candidates], w.plan.chosen
        ([('p1', ('A', 'B'), 2.0)], ('p1',))
    """

    queries: tuple[CompiledQuery, ...]
    plan: object

    @deeply
    def explain(self, format: str = "text") -> str:  # noqa: A002 - the CLI's option name
        """The sharing plan as text (candidates, conflicts, pruned, chosen plan, executor) or Graphviz DOT."""
        from sparkcep.compiler.optimizer.sharing.explain import dot_workload, explain_workload

        if format == "dot":
            return dot_workload(self.plan)
        if format != "text":
            raise CEPError(f"unknown explain format {format!r} (text or dot)")
        return explain_workload(self.plan)

    @deeply
    def specs(self, share: bool = True) -> list:
        """The shared engine's specs, one per sharing context (``share=False``: the Non-Shared layout)."""
        from sparkcep.compiler.optimizer.sharing.layout import shared_specs

        return shared_specs(self.plan, share=share)

    def alone(self) -> tuple[CompiledQuery, ...]:
        """The queries that run with their own operator."""
        names = {q.name for q in self.plan.queries if q.reason is not None}
        return tuple(q for q in self.queries if q.name in names)

    @deeply
    def job_source(self, name: str | None = None) -> str:
        """A standalone PySpark job running the whole workload from files (see ``sparkcep compile``): the
        sharing plan (shared operators and the queries that run alone) baked in as JSON, one result with a
        ``query`` column (:mod:`sparkcep.spark.workload`)."""
        from sparkcep.compiler.codegen.job import workload_job_source

        first = self.queries[0]
        shedding = shedding_specs = None
        if any(q.shedding_latency for q in self.queries):  # one stage in front of every operator
            shedding_specs, _, bound = self._shedding_parts()
            shedding = (bound, first.shedding_model)
        if any(q.collapsed for q in self.queries):
            raise CEPError("collapsed output is for one match query: compile it with --query NAME --collapsed")
        kinds = {q.resolved().ts_kind or ("timestamp" if q.query.within.unit is not None else "numeric")
                 for q in self.queries}
        if len(kinds) != 1:
            raise CEPError("the queries of a workload job need one ts kind: give durations with units in every "
                           "query (timestamp ts) or in none (numeric ts), or declare it with --ts")
        data, attributes = self.job_plan()
        explains = [q.explain() for q in self.alone()]
        explain = "\n\n".join([*explains, "-- sharing across the workload (Sharon)\n" + self.explain()])
        text = ";\n\n".join(format_query(q.query).strip() for q in self.queries)
        read_columns, needs = input_columns(self.queries)
        return workload_job_source(data, query_text=text, explain=explain, ts_kind=kinds.pop(),
                                   type_col=first.type_col, ts_col=first.ts_col, attributes=attributes, name=name,
                                   read_columns=read_columns, needs=needs, ts_unit=first.ts_unit,
                                   shedding=shedding, shedding_specs=shedding_specs)

    @deeply
    def job_plan(self, share: bool = True, schema=None) -> tuple[dict, list[str]]:
        """``(plan data, attributes)``: the chosen plan as a workload job runs it
        (:func:`sparkcep.spark.workload.workload_data`: the shared specs, and per query that runs
        alone its spec, Spark SQL filter over the view ``events`` and grouping), and the attributes it reads.
        ``share=False``: the Non-Shared layout; ``schema``: the alone queries' plans bound to the input's."""
        from sparkcep.compiler.codegen.job import operator_parts
        from sparkcep.spark.workload import workload_data

        alone, attributes = [], {}
        for q in self.alone():
            plan = q.plan(schema)
            parts = operator_parts(plan)
            alone.append({"name": q.name, "spec": parts["spec"], "filter_sql": parts["filter_sql"],
                          "group": parts["group"]})
            attributes.update(dict.fromkeys(referenced_attributes(plan)))
        shared = self.specs(share)
        for spec in shared:
            attributes.update(dict.fromkeys((*spec.key, *spec.group_by)))
            attributes.update(dict.fromkeys(a.attr for q in spec.queries for a in q.aggregates if a.attr))
        return workload_data(shared, alone), list(attributes)

    def apply(self, df, share: bool = True, side_channel: bool = False, shedding_training=None,
              arrival_col: str | None = None, followed: str | None = None):
        """Run the workload on a batch or streaming DataFrame, as its generated job does
        (:func:`~sparkcep.spark.workload.apply_workload`): one DataFrame with a ``query`` column
        and the columns of every query's RETURN (null where a query lacks one), from one stateful operator.
        ``share=False``: the Non-Shared layout (each query of the shared executor's scope on its own
        segments); ``side_channel`` (streaming): late events come out as rows of ``_kind`` "late" and the
        relevant events are counted, as :meth:`CompiledQuery.apply` does (for :mod:`sparkcep.spark.sinks`).
        With shedding (``WITH SHEDDING LATENCY`` or ``shedding_latency=``; streaming only) one gSPICE stage sits
        in front of every operator, after the watermark, its utilities learnt from ``shedding_training`` for
        every query at once (weighted by the sharing plan; the tightest bound of the queries); its handle is the
        result's ``shedding``.  ``arrival_col`` (streaming), or a stream read with ``keep_arrival=True``: each
        result row carries ``_arrival_ms``, the arrival of its events, as :meth:`CompiledQuery.apply`'s do.
        ``followed``: the directory the stream follows, as :meth:`CompiledQuery.apply`'s."""
        from pyspark.sql.types import StructType

        from sparkcep.spark.validate import ARRIVAL_COL, with_arrival
        from sparkcep.spark.workload import apply_workload

        if any(q.collapsed for q in self.queries):
            raise CEPError("collapsed output is for one match query: run it with --query NAME --collapsed")
        if any(q.query.skip is not None for q in self.queries):
            raise CEPError("an AFTER MATCH SKIP query runs as MATCH_RECOGNIZE, alone: choose it with --query NAME")
        if arrival_col is not None and df.isStreaming:
            df = with_arrival(df, arrival_col)
        elif ARRIVAL_COL in df.columns and not df.isStreaming:
            df = df.drop(ARRIVAL_COL)
        schema = StructType([f for f in df.schema.fields if f.name != ARRIVAL_COL])  # the query never sees it
        data, attributes = self.job_plan(share, schema)
        preflight.check_columns(self.queries, schema.fieldNames(), attributes=attributes,
                                hint=STREAM_SCHEMA_HINT if df.isStreaming else "")
        first = self.queries[0]
        handle = []
        bounds = [q.shedding_latency for q in self.queries if q.shedding_latency]
        df, source = _followed(df, bool(bounds) and df.isStreaming, followed)

        def shed(events):
            kept, shedding = self._shed(events, shedding_training)
            if source is not None:  # a followed directory: shed on the latency and the backlog
                shedding.follow_source(source)
            handle.append(shedding)
            return kept

        result = apply_workload(df, data, ts_col=first.ts_col, type_col=first.type_col, lateness=first.lateness,
                                side_channel=side_channel, ts_unit=first.ts_unit,
                                shed=shed if bounds and df.isStreaming else None)
        if handle:
            result.shedding = handle[0]
        return result

    def _shedding_parts(self, schema=None) -> tuple[list, list[str], float]:
        """``(weighted, attributes, bound)`` of the workload's one shedding stage: ``(spec, weight)`` per query
        (its matches: a trend query's are the trends it aggregates, :func:`shedding_spec`), weighted by the
        sharing plan (:func:`~sparkcep.compiler.optimizer.sharing.weights.shedding_weights`), the attributes
        they read, the tightest bound."""
        from sparkcep.compiler.optimizer.sharing.weights import shedding_weights

        weights = shedding_weights(self.plan)
        weighted, attributes = [], []
        for q in self.queries:
            weighted.append((shedding_spec(q, q.spec(schema)), weights.get(q.name, 1.0)))
            attributes += [a for a in referenced_attributes(q.plan(schema)) if a not in attributes]
        return weighted, attributes, min(q.shedding_latency for q in self.queries if q.shedding_latency)

    def _shed(self, events, training):
        """The one gSPICE stage of the workload (:func:`shedding_stage`) on its watermarked ``events``."""
        weighted, attributes, bound = self._shedding_parts(events.schema)
        first = self.queries[0]
        return shedding_stage(events, weighted[0][0], attributes, training, bound=bound,
                              model=first.shedding_model, type_col=first.type_col, ts_col=first.ts_col,
                              dropped_output=first.dropped_output, weighted=weighted)


@deeply
def compile_shared_workload(text: str, *, stats=None, sample=None, budget: float | None = 5.0,
                            resolve: bool = True, **options) -> CompiledWorkload:
    """Parse and check a workload and choose its sharing plan (Sharon).  Rates for the benefit model: a
    statistics file ``stats`` (JSON ``{"rates": {type: events per window}}``), else the workload's own
    ``WITH RATES (T = n, ...)`` clause, else a ``sample`` of events (dicts with type and ts), else the default
    (types a source leaves out get the default); ``budget``: seconds for the plan finder before GWMIN's
    plan is used; ``resolve``: expand candidates into options (§7.1)."""
    from sparkcep.compiler.optimizer.sharing import SharingQuery, optimize_workload
    from sparkcep.compiler.optimizer.sharing.rates import load_stats, rates_from_sample
    from sparkcep.compiler.optimizer.sharing.scope import sharing_query

    queries = compile_workload(text, **options)
    taken = {q.name for q in queries if q.name}
    names = []
    for i, q in enumerate(queries):
        name = q.name
        if not name:  # unnamed: q<position>, made unique
            name = f"q{i + 1}"
            while name in taken:
                name += "_"
            taken.add(name)
        names.append(name)
    if len(set(names)) != len(names):
        raise CEPError("the queries of a shared workload need distinct names")
    queries = [q if q.name else replace(q, query=replace(q.query, name=n)) for q, n in zip(queries, names, strict=True)]
    sharing = []
    for n, q in zip(names, queries, strict=True):
        if q.query.skip is not None:  # one preferred match per start event: MATCH_RECOGNIZE's engine, alone
            sharing.append(SharingQuery(n, (), reason="AFTER MATCH SKIP: runs alone, as MATCH_RECOGNIZE"))
            continue
        try:
            spec = q.spec()
        except CEPError as err:  # e.g. a plan that needs the input's schema: the query runs alone
            sharing.append(SharingQuery(n, (), reason=f"not planned without the input: {err.message}"))
            continue
        sharing.append(sharing_query(n, spec))
    rates, source = None, None
    declared = parse_workload(text).rates
    if stats is not None:
        rates, source = load_stats(stats), f"statistics file {stats}"
    elif declared:
        rates, source = dict(declared), "the workload's WITH RATES clause"
    elif sample is not None:
        window = next((q.window for q in sharing if q.reason is None), 0)
        rates, source = rates_from_sample(sample, window), "a sample of the input"
    plan = optimize_workload(sharing, rates, rates_source=source, budget=budget, resolve=resolve)
    return CompiledWorkload(tuple(queries), plan)


def input_columns(compiled) -> tuple[list[str] | None, dict[str, str]]:
    """``(attributes, needs)`` of compiled queries (:class:`sparkcep.CompiledQuery`): the attributes their plans
    read (None: every column, for a match query without RETURN, whose results show them all) and
    :func:`sparkcep.ir.needs.attribute_needs`."""
    attributes: list[str] | None = []
    for q in compiled:
        plan = q.plan()
        if q.query.returns is None and q.resolved().mode == "match":
            attributes = None
        if attributes is not None:
            attributes += [a for a in referenced_attributes(plan) if a not in attributes]
    return attributes, attribute_needs([q.query for q in compiled])


@dataclass
class LiveStream:
    """A continuous run started by :func:`apply_stream`: its ``query`` (Spark's ``StreamingQuery``), the
    ``result`` DataFrame it writes, its shedding stage (``shedding``: what it dropped per type; None without
    shedding) and the admission control handing the input's files over (``admission``; None without it)."""

    query: Any
    result: Any
    path: str
    shedding: Any = None
    admission: Any = None

    def backlog(self) -> int | None:
        """The input's files not read yet: those modified after the newest arrival the micro-batches read, as
        the admission control counts them for the progress line and its controller
        (:meth:`~sparkcep.spark.shedding.FileAdmission.backlog`; shed whole: not counted), else as seen from
        outside (:func:`sparkcep.spark.progress.backlog_files`); None: no arrival observed yet, or not a local
        directory."""
        from sparkcep.spark.progress import InputDirectory, unprocessed
        from sparkcep.spark.validate import ARRIVAL_METRIC

        newest = [p.observedMetrics[ARRIVAL_METRIC]["newest"] for p in self.query.recentProgress
                  if ARRIVAL_METRIC in (p.observedMetrics or {})]
        newest = [n for n in newest if n is not None]
        backlog = unprocessed(self.admission or InputDirectory(self.path), max(newest) if newest else None)
        return None if backlog is None else backlog[0]

    def stop(self) -> None:
        """Stop the query between micro-batches (the one under way commits first,
        :func:`~sparkcep.spark.progress.stop_between_batches`), then the admission thread; the shedding
        stage's listener is removed once Spark has delivered the query's last events to it."""
        from sparkcep.spark.progress import stop_between_batches

        try:
            stop_between_batches(self.query)
        finally:
            if self.admission is not None:
                self.admission.stop()
            if self.shedding is not None:
                self.shedding.detach()

    def awaitTermination(self, timeout: float | None = None):  # noqa: N802 - Spark's name
        return self.query.awaitTermination(timeout)


def apply_stream(path: str, query: CompiledQuery | str, *, checkpoint: str, output: str, spark=None,
                 training=None, fmt: str = "json", schema: str | None = None, files_per_trigger: int | None = None,
                 arrival_col: str | None = None, dead_letters: str | None = None, late: str | None = None,
                 latency_column: bool = False) -> LiveStream:
    """Start a continuous run of ``query`` (a :class:`CompiledQuery` or its text) over the directory ``path``
    as ``sparkcep run --stream`` does: the input validated (bad records to ``dead_letters``, default
    ``OUTPUT/_dead_letters``), results written as JSON lines to ``output`` per micro-batch (late events to
    ``late``, default ``OUTPUT/_late``; ``latency_column``: each result with ``_latency_ms``), the checkpoint in
    ``checkpoint``.  With shedding (``shedding_latency``) over a local directory of JSON lines, the admission
    control of ``run --stream`` (:class:`~sparkcep.spark.shedding.FileAdmission`): the stream reads
    ``CHECKPOINT/_admitted``, which a driver thread fills from ``path``, one slice per micro-batch, as the
    backlog controller allows; ``training``: the sample the utilities are learnt from (default: the events in
    ``path`` now).  Without shedding, a local directory is followed through the same admission with no bound
    (every file handed over as it arrives), so that each micro-batch observes the backlog behind it (Spark's
    observed metric ``backlog``).  Returns a :class:`LiveStream`; its ``stop()`` stops the query between
    micro-batches and the admission thread."""
    from pyspark.sql import SparkSession

    from sparkcep.live import prepare_live
    from sparkcep.spark.io import read_events
    from sparkcep.spark.late import KIND, REASON, RECORD
    from sparkcep.spark.sinks import counted, routed, start
    from sparkcep.spark.validate import RESULT_ARRIVAL, read_validated

    q = compile(query) if isinstance(query, str) else query
    spark = spark or SparkSession.builder.getOrCreate()
    attributes, needs = input_columns([q])
    live = prepare_live(path, fmt, checkpoint=checkpoint, check=[q], ts_col=q.ts_col, schema=schema)
    try:
        df, rejected = read_validated(spark, live.read_from, fmt, q.type_col, q.ts_col, stream=True,
                                      files_per_trigger=files_per_trigger, schema=schema, attributes=attributes,
                                      needs=needs, ts_unit=q.ts_unit, arrival_col=arrival_col, keep_arrival=True)
        df, rejected = counted(df, "events_valid"), counted(rejected, "dead_letters")
        if q.shedding_latency and q.query.skip is None and training is None:
            training = read_events(spark, path, fmt, q.ts_col, schema=schema, type_col=q.type_col,
                                   attributes=attributes, needs=needs)
        result = q.apply(df, shedding_training=training, side_channel=True, checkpoint=checkpoint, followed=path)
        shedding = getattr(result, "shedding", None)  # a followed directory: shed on latency and backlog
        columns = [f.name for f in result.schema.fields if f.name not in (KIND, REASON, RECORD, RESULT_ARRIVAL)]
        live.admit(shedding, checkpoint, type_col=q.type_col, dropped_output=q.dropped_output)  # before the query
        started = start(routed(result, rejected), output, checkpoint, result_columns=columns,
                        dead_letters=dead_letters, late=late, latency=latency_column)
    except BaseException:
        live.close()
        raise
    # the controller follows this query's progress only; the admission polls until stop(), or the query ends
    live.started(started, shedding, watch=True)
    return LiveStream(started, result, path, shedding, live.admission)
