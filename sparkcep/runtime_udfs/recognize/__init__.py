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

from sparkcep.ir import recognize as R
from sparkcep.ir.recognize import SKIP_PAST_LAST_ROW as PAST_LAST_ROW
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
           "advance", "compile_pattern", "describe_engine", "describe_program", "init_state", "run_partition",
           "sort_key",
           "state_from_json", "state_to_json", "step", "wakeup"]


def describe_program(spec) -> list[str]:
    """The compiled pattern program as readable lines (``0: CHAR A``, ``1: SPLIT 2, 4``, ...), for explain."""
    return compiled(spec).program.describe()


def describe_engine(spec) -> list[str]:
    """How the engine runs ``spec``, as readable lines for explain: thread merging, incremental aggregates,
    whether a batch runs the columnar kernel, the rows the streaming state keeps."""
    c = compiled(spec)
    out = [f"pattern program: {len(c.program.code)} instructions; threads in preferment order, earlier start rows "
           "first"]
    if c.mergeable:
        out.append("threads of one start row at the same instruction merged (every DEFINE reads only the row "
                   "being labelled and PREV/NEXT of it)")
        if c.skip == PAST_LAST_ROW and c.merge_leaves:
            out.append("AFTER MATCH SKIP PAST LAST ROW: a later start row's thread at the same instruction as the "
                       "earliest undecided start's is dropped")
        elif c.merge_leaves:
            out.append(f"AFTER MATCH SKIP TO {'FIRST' if c.skip == R.SKIP_TO_FIRST else 'LAST'} {c.spec.skip.var}: a "
                       "later start row's thread at the same instruction as the earliest undecided start's is "
                       f"dropped at {len(c.merge_leaves)} of {sum(pc == same for pc, same in c.leaf_of.items())} "
                       "instruction(s): those where its match is sure to skip past the later start")
    else:
        out.append(f"threads kept apart (a DEFINE reads other rows of the match): at most {MAX_THREADS:,} partial "
                   "matches per partition")
    if c.define_slots.items:
        out.append(f"{len(c.define_slots.items)} running aggregate(s) of DEFINE kept incrementally per thread")
    from sparkcep.runtime_udfs.recognize import kernel

    # the batch path's choice (sparkcep.spark.recognize.partition_function): kernel per chunk, else the row engine
    out += [f"batch: {line}" for line in kernel.describe(spec)]
    keep = "the earliest undecided start row" + (f" minus {c.reach} row(s) for PREV" if c.reach else "")
    out.append(f"streaming state: the rows from {keep}"
               + (f"; a start row is given up once the watermark is WITHIN ({c.within:g}) past it"
                  if c.within is not None else ""))
    return out
