"""Differential test: sparkcep's MATCH_RECOGNIZE against Apache Flink's, on the subset Flink supports.

Flink (PyFlink, ``apache-flink`` from PyPI) runs in a subprocess of its own Python (one JVM for every
statement), so the project's environment needs no pyflink: set ``SPARKCEP_FLINK_PYTHON`` to that Python, or
create ``.venv-flink`` at the repository root (``make flink-diff`` does both). Without it the test is skipped.

For each seeded random stream (a few hundred rows, a few partitions, ties in ``ts`` broken by ``id`` in
both systems) and each statement, Flink's rows must equal those of sparkcep's brute-force reference
(``oracles.recognize.recognize_all``) and of the engine (``runtime_udfs.recognize.run_partition``), the
statement parsed by ``grammar.recognize.parse_recognize`` and compiled by ``compiler.recognize.build_spec``.

Where Flink is not the standard, the statements avoid it (found by running Flink 2.3.0, batch mode):

* its greedy quantifiers do not backtrack: a row that satisfies both the quantified variable and the next
  one goes to the quantified variable only (``A B+ C`` with ``B: price > 1``, ``C: price > 3`` over prices
  1, 2, 5, 3, 1 finds nothing; the standard matches 1, 2, 5): after a greedy quantifier the next variable's
  DEFINE is disjoint from the quantified one's here; reluctant quantifiers may overlap;
* its PREV in DEFINE does not leave the match (NULL on the match's first row; the standard reads the row
  before it in the partition): PREV is used on later rows only;
* its default skip is TO NEXT ROW, the standard's PAST LAST ROW: every statement writes the clause;
* it ignores ``^``, raises on SKIP TO FIRST v when v's row starts the match, and refuses alternation,
  groups, PERMUTE, ``{- -}``, SUBSET, ``{,m}``, ALL ROWS PER MATCH, MATCH_NUMBER, CLASSIFIER, RUNNING and
  PREV in MEASURES, a physical offset on a variable in DEFINE (``PREV(B.price)``), a greedy quantifier last.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.flink

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "bench" / "flink_worker.py"
COLUMNS = (("p", "INT", "int"), ("ts", "BIGINT", "bigint"), ("id", "BIGINT", "bigint"),
           ("typ", "STRING", "string"), ("price", "DOUBLE", "double"))
SEEDS = (1, 2)

_TYPES = "DEFINE A AS typ = 'A', B AS typ = 'B', C AS typ = 'C'"
_ABC = "FIRST(A.id) AS a, LAST(B.id) AS lb, COUNT(B.id) AS nb, LAST(C.id) AS c"

#: (name, MEASURES, the rest of the clause). ``rt`` is Flink's event-time column (``ts`` in milliseconds).
STATEMENTS = (
    ("abc_past_last", _ABC, f"AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) {_TYPES}"),
    ("abc_next_row", _ABC, f"AFTER MATCH SKIP TO NEXT ROW PATTERN (A B+ C) {_TYPES}"),
    ("abc_to_last_b", _ABC, f"AFTER MATCH SKIP TO LAST B PATTERN (A B+ C) {_TYPES}"),
    ("abc_to_b", _ABC, f"AFTER MATCH SKIP TO B PATTERN (A B+? C) {_TYPES}"),
    ("abc_to_first_b", _ABC, f"AFTER MATCH SKIP TO FIRST B PATTERN (A B+? C) {_TYPES}"),
    ("reluctant_star_overlap", "FIRST(A.id) AS a, COUNT(B.id) AS nb, LAST(C.id) AS c, SUM(B.price) AS sb",
     "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B*? C) "
     "DEFINE A AS typ = 'A', B AS price > 5, C AS typ = 'C' OR price > 17"),
    ("reluctant_range_overlap", "FIRST(A.id) AS a, COUNT(B.id) AS nb, C.id AS c",
     "AFTER MATCH SKIP TO NEXT ROW PATTERN (A B{1,3}? C) "
     "DEFINE A AS typ = 'A', B AS price < 15, C AS typ = 'C' AND price > 8"),
    ("range_greedy", _ABC, f"AFTER MATCH SKIP PAST LAST ROW PATTERN (A B{{2,3}} C) {_TYPES}"),
    ("at_least", _ABC, f"AFTER MATCH SKIP TO NEXT ROW PATTERN (A B{{2,}} C) {_TYPES}"),
    ("exactly", "FIRST(A.id) AS a, FIRST(B.id) AS fb, C.id AS c",
     f"AFTER MATCH SKIP PAST LAST ROW PATTERN (A B{{2}} C) {_TYPES}"),
    ("leading_plus", "FIRST(A.id) AS a, COUNT(A.id) AS na, LAST(B.id) AS b, COUNT(*) AS n",
     "AFTER MATCH SKIP PAST LAST ROW PATTERN (A+ B+ C) "
     "DEFINE A AS typ = 'A', B AS typ = 'B' OR typ = 'D', C AS typ = 'C'"),
    ("leading_star", "FIRST(B.id) AS b, COUNT(B.id) AS nb, C.id AS c",
     "AFTER MATCH SKIP TO NEXT ROW PATTERN (B* C) DEFINE B AS typ = 'B', C AS typ = 'C'"),
    ("optional", "FIRST(A.id) AS a, B.id AS b, C.id AS c",
     f"AFTER MATCH SKIP PAST LAST ROW PATTERN (A? B? C) {_TYPES}"),
    ("within_next_row", "FIRST(A.id) AS a, LAST(C.id) AS c",
     f"AFTER MATCH SKIP TO NEXT ROW PATTERN (A B C) WITHIN INTERVAL '3' SECOND {_TYPES}"),
    # not _ABC: Flink plans two clauses that differ only in WITHIN as one (bench/flink_worker.py)
    ("within_greedy", "FIRST(A.id) AS a, COUNT(B.id) AS nb, SUM(B.price) AS sb, LAST(C.id) AS c",
     f"AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) WITHIN INTERVAL '6' SECOND {_TYPES}"),
    ("rising_prev", "FIRST(A.id) AS a, COUNT(B.id) AS nb, LAST(B.price) AS top, C.id AS c",
     "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) DEFINE A AS typ = 'A', "
     "B AS price > PREV(price), C AS price <= PREV(price)"),
    ("define_last_and_agg", _ABC,
     "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) DEFINE A AS typ = 'A', "
     "B AS typ = 'B' AND price >= LAST(A.price) - 5, C AS typ = 'C' AND AVG(B.price) > 8"),
    ("define_first_count", _ABC,
     "AFTER MATCH SKIP TO NEXT ROW PATTERN (A B+ C) DEFINE A AS typ = 'A', "
     "B AS typ = 'B' AND COUNT(B.id) <= 3, C AS typ = 'C' AND price > FIRST(B.price) AND PREV(price, 2) < 16"),
    ("measures_nav_aggs",
     "LAST(B.price, 1) AS lb1, FIRST(B.price, 1) AS fb1, LAST(id, 2) AS l2, FIRST(id) AS f0, "
     "AVG(B.price) AS ab, SUM(price) AS sp, MIN(B.price) AS mnb, MAX(B.id) AS mxb, COUNT(*) AS n, "
     "FINAL LAST(B.id) AS fin, LAST(C.price) - FIRST(A.price) AS d",
     f"AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C) {_TYPES}"),
    ("v_shape", "FIRST(A.id) AS a, LAST(B.price) AS bottom, LAST(C.price) AS top, COUNT(*) AS n",
     "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B+ C+ D) DEFINE "
     "B AS price < PREV(price), C AS price > PREV(price), D AS price <= PREV(price)"),
)


def flink_sql(measures: str, rest: str) -> str:
    return (f"SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY p ORDER BY rt, id MEASURES {measures} "
            f"ONE ROW PER MATCH {rest}) AS m")


def sparkcep_sql(measures: str, rest: str) -> str:
    return flink_sql(measures, rest).replace("ORDER BY rt, id", "ORDER BY ts, id")


def stream(seed: int, partitions: int = 3, per_partition: int = 120) -> list[dict]:
    """Rows of a few partitions: types A-D (B most often), prices 1-20 (whole numbers), ts in ms with ties."""
    rnd = random.Random(seed)
    rows, next_id = [], 0
    for p in range(1, partitions + 1):
        ts = rnd.randrange(0, 5000)
        for _ in range(per_partition):
            ts += rnd.choice((0, 500, 1000, 1000, 1500, 2000))
            rows.append({"p": p, "ts": ts, "id": next_id, "typ": rnd.choices("ABCD", (3, 4, 3, 1))[0],
                         "price": float(rnd.randint(1, 20))})
            next_id += 1
    rnd.shuffle(rows)  # arrival order is not the row order
    return rows


def flink_python() -> str | None:
    candidates = [os.environ.get("SPARKCEP_FLINK_PYTHON"), str(ROOT / ".venv-flink" / "bin" / "python")]
    for exe in (c for c in candidates if c):
        if Path(exe).is_file():
            probe = subprocess.run([exe, "-c", "import pyflink"], capture_output=True)
            if probe.returncode == 0:
                return exe
    return None


def run_flink(exe: str, tables: list[dict], queries: list[dict]) -> dict[str, dict]:
    job = {"tables": tables, "queries": queries, "parallelism": 1, "union": True}
    proc = subprocess.run([exe, str(WORKER)], input=json.dumps(job), capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"the Flink worker failed:\n{proc.stderr[-3000:]}")
    out = {}
    for line in proc.stdout.splitlines():
        rec = json.loads(line)
        if "id" in rec:
            out[rec["id"]] = rec
    return out


def _norm(v):
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 9)
    return v


def canonical(rows) -> list[tuple]:
    return sorted((tuple(_norm(v) for v in r) for r in rows), key=repr)


@pytest.fixture(scope="module")
def flink_results(tmp_path_factory):
    exe = flink_python()
    if exe is None:
        pytest.skip("no Python with pyflink: set SPARKCEP_FLINK_PYTHON or run `make flink-diff`")
    tmp = tmp_path_factory.mktemp("flink")
    tables, queries, data = [], [], {}
    for seed in SEEDS:
        rows = stream(seed)
        data[seed] = rows
        path = tmp / f"events_{seed}.csv"
        path.write_text("".join(",".join(str(r[c]) for c, _, _ in COLUMNS) + "\n" for r in rows))
        tables.append({"name": f"events_{seed}", "path": str(path),
                       "columns": ", ".join(f"{c} {t}" for c, t, _ in COLUMNS)})
        for name, measures, rest in STATEMENTS:
            sql = flink_sql(measures, rest).replace("FROM events ", f"FROM events_{seed} ")
            queries.append({"id": f"{name}/{seed}", "sql": sql})
    return data, run_flink(exe, tables, queries)


def sparkcep_rows(sql: str, rows: list[dict], *, engine: bool) -> tuple[list[str], list[tuple]]:
    from sparkcep.compiler.recognize import build_spec, check_recognize
    from sparkcep.grammar.recognize import parse_recognize
    from sparkcep.oracles.recognize import recognize_all

    q = parse_recognize(sql)
    check_recognize(q, streaming=False)
    spec = build_spec(q, {c: s for c, _, s in COLUMNS}, ts_unit="ms")
    events = [{**r, "__ts": r["ts"]} for r in rows]
    if engine:
        from sparkcep.runtime_udfs import recognize as engine_mod

        key = engine_mod.sort_key(spec)
        parts: dict = {}
        for r in events:
            parts.setdefault(tuple(r[c] for c in spec.partition_by), []).append(r)
        out = []
        for part in parts.values():
            out.extend(engine_mod.run_partition(spec, sorted(part, key=key)))
    else:
        out = recognize_all(spec, events)
    return list(spec.output), [tuple(o[c] for c in spec.output) for o in out]


@pytest.mark.parametrize("engine", [False, True], ids=["reference", "engine"])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name,measures,rest", STATEMENTS, ids=[s[0] for s in STATEMENTS])
def test_flink_equals_sparkcep(flink_results, name, measures, rest, seed, engine):
    data, results = flink_results
    flink = results[f"{name}/{seed}"]
    assert flink["error"] is None, f"Flink refused the statement: {flink['error']}"
    columns, mine = sparkcep_rows(sparkcep_sql(measures, rest), data[seed], engine=engine)
    assert [c.lower() for c in columns] == [c.lower() for c in flink["columns"]]
    assert flink["rows"], "a statement that matches nothing compares nothing: change the stream or the query"
    assert canonical(mine) == canonical(flink["rows"])


if __name__ == "__main__":  # the statements as Flink SQL, to try them by hand
    for n, m, r in STATEMENTS:
        sys.stdout.write(f"-- {n}\n{flink_sql(m, r)};\n")
