"""``sparkcep run`` checks its input before Spark starts (sparkcep.preflight): a missing path, a file given to
``--stream``, no input files, a missing ts column or attribute each exit 2 with one message, and the session
factory is never called.  Pure: a session factory that raises stands in for Spark."""

from __future__ import annotations

import json

import pytest

import sparkcep.spark.session
from sparkcep.cli import main

QUERY = "PATTERN SEQ(A a, B b)\nWHERE [id] AND a.x < b.x\nWITHIN 10"


class SparkStarted(Exception):
    """The run got past the checks to the session factory."""


@pytest.fixture(autouse=True)
def no_spark(monkeypatch):
    def refuse(*args, **kwargs):
        raise SparkStarted

    monkeypatch.setattr(sparkcep.spark.session, "local_session", refuse)


def jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


EVENTS = [{"type": "A", "ts": 1, "id": 1, "x": 1.0}, {"type": "B", "ts": 2, "id": 1, "x": 2.0}]


def failure(capsys, argv) -> str:
    assert main(argv) == 2  # SparkStarted would propagate: Spark was never asked for
    err = capsys.readouterr().err
    assert err.startswith("sparkcep: ") and err.count("sparkcep: ") == 1 and "Traceback" not in err, err
    assert "starting Spark" not in err
    return err


def test_missing_path_suggests_the_near_name(tmp_path, capsys):
    jsonl(tmp_path / "events.json", EVENTS)
    err = failure(capsys, ["run", "-e", QUERY, "--input", str(tmp_path / "event.json")])
    assert err == f"sparkcep: no such input: {tmp_path / 'event.json'}; did you mean 'events.json'?\n"


def test_stream_needs_a_directory(tmp_path, capsys):
    path = jsonl(tmp_path / "events.json", EVENTS)
    err = failure(capsys, ["run", "-e", QUERY, "--input", str(path), "--stream"])
    assert err.count("\n") == 1 and "a stream reads a directory" in err and str(path) in err


@pytest.mark.parametrize("stream", [False, True], ids=["batch", "stream"])
def test_a_directory_without_files(tmp_path, capsys, stream):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "_SUCCESS").write_text("")
    err = failure(capsys, ["run", "-e", QUERY, "--input", str(tmp_path / "in")] + (["--stream"] if stream else []))
    assert err.startswith("sparkcep: no input files in ") and err.count("\n") == 1


def write_json(tmp_path, records):
    return jsonl(tmp_path / "in.json", records)


def write_csv(tmp_path, records):
    path = tmp_path / "in.csv"
    names = list(records[0])
    path.write_text(",".join(names) + "\n" + "".join(",".join(str(r[n]) for n in names) + "\n" for r in records))
    return path


def write_parquet(tmp_path, records):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "in").mkdir()
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "in" / "part-0.parquet")
    return tmp_path / "in"


@pytest.mark.parametrize("write", [write_json, write_csv, write_parquet], ids=["json", "csv", "parquet"])
def test_missing_attribute_has_line_column_caret_and_suggestion(tmp_path, capsys, write):
    path = write(tmp_path, [{k: v for k, v in e.items() if k != "x"} | {"xs": 1} for e in EVENTS])
    fmt = ["--format", "parquet"] if write is write_parquet else []
    err = failure(capsys, ["run", "-e", QUERY, "--input", str(path), *fmt])
    assert err.splitlines() == [
        f"sparkcep: line 2, column 16: the query reads 'x', which the input {path} does not have "
        "(columns: id, ts, type, xs); did you mean 'xs'?",
        "  WHERE [id] AND a.x < b.x",
        "                 ^^^",
    ]


def test_missing_attribute_of_a_match_query_without_return(tmp_path, capsys):
    """Such a query reads every column for its results, and the attributes of its predicates at least."""
    path = write_json(tmp_path, [{k: v for k, v in e.items() if k != "id"} for e in EVENTS])
    err = failure(capsys, ["run", "-e", QUERY, "--input", str(path)])
    assert err.startswith("sparkcep: line 2, column 8: the query reads 'id',")


def test_missing_attribute_in_the_second_query_of_a_workload(tmp_path, capsys):
    (tmp_path / "w.cep").write_text("Q1: PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 10;\n"
                                    "Q2: PATTERN SEQ(A a, B b) WHERE a.y < b.x WITHIN 10\n")
    path = write_json(tmp_path, EVENTS)
    err = failure(capsys, ["run", str(tmp_path / "w.cep"), "--input", str(path)])
    assert err.startswith("sparkcep: line 2, column 33: the query reads 'y',"), err
    assert err.splitlines()[1] == "  Q2: PATTERN SEQ(A a, B b) WHERE a.y < b.x WITHIN 10"


def test_missing_ts_column(tmp_path, capsys):
    path = write_csv(tmp_path, EVENTS)
    err = failure(capsys, ["run", "-e", QUERY, "--input", str(path), "--ts-col", "tss"])
    assert err == ("sparkcep: the input has no ts column 'tss' (columns: id, ts, type, x; --ts-col names it); "
                   "did you mean 'ts'?\n")


def test_query_name_suggestion(tmp_path, capsys):
    (tmp_path / "w.cep").write_text("Fever: PATTERN SEQ(A a, B b) WITHIN 10;\nCough: PATTERN SEQ(A a, C c) WITHIN 10\n")
    err = failure(capsys, ["run", str(tmp_path / "w.cep"), "--query", "fevre", "--input", str(tmp_path)])
    assert err.endswith("(queries: Fever, Cough); did you mean 'Fever'?\n")


def spark_is_asked(capsys, argv) -> str:
    with pytest.raises(SparkStarted):
        main(argv)
    return capsys.readouterr().err


def test_good_input_reaches_spark_with_one_note(tmp_path, capsys):
    path = write_json(tmp_path, EVENTS)
    assert spark_is_asked(capsys, ["run", "-e", QUERY, "--input", str(path)]) == "starting Spark (local[*])...\n"
    assert spark_is_asked(capsys, ["run", "-e", QUERY, "--input", str(path), "--quiet"]) == ""


def test_files_in_underscore_partitions_are_input_files(tmp_path, capsys):
    """Spark's listing hides a ``_`` name only without ``=`` (``HadoopFSUtils.shouldFilterOutPathName``, for
    directories as for files): the files of ``_day=1/`` are read, ``_day`` is a partition column; those of
    ``_temporary/`` and ``.hidden/``, and a file still being copied, are not."""
    from sparkcep.preflight import data_files
    from sparkcep.spark.validate import has_data_files

    source = tmp_path / "in"
    for folder in ("_day=1", "_temporary", ".hidden"):
        (source / folder).mkdir(parents=True)
        jsonl(source / folder / "part.json", EVENTS)
    (source / "part.json._COPYING_").write_text("")
    assert data_files(str(source)) == ([str(source / "_day=1" / "part.json")], {"_day"})
    assert has_data_files(str(source))
    assert spark_is_asked(capsys, ["run", "-e", QUERY, "--input", str(source)]) == "starting Spark (local[*])...\n"
    (source / "_day=1" / "part.json").unlink()  # only hidden files left: none to read
    assert not has_data_files(str(source))
    assert failure(capsys, ["run", "-e", QUERY, "--input", str(source)]).startswith("sparkcep: no input files in ")


#: Layouts of an input directory and the files Spark 4.3 reads there (seen on Spark itself, a stream with
#: availableNow and a batch read alike, by input_file_name()), with the partition columns; Spark's partition
#: discovery: with ``key=value`` directories holding files, only their files; without, only the top-level files.
SPARK_READS = {
    "plain subdirectory": (["sub/b.json"], [], set()),
    "top-level files beside a plain subdirectory": (["a.json", "sub/b.json", "sub/deeper/c.json"], ["a.json"], set()),
    "top-level files beside partitions": (["a.json", "_key=1/b.json"], ["_key=1/b.json"], {"_key"}),
    "an empty partition": (["a.json", "k=1/.keep"], ["a.json"], set()),
    "nested partitions": (["k=1/j=2/b.json", "k=2/j=1/c.json"], ["k=1/j=2/b.json", "k=2/j=1/c.json"], {"k", "j"}),
    "a plain directory in a partition": (["k=1/sub/b.json", "k=2/c.json"], ["k=1/sub/b.json", "k=2/c.json"], {"k"}),
    "partitions in a plain directory": (["sub/k=1/b.json", "sub/k=2/c.json"], ["sub/k=1/b.json", "sub/k=2/c.json"],
                                        {"k"}),
    "hidden and temporary files": (["k=1/b.json", "k=1/_temporary/0/x.json", "k=1/.h.json", "k=1/y.json._COPYING_"],
                                   ["k=1/b.json"], {"k"}),
    # partition names are unescaped (``ExternalCatalogUtils.unescapePathName``: ``%`` and two hex digits)
    "escaped partition columns": (["my%20col=1/b.json", "my%20col=2/c.json"],
                                  ["my%20col=1/b.json", "my%20col=2/c.json"], {"my col"}),
    "an escaped = in a partition column": (["a%3Db=1/b.json"], ["a%3Db=1/b.json"], {"a=b"}),
    "an escaped letter, an escaped value": (["k%41=x%3Dy/b.json"], ["k%41=x%3Dy/b.json"], {"kA"}),
    # Spark's listing keeps ``_metadata...`` and ``_common_metadata...`` names: such a directory is read like
    # any other (in a partition, with it), such a file is no data file
    "_metadata directories in partitions": (["k=1/_metadata/m.json", "k=2/_metadata", "k=2/_common_metadata/c.json",
                                             "k=2/_metadata_x/d.json", "k=2/_metadata.json"],
                                            ["k=1/_metadata/m.json", "k=2/_common_metadata/c.json",
                                             "k=2/_metadata_x/d.json"], {"k"}),
    "partitions in a _metadata directory": (["_metadata/k=1/b.json"], ["_metadata/k=1/b.json"], {"k"}),
    "a _metadata directory beside top-level files": (["a.json", "_metadata/b.json"], ["a.json"], set()),
}


@pytest.mark.parametrize("layout", SPARK_READS)
def test_the_input_files_are_those_spark_reads(tmp_path, capsys, layout):
    """``has_data_files`` and the preflight's ``data_files`` list the files Spark's partition discovery reads: a
    file in a plain subdirectory is not read (nor its columns), nor a top-level one beside partitions."""
    from sparkcep.preflight import data_files
    from sparkcep.spark.validate import has_data_files

    files, read, columns = SPARK_READS[layout]
    source = tmp_path / "in"
    for name in files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        jsonl(source / name, EVENTS)
    assert data_files(str(source)) == ([str(source / name) for name in read], columns)
    assert has_data_files(str(source)) == bool(read)
    if not read:  # Spark would read nothing: the message before Spark starts
        assert failure(capsys, ["run", "-e", QUERY, "--input", str(source)]).startswith("sparkcep: no input files in ")


def test_columns_of_files_spark_does_not_read_are_not_the_inputs(tmp_path, capsys):
    """A column only in a file Spark does not read (``sub/b.json`` beside ``a.json``) is missing: said before Spark
    starts.  Another stream's file-sink output (``_spark_metadata``: Spark reads what its log committed) is left
    to Spark once its log committed a file; before (an empty log, or batches that wrote no file), Spark reads no
    file there ("Unable to infer schema", Spark 4.3): no input files, said before Spark starts."""
    from sparkcep.preflight import data_files
    from sparkcep.spark.validate import has_data_files

    source = tmp_path / "in"
    (source / "sub").mkdir(parents=True)
    jsonl(source / "a.json", [{k: v for k, v in e.items() if k != "x"} for e in EVENTS])
    jsonl(source / "sub" / "b.json", EVENTS)
    err = failure(capsys, ["run", "-e", QUERY, "--input", str(source)])
    assert err.startswith(f"sparkcep: line 2, column 16: the query reads 'x', which the input {source} does not have")
    log = source / "_spark_metadata"
    log.mkdir()
    for committed in ([], ["v1\n"], ["v1\n", "v1\n"]):  # no batch yet; batches that committed no file
        for k, text in enumerate(committed):
            (log / str(k)).write_text(text)
        assert data_files(str(source)) is None and not has_data_files(str(source))
        assert failure(capsys, ["run", "-e", QUERY, "--input", str(source)]).startswith("sparkcep: no input files in ")
    entry = {"path": (source / "a.json").as_uri(), "size": 1, "isDir": False, "modificationTime": 0,
             "blockReplication": 1, "blockSize": 1, "action": "add"}
    (log / "2").write_text("v1\n" + json.dumps(entry) + "\n")
    assert data_files(str(source)) is None and has_data_files(str(source))
    assert spark_is_asked(capsys, ["run", "-e", QUERY, "--input", str(source)]) == "starting Spark (local[*])...\n"


def test_a_sink_outputs_files_are_those_its_log_committed(tmp_path):
    """``sink_files``: the files of another stream's file-sink output that Spark reads (``MetadataLogFileIndex``),
    those its log ``_spark_metadata`` lists from the newest ``.compact`` on (which holds every batch before it:
    an older batch file is not read), not directories, as local paths (the URIs unescaped); None when the log
    cannot be read (left to Spark)."""
    from sparkcep.spark.validate import sink_files

    log = tmp_path / "_spark_metadata"
    log.mkdir()
    assert sink_files(str(tmp_path)) == []

    def batch(name: str, *paths: str, directory: bool = False) -> None:
        (log / name).write_text("v1\n" + "".join(json.dumps({"path": (tmp_path / p).as_uri(), "isDir": directory,
                                                             "action": "add"}) + "\n" for p in paths))

    batch("3", "old.json")
    batch("9.compact", "a b.json", "c%.json")
    batch("10", "d.json")
    batch("11", "sub", directory=True)
    (log / ".11.tmp").write_text("garbage")
    assert sink_files(str(tmp_path)) == [str(tmp_path / n) for n in ("a b.json", "c%.json", "d.json")]
    (log / "12").write_text("v2\n")
    assert sink_files(str(tmp_path)) is None


@pytest.mark.parametrize("case", ["partition-column", "single-quotes", "schema", "compressed"])
def test_inconclusive_inputs_are_left_to_spark(tmp_path, capsys, case):
    """No false alarm: where Python cannot see every column Spark would, the check stands aside."""
    argv = ["run", "-e", QUERY, "--input", str(tmp_path / "in")]
    (tmp_path / "in").mkdir()
    no_id = [{k: v for k, v in e.items() if k != "id"} for e in EVENTS]
    if case == "partition-column":  # id comes from the directory names
        (tmp_path / "in" / "id=1").mkdir()
        jsonl(tmp_path / "in" / "id=1" / "part.json", no_id)
    elif case == "single-quotes":  # Spark's JSON reader takes single quotes; Python's does not
        jsonl(tmp_path / "in" / "part.json", no_id)
        with open(tmp_path / "in" / "part.json", "a") as fh:
            fh.write("{'type': 'A', 'ts': 3, 'id': 1, 'x': 1.0}\n")
    elif case == "schema":
        jsonl(tmp_path / "in" / "part.json", no_id)
        argv += ["--schema", "type STRING, ts BIGINT, id BIGINT, x DOUBLE"]
    else:
        import gzip

        (tmp_path / "in" / "part.json.gz").write_bytes(gzip.compress(b'{"type": "A", "ts": 1, "x": 1}\n'))
    spark_is_asked(capsys, argv)


STATEMENT = ("SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts MEASURES A.ts AS ats\n"
             "  PATTERN (A B) DEFINE B AS B.prize > A.Price)")


def test_statement_column_missing_from_the_input(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("ts,sym,price\n2024-01-01T00:00:00,A,1\n")
    err = failure(capsys, ["run", "-e", STATEMENT, "--input", str(path)])
    assert err.splitlines() == [
        f"sparkcep: line 2, column 29: the statement reads the column 'prize' of ticks, which the input {path} "
        "does not have (columns: price, sym, ts); did you mean 'price'?",
        "  " + STATEMENT.splitlines()[1],
        " " * 30 + "^" * 7,
    ]
    err = failure(capsys, ["run", "-e", STATEMENT.replace("sym", "symb"), "--input", str(path), "--stream"])
    assert "a stream reads a directory" in err
    (tmp_path / "in").mkdir()
    path.rename(tmp_path / "in" / "t.csv")
    err = failure(capsys, ["run", "-e", STATEMENT.replace("sym", "symb"), "--input", str(tmp_path / "in"),
                           "--format", "csv"])
    assert "the column 'symb' of ticks" in err and "did you mean 'sym'?" in err and err.count("\n") == 1


def test_statement_with_good_input_reaches_spark(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("ts,sym,prize,price\n2024-01-01T00:00:00,A,1,2\n")
    assert spark_is_asked(capsys, ["run", "-e", STATEMENT, "--input", str(path)]) == "starting Spark (local[*])...\n"


@pytest.mark.parametrize(("ts", "text", "message"), [
    ([1, 2], "PATTERN SEQ(A a, B b) WITHIN 10 seconds",
     "a duration with a unit needs the unit of the numeric ts column"),
    (["2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z"], "PATTERN SEQ(A a, B b) WITHIN 10",
     "duration 10 has no unit, but ts is a timestamp"),
    (["2024-01-01T00:00:01Z", 5], "PATTERN SEQ(A a, B b) WITHIN 10",  # half numbers: read as timestamps
     "duration 10 has no unit, but ts is a timestamp"),
], ids=["numeric", "timestamp", "mixed"])
def test_ts_kind_against_the_query_durations(tmp_path, capsys, ts, text, message):
    path = write_json(tmp_path, [e | {"ts": t} for e, t in zip(EVENTS, ts, strict=True)])
    err = failure(capsys, ["run", "-e", text, "--input", str(path)])
    assert err.startswith("sparkcep: line 1, column ") and message in err and err.count("\n") == 3, err


def test_ts_kind_of_parquet_and_the_fitting_query(tmp_path, capsys):
    path = write_parquet(tmp_path, EVENTS)
    err = failure(capsys, ["run", "-e", "PATTERN SEQ(A a, B b) WITHIN 10 seconds", "--input", str(path),
                           "--format", "parquet"])
    assert "a duration with a unit needs the unit of the numeric ts column" in err
    argv = ["run", "-e", "PATTERN SEQ(A a, B b) WITHIN 10 seconds", "--input", str(path), "--format", "parquet"]
    assert spark_is_asked(capsys, [*argv, "--ts-unit", "s"]).startswith("starting Spark")
    path = write_json(tmp_path, [e | {"ts": "3"} for e in EVENTS])  # text that is a number: numeric
    assert spark_is_asked(capsys, ["run", "-e", "PATTERN SEQ(A a, B b) WITHIN 10", "--input", str(path)])


class _Frame:
    """What ``CompiledQuery.apply`` reads of a DataFrame before its attribute check: the schema, batch or stream
    (a pyspark StructType needs no JVM)."""

    def __init__(self, fields, streaming=False):
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        kinds = {"type": StringType(), "ts": LongType()}
        self.schema = StructType([StructField(f, kinds.get(f, LongType())) for f in fields])
        self.columns = list(fields)
        self.isStreaming = streaming


@pytest.mark.parametrize("streaming", [False, True])
def test_apply_names_a_missing_attribute_with_line_column_and_caret(streaming):
    """The Python API's check of a DataFrame's columns reads as the CLI's: where the query reads the attribute,
    the columns, a near name; the streaming schema hint only for a stream."""
    from sparkcep import CEPError, compile

    with pytest.raises(CEPError) as caught:
        compile(QUERY).apply(_Frame(["type", "ts", "id", "xs"], streaming=streaming))
    text = caught.value.render()
    assert text.startswith("line 2, column 16: the query reads 'x', which the input does not have "
                           "(columns: id, ts, type, xs); did you mean 'xs'?"), text
    assert text.splitlines()[1:] == ["  WHERE [id] AND a.x < b.x", "                 ^^^"]
    assert ("readStream.schema" in text) == streaming


def test_workload_apply_names_a_missing_attribute_with_its_query_position():
    from sparkcep import CEPError, compile_shared_workload

    w = compile_shared_workload("p: RETURN COUNT(*) PATTERN SEQ(A a, B b) WHERE [id] WITHIN 10;\n"
                                "q: RETURN COUNT(*) PATTERN SEQ(A a, C c) WHERE [id] AND c.v > 1 WITHIN 10")
    with pytest.raises(CEPError) as caught:
        w.apply(_Frame(["type", "ts", "id"]))
    assert caught.value.render().startswith("line 2, column 57: the query reads 'v', which the input does not have "
                                            "(columns: id, ts, type)\n"), caught.value.render()
