SELECT
  *
FROM (
  SELECT
    `type`,
    `ts`,
    task_id,
    period,
    CASE WHEN `type` = 'ReducerStart' THEN 1 ELSE 0 END + CASE WHEN `type` = 'DataPull' THEN 2 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` IN ('DataPull', 'ReducerStart')
) AS candidates
WHERE
  _mask <> 0
