"""The IR of SQL:2016 row pattern recognition (``MATCH_RECOGNIZE``): frozen dataclasses.

The SQL front end (``sparkcep.grammar.recognize``) builds a :class:`Recognize` from a statement
``SELECT ... FROM t MATCH_RECOGNIZE (...) [AS m] [WHERE ...] [ORDER BY ...]``; the compiler turns it into a
:class:`RecognizeSpec` (what the engine ``sparkcep.runtime_udfs.recognize`` and the brute-force reference
``sparkcep.oracles.recognize`` read); the Spark layer runs the spec per partition.

Expressions reuse the pattern language's nodes (``ir.ast``: ``Literal``, ``Attr``, ``Unary``, ``BinOp``,
``Func``) with these meanings inside MATCH_RECOGNIZE:

* ``Attr(var, attr)``: a column of a row. ``var`` is a pattern variable or a SUBSET name (the last row mapped
  to it, RUNNING or FINAL as the enclosing :class:`Nav`/measure says), or ``None`` for the universal row
  pattern variable (the current row in DEFINE, the last row of the match so far in MEASURES).
* ``BinOp`` ops: ``+ - * / %``, ``= != < <= > >=``, ``AND OR``; ``Unary`` ops: ``NOT``, ``-``, ``IS NULL``,
  ``IS NOT NULL``; ``Func``: scalar functions the engines evaluate (``abs``, ``coalesce``, ...).
* :class:`Nav` (``PREV/NEXT/FIRST/LAST``), :class:`Classifier`, :class:`MatchNumber`, :class:`Agg` are the
  row pattern functions.
* :class:`RowExpr`: a per-row sub-expression in Spark SQL (any Spark function, CASE, LIKE, IN, CAST, ...)
  whose column references all name one row; Spark computes it before the shuffle as column ``column`` and the
  engines read it like an input column.

Semantics (docs/language.md, "MATCH_RECOGNIZE"): matches are searched in row order within a partition; among
the matches starting at a row the first in the pattern's preferment order wins (greedy quantifiers prefer more
iterations, reluctant fewer, alternation left to right, PERMUTE in lexicographic order of its list); DEFINE is
evaluated with RUNNING semantics while matching; then the AFTER MATCH SKIP rule picks the next start row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkcep.ir.ast import Attr, BinOp, Duration, Literal
from sparkcep.ir.errors import Span
from sparkcep.ir.serde import OMIT_DEFAULT


def _span() -> Span | None:
    return field(default=None, compare=False, repr=False)


# ----------------------------------------------------------------------------------------------- row pattern


@dataclass(frozen=True)
class PVar:
    """A primary row pattern variable ``A``."""

    name: str
    span: Span | None = _span()


@dataclass(frozen=True)
class PConcat:
    """``A B C``."""

    items: tuple[RowPattern, ...]
    span: Span | None = _span()


@dataclass(frozen=True)
class PAlt:
    """``A | B | C``: preferred left to right."""

    alternatives: tuple[RowPattern, ...]
    span: Span | None = _span()


@dataclass(frozen=True)
class PQuant:
    """``X*  X+  X?  X{n}  X{n,}  X{,m}  X{n,m}`` and the reluctant forms (``greedy=False``: ``X*?`` ...).

    ``max`` is None for unbounded. ``*`` is ``(0, None)``, ``+`` ``(1, None)``, ``?`` ``(0, 1)``,
    ``{,m}`` ``(0, m)``."""

    inner: RowPattern
    min: int
    max: int | None
    greedy: bool = True
    span: Span | None = _span()


@dataclass(frozen=True)
class PPermute:
    """``PERMUTE(A, B, C)``: every order of the items, preferred in lexicographic order of the list."""

    items: tuple[RowPattern, ...]
    span: Span | None = _span()


@dataclass(frozen=True)
class PExclude:
    """``{- X -}``: rows matched by X are part of the match but not output by ALL ROWS PER MATCH."""

    inner: RowPattern
    span: Span | None = _span()


@dataclass(frozen=True)
class PAnchor:
    """``^`` (``kind="start"``: the first row of the partition) or ``$`` (``kind="end"``: after its last row)."""

    kind: str
    span: Span | None = _span()


@dataclass(frozen=True)
class PEmpty:
    """``()``: the empty pattern, matching zero rows."""

    span: Span | None = _span()


RowPattern = PVar | PConcat | PAlt | PQuant | PPermute | PExclude | PAnchor | PEmpty


# ----------------------------------------------------------------------------------------------- expressions

#: RUNNING / FINAL, or None where not written (RUNNING in DEFINE; in MEASURES RUNNING by default, which for ONE
#: ROW PER MATCH equals FINAL).
Semantics = str | None


@dataclass(frozen=True)
class Nav:
    """``PREV(e, n)`` / ``NEXT(e, n)`` (physical offset in the partition from the row ``e`` refers to; NULL
    outside the partition), ``FIRST(e, n)`` / ``LAST(e, n)`` (logical offset among the rows mapped to the
    variable of ``e``: FIRST from the first such row forward, LAST from the last such row backward).
    ``offset`` defaults to 1 for PREV/NEXT and 0 for FIRST/LAST. ``PREV(LAST(A.x, 1), 2)`` nests a logical
    navigation inside a physical one."""

    kind: str
    arg: object
    offset: int
    semantics: Semantics = None
    span: Span | None = _span()


@dataclass(frozen=True)
class Classifier:
    """``CLASSIFIER()``: the variable the current row is mapped to (``CLASSIFIER(v)`` restricts to a
    variable/SUBSET: the last row mapped to ``v``'s variable)."""

    var: str | None = None
    semantics: Semantics = None
    span: Span | None = _span()


@dataclass(frozen=True)
class MatchNumber:
    """``MATCH_NUMBER()``: 1 for the first match of a partition, then 2, 3, ... (empty matches count)."""

    span: Span | None = _span()


@dataclass(frozen=True)
class Agg:
    """``COUNT(*)``, ``COUNT(A.*)``, ``COUNT(e)``, ``SUM/AVG/MIN/MAX(e)`` over the rows of the match (so far,
    for RUNNING) mapped to ``var`` (a variable, a SUBSET name, or None: every row). ``arg`` is None for
    ``COUNT(*)``/``COUNT(A.*)``."""

    func: str
    arg: object
    var: str | None = None
    semantics: Semantics = None
    span: Span | None = _span()


@dataclass(frozen=True)
class RowExpr:
    """A per-row Spark SQL expression, computed by Spark before the shuffle as column ``column``.

    ``sql`` is Spark SQL over the input columns (unqualified), generated from a sqlglot tree; ``var`` is the
    row it is read from (as in ``Attr``)."""

    sql: str
    column: str
    var: str | None = None
    span: Span | None = _span()


def bit_test(column: str, bit: int) -> BinOp:
    """The condition "bit ``bit`` of the non-negative integer ``column`` is set" (``column % 2^(bit+1) >=
    2^bit``; NULL: false): a DEFINE that reads its truth from a packed mask column (the batch path has Spark
    compute several one-row DEFINEs into one INT column, the bit of variable ``i`` of ``spec.variables``
    ``i``). :func:`tested_bit` reads it back."""
    return BinOp(">=", BinOp("%", Attr(None, column), Literal(2 ** (bit + 1))), Literal(2 ** bit))


def tested_bit(e: object) -> tuple[str, int] | None:
    """``(column, bit)`` of a :func:`bit_test` condition, None for any other expression."""
    if not (isinstance(e, BinOp) and e.op == ">=" and isinstance(e.left, BinOp) and e.left.op == "%"):
        return None
    column, modulus, low = e.left.left, e.left.right, e.right
    if not (isinstance(column, Attr) and column.var is None and column.index is None
            and isinstance(modulus, Literal) and isinstance(low, Literal)):
        return None
    m, v = modulus.value, low.value
    if type(v) is int and v > 0 and v & (v - 1) == 0 and m == 2 * v and type(m) is int:
        return column.attr, v.bit_length() - 1
    return None


# ----------------------------------------------------------------------------------------------- the clause


@dataclass(frozen=True)
class Measure:
    expr: object
    name: str
    span: Span | None = _span()


#: ROWS PER MATCH options
ONE_ROW = "ONE ROW PER MATCH"
ALL_ROWS = "ALL ROWS PER MATCH"  # = SHOW EMPTY MATCHES
ALL_ROWS_OMIT_EMPTY = "ALL ROWS PER MATCH OMIT EMPTY MATCHES"
ALL_ROWS_WITH_UNMATCHED = "ALL ROWS PER MATCH WITH UNMATCHED ROWS"
ROWS_PER_MATCH = (ONE_ROW, ALL_ROWS, ALL_ROWS_OMIT_EMPTY, ALL_ROWS_WITH_UNMATCHED)

#: AFTER MATCH SKIP options (``SKIP TO v`` is ``SKIP TO LAST v``)
SKIP_PAST_LAST_ROW = "PAST LAST ROW"
SKIP_TO_NEXT_ROW = "TO NEXT ROW"
SKIP_TO_FIRST = "TO FIRST"
SKIP_TO_LAST = "TO LAST"


@dataclass(frozen=True)
class Skip:
    kind: str = SKIP_PAST_LAST_ROW
    var: str | None = None
    span: Span | None = _span()


@dataclass(frozen=True)
class OrderItem:
    column: str
    ascending: bool = True
    nulls_first: bool | None = None
    span: Span | None = _span()


#: the kinds of :class:`WindowCount`: the partition's rows of its types before the row's time, at or before it
#: minus WITHIN; after it, at or after it plus WITHIN
WINDOW_KINDS = ("before", "before_within", "after", "after_within", "latest_before", "earliest_after")


@dataclass(frozen=True)
class WindowCount:
    """A per-row count over the partition's rows (a pattern query's negation at the start or the end under AFTER
    MATCH SKIP, ``sparkcep.compiler.recognize.from_pattern``): how many rows whose ``type_column`` is one of
    ``types`` lie, in event time, before the row's (``before``), at or before it minus WITHIN
    (``before_within``), after it (``after``), at or after it plus WITHIN (``after_within``).  DEFINEs read it as
    column ``name``.  A batch has Spark compute it (window functions) as an input column; a stream, which has no
    such window, leaves it to the engine (``RecognizeSpec.windows``), which gives a row to the pattern once its
    counts are settled (an ``after_within`` count read only of a match's first row: the candidate match waits
    for it instead); there an ``after*`` count is the negated count of the rest (at or before, before),
    which differs from the batch value by the partition's total, the same for every row, so comparisons of two
    such counts hold alike.  ``condition``: an expression over the row alone (``Attr(None, column)``) the
    counted rows also satisfy (the negated event's conditions on it alone): NULL or false is not counted, as in
    the batch's ``count(CASE WHEN ... THEN 1 END)``.  ``pairs`` ``((own, other), ...)``, kinds ``latest_before``
    and ``earliest_after`` (an equality of the negated event with the component next to it): not a count but
    the ts of the latest such row strictly before the row's time (the earliest strictly after it) whose ``own``
    columns (none NULL) equal the row's ``other`` ones; the engine may read one older than the row's time minus
    WITHIN as NULL, and the earliest after as NULL unless it is before the row's time plus WITHIN (the DEFINE
    that reads it, ``at IS NULL OR at <= b.ts - w`` / ``>= a.ts + w``, holds alike); ``lacking``: a row with
    NULL ``own`` columns matches on them whatever the row's values."""

    name: str
    types: tuple[str, ...]
    kind: str
    type_column: str = "type"
    condition: object = field(default=None, metadata={OMIT_DEFAULT: True})
    pairs: tuple[tuple[str, str], ...] = field(default=(), metadata={OMIT_DEFAULT: True})
    #: with ``pairs``: the negated event is ANY-bound, a row whose ``own`` column is NULL lacks it and its equality
    #: holds whatever the row's ``other`` value (SASE's lacking-attribute rule)
    lacking: bool = field(default=False, metadata={OMIT_DEFAULT: True})


@dataclass(frozen=True)
class Recognize:
    """A parsed ``MATCH_RECOGNIZE`` statement.

    ``source`` is the table or view read (``FROM source MATCH_RECOGNIZE``); ``outer_sql`` is the statement with
    the ``source MATCH_RECOGNIZE (...) [AS alias]`` replaced by the table name ``result_view``, otherwise as
    written (read and, for a stream's side columns, rewritten by sqlglot: ``sparkcep.ir.outer``), which Spark
    runs over the engine's result (SELECT list, WHERE, GROUP BY, ORDER BY on the matches). ``defines`` holds
    only the variables that have a DEFINE (the others are true)."""

    source: str
    pattern: RowPattern
    partition_by: tuple[str, ...] = ()
    order_by: tuple[OrderItem, ...] = ()
    measures: tuple[Measure, ...] = ()
    rows_per_match: str = ONE_ROW
    skip: Skip = Skip()
    subsets: tuple[tuple[str, tuple[str, ...]], ...] = ()
    defines: tuple[tuple[str, object], ...] = ()
    within: Duration | None = None
    alias: str | None = None
    outer_sql: str = "SELECT * FROM __sparkcep_matches"
    result_view: str = "__sparkcep_matches"
    #: per-row counts a negation at the start or end reads (:class:`WindowCount`), input columns in a batch
    windows: tuple[WindowCount, ...] = field(default=(), metadata={OMIT_DEFAULT: True})
    text: str = field(default="", compare=False, repr=False)
    span: Span | None = _span()


# ----------------------------------------------------------------------------------------------- engine spec


@dataclass(frozen=True)
class RecognizeSpec:
    """What the engine and the reference read (JSON in generated jobs, via ``ir.serde``).

    ``columns`` are the input columns the engine receives per row (partition, order, those DEFINE/MEASURES
    read, the ``RowExpr`` columns, and for ALL ROWS PER MATCH every input column that is output), in order.
    ``time_column`` is the first ORDER BY column (event time); ``order_by`` the whole ORDER BY (ties after it
    are broken by ``tiebreak``: the remaining ``columns`` in order, ascending, NULLs first).
    ``output`` lists the result columns in order: partition columns, then (ALL ROWS) the input columns, then
    the measures, with ``output_types`` their Spark SQL types (``simpleString``: ``bigint``, ``double``,
    ``string``, ...); ``time_column`` is the hidden numeric event-time column the Spark layer adds (``__ts``:
    epoch microseconds for a TIMESTAMP column, the value itself for a numeric one) and ``within`` the WITHIN
    interval in its units (a match is one only if its last row's ``__ts`` minus its first row's is less than
    ``within``), or None."""

    pattern: RowPattern
    variables: tuple[str, ...]
    defines: tuple[tuple[str, object], ...]
    subsets: tuple[tuple[str, tuple[str, ...]], ...]
    measures: tuple[Measure, ...]
    rows_per_match: str
    skip: Skip
    partition_by: tuple[str, ...]
    order_by: tuple[OrderItem, ...]
    columns: tuple[str, ...]
    output: tuple[str, ...]
    output_types: tuple[str, ...] = ()
    time_column: str = "__ts"
    within: float | None = None
    #: the :class:`WindowCount` columns the engine computes itself (not input columns: a stream's)
    windows: tuple[WindowCount, ...] = field(default=(), metadata={OMIT_DEFAULT: True})
