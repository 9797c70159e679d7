"""Columnar sequence construction for batch matching: every match of a plain sequence query, for all keys at
once, in numpy (SASE §4: sequence construction over the candidates of each position, the window pushed into
construction, partitioned by the equivalence key as PAIS does).

The per-key engine (:mod:`match_engine`) turns every row into a dict and walks active instance stacks per
key.  For the common query class ``SEQ(E1 e1, ..., Em em) WHERE ... WITHIN W`` under skip_till_any_match a
match is just a chain of rows, one per position, of one key, with strictly increasing ts, ``last.ts -
first.ts < W`` and the parameterized predicates TRUE (LANGUAGE.md §1–§3).  :func:`columnar` turns such a
spec into a :class:`ColumnarConstruction`, which builds the chains column-wise::

    chains = columnar(spec)(group_ids, ts, mask)          # int64 (matches, m): input row per position

**The construction.**  Rows are sorted by (key, ts) (the prefilter's helpers,
:mod:`sparkcep.runtime_udfs.match.prefilter`).  Per position ``k`` the sorted row indices ``P_k`` of the rows
whose ``_mask`` has bit ``comps[k]`` (an ``ANY`` component, or overlapping types, put a row into several
positions).  Chains of length 1 are ``P_0``.  A chain ``(start s, last r)`` extends to position ``k + 1`` by the
rows of ``P_{k+1}`` after ``r``'s whole tie run (strictly larger ts, same key) and before ``end[s]``, the first
row after ``s`` that is in another key or at ``ts - ts[s] >= W``: a contiguous range of ``P_{k+1}``, found with
two ``np.searchsorted`` on row indices (sorted order is (key, ts) order, so row indices are the exact
monotone composite), then expanded with ``np.repeat``/``cumsum``.  ``end`` is one ``np.searchsorted`` on the
int64 (key, ts) composite for whole-number ts (:func:`match_prefilter.key_ts_composite`; integer ts stay
int64, so epoch ms and large counters are exact), else a vectorized bisection evaluating ``ts[j] - ts[s] < W``
in float64 as the engine does.  A predicate is applied as soon as all its variables are bound (SASE §4's
dynamic filtering), on the chains built so far.  When a step would create more than ``max_chains`` chains,
the chains are processed in slices (depth first), so memory stays bounded by about ``max_chains`` rows per
position.

Rows without a usable ts (null, NaN) are in no match, as in the engine; a batch with an infinite ts is
declined (the call returns None and the caller runs the engine).

**Alternatives** (``OR``, ``T?``): the plan's alternatives are each a flat sequence; the matches are the union
of each alternative's chains (:class:`ColumnarAlternatives`), result columns the spec's components with -1
(null outputs) for a variable the alternative lacks, and predicates reading an absent variable read NULL (the
plan's ``nulled`` conjuncts, vectorized like any other).  No binding comes twice: the plan's alternatives bind
distinct variable sets (alternatives binding the same set, e.g. ``(A? a OR B? b)``, make the plan one
automaton, which is not eligible).

**Eligible specs** (:func:`columnar` returns None otherwise): a match spec, not collapsed, under
skip_till_any_match, whose :class:`~sparkcep.runtime_udfs.match.compile.Plan` alternatives are flat sequences
of single positive events (``ANY``, ``OR`` and ``T?`` allowed; no ``T+``/``T*``, negation or repeated groups);
every parameterized predicate vectorizable (:func:`sparkcep.runtime_udfs.expr.vector.vectorize`); every
output a plain
``var.attr`` of a component (``v.attr`` as first, last or ``[1]`` of a ``T?`` variable: one event).

**Small batches** are not sent back to the engine: on partitions of 3–15 kept rows the construction costs
0.03–0.27 ms more than the engine loop (``bench/match_columnar.py --small``, ``run_table`` per call, 2-core
machine shared with other jobs), below the 0.5 ms per partition a fallback branch would have to save; from
about 20 kept rows on it is ahead.

Example::

    >>> import numpy as np
    >>> from sparkcep.ir.ast import Attr, has_until
    >>> from sparkcep.ir.spec import Component, MatchSpec, OutputColumn
    >>> spec = MatchSpec((Component("a", ("A",)), Component("b", ("B",))), (), 10,
    ...                  (OutputColumn("a_ts", Attr("a", "ts")),))
    >>> cc = columnar(spec)
    >>> cc(np.array([0, 0, 0, 0]), np.array([1, 5, 20, 5]), np.array([1, 2, 2, 1])).tolist()
    [[0, 1]]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcep.ir.ast import Attr, has_until
from sparkcep.ir.errors import CEPError
from sparkcep.ir.spec import INTERNAL_COLUMNS, MatchSpec, reads_every_event
from sparkcep.runtime_udfs.expr.vector import vectorize
from sparkcep.runtime_udfs.match.budget import Budget
from sparkcep.runtime_udfs.match.compile import Plan
from sparkcep.runtime_udfs.match.conjuncts import ANY_MATCH
from sparkcep.runtime_udfs.match.prefilter import _bounds, _key_ts_order, key_ts_composite, scan_ts

__all__ = ["MAX_CHAINS", "ColumnarAlternatives", "ColumnarConstruction", "arrow_matches", "columnar", "engine_ts",
           "engine_names", "epoch_ms", "ineligible", "key_ids", "nan_as_null", "output_table"]

#: Chains one extension step may create before the chains are processed in slices.
MAX_CHAINS = 5_000_000

#: ``values(attr) -> Arrow array`` (input row order) of an engine attribute name, None if there is no such column
Values = Callable[[str], "pa.Array | pa.ChunkedArray | None"]


class ColumnarConstruction:
    """The columnar construction of one flat alternative.  ``bits`` the component bit per position, ``window``,
    ``checks`` per position the predicates ``(vector expr, ((var, attr, position), ...))`` applied once that
    position is bound, ``outputs`` ``(name, column, attr)`` per result column, ``columns`` the result column
    of each position (the spec's component index; default: position ``p`` is column ``p``) and ``width`` the
    result's columns (default: the positions)."""

    __slots__ = ("bits", "window", "checks", "outputs", "max_chains", "columns", "width")

    def __init__(self, bits: tuple[int, ...], window: float, checks: tuple[tuple, ...],
                 outputs: tuple[tuple[str, int, str], ...], max_chains: int = MAX_CHAINS,
                 columns: tuple[int, ...] | None = None, width: int | None = None):
        self.bits, self.window, self.checks, self.outputs = bits, window, checks, outputs
        self.max_chains = max_chains
        self.columns = tuple(range(len(bits))) if columns is None else columns
        self.width = len(bits) if width is None else width

    def __repr__(self) -> str:
        return (f"ColumnarConstruction(bits={self.bits}, window={self.window}, "
                f"predicates={sum(map(len, self.checks))})")

    def __call__(self, group_ids, ts, mask, values: Values | None = None,
                 budget: Budget | None = None, last: np.ndarray | None = None) -> np.ndarray | None:
        """The matches as an int64 array ``(matches, width)`` of input row indices (column ``columns[p]`` the
        row at position ``p``, -1 in the columns of no position), or None when the batch is declined (an
        infinite ts: the engine decides).  ``ts`` as the engine sees it (:func:`engine_ts`): int64 for integer
        and whole-ms timestamp input, float64 otherwise (NaN: no usable ts); ``values`` gives the columns the
        predicates read.  ``budget``: the finished chains of each slice are counted against it as they are
        built (:class:`~sparkcep.runtime_udfs.match.budget.MatchBudgetError` once it is exceeded).  ``last``
        (bool per input row, optional): only these rows may be a match's last event (the streaming step,
        :mod:`match_stream_columnar`, asks for the matches its new rows complete)."""
        group_ids = np.asarray(group_ids, dtype=np.int64)
        ts = scan_ts(ts)  # as the prefilter compares it: int64 (uint64) or float64
        mask = np.asarray(mask, dtype=np.int64)
        if not (len(group_ids) == len(ts) == len(mask)):
            raise ValueError(f"group_ids, ts and mask differ in length ({len(group_ids)}, {len(ts)}, {len(mask)})")
        empty = np.zeros((0, self.width), dtype=np.int64)
        rows = np.flatnonzero((mask & sum(self.bits)) != 0)
        if ts.dtype.kind == "f":
            if np.isinf(ts[rows]).any():
                return None
            rows = rows[~np.isnan(ts[rows])]
        if not len(rows):
            return empty
        g, t = group_ids[rows], ts[rows]
        order = _key_ts_order(g, t)
        rows, g, t, mk = rows[order], g[order], t[order], mask[rows[order]]
        _, _, group_last, _, run_last = _bounds(g, t)
        end = self._ends(g, t, group_last)
        if end is None:
            return None
        cand = [np.flatnonzero((mk & b) != 0) for b in self.bits]
        if last is not None:
            cand[-1] = cand[-1][np.asarray(last, dtype=bool)[rows[cand[-1]]]]
        ctx = (rows, end, run_last, cand, values, {}, budget if budget is not None and budget.limit is not None
               else None)
        parts = self._extend([cand[0]], 0, ctx)
        if not parts:
            return empty
        chains = np.concatenate([np.stack(p, axis=1) for p in parts]) if len(parts) > 1 else np.stack(parts[0], 1)
        if self.columns == tuple(range(self.width)):
            return rows[chains]
        out = np.full((len(chains), self.width), -1, dtype=np.int64)
        out[:, list(self.columns)] = rows[chains]
        return out

    def _ends(self, g: np.ndarray, t: np.ndarray, group_last: np.ndarray) -> np.ndarray | None:
        """Per sorted row ``s``: the first sorted row in another key or at ``t - t[s] >= W``."""
        n = len(t)
        window = self.window
        if window == math.inf:
            return group_last + 1
        composite = key_ts_composite(g, t)
        if composite is not None:
            c, span = composite
            # whole-number ts: t - t[s] < W  <=>  t < t[s] + ceil(W); at most to the key's end
            w = np.int64(min(math.ceil(window), span))
            limit = (c - c % np.int64(span)) + np.int64(span)
            return np.searchsorted(c, np.minimum(c + w, limit), side="left").astype(np.int64)
        if t.dtype.kind != "f":
            return None  # integers too far apart for an int64 composite
        lo = np.arange(n, dtype=np.int64) + 1  # t[s] - t[s] = 0 < W
        hi = group_last + 1
        while True:
            active = lo < hi
            if not active.any():
                return lo
            mid = (lo + hi) // 2
            mid_c = np.minimum(mid, n - 1)
            ok = (t[mid_c] - t) < window
            lo = np.where(active & ok, mid + 1, lo)
            hi = np.where(active & ~ok, mid, hi)

    def _extend(self, chains: list[np.ndarray], k: int, ctx) -> list[list[np.ndarray]]:
        """Complete ``chains`` (per bound position, sorted row indices; all of one length) from position ``k``:
        the finished chains, in slices."""
        rows, end, run_last, cand, values, cache, budget = ctx
        chains = self._check(chains, k, rows, values, cache)
        if not len(chains[0]):
            return []
        if k + 1 == len(self.bits):
            if budget is not None:
                budget.charge(len(chains[0]))
            return [chains]
        nxt = cand[k + 1]
        lo = np.searchsorted(nxt, run_last[chains[-1]], side="right")
        hi = np.searchsorted(nxt, end[chains[0]], side="left")
        counts = np.maximum(hi - lo, 0)
        total = int(counts.sum())
        if total > self.max_chains and len(counts) > 1:
            out = []
            cum = np.cumsum(counts)
            cuts = np.flatnonzero(np.diff(cum // self.max_chains)) + 1
            for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(counts)], strict=True):
                out += self._extend_slice([c[a:b] for c in chains], lo[a:b], counts[a:b], nxt, k, ctx)
            return out
        return self._extend_slice(chains, lo, counts, nxt, k, ctx)

    def _extend_slice(self, chains, lo, counts, nxt, k, ctx) -> list[list[np.ndarray]]:
        total = int(counts.sum())
        if not total:
            return []
        parent = np.repeat(np.arange(len(counts)), counts)
        offset = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        new = nxt[lo[parent] + offset]
        return self._extend([*(c[parent] for c in chains), new], k + 1, ctx)

    def _check(self, chains: list[np.ndarray], k: int, rows, values, cache) -> list[np.ndarray]:
        """The chains whose predicates that become decidable at position ``k`` are TRUE."""
        for fn, reads in self.checks[k]:
            if not len(chains[0]):
                break
            columns = {}
            for var, attr, p in reads:
                col = cache.get(attr)
                if col is None:
                    col = cache[attr] = _engine_values(values(attr) if values is not None else None,
                                                       len(rows) and int(rows.max()) + 1)
                columns[(var, attr)] = col.take(pa.array(rows[chains[p]]))
            keep = np.asarray(fn(columns, len(chains[0])), dtype=bool)
            chains = [c[keep] for c in chains]
        return chains


class ColumnarAlternatives:
    """The columnar construction of a spec of several flat alternatives (``OR``, ``T?``): the union of each
    alternative's chains (:class:`ColumnarConstruction` ``parts``, all of one ``width``, -1 where an
    alternative lacks a variable).  No binding is found twice: the plan's alternatives bind distinct sets of
    variables (:class:`~sparkcep.runtime_udfs.match.compile.Plan` runs the pattern as one automaton
    otherwise, which is ineligible), so their chains differ in which columns are -1.  ``bits`` (a bit per
    result column) and ``checks`` (every part's) summarize it as :class:`ColumnarConstruction`'s do."""

    __slots__ = ("parts", "outputs", "width", "window", "bits", "checks")

    def __init__(self, parts: tuple[ColumnarConstruction, ...], outputs: tuple[tuple[str, int, str], ...],
                 bits: tuple[int, ...]):
        self.parts, self.outputs, self.bits = parts, outputs, bits
        self.width, self.window = parts[0].width, parts[0].window
        self.checks = tuple(c for part in parts for c in part.checks)

    def __repr__(self) -> str:
        return f"ColumnarAlternatives({', '.join(map(repr, self.parts))})"

    def __call__(self, group_ids, ts, mask, values: Values | None = None,
                 budget: Budget | None = None, last: np.ndarray | None = None) -> np.ndarray | None:
        """:meth:`ColumnarConstruction.__call__` of each alternative, concatenated (None if any declines)."""
        found = []
        for part in self.parts:
            chains = part(group_ids, ts, mask, values, budget, last)
            if chains is None:
                return None
            found.append(chains)
        return np.concatenate(found)


def _engine_values(col, n: int) -> pa.Array:
    """A column as predicates read it: one Arrow array (``expr_arrow`` reads NaN as NULL, as the engine reads a
    NaN attribute as lacking), a missing column all null."""
    if col is None:
        return pa.nulls(n)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not isinstance(col, pa.Array):
        col = pa.array(col, from_pandas=True)
    return col


def key_ids(columns, n: int) -> np.ndarray:
    """Dense int64 ids of ``n`` rows' key values, one column per key attribute (Arrow, or numpy as pandas gives
    them): rows of one key share an id, computed with Arrow (no Python per row); null and NaN are one key (as
    the engine's partitions see them); no columns: one key."""
    ids: np.ndarray | None = None
    for col in columns:
        if not isinstance(col, (pa.Array, pa.ChunkedArray)):
            col = pa.array(col, from_pandas=True)  # NaN and None: null
        encoded = pc.dictionary_encode(nan_as_null(col), null_encoding="encode")
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks() if encoded.num_chunks != 1 else encoded.chunk(0)
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        if ids is None:
            ids = codes
        else:  # combine and make dense again (no overflow however many key columns)
            ids = np.unique(ids * len(encoded.dictionary) + codes, return_inverse=True)[1].astype(np.int64)
    return np.zeros(n, dtype=np.int64) if ids is None else ids


def nan_as_null(col: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A float column's NaN as null (the engine reads a NaN attribute as lacking, and a NaN key as the null
    key); other columns as they are."""
    if pa.types.is_floating(col.type):
        return pc.if_else(pc.is_nan(col), pa.scalar(None, col.type), col)
    return col


def ineligible(spec) -> str | None:
    """Why ``spec`` has no columnar construction (a short phrase), or None when it has one."""
    return _built(spec, MAX_CHAINS)[0]


def columnar(spec, max_chains: int = MAX_CHAINS) -> ColumnarConstruction | ColumnarAlternatives | None:
    """The columnar construction of ``spec`` (a :class:`ColumnarAlternatives` for several alternatives), or
    None when it is not eligible (see the module docstring; :func:`ineligible` says why).  Result columns are
    the spec's components (column ``k`` the row bound to component ``k``)."""
    return _built(spec, max_chains)[1]


def _built(spec, max_chains: int) -> tuple[str | None, ColumnarConstruction | ColumnarAlternatives | None]:
    """``(None, construction)``, or ``(why not, None)``: one pass over the plan serves :func:`ineligible` and
    :func:`columnar`, so the two always agree."""
    if not isinstance(spec, MatchSpec):
        return "not a match query", None
    if spec.collapsed:
        return "collapsed output", None
    if (spec.strategy or ANY_MATCH) != ANY_MATCH:
        return f"strategy {spec.strategy}", None
    if has_until(spec.pattern):
        return "a stop condition (UNTIL)", None
    if reads_every_event(spec):
        return "NEXT steps", None
    if any(c.negated for c in spec.components):
        return "negation", None
    if any(c.kleene not in (None, "?") for c in spec.components):
        return "Kleene closure", None
    try:
        plan = Plan(spec)
    except CEPError:
        return "refused by the match engine", None
    for alt in plan.alternatives:
        if alt.automaton is not None or alt.groups or alt.negs or any(alt.kleene):
            return "not flat sequences of single events", None
    optional = {c.var for c in spec.components if c.kleene == "?"}
    for o in spec.outputs:
        e = o.expr
        # a T? variable is one event or none: its first, last and [1] are the event
        if not (isinstance(e, Attr) and any(e.var in alt.position for alt in plan.alternatives)
                and (e.index is None or (e.var in optional and e.index in (1, "first", "last")))):
            return f"result column {o.name} is not a plain var.attr", None
    width = len(spec.components)
    column = {c.var: k for k, c in enumerate(spec.components)}
    outputs = tuple((o.name, column[o.expr.var], o.expr.attr) for o in spec.outputs)
    parts = []
    for alt in plan.alternatives:
        position = alt.position
        checks: list[list] = [[] for _ in alt.vars]
        for c in alt.conjuncts:
            fn = None if c.global_ else vectorize(c.expr, plan.any_vars)
            if fn is None or any(var not in position for var, _ in fn.reads):
                return "a predicate that is not vectorizable", None
            reads = tuple((var, attr, position[var]) for var, attr in sorted(fn.reads))
            # applied once the alternative's last variable of it is bound (absent ones read NULL: ``nulled``)
            checks[max((position[v] for v in c.vars if v in position), default=0)].append((fn, reads))
        parts.append(ColumnarConstruction(tuple(1 << k for k in alt.comps), float(spec.window),
                                          tuple(tuple(c) for c in checks), outputs, max_chains,
                                          tuple(alt.comps), width))
    if len(parts) == 1 and parts[0].columns == tuple(range(width)):
        return None, parts[0]
    return None, ColumnarAlternatives(tuple(parts), outputs,
                                      tuple(1 << k for k in range(width) if not spec.components[k].negated))


def epoch_ms(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Epoch milliseconds of an Arrow timestamp column as the engine reads them: int64 when every value is a
    whole millisecond, else float64 (nulls kept)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if col.type.unit != "us":
        col = col.cast(pa.timestamp("us", tz=col.type.tz))
    us = pc.cast(col, pa.int64())
    filled = pc.fill_null(us, 0).to_numpy()
    if (filled % 1000 == 0).all():
        return pc.divide(us, 1000)
    return pc.divide(pc.cast(us, pa.float64(), safe=False), 1000.0)  # beyond 2**53 us (~285 years): ~us-coarse


def engine_ts(col: pa.Array | pa.ChunkedArray, time: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """``(ts, valid)`` of a ts column in numpy, the very values the engine compares (shared by the prefilter,
    ``MatchOperator._prefiltered``, and :func:`arrow_matches`): int64 for integer columns (uint64 kept) and, when
    ``time``, for timestamps of whole ms (epoch ms, :func:`epoch_ms`), so counters and epoch values beyond 2^53
    stay exact; float64 otherwise.  ``valid`` is False for null and NaN (ts 0 and NaN there).  None for a column
    of another type than integers, floats and timestamps."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if time and pa.types.is_timestamp(col.type):
        col = epoch_ms(col)
    elif not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        return None
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
    if pa.types.is_integer(col.type):
        wide = pa.uint64() if col.type == pa.uint64() else pa.int64()
        return pc.fill_null(col.cast(wide), 0).to_numpy(), valid
    ts = pc.fill_null(pc.cast(col, pa.float64()), math.nan).to_numpy()
    return ts, valid & ~np.isnan(ts)


def output_table(construction: ColumnarConstruction | ColumnarAlternatives, chains: np.ndarray, values: Values,
                 schema: pa.Schema) -> pa.Table:
    """The result table of ``chains`` (input row per result column, -1: none): each output column the ``take``
    of its attribute's column at its column's rows (null where there is no row), cast to ``schema`` (NaN as
    null, as the engine returns it)."""
    if not len(chains):
        return pa.Table.from_batches([], schema=schema)
    arrays = []
    for (_, p, attr), field in zip(construction.outputs, schema, strict=True):
        col = values(attr)
        rows = chains[:, p]
        absent = rows < 0  # a variable the match's alternative lacks: null
        if col is None or absent.all():
            arrays.append(pa.nulls(len(chains), field.type))
            continue
        taken = col.take(pa.array(rows, mask=absent) if absent.any() else pa.array(rows))
        if isinstance(taken, pa.ChunkedArray):
            taken = taken.combine_chunks()
        taken = nan_as_null(taken)
        arrays.append(taken if taken.type == field.type else taken.cast(field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def engine_names(names, columns, ts_col: str, type_col: str) -> dict[str, str]:
    """Engine attribute → input column, over the input's column ``names`` the engine reads (in ``columns``): each
    under its own name, the ts and type columns also as ``ts`` and ``type`` (as ``MatchOperator`` names an
    event's values: a later column wins a name)."""
    source: dict[str, str] = {}
    for c in names:
        if c not in columns:
            continue
        source[c] = c
        if c == ts_col and c != "ts":
            source["ts"] = c
        elif c == type_col and c != "type":
            source["type"] = c
    return source


def arrow_matches(construction: ColumnarConstruction | ColumnarAlternatives, table: pa.Table, ids: np.ndarray | None,
                  *, ts_col: str, type_col: str, time_cols, columns, schema: pa.Schema,
                  budget: Budget | None = None) -> pa.Table | None:
    """The matches of every key of an Arrow batch (``MatchOperator.run_table`` after the prefilter) as a table
    of ``schema``, or None when the batch is left to the engine (no ``_mask`` column, a ts column of another
    type than integers, floats and timestamps, an infinite ts).

    ``ids`` are the rows' key ids (None: one key); ``time_cols`` the timestamp columns (the engine reads them
    as epoch ms); ``columns`` the input columns the engine reads; ``budget`` counts the matches (see
    :meth:`ColumnarConstruction.__call__`).  Engine names as ``MatchOperator`` gives them:
    the ts and type columns are also ``ts`` and ``type``."""
    mask_col = INTERNAL_COLUMNS[0]
    if mask_col not in table.column_names or ts_col not in table.column_names:
        return None
    source = engine_names(table.column_names, columns, ts_col, type_col)
    n = table.num_rows
    read = engine_ts(table.column(ts_col), ts_col in time_cols)
    if read is None:
        return None
    ts, valid = read
    mask = pc.fill_null(table.column(mask_col), 0).to_numpy().astype(np.int64)
    mask[~valid] = 0  # rows without a usable ts are in no match
    engine_cache: dict[str, pa.Array | None] = {}

    def engine_values(attr: str):
        if attr not in engine_cache:
            name = source.get(attr)
            engine_cache[attr] = None if name is None else (
                epoch_ms(table.column(name)) if name in time_cols else table.column(name))
        return engine_cache[attr]

    def raw_values(attr: str):
        name = source.get(attr)
        return None if name is None else table.column(name)

    group_ids = ids if ids is not None else np.zeros(n, dtype=np.int64)
    chains = construction(group_ids, ts, mask, engine_values, budget)
    if chains is None:
        return None
    return output_table(construction, chains, raw_values, schema)
