-- A workload of three MATCH_RECOGNIZE statements over the Ticker table of the Apache Flink documentation
-- ("Detecting Patterns"). The first two share one pass (same PARTITION BY and ORDER BY); the third runs alone.

-- the V shape of a stock's price (the Flink documentation's example)
SELECT *
FROM Ticker
    MATCH_RECOGNIZE (
        PARTITION BY symbol
        ORDER BY rowtime
        MEASURES
            START_ROW.rowtime AS start_tstamp,
            LAST(PRICE_DOWN.rowtime) AS bottom_tstamp,
            LAST(PRICE_UP.rowtime) AS end_tstamp
        ONE ROW PER MATCH
        AFTER MATCH SKIP TO LAST PRICE_UP
        PATTERN (START_ROW PRICE_DOWN+ PRICE_UP)
        DEFINE
            PRICE_DOWN AS
                (LAST(PRICE_DOWN.price, 1) IS NULL AND PRICE_DOWN.price < START_ROW.price) OR
                    PRICE_DOWN.price < LAST(PRICE_DOWN.price, 1),
            PRICE_UP AS
                PRICE_UP.price > LAST(PRICE_DOWN.price, 1)
    ) AS vshape;

-- three or more rises in a row
SELECT symbol, start_tstamp, end_tstamp, rises
FROM Ticker
    MATCH_RECOGNIZE (
        PARTITION BY symbol
        ORDER BY rowtime
        MEASURES
            FIRST(UP.rowtime) AS start_tstamp,
            LAST(UP.rowtime) AS end_tstamp,
            COUNT(UP.*) AS rises
        PATTERN (UP{3,})
        DEFINE UP AS UP.price > PREV(UP.price)
    ) AS rising;

-- a drop of more than 5 from one row to the next, whatever the symbol
SELECT *
FROM Ticker
    MATCH_RECOGNIZE (
        ORDER BY rowtime
        MEASURES D.rowtime AS drop_tstamp, PREV(D.price) - D.price AS fall
        PATTERN (D)
        DEFINE D AS D.price < PREV(D.price) - 5
    ) AS drops;
