"""What the batch path ships to its Python worker: :func:`worker_spec`.

After Spark's sort, the worker needs only the columns the engine reads for matching and output: the sort's
tiebreak columns and the time column (without WITHIN) are not shipped.

A DEFINE that reads only the row being labelled and rows ``PREV``/``NEXT`` of it by a constant offset, made of
comparisons between columns and literals (STRING with STRING, BOOLEAN with BOOLEAN, numbers with numbers:
integer types and DOUBLE), ``AND``/``OR``/``NOT`` and ``IS [NOT] NULL``, is the same condition in Spark SQL
(three-valued logic, NULL = false; strings compared by code point as Python does; an integer meeting a DOUBLE
compared as DOUBLE; NaN equal to NaN and above every other DOUBLE, -0.0 equal to 0.0, as the engine compares).
The batch path then ships them packed into one INT column to the Python worker (:attr:`WorkerSpec.mask`: the
bit of variable ``i`` of ``spec.variables`` set where its condition holds, clear where it is false or NULL;
BIGINT past 31 variables) instead of the columns only these conditions read, and the engine reads the
variable's truth from its bit (:func:`sparkcep.ir.recognize.bit_test`).  ``PREV(x, k)`` / ``NEXT(x,
k)`` become ``lag(x, k)`` / ``lead(x, k)`` over the PARTITION BY columns in the order of Spark's sort (the
engine's row order, ties included; NULL beyond the partition, as in the engine): :attr:`WorkerSpec.shifted`,
computed by the Spark layer after the sort, only where Spark's window and the worker group the partition key
alike (integer, string, boolean, date and time keys; floating-point ones are left out), and only where the
columns this spares the worker cost more to ship than the window costs Spark (:data:`WINDOW_COST`: a window
costs about as much as two or three numeric columns across the Arrow boundary; otherwise the worker reads the
columns and evaluates PREV/NEXT itself).
FLOAT (single precision) columns are left to the engine (Spark compares an integer with a FLOAT in single
precision), and so is arithmetic (overflow rules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from sqlglot import exp

from sparkcep.compiler.codegen.sql import to_sql_expr
from sparkcep.compiler.recognize.analysis import walk
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import Attr, BinOp, Literal, Unary

__all__ = ["KEY_SHIFT", "WorkerSpec", "describe_worker", "worker_spec"]

#: The kind of value of a column by its Spark type (``simpleString``), for the types lowered here.
_KINDS = {"string": "str", "bigint": "int", "int": "int", "smallint": "int", "tinyint": "int",
          "boolean": "bool", "double": "float"}
_CMP = frozenset({"=", "!=", "<", "<=", ">", ">="})
#: Partition key types that Spark's window and the worker's partition cut group alike (PREV/NEXT as lag/lead).
_GROUPED_ALIKE = frozenset({"string", "bigint", "int", "smallint", "tinyint", "boolean", "date", "timestamp",
                            "timestamp_ntz"})


@dataclass(frozen=True)
class WorkerSpec:
    """The spec the batch worker runs after Spark's sort: ``spec.columns`` only what it reads, each DEFINE of
    ``computed`` reading its bit of the ``mask`` column; ``computed``: ``(variable, bit, Spark SQL)`` of the
    conditions Spark evaluates after the sort, over the input columns and the columns of ``shifted``:
    ``(column, input column, offset)``, the input column ``offset`` rows away from the row in the partition
    (negative: before, ``lag``; positive: after, ``lead``), NULL beyond the partition.  ``mask``: ``(column,
    Spark SQL)``, the bits of ``computed`` OR-ed (``CASE WHEN condition THEN 2^bit ELSE 0 END | ...``: never
    NULL; a NULL condition leaves its bit clear), None when nothing is computed."""

    spec: rx.RecognizeSpec
    computed: tuple[tuple[str, int, str], ...]
    shifted: tuple[tuple[str, str, int], ...] = ()
    mask: tuple[str, str] | None = None
    #: the one INT/SMALLINT/TINYINT PARTITION BY column when it travels in the mask's high bits (:data:`KEY_SHIFT`)
    #: instead of as a column of its own (the worker decodes it, ``sparkcep.spark.recognize``); None: not packed
    key: str | None = None
    #: where the key starts in the mask (:data:`KEY_SHIFT`)
    key_shift: int = 31


def _reference(e, var: str) -> tuple[str, int] | None:
    """``(column, offset)`` of a column of the row being labelled (as ``var``), or of ``PREV``/``NEXT`` of it
    by a constant offset; None for anything else."""
    offset = 0
    if isinstance(e, rx.Nav) and e.kind in ("PREV", "NEXT"):
        offset = -e.offset if e.kind == "PREV" else e.offset
        e = e.arg
    if isinstance(e, Attr) and e.index is None and e.var in (None, var):
        return e.attr, offset
    if isinstance(e, rx.RowExpr) and e.var in (None, var):
        return e.column, offset
    return None


def _kind(e, var: str, types: dict[str, str]) -> str | None:
    if isinstance(e, Literal):
        v = e.value
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, int):
            return "int" if -(2 ** 63) <= v < 2 ** 63 else None
        return "float" if isinstance(v, float) else ("str" if isinstance(v, str) else None)
    ref = _reference(e, var)
    return None if ref is None else _KINDS.get(types.get(ref[0], ""))


def _comparable(kinds: set) -> bool:
    return None not in kinds and (len(kinds) == 1 or kinds == {"int", "float"})


def _condition(e, var: str, types: dict[str, str]) -> bool:
    """Whether ``e`` (a DEFINE of ``var``) is a condition Spark computes as the engine does."""
    if _reference(e, var) is not None:
        return _kind(e, var, types) == "bool"
    if isinstance(e, Unary):
        if e.op == "NOT":
            return _condition(e.operand, var, types)
        if e.op in ("IS NULL", "IS NOT NULL"):
            ref = _reference(e.operand, var)
            return ref is not None and ref[0] in types
        return False
    if isinstance(e, BinOp):
        if e.op in ("AND", "OR"):
            return _condition(e.left, var, types) and _condition(e.right, var, types)
        if e.op in _CMP:
            sides = (e.left, e.right)
            if not any(_reference(s, var) is not None for s in sides):
                return False
            return _comparable({_kind(s, var, types) for s in sides})
    return False


def _lowered(e, var: str, shifted: Callable[[tuple[str, int]], str]):
    """A condition :func:`_condition` accepts with every reference a plain column: the input column, or
    ``shifted((column, offset))``, the column that holds it ``offset`` rows away."""
    ref = _reference(e, var)
    if ref is not None:
        return Attr(None, ref[0] if ref[1] == 0 else shifted(ref))
    if isinstance(e, Unary):
        return Unary(e.op, _lowered(e.operand, var, shifted))
    if isinstance(e, BinOp):
        return BinOp(e.op, _lowered(e.left, var, shifted), _lowered(e.right, var, shifted))
    return e


def _fresh(base: str, taken: set[str]) -> str:
    name = base
    while name.lower() in taken:
        name = "_" + name
    taken.add(name.lower())
    return name


#: What Spark pays per 10^6 rows for a ``lag``/``lead`` window over the sort's order, in units of shipping one
#: numeric column to the worker (measured, ``bench/match_recognize.py`` data, JVM CPU of the stage after the
#: shuffle, 2 cores: the sort alone 0.35 s, with one ``lag`` window 0.59 s; one BIGINT/INT/DOUBLE/BOOLEAN
#: column more across the Arrow boundary 0.06-0.10 s, a short STRING column 0.15 s).  PREV/NEXT become
#: ``lag``/``lead`` only where the columns that spares cost more than the window.
WINDOW_COST = 2.5
#: A STRING column across the Arrow boundary, in the same units.
STRING_COST = 1.5


def worker_spec(spec: rx.RecognizeSpec, schema: dict[str, str], *,
                window_cost: float = WINDOW_COST) -> WorkerSpec | None:
    """What the batch worker runs (see the module docstring) when that spares it at least one column of
    ``spec.columns``, else None.  ``schema``: the input columns' Spark types (``simpleString``).  DEFINEs with
    PREV/NEXT are computed by Spark (``lag``/``lead``) only when the columns only they read cost more to ship
    than ``window_cost`` (:data:`WINDOW_COST`; :data:`STRING_COST` for a STRING column, 1 for another)."""
    types = {c: t.lower() for c, t in schema.items()}
    navigable = all(types.get(c) in _GROUPED_ALIKE for c in spec.partition_by)
    plain = _build(spec, types, False)
    chosen = plain
    if navigable:
        shifting = _build(spec, types, True)
        if shifting[2]:
            spared = set(plain[3]) - set(shifting[3])
            cost = sum(STRING_COST if types.get(c) == "string" else 1.0 for c in spared)
            if cost > window_cost:
                chosen = shifting
    rewritten, computed, shifted, kept, mask = chosen
    if len(kept) == len([c for c in spec.columns if c != spec.time_column]):
        return None  # every column is still read: nothing spared
    key = _packed_key(spec, types, computed, mask)
    if key is not None:
        kept = [c for c in kept if c != key]
        mask = (mask[0], _with_key(key, mask[1]))
    ts = (spec.time_column,) if spec.time_column in spec.columns else ()
    columns = (*kept, *((mask[0],) if mask else ()), *ts)
    return WorkerSpec(replace(rewritten, columns=columns), tuple(computed), shifted, mask, key, KEY_SHIFT)


#: Where the packed partition key starts in the mask (``WorkerSpec.key_shift``): bits ``0..KEY_SHIFT - 2`` are
#: the variables', bit ``KEY_SHIFT - 1`` is set for a NULL key, bits ``KEY_SHIFT..62`` hold ``key + 2^31`` (a
#: 32-bit key made non-negative, so that the mask stays a non-negative BIGINT, as
#: :func:`sparkcep.ir.recognize.bit_test` reads it).
KEY_SHIFT = 31
#: The integer types a packed key may have (32 bits at most).
_PACKABLE = frozenset({"int", "smallint", "tinyint"})


def _packed_key(spec: rx.RecognizeSpec, types: dict[str, str], computed: list, mask) -> str | None:
    """The PARTITION BY column that travels in the mask's high bits: the only one, of a 32-bit integer type, when
    there is a mask and its bits leave room (every computed bit below ``KEY_SHIFT - 1``); else None."""
    if mask is None or len(spec.partition_by) != 1 or types.get(spec.partition_by[0]) not in _PACKABLE:
        return None
    if max(b for _, b, _ in computed) >= KEY_SHIFT - 1:
        return None
    return spec.partition_by[0]


def _with_key(key: str, bits_sql: str) -> str:
    """The mask's Spark SQL with ``key`` in its high bits (:data:`KEY_SHIFT`): a BIGINT, never NULL."""
    column = exp.column(key, quoted=True)
    shifted = exp.BitwiseLeftShift(
        this=exp.paren(exp.Add(this=exp.cast(column, "BIGINT"), expression=exp.Literal.number(2 ** 31))),
        expression=exp.Literal.number(KEY_SHIFT))
    high = exp.Case(ifs=[exp.If(this=exp.Is(this=column, expression=exp.null()),
                                true=exp.Literal.number(1 << (KEY_SHIFT - 1)))], default=shifted)
    bits = exp.paren(exp.maybe_parse(bits_sql, dialect="spark"))
    return exp.BitwiseOr(this=high, expression=bits).sql(dialect="spark")


def _build(spec: rx.RecognizeSpec, types: dict[str, str], navigate: bool) -> tuple[
        rx.RecognizeSpec, list[tuple[str, int, str]], tuple[tuple[str, str, int], ...], list[str],
        tuple[str, str] | None]:
    """``(spec with the lowered DEFINEs reading their bits, computed, shifted, the spec's columns still read,
    mask)``: every DEFINE :func:`_condition` accepts lowered, those with PREV/NEXT only if ``navigate``."""
    taken = {c.lower() for c in types}
    mask = _fresh("__mask", taken)
    bit_of = {v: i for i, v in enumerate(spec.variables)}
    computed: list[tuple[str, int, str]] = []
    terms: list[exp.Expression] = []
    shifted: dict[tuple[str, int], str] = {}

    def shifted_column(ref: tuple[str, int]) -> str:
        if ref not in shifted:
            shifted[ref] = _fresh(f"__nav{len(shifted)}", taken)
        return shifted[ref]

    defines = []
    for v, e in spec.defines:
        refs = [_reference(n, v) for n in walk(e)]
        if _condition(e, v, types) and (navigate or all(r is None or r[1] == 0 for r in refs)):
            condition = to_sql_expr(_lowered(e, v, shifted_column), types=types)
            bit = bit_of[v]
            computed.append((v, bit, condition.sql(dialect="spark")))
            # CASE WHEN: a NULL condition takes ELSE (NULL = false, as in the engine)
            terms.append(exp.Case(ifs=[exp.If(this=condition, true=exp.Literal.number(1 << bit))],
                                  default=exp.Literal.number(0)))
            defines.append((v, rx.bit_test(mask, bit)))
        else:
            defines.append((v, e))
    packed = None
    if terms:
        packed = terms[0]
        for t in terms[1:]:
            packed = exp.BitwiseOr(this=packed, expression=t)
    rewritten = replace(spec, defines=tuple(defines))
    needed = _read(rewritten) | set(spec.partition_by) | set(spec.output)
    if spec.within is not None or spec.rows_per_match != rx.ONE_ROW:
        needed |= {o.column for o in spec.order_by}
    kept = [c for c in spec.columns if c in needed and c != spec.time_column]
    return (rewritten, computed, tuple((name, column, offset) for (column, offset), name in shifted.items()), kept,
            None if packed is None else (mask, packed.sql(dialect="spark")))


def _read(spec: rx.RecognizeSpec) -> set[str]:
    out: set[str] = set()
    for e in [c for _, c in spec.defines] + [m.expr for m in spec.measures]:
        for node in walk(e):
            if isinstance(node, Attr):
                out.add(node.attr)
            elif isinstance(node, rx.RowExpr):
                out.add(node.column)
    return out


def describe_worker(spec: rx.RecognizeSpec, schema: dict[str, str]) -> list[str]:
    """Explain's lines on what the batch worker reads (none when it reads every column of ``spec``)."""
    w = worker_spec(spec, schema)
    if w is None:
        return []
    shown = [c for c in w.spec.columns if c != spec.time_column]
    out = [f"batch: the worker reads {', '.join(shown)} after Spark's sort (by the columns above: where every "
           "one is a number, string, boolean or time)"]
    if w.mask is not None:
        wide = "BIGINT" if max(b for _, b, _ in w.computed) >= 31 or w.key is not None else "INT"
        out.append(f"batch: Spark computes DEFINE {', '.join(f'{v} as bit {b}' for v, b, _ in w.computed)} after "
                   f"the sort, packed into one {wide} column {w.mask[0]} (NULL: bit clear)")
    if w.key is not None:
        out.append(f"batch: PARTITION BY {w.key} travels in {w.mask[0]}'s high bits (a BIGINT: one column less to "
                   "convert to Arrow), decoded by the worker")
    if w.shifted:
        navs = ", ".join(f"{'PREV' if k < 0 else 'NEXT'}({c}{'' if abs(k) == 1 else f', {abs(k)}'}) as "
                         f"{'lag' if k < 0 else 'lead'}({c}, {abs(k)})" for _, c, k in w.shifted)
        out.append(f"batch: {navs} over PARTITION BY and the sort's order (the rows' order in the engine)")
    return out
