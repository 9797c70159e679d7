SELECT
  *
FROM (
  SELECT
    `type`,
    `ts`,
    segment,
    vehicle,
    speed,
    CASE WHEN `type` = 'Accident' THEN 1 ELSE 0 END + CASE WHEN `type` = 'Position' THEN 2 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` IN ('Accident', 'Position')
) AS candidates
WHERE
  _mask <> 0
