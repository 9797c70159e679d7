"""The columnar fast path of the MATCH_RECOGNIZE engine: DEFINE as one boolean mask per variable over a chunk
of rows, the pattern program run by a numba-compiled prioritized NFA over the per-row variable bits, the
measures gathered by index.  Pure (numpy, pyarrow, numba; no pyspark).

Same semantics as :mod:`.engine` (the kernel is the engine's loop, ``_run``/``_finish``/``_decide``, over
integer arrays): the threads of a partition in priority order, threads of one start at one instruction
merged, the AFTER MATCH SKIP rules, WITHIN, anchors, empty matches, ``{- -}``.  It takes a spec when
(:func:`eligibility`, decided once per spec):

* every DEFINE reads only the row being labelled and rows PREV/NEXT of it by constant offsets (no
  FIRST/LAST, aggregates, CLASSIFIER, other variables' rows) and is made of what
  :func:`sparkcep.runtime_udfs.expr.vector.vectorize` evaluates column-wise (literals, columns, ``+ - * / %``,
  comparisons, AND/OR/NOT, unary minus) and ``IS [NOT] NULL``, with the row evaluator's semantics (Spark
  SQL's ``try_*`` rules, NULL = false; PREV/NEXT across the partition's edge read NULL); a variable without
  DEFINE is true;
* each measure (RUNNING or FINAL; ONE ROW PER MATCH or ALL ROWS PER MATCH with any option) is one of: a
  column of a variable's (a SUBSET's, every row's) last row, ``FIRST/LAST(X.c, k)``, PREV/NEXT of those,
  ``CLASSIFIER()`` (also of a variable, and PREV/NEXT of it), ``MATCH_NUMBER()``, ``COUNT(*)``/``COUNT(X.*)``
  and ``COUNT/SUM/AVG/MIN/MAX`` of a column per variable, SUBSET or the whole match; or an expression of
  those that ``vectorize`` evaluates (``LAST(B.price) - FIRST(A.price)``).  Measures are gathered in one pass
  over each match's rows (RUNNING ones too), never walked per output row.

Not taken (the row engine runs them): functions (``abs``, ``coalesce``, ...) in DEFINE or MEASURES, DEFINEs
that read the match's history, more than 62 variables.

DEFINEs read each column once into numpy, NaN a value as the row evaluator and Spark SQL order it (equal to
NaN, above every other DOUBLE); PREV/NEXT are the column moved, NULL off the row's partition.  A chunk whose
values the kernel does not read (NaN in a DOUBLE column a measure's aggregate or expression reads: the
columnar evaluator there reads it as NULL; columns of other types than BIGINT/INT/DOUBLE/STRING/BOOLEAN;
event times beyond 2^53) makes :func:`run_chunk` answer None: the caller runs the existing engine on it.

The numba functions are compiled once per machine (``cache=True``: next to the module, or numba's user-wide
cache directory where that is not writable; ``bench/match_kernel.py --cold`` times the compilation) and loaded
once per process (about 0.5 s CPU); a call then costs about a millisecond plus its rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkcep.ir import recognize as R
from sparkcep.ir.ast import Attr, BinOp, Literal, Unary
from sparkcep.runtime_udfs.expr import vector
from sparkcep.runtime_udfs.expr.vector import vectorize
from sparkcep.runtime_udfs.recognize.engine import MAX_THREADS, RecognizeBudgetError, compiled
from sparkcep.runtime_udfs.recognize.program import CHAR, MATCH

try:  # numba is a dependency; without it the kernel is off and the engine runs every chunk
    import numba

    _NUMBA_ERROR = None
except ImportError as err:  # pragma: no cover - numba is installed with sparkcep
    numba = None
    _NUMBA_ERROR = str(err)

__all__ = ["Eligibility", "describe", "eligibility", "run_chunk"]


@dataclass(frozen=True)
class Eligibility:
    """Whether the kernel runs a spec (``ok``) and why not (``reason``)."""

    ok: bool
    reason: str = ""


class _Refused(Exception):
    pass


# ----------------------------------------------------------------------------------------------- the plan


_SKIPS = {R.SKIP_PAST_LAST_ROW: 0, R.SKIP_TO_NEXT_ROW: 1, R.SKIP_TO_FIRST: 2, R.SKIP_TO_LAST: 3}
_AGGS = {"count": 0, "sum": 1, "avg": 2, "min": 3, "max": 4}


@dataclass(frozen=True)
class _Measure:
    """One measure: ``kind`` ``read`` (column ``column`` of the row located by ``mset``, ``nth``, ``shift``),
    ``class`` (the variable of that row), ``mnum``, ``agg`` (``func`` over column ``column`` of the rows of
    ``mset``, ``column`` None for COUNT(*)), ``expr`` (``fn`` over the values of the measures ``parts``)."""

    name: str
    kind: str
    column: str | None = None
    mset: int = -1  # bit set of variables; -1 every row
    nth: int = 0  # 0 last; k+1: FIRST(.., k); -(k+1): LAST(.., k)
    shift: int = 0
    func: str = ""
    final: bool = False  # FINAL (else RUNNING: the rows up to the output row)
    parts: tuple = ()  # kind ``expr``: the leaf measures ``fn`` reads as ("m", name)
    fn: object = None


class _Plan:
    def __init__(self, spec: R.RecognizeSpec):
        c = compiled(spec)
        self.spec = spec
        prog = c.program
        variables = tuple(spec.variables)
        if len(variables) > 62:
            raise _Refused("more than 62 row pattern variables")
        if not c.mergeable:
            raise _Refused("a DEFINE reads rows of the match other than the one labelled")
        if c.windows:
            raise _Refused("window counts the engine computes (a stream's)")
        self.mask_of = {v: sum(1 << i for i in m) for v, m in c.members.items()}
        self.variables = variables
        # DEFINE: one vectorized condition per defined variable, over (column, shift) keys
        defines = dict(spec.defines)
        self.defines: list[tuple[int, object]] = []
        self.reads: set[tuple[str, int]] = set()
        #: (key, condition, IS NULL?): a boolean column computed before the DEFINEs that read it
        self.derived: list[tuple[str, object, bool]] = []
        #: ``(column, bits)``: the DEFINEs that test their own variable's bit of one packed INT column (the batch
        #: path's mask, :func:`sparkcep.ir.recognize.bit_test`), read as ``bits`` of it at once
        self.packed: tuple[str, int] | None = None
        for i, v in enumerate(variables):
            if v not in defines:
                continue
            tested = R.tested_bit(defines[v])
            if tested is not None and tested[1] == i and (self.packed is None or self.packed[0] == tested[0]):
                self.packed = (tested[0], (self.packed[1] if self.packed else 0) | (1 << i))
                continue
            reads: set = set()
            ast = _vector_ast(defines[v], 0, reads, self.derived)
            f = None if ast is None else vectorize(ast)
            if f is None:
                raise _Refused(f"the DEFINE of {v} uses what is not evaluated column-wise (a function, a literal "
                               "of another type than number, string or boolean)")
            self.defines.append((i, f))
            self.reads |= reads
        # the program as arrays: the variable and exclusion of each CHAR, the leaves after each CHAR, the
        # start leaves, what a leaf waiting at ANCHOR $ becomes at the partition's end
        code = prog.code
        n = len(code)
        self.char_var = np.array([a if op == CHAR else -1 for op, a, _ in code], dtype=np.int64)
        self.char_excl = np.array([b if op == CHAR else 0 for op, _, b in code], dtype=np.int64)
        self.match_pc = prog.match_pc
        assert code[self.match_pc][0] == MATCH
        after = c.after
        self.after_off, self.after = _csr([after[pc] for pc in range(n)])
        #: the look-ahead (:func:`._nfa.match`): per CHAR, the variables of the CHARs that may follow it (-1: a
        #: MATCH may), whether a thread waiting at ANCHOR $ may
        self.look_need = np.full(n, -1, dtype=np.int64)
        self.look_wait = np.zeros(n, dtype=np.bool_)
        for at in range(n):
            if code[at][0] == CHAR and self.match_pc not in after[at]:
                self.look_need[at] = sum({1 << code[x][1] for x in after[at] if x >= 0})
                self.look_wait[at] = any(x < 0 for x in after[at])
        self.start_bol = np.array(c.start_bol, dtype=np.int64)
        self.start_plain = np.array(c.start_plain, dtype=np.int64)
        waits = len(prog._waits)
        self.resume_off, self.resume = _csr([prog.resume(-w - 1) for w in range(waits)])
        #: per leaf (index leaf + waits): a later start's thread there may be dropped (:func:`.engine.merge_leaves`)
        self.merge_ok = np.zeros(n + waits, dtype=np.bool_)
        for leaf in c.merge_leaves:
            self.merge_ok[leaf + waits] = True
        self.skip = _SKIPS[spec.skip.kind]
        self.skip_mask = self.mask_of.get(spec.skip.var, 0) if spec.skip.var else 0
        self.within = spec.within
        self.monotone = c.monotone
        self.quiet = spec.rows_per_match != R.ALL_ROWS_WITH_UNMATCHED
        # measures
        self.mode = {R.ONE_ROW: 0, R.ALL_ROWS_OMIT_EMPTY: 2}.get(spec.rows_per_match, 1)
        self.measures = [self._measure(m) for m in spec.measures]
        self.measure_names = {m.name for m in spec.measures}
        #: whether the NFA keeps each match's variables (a node per consumed row): only for a measure that
        #: reads them (CLASSIFIER, a variable's or SUBSET's rows) or ALL ROWS with ``{- -}``
        self.track = any(_reads_variables(ms) for ms in self.measures) or (
            self.mode != 0 and bool(np.any(self.char_excl)))
        #: the NFA's array sizes (:func:`_nfa_match`): threads, nodes per row, match variables per row
        self.caps = [64, 2, 2]
        #: later starts' threads dropped so far (:func:`_nfa_match`)
        self.merged = 0

    def _mset(self, var: str | None) -> int:
        return -1 if var is None else self.mask_of[var]

    def _measure(self, m: R.Measure) -> _Measure:
        leaf = self._leaf(m.name, m.expr)
        if leaf is not None:
            return leaf
        parts: list[_Measure] = []
        ast = self._expr(m.expr, parts)
        f = None if ast is None else vectorize(ast)
        if f is None:
            raise _Refused(f"the measure {m.name} is not computed column-wise")
        return _Measure(m.name, "expr", parts=tuple(parts), fn=f)

    def _expr(self, e, parts: list):
        """A measure's expression over its leaves (each one a measure of its own, read as ("m", name))."""
        if isinstance(e, Literal):
            return e
        leaf = self._leaf(f"#{len(parts)}", e)
        if leaf is not None:
            parts.append(leaf)
            return Attr("m", leaf.name)
        if isinstance(e, Unary) and e.op in ("NOT", "-"):
            inner = self._expr(e.operand, parts)
            return None if inner is None else Unary(e.op, inner)
        if isinstance(e, BinOp):
            a, b = self._expr(e.left, parts), self._expr(e.right, parts)
            return None if a is None or b is None else BinOp(e.op, a, b)
        return None

    def _leaf(self, name: str, e) -> _Measure | None:
        """``e`` as a measure gathered by row index, or None."""
        shift = 0
        while isinstance(e, R.Nav) and e.kind in ("PREV", "NEXT"):
            shift += -e.offset if e.kind == "PREV" else e.offset
            e = e.arg
        nth, final = 0, False
        if isinstance(e, R.Nav) and e.kind in ("FIRST", "LAST"):
            nth = e.offset + 1 if e.kind == "FIRST" else -(e.offset + 1)
            final = e.semantics == "FINAL"
            e = e.arg
            if isinstance(e, R.Classifier):
                return None
        if isinstance(e, (Attr, R.RowExpr)) and (not isinstance(e, Attr) or e.index is None):
            column = e.attr if isinstance(e, Attr) else e.column
            return _Measure(name, "read", column, self._mset(e.var), nth, shift, final=final)
        if isinstance(e, R.Classifier) and nth == 0:
            return _Measure(name, "class", None, self._mset(e.var), 0, shift, final=e.semantics == "FINAL")
        if isinstance(e, R.MatchNumber) and nth == 0 and shift == 0:
            return _Measure(name, "mnum")
        if isinstance(e, R.Agg) and nth == 0 and shift == 0 and e.func.lower() in _AGGS:
            arg = e.arg
            if arg is None:
                if e.func.lower() == "count":
                    return _Measure(name, "agg", None, self._mset(e.var), func="count",
                                    final=e.semantics == "FINAL")
            elif isinstance(arg, (Attr, R.RowExpr)) and (not isinstance(arg, Attr) or arg.index is None):
                column = arg.attr if isinstance(arg, Attr) else arg.column
                return _Measure(name, "agg", column, self._mset(e.var), func=e.func.lower(),
                                final=e.semantics == "FINAL")
        return None


def _reads_variables(ms: _Measure) -> bool:
    if ms.kind == "expr":
        return any(_reads_variables(part) for part in ms.parts)
    return ms.kind == "class" or (ms.kind in ("read", "agg") and ms.mset != -1)


def _csr(lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(lists) + 1, dtype=np.int64)
    for k, xs in enumerate(lists):
        off[k + 1] = off[k] + len(xs)
    flat = np.array([x for xs in lists for x in xs], dtype=np.int64)
    return off, flat


def _vector_ast(e, shift: int, reads: set, derived: list):
    """A DEFINE (history-free) as an expression :func:`vectorize` reads: every column reference of the row
    ``shift`` rows from the labelled one becomes the attribute ``("r", "<column>@<shift>")``, ``x IS [NOT]
    NULL`` a boolean column computed first (``derived``); None if it uses anything the columnar evaluator does
    not have."""
    if isinstance(e, Literal):
        return e
    if isinstance(e, (Attr, R.RowExpr)):
        if isinstance(e, Attr) and e.index is not None:
            return None
        column = e.attr if isinstance(e, Attr) else e.column
        reads.add((column, shift))
        return Attr("r", _key(column, shift))
    if isinstance(e, Unary):
        inner = _vector_ast(e.operand, shift, reads, derived)
        if inner is None:
            return None
        if e.op in ("IS NULL", "IS NOT NULL"):
            f = vectorize(inner)
            if f is None:
                return None
            key = f"#null{len(derived)}"
            derived.append((key, f, e.op == "IS NULL"))
            return Attr("r", key)
        return Unary(e.op, inner) if e.op in ("NOT", "-") else None
    if isinstance(e, BinOp):
        a = _vector_ast(e.left, shift, reads, derived)
        b = _vector_ast(e.right, shift, reads, derived)
        return None if a is None or b is None else BinOp(e.op, a, b)
    if isinstance(e, R.Nav) and e.kind in ("PREV", "NEXT"):
        return _vector_ast(e.arg, shift - e.offset if e.kind == "PREV" else shift + e.offset, reads, derived)
    return None


def _key(column: str, shift: int) -> str:
    return f"{column}@{shift}"


_PLANS: dict[int, tuple[R.RecognizeSpec, _Plan | Eligibility]] = {}


def _plan(spec: R.RecognizeSpec) -> _Plan | Eligibility:
    got = _PLANS.get(id(spec))
    if got is not None and got[0] is spec:
        return got[1]
    if numba is None:
        plan: _Plan | Eligibility = Eligibility(False, f"numba is not installed ({_NUMBA_ERROR})")
    else:
        try:
            plan = _Plan(spec)
        except _Refused as err:
            plan = Eligibility(False, str(err))
    if len(_PLANS) > 64:
        _PLANS.clear()
    _PLANS[id(spec)] = (spec, plan)
    return plan


def eligibility(spec: R.RecognizeSpec) -> Eligibility:
    """Whether :func:`run_chunk` runs ``spec`` (else the caller runs the engine), with the reason."""
    plan = _plan(spec)
    return plan if isinstance(plan, Eligibility) else Eligibility(True, "")


def describe(spec: R.RecognizeSpec) -> list[str]:
    """One line for explain: does the columnar kernel run this spec, and if not why."""
    e = eligibility(spec)
    if e.ok:
        return ["columnar kernel: DEFINE as one mask per variable per chunk, the pattern program compiled "
                "(numba), measures gathered by row index"]
    return [f"columnar kernel: no ({e.reason}); the row engine runs it"]


# ----------------------------------------------------------------------------------------------- a chunk


def run_chunk(spec: R.RecognizeSpec, table: pa.Table, bounds: Sequence[int]) -> pa.Table | None:
    """The outputs of the row pattern partitions in ``table`` (partition ``k`` is rows ``bounds[k]`` to
    ``bounds[k + 1]``, each whole and in the engine's order), as a table of ``spec.output`` columns, the rows
    and values :func:`.engine.run_partition` gives partition after partition; None if this chunk holds data
    the kernel does not read (then run the engine on it).  Raises :class:`.RecognizeBudgetError` as the
    engine does."""
    plan = _plan(spec)
    if isinstance(plan, Eligibility):
        raise ValueError(f"the columnar kernel does not run this spec: {plan.reason}")
    n = table.num_rows
    b = np.asarray(bounds, dtype=np.int64)
    if len(b) < 1 or b[0] != 0 or b[-1] != n or np.any(np.diff(b) < 0):
        raise ValueError("bounds must rise from 0 to the table's number of rows")
    try:
        bits = _masks(plan, table, b, n)
        ts, ts_ok = _times(plan, table, n)
    except _Fallback:
        return None
    ev, flat, fexcl, err = _nfa_match(plan, bits, b, ts, ts_ok, plan.track)
    if err:
        raise RecognizeBudgetError(
            f"MATCH_RECOGNIZE: more than {MAX_THREADS:,} partial matches alive in one partition (an "
            "ambiguous pattern such as (A|B)* over rows where both hold, with a DEFINE that reads other rows "
            "of the match); make the DEFINE conditions exclusive, add WITHIN, or use a reluctant quantifier")
    try:
        return _output(plan, table, b, ev, flat, fexcl)
    except _Fallback:
        return None


def _nfa_match(plan: _Plan, bits: np.ndarray, b: np.ndarray, ts: np.ndarray, ts_ok: np.ndarray, track: bool,
               look: bool = True):
    """The numba NFA over ``bits`` (``track``: keep every match's variables; ``plan.track`` is the least that
    the measures need; ``bench/match_kernel.py --nfa`` times both; ``look``: the look-ahead at start rows):
    events, match variables, exclusions and whether there were too many threads.  Its arrays do not grow: a
    size found too small is doubled (for the plan's later chunks too) and the chunk run again; so is a chunk
    whose thread budget the look-ahead may have changed, without it.  ``plan.merged`` counts the later starts'
    threads dropped for the earliest undecided start's (:func:`.engine.merge_leaves`), over the plan's chunks."""
    n = len(bits)
    while True:
        merged = np.zeros(1, dtype=np.int64)
        threads, nodes, variables = plan.caps
        caps = np.array([threads, nodes * n + 16 if track else 1, n + 1, variables * n + 16], dtype=np.int64)
        ev, flat, fexcl, code = _kernels().match(
            bits, b, plan.char_var, plan.char_excl, plan.after_off, plan.after, plan.start_bol, plan.start_plain,
            plan.resume_off, plan.resume, plan.match_pc, plan.skip, plan.skip_mask, plan.within is not None,
            float(plan.within or 0.0), plan.monotone, ts, ts_ok, plan.quiet, MAX_THREADS, track, caps, look,
            plan.look_need, plan.look_wait, plan.merge_ok, merged)
        if code < 2:
            plan.merged += int(merged[0])
            return ev, flat, fexcl, code == 1
        if code == 6:
            look = False
            continue
        k = {2: 0, 3: 1, 5: 2}[code]  # 4, the events, cannot happen: one per start row at most
        plan.caps[k] = max(1, 2 * plan.caps[k])


class _Fallback(Exception):
    """This chunk's data is not for the kernel."""


def _input(table: pa.Table, column: str, nan: bool = False):
    """The column as an Arrow array the kernel reads, None if the table lacks it; :class:`_Fallback` for a type
    it does not read, and for a NaN unless ``nan`` (a DEFINE's column: read as Spark SQL reads it)."""
    if column not in table.column_names:
        return None
    a = table.column(column)
    a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
    t = a.type
    if pa.types.is_dictionary(t):
        a = a.dictionary_decode()
        t = a.type
    if pa.types.is_floating(t):
        if t != pa.float64():
            a = a.cast(pa.float64())
        if not nan and pc.any(pc.is_nan(a)).as_py():
            raise _Fallback
        return a
    if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_null(t):
        return a
    if pa.types.is_string(t):
        return a.cast(pa.large_string())  # once here, not once per condition reading it
    if pa.types.is_large_string(t):
        return a
    raise _Fallback


def _lost(b: np.ndarray, shift: int, n: int) -> np.ndarray:
    """Where a row read ``shift`` rows away is off its partition (``b``: the partitions' bounds)."""
    lost = np.zeros(n, dtype=np.bool_)
    starts, ends = b[:-1], b[1:]
    for j in range(abs(shift)):
        idx = starts + j if shift < 0 else ends - 1 - j
        lost[idx[(idx >= starts) & (idx < ends)]] = True
    return lost


def _masks(plan: _Plan, table: pa.Table, b: np.ndarray, n: int) -> np.ndarray:
    """One int64 per row: bit ``v`` set where the DEFINE of variable ``v`` holds (undefined: always).  Each
    column read once into numpy (NaN a value, as Spark SQL and the row evaluator order it); PREV/NEXT are that
    column moved, NULL off the row's partition."""
    cols = {}
    base: dict[str, object] = {}
    lost: dict[int, np.ndarray] = {}
    try:
        for column, shift in sorted(plan.reads):
            if column not in base:
                a = _input(table, column, nan=True)
                base[column] = None if a is None else vector.column(a, nan_is_null=False)
            v = base[column]
            if v is None:
                continue
            if shift and shift not in lost:
                lost[shift] = _lost(b, shift, n)
            cols[("r", _key(column, shift))] = vector.moved(v, shift, lost[shift]) if shift else v
        for key, f, is_null in plan.derived:
            nulls = f.values(cols, n).is_null().to_numpy(zero_copy_only=False)
            cols[("r", key)] = nulls if is_null else ~nulls
    except (TypeError, ValueError, OverflowError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _Fallback from None
    defined = {i for i, _ in plan.defines}
    packed = plan.packed[1] if plan.packed else 0
    full = sum(1 << i for i in range(len(plan.variables)) if i not in defined and not packed >> i & 1)
    bits = np.full(n, full, dtype=np.int64)
    if packed:
        a = _input(table, plan.packed[0])
        if a is not None:  # a column the rows lack is NULL: no bit set
            if not pa.types.is_integer(a.type):
                raise _Fallback
            bits |= pc.fill_null(a, 0).to_numpy(zero_copy_only=False).astype(np.int64) & packed
    for i, f in plan.defines:
        try:
            holds = f(cols, n)
        except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise _Fallback from None
        bits |= np.left_shift(holds, i, dtype=np.int64)
    return bits


def _times(plan: _Plan, table: pa.Table, n: int) -> tuple[np.ndarray, np.ndarray]:
    if plan.within is None:
        return np.zeros(0), np.zeros(0, dtype=np.bool_)
    a = _input(table, plan.spec.time_column)
    if a is None:
        return np.zeros(n), np.zeros(n, dtype=np.bool_)
    if pa.types.is_boolean(a.type) or pa.types.is_string(a.type) or pa.types.is_large_string(a.type):
        raise _Fallback
    ok = pc.is_valid(a).to_numpy(zero_copy_only=False)
    values = pc.fill_null(a, 0).to_numpy(zero_copy_only=False)
    if values.dtype.kind in "iu":
        if len(values) and np.abs(values).max() >= 2 ** 53:  # int64 differences would not be exact doubles
            raise _Fallback
    return values.astype(np.float64), ok.astype(np.bool_)


# ----------------------------------------------------------------------------------------------- output


def _output(plan: _Plan, table: pa.Table, b: np.ndarray, ev: np.ndarray, flat: np.ndarray,
            fexcl: np.ndarray) -> pa.Table:
    """The output rows of the events (``ev`` rows: kind 0 match / 1 unmatched row, start, end, match number,
    offset of the match's variables in ``flat``) as :func:`.engine._emit` makes them."""
    k = _kernels()
    oj, oq, orow = k.expand(ev, fexcl, plan.mode)
    # the events come partition after partition, their start rows rising: each partition's run of events
    per = np.diff(np.searchsorted(ev[:, 1], b[1:-1], side="left"), prepend=0, append=len(ev))
    pstart, pend = np.repeat(b[:-1], per), np.repeat(b[1:], per)
    if len(oj) != len(ev) or np.any(oj != np.arange(len(ev))):  # else one output row per event, in order
        pstart, pend = pstart[oj], pend[oj]
    is_match = ev[oj, 0] == 0
    columns = {ms.name: _measure_column(plan, table, ms, ev, flat, oj, oq, pstart, pend, is_match)
               for ms in plan.measures}
    out = []
    for name in plan.spec.output:
        if name in plan.measure_names:
            out.append(columns[name])
        else:
            out.append(_take(_raw(table, name), orow))
    return pa.Table.from_arrays(out, names=list(plan.spec.output))


def _measure_column(plan: _Plan, table: pa.Table, ms: _Measure, ev, flat, oj, oq, pstart, pend,
                    is_match) -> pa.Array:
    k = _kernels()
    if ms.kind == "mnum":
        return pa.array(ev[oj, 3], mask=~is_match, type=pa.int64())
    if ms.kind == "read":
        return _take(_raw(table, ms.column), k.locate(ev, flat, oj, oq, ms.mset, ms.nth, ms.shift, ms.final, pstart,
                                                      pend))
    if ms.kind == "class":
        rows = k.locate(ev, flat, oj, oq, ms.mset, 0, ms.shift, ms.final, pstart, pend)
        codes = k.classify(ev, flat, oj, oq, rows, ms.final)
        return pa.array(plan.variables, pa.string()).take(pa.array(np.maximum(codes, 0), mask=codes < 0))
    if ms.kind == "agg":
        return _aggregate(table, ms, ev, flat, oj, oq, is_match)
    cols = {}
    for part in ms.parts:
        a = _measure_column(plan, table, part, ev, flat, oj, oq, pstart, pend, is_match)
        if pa.types.is_floating(a.type) and pc.any(pc.is_nan(a)).as_py():
            raise _Fallback  # the row evaluator reads a NaN as a value, the columnar one as NULL
        cols[("m", part.name)] = a
    try:
        values = ms.fn.values(cols, len(oj))
    except (TypeError, ValueError, OverflowError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _Fallback from None
    return pc.if_else(pa.array(is_match), values, pa.nulls(len(oj), values.type))


def _raw(table: pa.Table, column: str | None):
    return table.column(column) if column is not None and column in table.column_names else None


def _take(a, rows: np.ndarray) -> pa.Array:
    """``a`` at ``rows`` (NULL where -1; a missing column is NULL)."""
    ok = rows >= 0
    if a is None:
        return pa.nulls(len(rows))
    every = bool(ok.all())
    if a.null_count == 0 and (pa.types.is_integer(a.type) or pa.types.is_floating(a.type)):
        values = a.to_numpy()  # no copy: a numpy gather, no Arrow take
        got = values[rows if every else np.where(ok, rows, 0)]
        return pa.array(got, type=a.type, mask=None if every else ~ok)
    return a.take(pa.array(rows if every else np.where(ok, rows, 0), mask=None if every else ~ok))


def _aggregate(table: pa.Table, ms: _Measure, ev: np.ndarray, flat: np.ndarray, oj: np.ndarray, oq: np.ndarray,
               is_match: np.ndarray) -> pa.Array:
    m = len(oj)
    func = _AGGS[ms.func]
    a = None if ms.column is None else _input(table, ms.column)
    if ms.column is not None and a is None:  # a column the rows lack: NULL in every row
        if func != 0:
            return pa.nulls(m)
        a = pa.nulls(table.num_rows)
    n = table.num_rows
    ivals, fvals, kind = np.zeros(1, dtype=np.int64), np.zeros(1), 2
    if a is None:
        valid = np.ones(n, dtype=np.bool_)
    else:
        valid = pc.is_valid(a).to_numpy(zero_copy_only=False).astype(np.bool_)
        if pa.types.is_integer(a.type):
            kind, ivals = 0, pc.fill_null(a, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        elif pa.types.is_floating(a.type):
            kind, fvals = 1, pc.fill_null(a, 0.0).to_numpy(zero_copy_only=False)
        elif func != 0:  # SUM/AVG/MIN/MAX of strings or booleans: the engine's rules, not the kernel's
            raise _Fallback
    ival, fval, cnt, ok = _kernels().aggregate(ev, flat, oj, oq, ivals, fvals, valid, kind, ms.mset, func, ms.final)
    if func == 0:
        return pa.array(cnt, mask=~is_match, type=pa.int64())
    ok &= is_match
    if func == 2 or kind == 1:
        return pa.array(fval, mask=~ok, type=pa.float64())
    return pa.array(ival, mask=~ok, type=pa.int64())


# ----------------------------------------------------------------------------------------------- numba

_COMPILED: list = []


def _kernels():
    """The numba module, imported (its functions loaded from numba's cache or compiled) once per process."""
    if not _COMPILED:
        from sparkcep.runtime_udfs.recognize import _nfa

        _COMPILED.append(_nfa)
    return _COMPILED[0]
