"""``sparkcep.spark.session``: the settings :func:`local_session` gives its session (``SESSION_DEFAULTS``)."""

from __future__ import annotations

import pytest

from sparkcep.spark.session import SESSION_DEFAULTS, with_defaults

BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"


class _Conf:
    """A session's ``conf`` (``get(key, default)``, ``set``) over a dict: only the values set explicitly."""

    def __init__(self, values: dict[str, str]):
        self.values = dict(values)

    def get(self, key: str, default=None):
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _Session:
    def __init__(self, values: dict[str, str]):
        self.conf = _Conf(values)


def test_defaults_fill_only_what_the_session_lacks():
    bare = with_defaults(_Session({"spark.sql.shuffle.partitions": "2"}))
    assert bare.conf.values == {"spark.sql.shuffle.partitions": "2", BYTES: str(2 ** 31 - 1)}
    given = with_defaults(_Session({BYTES: "1048576"}))  # a value given at start-up wins
    assert given.conf.values == {BYTES: "1048576"}
    assert set(SESSION_DEFAULTS) == {BYTES}


@pytest.mark.spark
def test_local_session_has_no_arrow_byte_limit(spark):
    """The test session is ``local_session``'s: Spark reads its byte limit as exactly 2^31 - 1, the one value at
    which it does not measure the Arrow batch after every row it writes for a Python worker."""
    assert spark.conf.get(BYTES) == str(2 ** 31 - 1)
    assert spark._jsparkSession.sessionState().conf().arrowMaxBytesPerBatch() == 2 ** 31 - 1
