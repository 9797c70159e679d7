"""The helpers of ``bench/recognize_split.py``: stage kinds, a side's session settings."""

from bench.recognize_split import SIDE_CONF, session_conf, stage_label
from sparkcep.spark.session import SESSION_DEFAULTS


def test_stages_are_told_apart_by_their_input_and_shuffle_output():
    assert stage_label({"inputBytes": 31_000_000, "shuffleWriteBytes": 20_000_000}) == "cpu_scan"
    assert stage_label({"inputBytes": 0, "inputRecords": 5, "shuffleWriteBytes": 0}) == "cpu_scan"
    assert stage_label({"inputBytes": 0, "shuffleReadBytes": 9, "shuffleWriteBytes": 120}) == "cpu_sorted"
    assert stage_label({"inputBytes": 0, "shuffleReadBytes": 120, "shuffleWriteBytes": 0}) == "cpu_final"


class _Conf:
    def __init__(self, values):
        self.values = dict(values)

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = value

    def unset(self, key):
        del self.values[key]


class _Session:
    def __init__(self, values):
        self.conf = _Conf(values)


def test_a_side_settings_hold_inside_its_runs_only():
    spark = _Session({"a": "1"})
    with session_conf(spark, {"a": "2", "b": "3"}):
        assert spark.conf.values == {"a": "2", "b": "3"}
    assert spark.conf.values == {"a": "1"}  # the former value back, the absent one absent again


def test_the_unbounded_side_is_what_local_session_sets():
    assert SIDE_CONF["unbounded"] == SESSION_DEFAULTS
