-- a login and a password change in either order, then a payment, with the noise between them excluded
SELECT *
FROM audit
    MATCH_RECOGNIZE (
        PARTITION BY account
        ORDER BY ts
        MEASURES
            CLASSIFIER() AS step,
            MATCH_NUMBER() AS m,
            FINAL LAST(PAY.amount) AS paid
        ALL ROWS PER MATCH
        PATTERN (PERMUTE(LOGIN, CHANGE) {- NOISE*? -} PAY)
        DEFINE
            LOGIN AS lower(action) = 'login',
            CHANGE AS action = 'password',
            PAY AS action = 'pay' AND amount > 100
    )
