-- bench/match_recognize.py's V-shape, counted: the outer query reads the measures a and c, not the partition
-- column p, so a batch's worker returns a and c only
SELECT COUNT(*) AS n, SUM(a) AS sa, SUM(c) AS sc
FROM events
    MATCH_RECOGNIZE (
        PARTITION BY p
        ORDER BY ts, id
        MEASURES FIRST(id) AS a, LAST(id) AS c
        ONE ROW PER MATCH
        AFTER MATCH SKIP TO LAST UP
        PATTERN (STRT DOWN+ UP)
        DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)
    ) AS m
