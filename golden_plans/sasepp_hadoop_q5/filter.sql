SELECT
  *
FROM (
  SELECT
    `type`,
    `ts`,
    task_id,
    CASE WHEN `type` = 'Balance' THEN 1 ELSE 0 END + CASE WHEN `type` = 'ReducerStart' THEN 2 ELSE 0 END + CASE WHEN `type` = 'Imbalance' THEN 4 ELSE 0 END + CASE WHEN `type` = 'ReducerEnd' THEN 8 ELSE 0 END + CASE WHEN `type` = 'Balance' THEN 16 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` IN ('Balance', 'Imbalance', 'ReducerEnd', 'ReducerStart')
) AS candidates
WHERE
  _mask <> 0
