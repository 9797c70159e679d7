SELECT
  *
FROM (
  SELECT
    *,
    CASE WHEN `type` = 'MEDICINE-TAKEN' THEN 1 ELSE 0 END + CASE WHEN `type` = 'MEDICINE-TAKEN' THEN 2 ELSE 0 END AS _mask
  FROM events
  WHERE
    `type` = 'MEDICINE-TAKEN' AND (
      name = 'John' AND medicine = 'Antibiotics'
    )
) AS candidates
WHERE
  _mask <> 0
