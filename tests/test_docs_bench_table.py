"""README.md's bench table stays a table: one short row per bench script, the history in docs/bench_history.md.

Pure (no JVM, no bench run): it reads README.md, docs/bench_history.md and the names of ``bench/*.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: a row: the latest figure and its goal, in short; what came before goes to docs/bench_history.md
MAX_ROW = 650
SCRIPT = re.compile(r"`(bench/[\w./-]+?\.py)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


def bench_rows() -> list[str]:
    return [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("| `bench/")]


def first_cell(row: str) -> str:
    return re.split(r"(?<!\\)\|", row)[1]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(ln.lstrip("#")) for ln in page.read_text().splitlines() if re.match(r"#+ ", ln)}


def test_one_short_row_per_bench_script():
    rows = bench_rows()
    assert rows, "README.md has no bench table"
    long = {first_cell(r).strip(): len(r) for r in rows if len(r) > MAX_ROW}
    assert not long, f"rows over {MAX_ROW} characters (older figures go to docs/bench_history.md): {long}"
    named = [s for r in rows for s in SCRIPT.findall(first_cell(r))]
    assert len(named) == len(set(named)), f"a script with two rows: {sorted(named)}"
    scripts = {f"bench/{p.name}" for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_")}
    assert set(named) == scripts, f"no row: {sorted(scripts - set(named))}; no file: {sorted(set(named) - scripts)}"
    everywhere = {s for r in rows for s in SCRIPT.findall(r)}
    assert everywhere <= scripts, f"the table names scripts that do not exist: {sorted(everywhere - scripts)}"


def test_bench_links_and_history_sections_exist():
    section = (ROOT / "README.md").read_text().split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    history = ROOT / "docs" / "bench_history.md"
    assert "docs/bench_history.md" in section
    for target, anchor in LINK.findall(section):
        page = ROOT / target
        assert page.is_file(), f"README bench table links to a missing file: {target}"
        assert not anchor or anchor in anchors(page), f"no heading #{anchor} in {target}"
    heads = [ln[3:] for ln in history.read_text().splitlines() if ln.startswith("## ")]
    assert heads and all(SCRIPT.search(h) for h in heads)
    for h in heads:
        for s in SCRIPT.findall(h):
            assert (ROOT / s).is_file(), f"docs/bench_history.md has a section for a missing script: {s}"


def test_bench_rows_name_options_their_scripts_have():
    """An option a row shows (``--sizes 10000000``) is a string literal of a script the row names (``add_argument``,
    or passed on to ``sparkcep run``): a renamed or dropped option makes the row's command fail."""
    for row in bench_rows():
        scripts = set(SCRIPT.findall(row))
        known = {o for s in scripts for o in re.findall(r"""["'](--[a-z][\w-]*)""", (ROOT / s).read_text())}
        unknown = set(OPTION.findall(row)) - known
        assert not unknown, f"{sorted(scripts)} has no option {sorted(unknown)}"
