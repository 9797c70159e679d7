"""Load shedding for a workload without a JVM: the one gSPICE stage (its pure body,
:func:`~sparkcep.spark.shedding.shed_partition`, driven by the controller) in front of the workload's operators
(the shared executor of its Sharon plan and the queries that run alone, each through its streaming function over
micro-batches).  With a loose latency bound the controller keeps everything, and every query's results are those
of the unshed workload and of the oracle (issue 17's Done-when line); the stage's utilities are weighted by the
sharing plan (:mod:`sparkcep.compiler.optimizer.sharing.weights`)."""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.ir.spec import with_default_outputs
from sparkcep.oracles.match import match_rows, trend_aggregates
from sparkcep.runtime_udfs.shedding.controller import BacklogController, BatchController
from sparkcep.runtime_udfs.shedding.shedder import fit_shedder
from sparkcep.spark import late
from sparkcep.spark.operator import MatchOperator
from sparkcep.spark.results import canonical
from sparkcep.spark.shedding import SHED, shed_partition, training_events
from sparkcep.spark.workload import QUERY
from tests.strategies import event_streams
from tests.test_late_events import COLUMNS, SCHEMA, operator_rows, plain

BOUND = 1000.0  # seconds: loose, every micro-batch below takes well under it
#: the stage's training sample: every type, both keys
TRAINING = [{"type": "ABCD"[i % 4], "ts": i, "id": i % 3 % 2, "x": i % 5} for i in range(40)]


@st.composite
def shedding_workloads(draw):
    """2-3 queries over one shared sub-pattern (each: a prefix, the shared part, a suffix; as the sharing
    tests draw them): trend aggregates the shared executor covers, and match queries, which run alone."""
    window = draw(st.integers(2, 9))
    shared = draw(st.lists(st.sampled_from("ABCD"), min_size=1, max_size=2))
    lines = []
    for i in range(draw(st.integers(2, 3))):
        types = [*draw(st.lists(st.sampled_from("ABCD"), max_size=1)), *shared,
                 *draw(st.lists(st.sampled_from("ABCD"), max_size=1))]
        if draw(st.booleans()):
            lines.append(f"q{i}: RETURN COUNT(*) PATTERN SEQ({', '.join(types)}) WHERE [id] WITHIN {window}")
        else:
            seq = ", ".join(f"{t} v{k}" for k, t in enumerate(types))
            lines.append(f"q{i}: PATTERN SEQ({seq}) WHERE [id] WITHIN {window} "
                         f"RETURN v0.ts AS first_ts, v{len(types) - 1}.ts AS last_ts")
    return ";\n".join(lines)


def micro_batches(events: list[dict], sizes: list[int]) -> list[list[dict]]:
    out, i = [], 0
    for size in sizes:
        if i < len(events):
            out.append(events[i:i + size])
            i += size
    return out + ([events[i:]] if i < len(events) else [])


def shed_stream(w, batches: list[list[dict]], backlog: bool, seed: int) -> tuple[list[list[dict]], int]:
    """``(kept micro-batches, events dropped)``: the workload's stage as the Spark stage runs it, one task per
    micro-batch with the ρ the controller set after the previous one (``backlog``: the backlog controller of a
    followed directory, else the batch-duration one), each batch taking 0.1 s plus 1 ms per event."""
    weighted, _, bound = w._shedding_parts(SCHEMA)
    assert bound == BOUND
    shedder = fit_shedder(weighted, training_events(TRAINING, None), attributes=["x"])
    controller = BacklogController(bound) if backlog else BatchController(bound)
    kept, dropped, start = [], 0, 0.0
    for i, batch in enumerate(batches):
        [out] = shed_partition(shedder, iter([pd.DataFrame(batch, columns=COLUMNS)]), controller.rho, seed=seed + i)
        kept.append([{c: r[c] for c in COLUMNS} for r in out[~out[SHED]].to_dict("records")])
        dropped += int(out[SHED].sum())
        duration = 0.1 + 0.001 * len(batch)
        if backlog:
            controller.on_batch(duration=duration, offered=len(batch), kept=len(kept[-1]), latency=2 * duration,
                                backlog=sum(map(len, batches[i + 1:])), interval=duration)
        else:
            controller.on_batch(start, duration, len(batch), len(kept[-1]))
        start += duration
    return kept, dropped


def workload_rows(w, batches: list[list[dict]]) -> dict[str, list]:
    """Each query's rows from the workload's operators (the shared executor's specs, the alone queries) over the
    micro-batches, as the workload's one stateful operator runs them."""
    ops = [(None, MatchOperator(spec, SCHEMA)) for spec in w.specs()]
    ops += [(q.name, MatchOperator(with_default_outputs(q.spec(SCHEMA), COLUMNS), SCHEMA)) for q in w.alone()]
    out: dict[str, list] = {q.name: [] for q in w.queries}
    for name, op in ops:
        for _, row in operator_rows(op, batches, lateness=0):
            row = plain({k: v for k, v in row.items() if k not in (late.KIND, late.REASON, late.RECORD)})
            out[row.pop(QUERY) if name is None else name].append(row)
    return {k: canonical(v) for k, v in out.items()}


def oracle_rows(w, events: list[dict]) -> dict[str, list]:
    out = {}
    for q in w.queries:
        if q.resolved().mode == "match":
            out[q.name] = canonical(match_rows(q.query, events, COLUMNS))
        else:
            out[q.name] = canonical([plain(r) for r in trend_aggregates(q.query, events)])
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(shedding_workloads(), event_streams("ABCD", max_size=12, attrs={"x": (0, 4), "id": (0, 1)}),
       st.lists(st.integers(1, 5), max_size=4), st.booleans(), st.integers(0, 2**16))
def test_workload_shedding_under_a_loose_bound_equals_the_unshed_workload_and_the_oracle(text, events, sizes,
                                                                                        backlog, seed):
    w = sparkcep.compile_shared_workload(text, budget=None, shedding_latency=BOUND)
    batches = micro_batches(events, sizes)
    kept, dropped = shed_stream(w, batches, backlog, seed)
    assert dropped == 0
    shed = workload_rows(w, kept)
    assert shed == workload_rows(w, batches)
    assert shed == oracle_rows(w, events)


def test_a_query_whose_results_others_share_weighs_more_in_the_stage():
    """Sharon's Example 3: ``c``'s whole pattern is the shared ``(A, B)`` that ``a`` and ``b`` read, so ``c`` weighs
    3 and the others 1; the match query ``m`` runs alone and weighs 1.  The stage learns the weighted utilities:
    an ``A`` that completes only ``c``'s matches is worth 3 of one that completes only ``m``'s."""
    text = ("a: RETURN COUNT(*) PATTERN SEQ(A, B, C) WHERE [id] WITHIN 10;"
            "b: RETURN COUNT(*) PATTERN SEQ(A, B, D) WHERE [id] WITHIN 10;"
            "c: RETURN COUNT(*) PATTERN SEQ(A, B) WHERE [id] WITHIN 10;"
            "m: PATTERN SEQ(A x, E y) WHERE [id] WITHIN 10")
    w = sparkcep.compile_shared_workload(text, budget=None, shedding_latency=BOUND)
    assert w.plan.chosen == ("p1",) and {q.name for q in w.alone()} == {"m"}
    weighted, _, _ = w._shedding_parts()
    assert [weight for _, weight in weighted] == [1.0, 1.0, 3.0, 1.0]
    # key 0: A then B (c's match only); key 1: A then E (m's match only); far apart: separate windows
    events = [{"type": t, "ts": ts, "id": k, "x": 0} for t, ts, k in
              [("A", 0, 0), ("B", 1, 0), ("A", 100, 1), ("E", 101, 1)]]
    shedder = fit_shedder(weighted, training_events(events, None), pane_length=1)
    codes, values = shedder.coder.encode_frame(pd.DataFrame(events, columns=COLUMNS), "type")
    utility = shedder.utilities(codes, values)
    assert utility[0] == 3 * utility[2] > 0
