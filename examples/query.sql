-- A SQL:2016 MATCH_RECOGNIZE statement over examples/events/ (`--table events`: the input is read as FROM's table):
-- per id, an A followed by one or more Bs.
SELECT * FROM events MATCH_RECOGNIZE (
    PARTITION BY id ORDER BY ts
    MEASURES FIRST(A.ts) AS a_ts, LAST(B.ts) AS last_b_ts, COUNT(B.*) AS n_b
    ONE ROW PER MATCH
    AFTER MATCH SKIP PAST LAST ROW
    PATTERN (A B+)
    DEFINE A AS type = 'A', B AS type = 'B'
)
