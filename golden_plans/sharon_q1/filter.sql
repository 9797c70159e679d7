SELECT
  *
FROM (
  SELECT
    `type`,
    `ts`,
    vehicle,
    CASE WHEN `type` = 'OakSt' THEN 1 ELSE 0 END + CASE WHEN `type` = 'MainSt' THEN 2 ELSE 0 END + CASE WHEN `type` = 'StateSt' THEN 4 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` IN ('MainSt', 'OakSt', 'StateSt')
) AS candidates
WHERE
  _mask <> 0
