"""The whole compiler pipeline (text → parse → analyze → optimize → engine spec) driving the pure match
engine, property-tested against the oracle on random queries and random streams (no JVM).

Events arrive in random micro-batches (out of order within each), with random watermark advances, as in
streaming; then the engine is flushed, as at the end of a batch job.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkcep
from sparkcep.ir.spec import with_default_outputs
from sparkcep.oracles.match import match_rows
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.spark.results import canonical
from tests.strategies import event_streams

COLUMNS = ["type", "ts", "x", "id"]
OPS = ["<", "<=", ">", ">=", "=", "!="]


@st.composite
def seq_queries(draw) -> str:
    """A random match query of 1–4 single-event components (SEQ, ANY), equivalence tests, local and
    parameterized predicates (sometimes under OR), WITHIN, with or without RETURN."""
    n = draw(st.integers(1, 4))
    names = "abcd"[:n]
    comps = []
    for v in names:
        if draw(st.integers(0, 4)) == 0:
            t1, t2 = draw(st.lists(st.sampled_from("ABCD"), min_size=2, max_size=2, unique=True))
            comps.append(f"ANY({t1}, {t2}) {v}")
        else:
            comps.append(f"{draw(st.sampled_from('ABCD'))} {v}")
    conds = []
    if draw(st.booleans()):
        conds.append("[id]")
    for v in names:
        if draw(st.integers(0, 2)) == 0:
            conds.append(f"{v}.x {draw(st.sampled_from(OPS))} {draw(st.integers(0, 4))}")
    if n > 1:
        for _ in range(draw(st.integers(0, 2))):
            u, v = sorted(draw(st.lists(st.sampled_from(names), min_size=2, max_size=2, unique=True)))
            form = draw(st.integers(0, 2))
            if form == 0:
                conds.append(f"{u}.x {draw(st.sampled_from(OPS))} {v}.x")
            elif form == 1:
                conds.append(f"{u}.x + {v}.x > {draw(st.integers(0, 8))}")
            else:
                conds.append(f"({u}.x < {v}.x OR {v}.id = {draw(st.integers(0, 1))})")
    pattern = f"SEQ({', '.join(comps)})" if n > 1 else comps[0]
    text = f"PATTERN {pattern}"
    if conds:
        text += " WHERE " + " AND ".join(conds)
    text += f" WITHIN {draw(st.integers(1, 8))}"
    if draw(st.booleans()):
        items = [f"{v}.ts" for v in names] + [f"{names[0]}.x AS first_x"]
        if n > 1:
            items.append(f"{names[0]}.x + {names[-1]}.x AS total")
        text += " RETURN " + ", ".join(items)
    return text


def run_partitioned(spec, events, cuts, watermarks):
    """What ``groupBy(spec.key)`` does: one engine per key, each fed its events as :func:`run_engine`."""
    groups: dict[tuple, list[dict]] = {}
    for e in events:
        groups.setdefault(tuple(e.get(k) for k in spec.key), []).append(e)
    return [row for part in groups.values() for row in run_engine(spec, part, cuts, watermarks)]


def run_engine(spec, events, cuts, watermarks):
    """Feed ``events`` in the micro-batches that ``cuts`` delimit, each shuffled, advancing the watermark."""
    cuts = [min(c, len(events)) for c in cuts]
    state, rows = match_engine.init_state(), []
    bounds = [0, *sorted(cuts), len(events)]
    for k, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)):
        batch = events[lo:hi][::-1] if k % 2 else events[lo:hi]
        state, out = match_engine.step(spec, state, batch)
        rows += out
        if k < len(watermarks):
            # a watermark never passes an event not yet delivered (what Spark guarantees with no lateness)
            safe = min([e["ts"] for e in events[hi:]], default=math.inf) - 1
            state, out = match_engine.advance(spec, state, min(watermarks[k], safe))
            rows += out
    state, out = match_engine.advance(spec, state, math.inf)
    return rows + out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=seq_queries(), events=event_streams(types="ABCD", max_size=9),
       cuts=st.lists(st.integers(0, 9), max_size=3), watermarks=st.lists(st.integers(0, 30), max_size=4))
def test_compiled_engine_equals_oracle(text, events, cuts, watermarks):
    q = sparkcep.compile(text)
    spec = with_default_outputs(q.spec(), COLUMNS)
    got = run_partitioned(spec, events, cuts, sorted(watermarks))
    expected = match_rows(q.query, events, COLUMNS)
    assert canonical(got) == canonical(expected), text
