-- every row of a run of rising prices with running and final measures; the other rows too (WITH UNMATCHED ROWS)
SELECT symbol, ts, price, cls, running_n, total_n, avg_up
FROM quotes
    MATCH_RECOGNIZE (
        PARTITION BY symbol
        ORDER BY ts
        MEASURES
            CLASSIFIER() AS cls,
            RUNNING COUNT(*) AS running_n,
            FINAL COUNT(*) AS total_n,
            AVG(UP.price) AS avg_up
        ALL ROWS PER MATCH WITH UNMATCHED ROWS
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (S UP{2,})
        DEFINE
            UP AS UP.price > PREV(UP.price)
    )
ORDER BY symbol, ts
