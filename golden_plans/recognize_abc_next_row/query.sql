-- A B+ C with AFTER MATCH SKIP TO NEXT ROW: overlapping matches, one per start row, within 10 seconds
SELECT id, first_x, last_x, n_b
FROM events
    MATCH_RECOGNIZE (
        PARTITION BY id
        ORDER BY ts
        MEASURES
            A.x AS first_x,
            C.x AS last_x,
            COUNT(B.*) AS n_b
        ONE ROW PER MATCH
        AFTER MATCH SKIP TO NEXT ROW
        PATTERN (A B+ C)
        DEFINE
            A AS A.kind = 'A',
            B AS B.kind = 'B' AND B.x > PREV(B.x),
            C AS C.kind = 'C'
        WITHIN INTERVAL '10' SECOND
    )
WHERE n_b >= 2
