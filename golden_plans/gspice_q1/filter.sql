SELECT
  *
FROM (
  SELECT
    *,
    CASE WHEN `type` = 'A' THEN 1 ELSE 0 END + CASE WHEN `type` = 'B' THEN 2 ELSE 0 END + CASE WHEN `type` = 'C' THEN 4 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` IN ('A', 'B', 'C')
) AS candidates
WHERE
  _mask <> 0
