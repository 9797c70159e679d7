SELECT
  *
FROM (
  SELECT
    `type`,
    `ts`,
    job,
    mapper,
    `load`,
    cpu,
    CASE WHEN `type` = 'Start' THEN 1 ELSE 0 END + CASE WHEN `type` = 'Measurement' THEN 2 ELSE 0 END + CASE WHEN `type` = 'End' THEN 4 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` IN ('End', 'Measurement', 'Start')
) AS candidates
WHERE
  _mask <> 0
