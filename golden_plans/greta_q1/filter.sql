SELECT
  *
FROM (
  SELECT
    `type`,
    `ts`,
    company,
    sector,
    price,
    CASE WHEN `type` = 'Stock' THEN 1 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` = 'Stock'
) AS candidates
WHERE
  _mask <> 0
