"""The result columns a batch MATCH_RECOGNIZE returns: only those its outer query reads
(``sparkcep.compiler.recognize.outputs``; on Spark: ``test_recognize_spark.test_batch_statements_equal_the_reference``
and the golden plan ``recognize_vshape_count``)."""

from __future__ import annotations

import pytest

from sparkcep.compiler.recognize import build_spec, pruned_output, read_columns
from sparkcep.grammar.recognize import parse_recognize

NAMES = ("p", "a", "c", "s")
VIEW = "__sparkcep_matches"


@pytest.mark.parametrize(("outer", "kept"), [
    # the V-shape count: p is not read
    (f"SELECT COUNT(*) AS n, SUM(a) AS sa, SUM(c) AS sc FROM {VIEW} AS m", ("a", "c")),
    # read only in WHERE, GROUP BY, HAVING, ORDER BY, a window, a subquery; qualified; another case
    (f"SELECT a FROM {VIEW} WHERE c > 1", ("a", "c")),
    (f"SELECT COUNT(*) FROM {VIEW} GROUP BY P", ("p",)),
    (f"SELECT MAX(a) FROM {VIEW} GROUP BY p HAVING MIN(c) > 0", ("p", "a", "c")),
    (f"SELECT a FROM {VIEW} ORDER BY s", ("a", "s")),
    (f"SELECT ROW_NUMBER() OVER (PARTITION BY p ORDER BY c) AS r FROM {VIEW}", ("p", "c")),
    (f"SELECT a FROM {VIEW} AS m WHERE m.c IN (SELECT x FROM other)", ("a", "c")),
    (f"SELECT m.A FROM {VIEW} AS m", ("a",)),
    # a struct field (s.f: s read), a lambda, a USING join column
    (f"SELECT s.f FROM {VIEW}", ("s",)),
    (f"SELECT transform(arr, x -> x + c) FROM {VIEW}", ("c",)),
    (f"SELECT a FROM {VIEW} JOIN other USING (p)", ("p", "a")),
    # a bare word sqlglot reads as a function, which Spark resolves to the result column of that name first
    (f"SELECT current_date, session_user FROM {VIEW}", ("current_date", "session_user")),
    # every column: a star other than COUNT(*), a NATURAL join, a quoted regex name, text that does not parse
    (f"SELECT * FROM {VIEW}", NAMES),
    (f"SELECT m.* FROM {VIEW} AS m", NAMES),
    (f"SELECT to_json(struct(*)) FROM {VIEW}", NAMES),
    (f"SELECT COUNT(m.*) FROM {VIEW} AS m", NAMES),
    (f"SELECT o.v FROM {VIEW} NATURAL JOIN other AS o", NAMES),
    (f"SELECT `(p)?+.+` FROM {VIEW}", NAMES),
    (f"SELECT a FROM {VIEW} WHERE IDENTIFIER('c') > 1", NAMES),
    (f"SELECT x FROM {VIEW} PIVOT (SUM(a) FOR c IN (1 AS x))", NAMES),  # grouped by p and s, unnamed
    (f"SELECT COUNT(*) FROM {VIEW} UNPIVOT (v FOR k IN (a, c))", NAMES),
    ("SELECT FROM WHERE (", NAMES),
    (f"TABLE {VIEW}", NAMES),
    # no column read at all: the first one, so that the rows are not lost
    (f"SELECT COUNT(*) FROM {VIEW}", ("p",)),
    (f"SELECT 1 AS one FROM {VIEW}", ("p",)),
])
def test_read_columns(outer, kept):
    names = (*NAMES, "current_date", "session_user") if "current_date" in outer else NAMES
    assert read_columns(outer, names) == kept


def test_pruned_output_keeps_each_column_with_its_type_and_the_engine_columns():
    text = ("SELECT COUNT(*) AS n, SUM(c) AS sc FROM events MATCH_RECOGNIZE (PARTITION BY p ORDER BY ts, id "
            "MEASURES FIRST(id) AS a, LAST(price) AS c AFTER MATCH SKIP TO LAST UP PATTERN (STRT DOWN+ UP) "
            "DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)) AS m")
    q = parse_recognize(text)
    spec = build_spec(q, {"p": "int", "ts": "bigint", "id": "bigint", "price": "double"})
    assert spec.output == ("p", "a", "c") and spec.output_types == ("int", "bigint", "double")
    got = pruned_output(spec, q.outer_sql)
    assert got.output == ("c",) and got.output_types == ("double",)
    assert got.columns == spec.columns and got.order_by == spec.order_by  # the sort, and so the ties, unchanged
    everything = parse_recognize(text.replace("SELECT COUNT(*) AS n, SUM(c) AS sc", "SELECT *"))
    assert pruned_output(spec, everything.outer_sql) is spec


ROWS_SCHEMA = {"p": "int", "ts": "bigint", "id": "bigint", "typ": "string", "price": "double"}
DROPPING = ("SELECT p, a, n FROM events MATCH_RECOGNIZE (PARTITION BY p ORDER BY ts MEASURES FIRST(A.id) AS a, "
            "LAST(price) AS lp, CLASSIFIER() AS cls, COUNT(B.*) AS n {rows} AFTER MATCH SKIP TO NEXT ROW "
            "PATTERN (A B* C) DEFINE A AS typ = 'A', B AS typ = 'B', C AS typ = 'C') AS m")


@pytest.mark.parametrize("rows", ["ONE ROW PER MATCH", "ALL ROWS PER MATCH WITH UNMATCHED ROWS"])
@pytest.mark.parametrize("seed", [1, 2])
def test_dropped_measures_change_no_kept_value(rows, seed):
    """The measures the outer query does not read leave the spec: the row engine's and the columnar kernel's
    rows over the pruned spec are the whole spec's rows cut to the kept columns (ties in ts, several
    partitions), and the batch worker no longer reads ``price``, which only the dropped ``LAST(price)`` read."""
    import random

    import pyarrow as pa

    from sparkcep.compiler.recognize import worker_spec
    from sparkcep.runtime_udfs import recognize as engine
    from sparkcep.runtime_udfs.recognize import kernel

    q = parse_recognize(DROPPING.format(rows=rows))
    spec = build_spec(q, ROWS_SCHEMA)
    pruned = pruned_output(spec, q.outer_sql)
    assert [m.name for m in pruned.measures] == ["a", "n"] and pruned.columns == spec.columns
    before = worker_spec(spec, ROWS_SCHEMA)  # None: the worker reads every engine column
    assert "price" in (spec.columns if before is None else before.spec.columns)
    assert "price" not in worker_spec(pruned, ROWS_SCHEMA).spec.columns
    rnd = random.Random(seed)
    parts = []
    for p in range(3):
        rows_p = [{"p": p, "ts": rnd.randint(0, 40), "id": i, "typ": rnd.choice("AABBBCD"),
                   "price": rnd.choice([1.5, 2.0, None])} for i in range(60)]
        for r in rows_p:
            r["__ts"] = r["ts"]
        parts.append(sorted(rows_p, key=engine.sort_key(spec)))
    full = [o for part in parts for o in engine.run_partition(spec, part)]
    cut = [o for part in parts for o in engine.run_partition(pruned, part)]
    assert cut == [{c: o[c] for c in pruned.output} for o in full] and len(full) >= 10
    table = pa.Table.from_pylist([r for part in parts for r in part])
    bounds = [0, 60, 120, 180]
    whole, kept = kernel.run_chunk(spec, table, bounds), kernel.run_chunk(pruned, table, bounds)
    assert kept.to_pylist() == whole.select(list(pruned.output)).to_pylist() == cut
