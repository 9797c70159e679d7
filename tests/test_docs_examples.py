"""Docs that cannot go stale: every fenced example of README.md and docs/*.md is run and its shown output compared.

What a fenced block is, from its first line and the HTML comment on the line just before it:

- ``$ command`` lines (a *session*): each command is run and the lines after it, up to the next ``$`` line, are
  its output.  ``sparkcep ...`` runs in this process through :func:`sparkcep.cli.main` (no extra JVM: a ``run``
  uses the test run's SparkSession), ``python -c '...'`` runs in this process too, and so does a generated job,
  ``python job.py ARGS`` (or ``.venv/bin/python job.py ARGS``): :func:`run_job` runs the file as ``__main__`` with
  ``sys.argv`` set, on the test run's SparkSession (its ``stop()`` is a no-op meanwhile, the SQL conf it sets is
  put back), and shows its stdout, its stderr and its exit status as the shell would (``echo $?`` after it
  prints that status).  Any other command (``cat``, ``head``, ``find | sort``) runs in ``bash``.  A command shows
  its stdout then its stderr, without the lines that vary from run to run (:data:`CHATTER`: the "starting Spark"
  note, progress lines, the closing summary).  A command ending in ``\\`` continues on the next line;
  ``NAME='...'`` sets a variable for the page's later commands.
- a ``python`` block with ``>>>`` prompts: run example by example as a doctest, each output compared.
- any other ``python`` block is run (in a fresh namespace: a snippet imports what it uses; ``spark`` is the test
  run's SparkSession, as in the ``pyspark`` shell) and its stdout compared with the untagged block right after it
  (only blank lines between), if there is one.
- ``<!-- file: NAME -->`` before a block: the block is the content of the file NAME that later examples of the
  page read; a comment ``<!-- file: NAME`` ... ``-->`` holds such a file without showing it.
- ``<!-- excerpt of: NAME -->`` before a block: the block is lines of the file NAME (written by an earlier example
  of the page, or of the checkout), in order, each run of lines between ``...`` lines contiguous there; not
  rewritten by ``--update-docs`` (a difference names the first run of lines not found).
- ``<!-- not run: reason -->`` before a block: deliberately not run (a cluster, ``spark-submit``: a JVM of its own).
  These are counted and listed (``-rP`` shows the list); a block that looks like a command line (``sparkcep``,
  ``make``, ``python``, ``spark-submit`` ...) without ``$`` and without this comment fails the test.
- any other block is text (query text, grammar, a plan quoted in prose, a directory layout).

Each page runs in a fresh temporary directory holding links to the checkout's top-level entries (so that
``golden_plans/queries.cep`` and ``examples/...`` resolve), its ``file:`` blocks written in page order.  Blocks that
need Spark (``sparkcep run``/``demo``, a generated job, a session naming a directory such a run wrote, Python that
names ``spark`` or calls ``apply``) run in the ``spark``-marked test of the page, the others in the pure one; the
Spark test runs the page's other sessions again, in order, for the files they write (``sparkcep compile -o
job.py``).

Normalised before comparing, and only this: trailing blanks of lines and blocks; the page's temporary
directory and the checkout's path (printed as ``.``/relative paths); a closing summary's seconds (``in 3.2 s``,
pytest's ``in 1.78s``: ``in N s``); the UUID in the name of a Spark part file; a checkpoint's
``"batchTimestampMs"`` (the wall-clock time a micro-batch started).
A line ``...`` in a shown output stands for any number of lines, and ``...`` inside a line for any text (the
doctest ellipsis).

``pytest tests/test_docs_examples.py --update-docs`` (``make docs``) rewrites the shown outputs in place from
what the examples print now; review the diff.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shlex
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(\s*)(```+)\s*([\w+-]*)\s*$")
MARK = re.compile(r"^\s*<!--\s*(not run|file|excerpt of)\s*:\s*(.*?)\s*(-->)?\s*$")
#: lines of an unmarked, unprompted block that read like a command someone would paste into a shell
COMMAND_LIKE = re.compile(r"^\s*(sparkcep (check|explain|compile|run|notebook|demo)|make \w|python3? \S|\.venv/bin/|"
                          r"spark-submit |PYSPARK_PYTHON=|export \w|source \S|pip install|pytest )")
#: commands that would start a JVM or a second Python of their own: a session holding one needs "not run"
OWN_PROCESS = re.compile(r"(^|[\s/;|&])(python3?|spark-submit|pyspark|java)(\s|$)")
SPARK_COMMAND = re.compile(r"^sparkcep\s+(run|demo)\b")
#: a generated job started with the environment's python (``python job.py ARGS``, ``.venv/bin/python job.py ARGS``)
JOB_COMMAND = re.compile(r"^(\.venv/bin/)?python3?\s+[\w./-]+\.py(\s|$)")
SPARK_PYTHON = re.compile(r"\bspark\b|\.apply\(|sparkcep\.sql\(")
#: stderr lines that vary from run to run and that pages do not show: the "starting Spark" note, the progress lines
#: of a batch's stages and of a stream's micro-batches, the closing summary (docs/operations.md shows them)
CHATTER = re.compile(r"^(starting Spark \(|sparkcep: job \d+, stage \d+/\d+: |batch \d+: read |"
                     r"sparkcep: (read|done) .*\bin \d+(\.\d+)? s\b)")
#: a result listing in prose: ``PATTERN ... over A1 B2(5) C3`` (the events: type, ts and x in parentheses)
EVENT_TOKEN = re.compile(r"([A-Z][A-Za-z_-]*?)(\d+)(?:\(([^)]*)\))?")
LISTING = re.compile(r"^(.*\S)\s+over((?:\s+[A-Z][A-Za-z_-]*?\d+(?:\([^)]*\))?)+)\s*$")
SUMMARY_SECONDS = re.compile(r"\bin \d+(\.\d+)? ?s\b")
#: what differs from run to run in Spark's files: the UUID of a part file's name, a batch's wall-clock start
PART_FILE_UUID = re.compile(r"\b(part-\d+-)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
BATCH_TIMESTAMP = re.compile(r'("batchTimestampMs":)\d+')


# -- the pages, as blocks ------------------------------------------------------------------------------------------

@dataclass
class Block:
    page: str
    start: int            # index of the opening fence line
    end: int              # index of the closing fence line
    indent: str
    lang: str
    lines: list[str]      # the content, indent removed
    mark: tuple[str, str] | None = None
    kind: str = "text"    # session | doctest | python | output | file | excerpt of | not run | text
    output: Block | None = None  # a python block's shown output
    reads_spark_output: bool = False  # a session naming what an earlier Spark run wrote (``find shop_ck``)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.start + 1}"

    def needs_spark(self) -> bool:
        if self.kind == "session":
            return self.reads_spark_output or any(SPARK_COMMAND.match(c) or JOB_COMMAND.match(c)
                                                  for c, _, _ in commands(self.lines))
        if self.kind in ("python", "doctest"):
            return bool(SPARK_PYTHON.search("\n".join(self.lines)))
        return False


@dataclass
class Page:
    name: str
    text_lines: list[str]
    blocks: list[Block] = field(default_factory=list)
    hidden_files: list[tuple[int, str, list[str]]] = field(default_factory=list)  # (line, name, content)


def parse_page(name: str, text: str) -> Page:
    lines = text.split("\n")
    page = Page(name, lines)
    i = 0
    while i < len(lines):
        hidden = re.match(r"^\s*<!--\s*file\s*:\s*(\S+)\s*$", lines[i])
        if hidden:  # <!-- file: NAME \n content \n -->
            j = i + 1
            while j < len(lines) and lines[j].strip() != "-->":
                j += 1
            pad = lines[i][:len(lines[i]) - len(lines[i].lstrip())]  # the comment's indent (in a list item)
            page.hidden_files.append((i, hidden.group(1), [ln[len(pad):] if ln.startswith(pad) else ln.lstrip()
                                                          for ln in lines[i + 1:j]]))
            i = j + 1
            continue
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
        block = Block(name, i, j, indent, lang, body)
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mark = MARK.match(lines[k]) if k >= 0 else None
        if mark and mark.group(3):
            block.mark = (mark.group(1), mark.group(2))
        page.blocks.append(block)
        i = j + 1
    previous: Block | None = None
    for b in page.blocks:
        first = next((ln for ln in b.lines if ln.strip()), "")
        if b.mark:
            b.kind = b.mark[0]
        elif previous is not None and previous.kind == "python" and previous.output is None and b.lang in ("", "text") \
                and all(not ln.strip() for ln in lines[previous.end + 1:b.start]) and not first.startswith("$ "):
            b.kind = "output"
            previous.output = b
        elif first.startswith("$ "):
            b.kind = "session"
        elif first.startswith(">>> ") and b.lang in ("", "python"):
            b.kind = "doctest"
        elif b.lang == "python":
            b.kind = "python"
        previous = b
    written: set[str] = set()  # the directories the page's Spark runs write (--output, --checkpoint, ...)
    for b in page.blocks:
        if b.kind != "session":
            continue
        if written and any(re.search(rf"(^|[\s/'\"]){re.escape(w)}(/|\s|$)", c) for c, _, _ in commands(b.lines)
                           for w in written):
            b.reads_spark_output = True
        for c, _, _ in commands(b.lines):
            if SPARK_COMMAND.match(c) or JOB_COMMAND.match(c):
                words = shlex.split(c, comments=True)
                written |= {w for k, w in enumerate(words) if k and words[k - 1] in PATH_OPTIONS}
    return page


def commands(lines: list[str]):
    """(command, first output line index, end index) of a session's lines."""
    out, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            i += 1
            continue
        cmd, i = lines[i][2:], i + 1
        while cmd.endswith("\\") and i < len(lines):
            cmd, i = cmd[:-1] + " " + lines[i].strip(), i + 1
        j = i
        while j < len(lines) and not lines[j].startswith("$ "):
            j += 1
        out.append((cmd.strip(), i, j))
        i = j
    return out


# -- running -------------------------------------------------------------------------------------------------------

def workdir_for(tmp: Path) -> Path:
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".venv") and not (tmp / entry.name).exists():
            (tmp / entry.name).symlink_to(entry)
    return tmp


def write_file(workdir: Path, name: str, content: list[str]) -> None:
    path = workdir / name
    if path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(content).rstrip("\n") + "\n")


def run_sparkcep(argv: list[str]) -> tuple[int, str, str]:
    from sparkcep import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(argv)
        except SystemExit as exit_:  # argparse's errors and --version
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    return status, out.getvalue(), err.getvalue()


def run_python(code: str, spark=None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    namespace = {"__name__": "__docs__"} | ({"spark": spark} if spark is not None else {})
    status = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(compile(code, "<docs>", "exec"), namespace)
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if isinstance(exit_.code, str):
                print(exit_.code, file=sys.stderr)
        except Exception:  # noqa: BLE001 - shown as the snippet's output, a difference if the page shows none
            status = 1
            print(traceback.format_exc(), file=sys.stderr)
    return status, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def kept_session():
    """While a generated job runs in this process: its ``SparkSession.stop()`` on the way out does nothing, and the
    SQL conf it sets (``spark.sql.shuffle.partitions``, ``spark.sparkcep.maxMatches``) is put back afterwards."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    before = dict(active.conf.getAll) if active is not None else None
    stop = SparkSession.stop
    SparkSession.stop = lambda self: None
    try:
        yield
    finally:
        SparkSession.stop = stop
        if before is not None:
            now = dict(active.conf.getAll)
            for key in now.keys() - before.keys():
                active.conf.unset(key)
            for key, value in before.items():
                if now.get(key) != value:
                    active.conf.set(key, value)


#: the options (of a generated job, ``sparkcep run`` and ``demo``) that name a directory Spark writes: a checkpoint
#: (Spark's ``FileContext`` resolves it against the JVM's own working directory, which
#: :func:`spark_working_directory` cannot move) and the outputs
PATH_OPTIONS = {"--output", "--checkpoint", "--dead-letters", "--late-events", "--dropped-output", "--dir"}


def absolute_paths(argv: list[str]) -> list[str]:
    """``argv`` with the directories of :data:`PATH_OPTIONS` made absolute (in the page's directory, the working
    directory, where the JVM of a command run there would write them)."""
    return [os.path.abspath(a) if k and argv[k - 1] in PATH_OPTIONS else a for k, a in enumerate(argv)]


def run_job(path: str, argv: list[str]) -> tuple[int, str, str]:
    """``python job.py ARGS`` in this process: the file run as ``__main__`` with ``sys.argv`` set, on the test run's
    SparkSession (the job's ``getOrCreate`` returns it); what it prints and its exit status as a shell shows them.
    The directories it writes are given as absolute paths (in the page's directory, where a job run there writes)."""
    import runpy

    argv = absolute_paths(argv)
    out, err = io.StringIO(), io.StringIO()
    status, argv_before = 0, sys.argv
    sys.argv = [path, *argv]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), kept_session():
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as exit_:  # the job's sys.exit("sparkcep job: ...") and argparse's errors
            if isinstance(exit_.code, str):
                print(exit_.code, file=sys.stderr)
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except Exception:  # noqa: BLE001 - a traceback, as Python prints it, and status 1
            status = 1
            print(traceback.format_exc(), file=sys.stderr, end="")
        finally:
            sys.argv = argv_before
    return status, out.getvalue(), err.getvalue()


ASSIGNMENT = re.compile(r"^([A-Za-z_]\w*)=(\S.*)$")
VARIABLE = re.compile(r"\"\$(\w+)\"|\$(\w+)\b")


def run_command(cmd: str, workdir: Path, variables: dict[str, str]) -> list[str]:
    """A session's command: ``NAME='...'`` sets a variable of the page's session (``"$NAME"`` later); ``sparkcep``
    (also piped into other commands: ``sparkcep ... | tail -3``) and ``python -c`` run in this process."""
    assignment = ASSIGNMENT.match(cmd)
    if assignment and len(shlex.split(cmd)) == 1:
        variables[assignment.group(1)] = shlex.split(assignment.group(2))[0]
        return []
    cmd = cmd.replace("$?", variables.get("?", "0"))  # the exit status of the page's previous command
    cmd = VARIABLE.sub(lambda m: shlex.quote(variables[m.group(1) or m.group(2)])
                       if (m.group(1) or m.group(2)) in variables else m.group(0), cmd)
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    rest = None
    if "|" in words and words[0] == "sparkcep":  # sparkcep in this process, the rest of the pipe in bash
        k = words.index("|")
        words, rest = words[:k], cmd.split("|", 1)[1] if cmd.count("|") else None
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    if words and words[0] == "sparkcep" and not set(words) & {">", "&&", ";", "2>&1", "<", ">>"}:
        if follows_forever(words[1:]):
            return ["(not run: `run --stream` without --once follows its input until it is stopped: add --once)"]
        status, out, err = run_sparkcep(absolute_paths(words[1:]))
    elif len(words) == 3 and words[0] in ("python", "python3") and words[1] == "-c":
        status, out, err = run_python(words[2])
    elif JOB_COMMAND.match(cmd) and not set(words) & {"|", ">", "&&", ";", "2>&1", "<", ">>"}:
        status, out, err = run_job(words[1], words[2:])
    else:
        rest, status, out, err = None, *_bash(cmd, workdir, env)
    if rest is not None:
        piped_status, out, piped_err = _bash(rest, workdir, env, stdin=out)
        status, err = status or piped_status, err + piped_err
    variables["?"] = str(status)
    return out.splitlines() + [ln for ln in err.splitlines() if not CHATTER.match(ln)]


def follows_forever(argv: list[str]) -> bool:
    """``sparkcep run --stream`` without ``--once``, where the CLI has ``--once``: it would never return."""
    if argv[:1] != ["run"] or "--stream" not in argv or "--once" in argv:
        return False
    from sparkcep import cli

    with contextlib.redirect_stderr(io.StringIO()):
        try:
            cli.build_parser().parse_args(["run", "-e", "x", "--input", ".", "--once"])
        except SystemExit:
            return False
    return True


def _bash(cmd: str, workdir: Path, env: dict, stdin: str | None = None) -> tuple[int, str, str]:
    done = subprocess.run(["bash", "-c", cmd], cwd=workdir, capture_output=True, text=True, env=env, input=stdin,
                          timeout=300)
    return done.returncode, done.stdout, done.stderr


def run_doctest(block: Block, spark=None) -> list[tuple[doctest.Example, list[str]]]:
    namespace = {"__name__": "__docs__"} | ({"spark": spark} if spark is not None else {})
    results = []
    for example in doctest.DocTestParser().get_examples("\n".join(block.lines) + "\n"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                exec(compile(example.source, "<docs>", "single"), namespace)
                shown = out.getvalue().splitlines()
            except Exception as err:  # noqa: BLE001 - an expected exception is an output like any other
                shown = out.getvalue().splitlines() + ["Traceback (most recent call last):", "  ..."] + \
                    traceback.format_exception_only(type(err), err)[-1].rstrip("\n").split("\n")
        results.append((example, shown))
    return results


# -- comparing -----------------------------------------------------------------------------------------------------

def relative(line: str, workdir: Path) -> str:
    """The page's temporary directory and the checkout's path, as the page shows them (relative paths, ``.``)."""
    for path in (str(workdir.resolve()), str(workdir), str(ROOT)):
        line = line.replace(path + "/", "").replace(path, ".")
    return line


def normalise(lines: list[str], workdir: Path) -> list[str]:
    out = []
    for ln in lines:
        ln = relative(ln, workdir)
        ln = PART_FILE_UUID.sub(r"\1UUID", BATCH_TIMESTAMP.sub(r"\1N", ln))
        out.append(SUMMARY_SECONDS.sub("in N s", ln).rstrip())
    while out and not out[-1]:
        out.pop()
    return out


def same_line(shown: str, actual: str) -> bool:
    """A ``...`` inside a shown line stands for any text (``{..."spark.sql.shuffle.partitions":"4",...}``)."""
    if "..." not in shown:
        return shown == actual
    return re.fullmatch(".*".join(map(re.escape, shown.split("..."))), actual) is not None


def same(shown: list[str], actual: list[str]) -> bool:
    """``shown`` (a ``...`` line matching any lines) against ``actual``."""
    if "..." not in shown:
        return len(shown) == len(actual) and all(map(same_line, shown, actual))
    k = shown.index("...")
    head, tail = shown[:k], shown[k + 1:]
    if len(actual) < k or not all(map(same_line, head, actual[:k])):
        return False
    rest = actual[k:]
    return any(same(tail, rest[s:]) for s in range(len(rest) + 1))


@dataclass
class Difference:
    where: str
    shown: list[str]
    actual: list[str]
    replace: tuple[int, int, list[str]]   # page line range [a, b) and its new lines (indent added)

    def __str__(self) -> str:
        import difflib

        diff = "\n".join(difflib.unified_diff(self.shown, self.actual, "shown", "printed now", lineterm=""))
        return f"{self.where}: the output shown differs from what the example prints now\n{diff}"


class PageRun:
    def __init__(self, page: Page, workdir: Path, spark=None):
        self.page, self.workdir, self.spark = page, workdir, spark
        self.differences: list[Difference] = []
        self.ran: list[str] = []

    def check(self, block: Block, first: int, shown: list[str], actual: list[str]) -> None:
        """``shown`` is the block's content lines [first, first + len(shown))."""
        actual_n, shown_n = normalise(actual, self.workdir), normalise(shown, self.workdir)
        if not same(shown_n, actual_n):
            a = block.start + 1 + first
            self.differences.append(Difference(f"{block.page}:{a + 1}", shown_n, actual_n,
                                               (a, a + len(shown_n),
                                                [block.indent + relative(ln, self.workdir) for ln in actual])))

    def excerpt(self, block: Block) -> None:
        """A run of lines not found in the file is a difference; the update takes the file's lines from the run's
        first line to its last (both must still be there, in order)."""
        self.ran.append(block.where)
        path = self.workdir / block.mark[1]
        text = [t.rstrip() for t in path.read_text().split("\n")] if path.is_file() else []
        chunks, chunk = [], []
        for ln in block.lines + ["..."]:
            if ln.strip() == "...":
                chunks, chunk = chunks + [chunk] if chunk else chunks, []
            else:
                chunk.append(ln.rstrip())
        at, now, stale = 0, [], False
        for chunk in chunks:
            found = next((k for k in range(at, len(text) - len(chunk) + 1) if text[k:k + len(chunk)] == chunk), None)
            if found is None:
                stale = True
                first = next((k for k in range(at, len(text)) if text[k] == chunk[0]), None)
                last = None if first is None else next((k for k in range(first, len(text)) if text[k] == chunk[-1]),
                                                       None)
                if last is None:
                    self.differences.append(Difference(block.where, chunk, [f"(not in {block.mark[1]}: edit the "
                                                                            f"excerpt by hand)"], (0, 0, [])))
                    return
                found, chunk = first, text[first:last + 1]
            now += (["..."] if now else []) + chunk
            at = found + len(chunk)
        if stale:
            a = block.start + 1
            self.differences.append(Difference(block.where, block.lines, now,
                                               (a, a + len(block.lines), [block.indent + ln for ln in now])))

    def listings(self, block: Block) -> None:
        """A text block of results in prose, ``QUERY over A1 B2(5) ...`` then the rows (``{'a': 1, 'b': 2}``),
        paragraphs apart: each query is run by the reference (:mod:`sparkcep.oracles.match`, the semantics every
        engine is tested against) over those events (type, ``ts``, ``x`` in parentheses), and its rows, in any
        order, must be the ones shown (a difference the update cannot rewrite: edit the page)."""
        import ast

        import sparkcep
        from sparkcep.oracles.match import is_trend_aggregate, match_rows, trend_aggregates

        paragraphs, current = [], []
        for ln in block.lines + [""]:
            if ln.strip():
                current.append(ln.strip())
            elif current:
                paragraphs, current = paragraphs + [current], []
        for para in paragraphs:
            k = next((i for i, ln in enumerate(para) if ln.startswith("{")), len(para))
            head = " ".join(para[:k])
            found = LISTING.match(head)
            if not found or not all(ln.startswith("{") for ln in para[k:]):
                continue
            self.ran.append(block.where)
            events = []
            for token in found.group(2).split():
                t, ts, x = EVENT_TOKEN.fullmatch(token).groups()
                events.append({"type": t, "ts": int(ts)} | ({} if x is None else {"x": ast.literal_eval(x)}))
            query = sparkcep.compile(found.group(1)).query
            rows = (trend_aggregates if is_trend_aggregate(query) else match_rows)(query, events)
            shown = [ast.literal_eval(ln) for ln in para[k:]]
            if sorted(map(repr, rows)) != sorted(map(repr, shown)):
                self.differences.append(Difference(f"{block.where} ({head[:60]}...)", para[k:],
                                                   [repr(r) for r in rows], (0, 0, [])))

    def files_before(self, line: int, done: set) -> None:
        for at, name, content in self.page.hidden_files:
            if at < line and (at, name) not in done:
                done.add((at, name))
                write_file(self.workdir, name, content)

    def run(self, with_spark: bool) -> None:
        done: set = set()
        variables: dict[str, str] = {}
        for block in self.page.blocks:
            self.files_before(block.start, done)
            if block.kind == "file":
                write_file(self.workdir, block.mark[1], block.lines)
            if block.kind == "excerpt of" and not with_spark:
                self.excerpt(block)
            if block.kind == "text" and not with_spark:
                self.listings(block)
            if block.kind not in ("session", "doctest", "python"):
                continue
            if block.needs_spark() != with_spark and not (with_spark and block.kind == "session"):
                continue  # the Spark pass runs every session again: they write what later commands read
            self.ran.append(block.where)
            if block.kind == "session":
                for cmd, a, b in commands(block.lines):
                    shown = block.lines[a:b]
                    while shown and not shown[-1].strip():  # the blank lines between commands stay as they are
                        shown = shown[:-1]
                    self.check(block, a, shown, run_command(cmd, self.workdir, variables))
            elif block.kind == "doctest":
                for example, actual in run_doctest(block, self.spark):
                    n_src = example.source.count("\n")
                    a = example.lineno + n_src
                    shown = block.lines[a:a + example.want.count("\n")]
                    self.check(block, a, shown, actual)
            else:
                status, out, err = run_python("\n".join(block.lines), self.spark)
                if status:  # a snippet that fails is a difference the update cannot rewrite
                    self.differences.append(Difference(block.where, [], out.splitlines() + err.splitlines(),
                                                       (0, 0, [])))
                elif block.output is not None:
                    self.check(block.output, 0, block.output.lines, out.splitlines())


@contextlib.contextmanager
def spark_working_directory(spark, path: Path):
    """Spark resolves a relative path against its JVM's working directory (Hadoop's local file system), not the
    Python process's: for the page's relative paths (``--input shop.jsonl``) it is pointed at ``path`` too."""
    if spark is None:
        yield
        return
    jvm = spark.sparkContext._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
    before = fs.getWorkingDirectory()
    fs.setWorkingDirectory(jvm.org.apache.hadoop.fs.Path(str(path)))
    try:
        yield
    finally:
        fs.setWorkingDirectory(before)


def apply_updates(page: Page, differences: list[Difference]) -> None:
    lines = list(page.text_lines)
    for d in sorted(differences, key=lambda d: d.replace[0], reverse=True):
        a, b, new = d.replace
        if a == b == 0:
            continue
        lines[a:b] = new
    (ROOT / page.name).write_text("\n".join(lines))


def run_page(name: str, tmp: Path, update: bool, spark=None) -> PageRun:
    page = parse_page(name, (ROOT / name).read_text())
    unmarked = [b.where for b in page.blocks if b.kind == "text" and any(COMMAND_LIKE.match(ln) for ln in b.lines)]
    assert not unmarked, (f"blocks that read like commands but are neither run ($ prompts) nor marked "
                          f"'<!-- not run: reason -->': {unmarked}")
    own = [b.where for b in page.blocks if b.kind == "session" and any(
        OWN_PROCESS.search(c) and not re.match(r"python3? (-c |-m pytest )", c) and not JOB_COMMAND.match(c)
        for c, _, _ in commands(b.lines))]
    assert not own, f"sessions that start a JVM or Python of their own: mark them '<!-- not run: reason -->': {own}"
    cwd = os.getcwd()
    os.chdir(workdir_for(tmp))
    try:
        with spark_working_directory(spark, tmp):
            run = PageRun(page, tmp, spark)
            run.run(with_spark=spark is not None)
    finally:
        os.chdir(cwd)
    if update and run.differences:
        apply_updates(page, run.differences)
    return run


def assert_no_differences(run: PageRun, update: bool) -> None:
    """After an update, only the differences it could not rewrite (an excerpt edited by hand, a snippet that
    fails without a shown output) are left."""
    left = [d for d in run.differences if not update or d.replace == (0, 0, [])]
    assert not left, "\n\n".join(map(str, left)) + "\n(make docs rewrites the outputs from what the examples print now)"


@pytest.fixture(scope="session")
def update_docs(request) -> bool:
    return request.config.getoption("--update-docs")


@pytest.mark.parametrize("name", PAGES)
def test_docs_examples(name, tmp_path, update_docs):
    run = run_page(name, tmp_path, update_docs)
    assert_no_differences(run, update_docs)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name", PAGES)
def test_docs_examples_on_spark(name, tmp_path, update_docs, request):
    page = parse_page(name, (ROOT / name).read_text())
    if not any(b.needs_spark() for b in page.blocks):
        pytest.skip("no example of this page needs Spark")
    spark = request.getfixturevalue("spark")
    before = set(os.listdir(ROOT))
    run = run_page(name, tmp_path, update_docs, spark=spark)
    # a path Spark resolves against its JVM's own working directory (not the page's) would land in the checkout
    assert set(os.listdir(ROOT)) <= before, f"examples wrote into the checkout: {set(os.listdir(ROOT)) - before}"
    assert_no_differences(run, update_docs)


def test_blocks_not_run_are_listed():
    """Every block marked ``not run`` has a reason; the list is printed (``pytest -rP``) for the reader."""
    listed = []
    for name in PAGES:
        for b in parse_page(name, (ROOT / name).read_text()).blocks:
            if b.kind == "not run":
                assert b.mark[1], f"{b.where}: '<!-- not run: -->' needs a reason"
                listed.append(f"{b.where}: {b.mark[1]}")
    print(f"{len(listed)} blocks not run:", *listed, sep="\n  ")


def test_an_edited_output_fails_and_update_restores_it(tmp_path, monkeypatch):
    """On a temporary copy of a page: an edited output is a difference; --update-docs rewrites it back."""
    page_dir = tmp_path / "root"
    (page_dir / "docs").mkdir(parents=True)
    text = "\n".join([
        "# a page", "", "```", "$ sparkcep check -e 'PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 10'",
        "ok  (unnamed): match query, 2 variables, parameterized", "```", "",
        "```python", "import sparkcep", "print(sparkcep.compile('PATTERN SEQ(A a, B b) WITHIN 10').name)", "```", "",
        "```", "None", "```", "",
        "```python", ">>> 1 + 1", "2", "```", ""])
    (page_dir / "docs" / "p.md").write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", page_dir)
    work = tmp_path / "w"
    work.mkdir()
    assert not run_page("docs/p.md", work, update=False).differences  # the page as it is: no difference
    edited = text.replace("parameterized", "local").replace("\nNone\n", "\nshop\n").replace("\n2\n", "\n3\n")
    (page_dir / "docs" / "p.md").write_text(edited)
    work2 = tmp_path / "w2"
    work2.mkdir()
    found = run_page("docs/p.md", work2, update=True).differences
    assert [d.where for d in found] == ["docs/p.md:5", "docs/p.md:14", "docs/p.md:19"]
    assert (page_dir / "docs" / "p.md").read_text() == text  # the update restored every output


def test_an_edited_generated_job_output_fails_and_update_restores_it(tmp_path, monkeypatch):
    """A generated job's block (``python job.py ...`` in this process, its stderr and exit status, ``echo $?``):
    an edited output is a difference, --update-docs rewrites it back.  The job stops on its options, before any
    Spark, so that this runs without a JVM."""
    page_dir = tmp_path / "root"
    (page_dir / "docs").mkdir(parents=True)
    text = "\n".join([
        "# a page", "", "```", "$ sparkcep compile -e 'PATTERN SEQ(A a, B b) WITHIN 10' -o job.py", "wrote job.py",
        "$ python job.py --input ev --output out --stream", "...", "job.py: error: --stream needs --checkpoint",
        "$ echo $?", "2", "```", ""])
    (page_dir / "docs" / "p.md").write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", page_dir)
    monkeypatch.setattr(Block, "needs_spark", lambda self: False)  # no Spark needed: run it in the pure pass
    work = tmp_path / "w"
    work.mkdir()
    run = run_page("docs/p.md", work, update=False)
    assert run.ran == ["docs/p.md:3"] and not run.differences  # the page as it is: no difference
    edited = text.replace("needs --checkpoint", "needs --lateness").replace("\n2\n", "\n0\n")
    (page_dir / "docs" / "p.md").write_text(edited)
    work2 = tmp_path / "w2"
    work2.mkdir()
    found = run_page("docs/p.md", work2, update=True).differences
    assert [d.where for d in found] == ["docs/p.md:7", "docs/p.md:10"]
    assert (page_dir / "docs" / "p.md").read_text() == text.replace("...\n", "\n".join(found[0].actual[:-1]) + "\n")


def test_a_result_listing_in_prose_is_checked(tmp_path, monkeypatch):
    """``QUERY over A1 B2(5) ...`` then rows: the reference's rows, in any order; a wrong or missing row fails."""
    (tmp_path / "docs").mkdir()
    listing = ["```", "PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 5 RETURN a.ts AS a, b.ts AS b",
               "    over A1(1) B2(0) B3(2) A4(3) B9(4)", "{'a': 1, 'b': 3}", "", "RETURN COUNT(*) PATTERN SEQ(A, B+) "
               "WITHIN 10 SLIDE 10     over A1 B2 B3", "{'window_start': 0, 'window_end': 10, 'count_all': 3}", "```"]
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs" / "p.md").write_text("\n".join(listing))
    run = run_page("docs/p.md", tmp_path / "docs", update=False)
    assert run.ran == ["docs/p.md:1", "docs/p.md:1"] and not run.differences
    for wrong in ("{'a': 4, 'b': 9}", "'count_all': 2}"):
        edited = listing[:3] + [listing[3] + "\n" + wrong] + listing[4:] if wrong.startswith("{") else \
            [ln.replace("'count_all': 3}", wrong) for ln in listing]
        (tmp_path / "docs" / "p.md").write_text("\n".join(edited))
        assert len(run_page("docs/p.md", tmp_path / "docs", update=False).differences) == 1


def test_unmarked_command_block_fails(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "p.md").write_text("```\nsparkcep check queries.cep\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="neither run"):
        run_page("docs/p.md", tmp_path / "docs", update=False)
    (tmp_path / "docs" / "p.md").write_text("<!-- not run: a synopsis -->\n```\nsparkcep check queries.cep\n```\n")
    assert not run_page("docs/p.md", tmp_path / "docs", update=False).differences
