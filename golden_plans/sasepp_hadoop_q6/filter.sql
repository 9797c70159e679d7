SELECT
  *
FROM (
  SELECT
    `type`,
    `ts`,
    task_id,
    val,
    CASE WHEN `type` = 'ReducerStart' THEN 1 ELSE 0 END + CASE WHEN `type` = 'LoadStd' THEN 2 ELSE 0 END + CASE WHEN `type` = 'ReducerEnd' THEN 4 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` IN ('LoadStd', 'ReducerEnd', 'ReducerStart')
) AS candidates
WHERE
  _mask <> 0
