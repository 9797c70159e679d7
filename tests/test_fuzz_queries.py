"""A bounded, seeded fuzz test over query text (issue 20): mutations of the paper queries
(golden_plans/queries.cep, LANGUAGE.md §8) through ``sparkcep check/explain/compile`` in-process (and a few as
a real process) exit 0 or 2, print exactly one message for 2, and never a traceback.

Mutations: character deletions, insertions of random tokens (keywords, operators, quotes of every kind,
numbers out of range, unicode, control characters), duplicated fragments, truncation and deep nesting.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparkcep.cli import main

ROOT = Path(__file__).resolve().parents[1]
SEED = 20
N_TEXTS = 150

TOKENS = [
    "SEQ(", "(", ")", "[", "]", "[]", "{", "}", ",", ";", ":", ".", "..", "+", "*", "?", "-", "!", "~", "¬", "∧",
    "∨", "≠", "≥", "=", "<>", "AND", "OR", "NOT", "PATTERN", "EVENT", "RETURN", "WHERE", "WITHIN", "SLIDE",
    "GROUP BY", "GROUP-BY", "USING", "skip_till_next_match", "strict_contiguity", "ANY(", "NEXT(", "COUNT(*)",
    "sum(", "avg(b[].x + 1)", "count(TRUE)", "WITH RATES (A = 1)", "WITH SHEDDING LATENCY 1 s", "AS", "i-1",
    "v[v.len]", "1e999", "-0", "0.5", "9" * 5000, "'", '"', "'it''s'", '"""', "\\", "\\x41", "\x00", "\n",
    "\t", "--", "/*", "*/", "é", "名前", "\ufeff", "\u202e", "\udcff", "10 seconds", "1 day", "PATERN", "WHER",
    "q:", "b[i].x", "x.where", "NULL", "TRUE",
]


def seeds() -> list[str]:
    """The paper queries, one text each (the golden file's named queries)."""
    text = (ROOT / "golden_plans" / "queries.cep").read_text(encoding="utf-8")
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    return [q.strip() for q in body.split(";") if q.strip()]


def mutate(text: str, rnd: random.Random) -> str:
    for _ in range(rnd.randint(1, 3)):
        kind = rnd.choice(["delete", "insert", "insert", "duplicate", "truncate", "replace", "nest", "number"])
        i = rnd.randrange(len(text) + 1)
        if kind == "delete":
            text = text[:i] + text[i + rnd.randint(1, 8):]
        elif kind == "insert":
            text = text[:i] + rnd.choice(["", " "]) + rnd.choice(TOKENS) + rnd.choice(["", " "]) + text[i:]
        elif kind == "duplicate":
            j = rnd.randrange(len(text) + 1)
            lo, hi = sorted((i, j))
            text = text[:hi] + text[lo:hi] + text[hi:]
        elif kind == "truncate":
            text = text[:i]
        elif kind == "replace" and text:
            k = rnd.randrange(len(text))
            text = text[:k] + chr(rnd.choice([rnd.randint(32, 126), rnd.randint(0x80, 0x2FFF)])) + text[k + 1:]
        elif kind == "nest":
            text = _nest(text, rnd)
        elif kind == "number":  # a number literal out of range
            text = re.sub(r"\b\d+\b", lambda m: rnd.choice(["9" * 5000, "1e999", m.group()]), text, count=1)
    return text


def _nest(text: str, rnd: random.Random) -> str:
    """Deep nesting that still parses: NOT/unary minus/+ chains in WHERE, SEQ( around the pattern, or parens."""
    depth = rnd.choice([30, 30, 300, 2100])  # the deepest legal ones: test_parser_limits
    m = re.search(r"\b(PATTERN|EVENT) (.*?)( USING| WHERE| WITHIN)", text, re.S)
    form = rnd.choice(["not", "plus", "seq", "paren"])
    if form == "seq" and m:
        return text[:m.start(2)] + "SEQ(" * depth + m.group(2) + ")" * depth + text[m.end(2):]
    where = text.find("WHERE ")
    if where < 0:
        return text[:-1] + "(" * depth + text[-1:] + ")" * depth
    at = where + len("WHERE ")
    chain = {"not": "NOT ", "plus": "1 + ", "seq": "- ", "paren": "("}[form]
    close = ")" * depth if form == "paren" else ""
    end = text.find(" WITHIN", at)
    end = len(text) if end < 0 else end
    return text[:at] + chain * depth + text[at:end] + close + text[end:]


def fuzzed() -> list[str]:
    rnd = random.Random(SEED)
    base = seeds()
    return [mutate(rnd.choice(base), rnd) for _ in range(N_TEXTS)]


def one_message(err: str) -> bool:
    """Exactly one ``sparkcep: ...`` message (its caret lines belong to it)."""
    return err.startswith("sparkcep: ") and err.count("sparkcep: ") == 1


def test_seeds_are_the_paper_queries():
    assert len(seeds()) >= 14


@pytest.mark.parametrize("command", ["check", "explain", "compile"])
def test_fuzzed_queries_exit_0_or_2_with_one_message(command, tmp_path, capsys):
    outcomes = {0: 0, 2: 0}
    for k, text in enumerate(fuzzed()):
        args = [command, "-e", text] + (["-o", str(tmp_path / "job.py")] if command == "compile" else [])
        status = main(args)
        out, err = capsys.readouterr()
        assert status in (0, 2), (k, text[:200], status)
        assert "Traceback" not in err + out, (k, text[:200], err[-2000:])
        if status == 2:
            assert one_message(err), (k, text[:200], err[:2000])
        outcomes[status] += 1
    assert outcomes[0] >= 5 and outcomes[2] >= 50, outcomes  # the mutations reach both sides


def test_fuzzed_queries_as_a_process(tmp_path):
    rnd = random.Random(SEED + 1)
    texts = [t for t in fuzzed() if "\x00" not in t and "\udcff" not in t]  # argv cannot carry these
    for text in rnd.sample(texts, 3) + ["PATTERN " + "SEQ(" * 3000 + "A a" + ")" * 3000 + " WITHIN 1"]:
        path = tmp_path / "q.cep"
        path.write_text(text, encoding="utf-8")
        proc = subprocess.run([sys.executable, "-m", "sparkcep.cli", "explain", str(path)],
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        if proc.returncode == 2:
            assert one_message(proc.stderr), proc.stderr[:2000]
        assert not re.search(r"\b_[A-Z]+\b", proc.stderr), proc.stderr  # no internal token names
