SELECT
  *
FROM (
  SELECT
    `type`,
    `ts`,
    job_id,
    period,
    CASE WHEN `type` = 'JobStart' THEN 1 ELSE 0 END + CASE WHEN `type` = 'Mapper' THEN 2 ELSE 0 END + CASE WHEN `type` = 'JobEnd' THEN 4 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` IN ('JobEnd', 'JobStart', 'Mapper') AND NOT (
      job_id IS NULL
    )
) AS candidates
WHERE
  _mask <> 0
