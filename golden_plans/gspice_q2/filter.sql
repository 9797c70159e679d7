SELECT
  *
FROM (
  SELECT
    *,
    CASE WHEN `type` = 'A' THEN 1 ELSE 0 END + CASE WHEN `type` = 'B' THEN 2 ELSE 0 END + CASE WHEN `type` = 'C' THEN 4 ELSE 0 END + CASE WHEN `type` = 'D' THEN 8 ELSE 0 END + CASE WHEN `type` = 'E' THEN 16 ELSE 0 END + CASE WHEN `type` = 'F' THEN 32 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` IN ('A', 'B', 'C', 'D', 'E', 'F')
) AS candidates
WHERE
  _mask <> 0
