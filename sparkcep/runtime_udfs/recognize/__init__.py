"""The MATCH_RECOGNIZE engine: a row pattern compiled into a program (:mod:`.program`) run as a prioritized NFA
(:mod:`.engine`), with DEFINE and MEASURES compiled into closures (:mod:`.evaluate`).  Pure Python (no
pyspark); the Spark layer (``sparkcep.spark.recognize``) feeds it the rows of each partition in order.

Example: the issue's ``A B+`` over A1 B2 B3 B4 A5 B6 gives two matches::

    >>> from sparkcep.ir.ast import Attr, BinOp, Literal
    >>> from sparkcep.ir import recognize as R
    >>> pat = R.PConcat((R.PVar("A"), R.PQuant(R.PVar("B"), 1, None)))
    >>> is_ = lambda t: BinOp("=", Attr(None, "t"), Literal(t))
    >>> spec = R.RecognizeSpec(pat, ("A", "B"), (("A", is_("a")), ("B", is_("b"))), (),
    ...     (R.Measure(R.Agg("count", None), "n"),), R.ONE_ROW, R.Skip(), (), (R.OrderItem("ts"),),
    ...     ("t", "ts"), ("n",))
    >>> run_partition(spec, [{"t": t, "ts": i, "__ts": i} for i, t in enumerate("abbbab", 1)])
    [{'n': 4}, {'n': 2}]
"""

from __future__ import annotations

from sparkcep.runtime_udfs.recognize.engine import (
    MAX_THREADS,
    RecognizeBudgetError,
    RecognizeState,
    advance,
    compiled,
    init_state,
    run_partition,
    step,
    wakeup,
)
from sparkcep.runtime_udfs.recognize.order import sort_key
from sparkcep.runtime_udfs.recognize.program import MAX_INSTRUCTIONS, ProgramTooLarge, compile_pattern
from sparkcep.runtime_udfs.recognize.serde import state_from_json, state_to_json

__all__ = ["MAX_INSTRUCTIONS", "MAX_THREADS", "ProgramTooLarge", "RecognizeBudgetError", "RecognizeState",
           "advance", "compile_pattern", "describe_program", "init_state", "run_partition", "sort_key",
           "state_from_json", "state_to_json", "step", "wakeup"]


def describe_program(spec) -> list[str]:
    """The compiled pattern program as readable lines (``0: CHAR A``, ``1: SPLIT 2, 4``, ...), for explain."""
    return compiled(spec).program.describe()
