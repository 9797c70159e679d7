"""AFTER MATCH SKIP queries of the pattern language on Spark (``CompiledQuery.apply``, which runs them as
MATCH_RECOGNIZE): batch and a file stream read one file per trigger equal the oracle (the strategy's matches,
preferment, the skip rule), with a negation between two components, after a loop, before an optional component,
a nested SEQ, a repeated group with UNTIL, an OR inside a SEQ and negations at the start and the end (a
stream's engine counts their window columns itself)."""

from __future__ import annotations

import json
import os
import random

import pytest

import sparkcep
from sparkcep.grammar.parser import parse_query
from sparkcep.ir.errors import CEPError
from sparkcep.oracles.match import match_rows

pytestmark = pytest.mark.spark

QUERIES = [
    # !(A n): no other A between a and the first b (the negation removes a match of _events(7) the query without
    # it reports)
    "PATTERN SEQ(A a, !(A n), B+ b[], C c) WHERE [id] AND b[i].x >= b[i-1].x WITHIN 8 AFTER MATCH SKIP PAST LAST EVENT "
    "RETURN a.ts AS a_ts, b[1].ts AS b1, b[b.len].ts AS bn, count(b[].x) AS n, c.ts AS c_ts",
    "PATTERN SEQ(A a, B*? b[], C c) USING partition_contiguity WHERE [id] WITHIN 8 AFTER MATCH SKIP TO NEXT EVENT "
    "RETURN a.ts AS a_ts, count(b[].x) AS n, c.ts AS c_ts",
    # NEXT: the first b is the row of the key right after a (its rows differ from the query without NEXT); UNTIL
    # under skip_till_next_match: over key 5 (A B B(x=3) B D C) the stop closes the loop, B and D are skipped, C
    # ends the match (no match if the closed loop could still take B; rows differ without UNTIL)
    "PATTERN SEQ(A a, NEXT B+ b[] UNTIL (b.x > 2), C c) USING skip_till_next_match WHERE [id] WITHIN 8 AFTER MATCH "
    "SKIP PAST LAST EVENT RETURN a.ts AS a_ts, count(b[].x) AS n, c.ts AS c_ts",
    # a negation after a reluctant loop, before a nested SEQ: no B between the loop's last b and c (its rows differ
    # from the query without the negation); the loop stops at any event with x > 2 (rows differ without UNTIL)
    "PATTERN SEQ(A a, B+? b[] UNTIL ANY (b.x > 2), !(B n), SEQ(C c, ANY(B, C) d)) WHERE [id] WITHIN 8 "
    "AFTER MATCH SKIP TO NEXT EVENT "
    "RETURN a.ts AS a_ts, count(b[].x) AS n, c.ts AS c_ts, d.ts AS d_ts",
    # no A between a and the next event (q's, or b's without q); a greedy group of (B, C) iterations that takes no
    # stop B (x > 2) nor skips one; then an A or a C, the A preferred.  Over key 4 (_events' tail) the group takes
    # two iterations (three without UNTIL, one reluctant); over key 2 the negation and over key 3 the OR's order
    # change the rows
    "PATTERN SEQ(A a, !(A n), B? q, (SEQ(B b, C c))+ UNTIL (b.x > 2), A e OR C f) WHERE [id] WITHIN 10 "
    "AFTER MATCH SKIP PAST LAST EVENT "
    "RETURN a.ts AS a_ts, q.ts AS q_ts, count(b[].x) AS n, c[c.len].ts AS c_ts, e.ts AS e_ts, f.ts AS f_ts, "
    "lower(a.type) AS la",  # a Spark SQL function of one event: a column Spark computes before the engine
]
# Spark SQL functions (and IN/BETWEEN forms) the engine does not evaluate, each over one event: columns Spark
# computes before the engine (refused before); BETWEEN and IN change the rows
QUERIES.insert(0, "PATTERN SEQ(A a, B+ b[], C c) USING skip_till_any_match WHERE [id] AND b[i].x BETWEEN 1 AND 2 "
               "AND a.x IN (0, 3) AND upper(c.type) = 'C' WITHIN 8 AFTER MATCH SKIP TO NEXT EVENT "
               "RETURN a.ts AS a_ts, count(b[].x) AS n, c.ts AS c_ts, lower(c.type) AS lc")
# a negation at the start: no C with a's x in (b.ts - 4, a.ts), and at the end: none with b's x, x > 0, in (b.ts,
# a.ts + 4); per event Spark finds the ts of the latest such C before it and counts those after it and at or after
# ts + 4 (window columns).  11 rows over _events(7) + _EDGE_TAIL; 10 without n.x = a.x, 9 without
# m.x = b.x or m.x > 0, 6 without any condition
EDGES = ("PATTERN SEQ(!(C n), A a, B b, !(C m)) USING skip_till_next_match WHERE [id] AND n.x = a.x AND m.x = b.x "
         "AND m.x > 0 WITHIN 4 AFTER MATCH SKIP PAST LAST EVENT RETURN a.ts AS a_ts, b.ts AS b_ts")
# key 6: C1 A2 B0 (C's x is not A's), A0 B2 C1 (C's x is not B's), A0 B0 C0 (C's x is 0), C2 A2 B0 with C and A at
# one ts, A0 B1 C1 with B and C at one ts (neither C is strictly inside its interval)
_EDGE_TAIL = [{"type": t, "ts": 90 + o, "id": 6, "x": x} for t, o, x in (
    ("C", 0, 1), ("A", 1, 2), ("B", 2, 0), ("A", 10, 0), ("B", 11, 2), ("C", 12, 1), ("A", 20, 0), ("B", 21, 0),
    ("C", 22, 0), ("C", 30, 2), ("A", 30, 2), ("B", 31, 0), ("A", 40, 0), ("B", 41, 1), ("C", 41, 1))]
QUERIES.insert(1, EDGES)
# ANY-bound negations at the start and the end over events with x NULL at times: an event lacking x is forbidden
# (a predicate on it is TRUE, SASE's rule): n's whatever a's x (the window's max over the key), m's alike
ANY_EDGES = ("PATTERN SEQ(!(ANY(C, D) n), A a, B b, !(ANY(C, D) m)) USING skip_till_next_match WHERE [id] AND "
             "n.x = a.x AND NOT (m.x > 2) WITHIN 4 AFTER MATCH SKIP PAST LAST EVENT RETURN a.ts AS a_ts, b.ts AS b_ts")


def _events(seed: int, n: int = 60) -> list[dict]:
    rnd = random.Random(seed)
    tail = [{"type": t, "ts": n + 1 + k, "id": 4, "x": 3 if k == 6 else 0} for k, t in enumerate("ABBCBCBCA")]
    tail += [{"type": t, "ts": n + 11 + k, "id": 5, "x": 3 if k == 2 else 0} for k, t in enumerate("ABBBDC")]
    return [{"type": rnd.choice("ABBC"), "ts": t + 1, "id": rnd.randint(1, 3), "x": rnd.randint(0, 3)}
            for t in range(n)] + tail


def _canon(rows) -> list[tuple]:
    return sorted(tuple(sorted(r.items())) for r in rows)


def test_batch_equals_the_oracle(spark):
    evs = _events(7) + _EDGE_TAIL
    df = spark.createDataFrame(evs, "type string, ts bigint, id bigint, x bigint")
    for text in QUERIES:
        got = [r.asDict() for r in sparkcep.compile(text).apply(df).collect()]
        want = match_rows(parse_query(text), evs)
        assert want and _canon(got) == _canon(want), text
    rnd = random.Random(4)  # 12 rows; 15 if a C or D lacking x did not forbid
    nulls = [{"type": rnd.choice("AABBCD"), "ts": k // 2, "id": rnd.randint(1, 2), "x": rnd.choice([0, 1, 3, None])}
             for k in range(100)]
    got = [r.asDict() for r in sparkcep.compile(ANY_EDGES).apply(spark.createDataFrame(
        nulls, "type string, ts bigint, id bigint, x bigint")).collect()]
    want = match_rows(parse_query(ANY_EDGES), nulls)
    assert want and _canon(got) == _canon(want)
    with pytest.raises(CEPError, match="numeric ts"):  # its window columns count within WITHIN of a number
        sparkcep.compile(EDGES).apply(spark.createDataFrame([], "type string, ts timestamp, id bigint, x bigint"))


def test_generated_job_computes_the_functions_of_one_event(spark, tmp_path):
    """The generated job of a query whose Spark SQL functions of one event (BETWEEN, IN, upper, lower) are columns
    Spark computes before the engine: run in this process over a file, its rows are the oracle's."""
    evs = _events(7)
    text = QUERIES[0]
    src, out = tmp_path / "events.json", tmp_path / "out"
    src.write_text("".join(json.dumps(e) + "\n" for e in evs))
    source = sparkcep.compile(text).job_source()
    assert "F.expr(sql).alias(name)" in source and "__sparkcep_f" in source
    job = {"__name__": "sparkcep_job"}  # not __main__: its session (this one) stays open
    exec(compile(source, "job.py", "exec"), job)  # noqa: S102 - the point: run the generated job
    job["main"](["--input", str(src), "--output", str(out), "--schema", "type string, ts bigint, id bigint, x bigint"])
    got = [json.loads(line) for f in sorted(out.glob("part-*")) for line in f.read_text().splitlines()]
    want = match_rows(parse_query(text), evs)
    assert want and _canon(got) == _canon(want)


@pytest.mark.parametrize("which", [-1, pytest.param("edges", marks=pytest.mark.slow)])
def test_stream_one_file_per_trigger_equals_the_oracle(spark, tmp_path, which):
    """Three files in time order (their modification times set apart: the file source takes the oldest first),
    read one per trigger; a last event of another key far later moves the watermark past every WITHIN, so every
    match is emitted.  With negations at the start and the end (``EDGES``: 6 rows over _events(7), 5 without the
    equalities, 4 without any condition) the engine computes the window columns (no window functions on a stream):
    counts of the negated events passing their conditions on them alone, the ts of the nearest one with the
    component's value, and holds each row until the watermark passes its ts + WITHIN."""
    evs = _events(7)
    src, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    src.mkdir()
    for k in range(3):
        chunk = evs[k * 20:(k + 1) * 20 if k < 2 else None] + ([{"type": "D", "ts": 1000, "id": 9, "x": 0}] if k == 2
                                                               else [])
        path = src / f"part-{k}.json"
        path.write_text("".join(json.dumps(e) + "\n" for e in chunk))
        os.utime(path, (1_700_000_000 + 10 * k, 1_700_000_000 + 10 * k))  # the file source reads by mtime
    text = EDGES if which == "edges" else QUERIES[which]
    stream = spark.readStream.schema("type string, ts bigint, id bigint, x bigint") \
        .option("maxFilesPerTrigger", 1).json(str(src))
    result = sparkcep.compile(text).apply(stream)
    assert result.isStreaming
    (result.writeStream.format("json").option("path", str(out)).option("checkpointLocation", str(ck))
     .outputMode("append").trigger(availableNow=True).start().awaitTermination())
    got = [r.asDict() for r in spark.read.schema(result.schema).json(str(out)).collect()]
    want = match_rows(parse_query(text), evs)
    assert want and _canon(got) == _canon(want)
