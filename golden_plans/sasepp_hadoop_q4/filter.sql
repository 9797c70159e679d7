SELECT
  *
FROM (
  SELECT
    `type`,
    `ts`,
    task_id,
    size,
    CASE WHEN `type` = 'JobStart' THEN 1 ELSE 0 END + CASE WHEN `type` = 'DataIO' THEN 2 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` IN ('DataIO', 'JobStart')
) AS candidates
WHERE
  _mask <> 0
