"""The result columns a batch statement's outer query reads: only those leave the worker.

``sparkcep.sql`` runs the outer query (``Recognize.outer_sql``: SELECT, WHERE, GROUP BY, ORDER BY on the matches)
by Spark SQL over the engine's result.  Spark cannot prune the columns of a ``mapInArrow`` result, so a column
the outer query never reads (the V-shape count's partition column ``p``: ``SELECT COUNT(*), SUM(a), SUM(c)``)
would still be assembled by the engine, converted to Arrow and read back by the JVM, one value per match.
:func:`pruned_output` drops such columns from the spec's ``output`` before the plan is made, and the spec's
measures to those still output, so the engine computes only those, and the batch worker reads no input column
that only a dropped measure or a dropped ALL ROWS PER MATCH column needed (``worker_spec`` keeps what
``output`` names and the measures read).  The sort and so the order of ties are unchanged: they follow
``spec.columns``, which this leaves alone.

The outer query is read with sqlglot, conservatively: a column is kept when any identifier of the query (a
column, a qualifier, an alias, a ``USING`` name, a struct field; a bare ``CURRENT_DATE``, which Spark takes for a
column of its name when there is one, is read as that column: ``sparkcep.ir.outer``) has its name,
case-insensitively, so a name read anywhere keeps it; every column is kept when the query has a ``*`` other
than ``COUNT(*)`` (``SELECT *``, ``m.*``, ``struct(*)``), a ``NATURAL`` join or a ``PIVOT``/``UNPIVOT`` (both
read the columns they do not name),
``IDENTIFIER(...)`` (a name given as a string), an identifier that is not a plain word (a quoted regex column
name), or is not a query that parses.  At least one column is always kept (a result without columns would lose
its rows: ``SELECT COUNT(*)`` keeps the first).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

import sqlglot
from sqlglot import exp

from sparkcep.ir import recognize as rx
from sparkcep.ir.outer import parse_outer

__all__ = ["pruned_output", "read_columns"]

_WORD = re.compile(r"\w+")


def read_columns(outer_sql: str, names: Sequence[str]) -> tuple[str, ...]:
    """The result columns ``names`` (in their order) that the outer query ``outer_sql`` may read (see the
    module docstring): all of them when it cannot be told, at least the first."""
    names = tuple(names)
    try:
        tree = parse_outer(outer_sql)
    except sqlglot.errors.SqlglotError:
        return names
    if not isinstance(tree, exp.Query) or tree.find(exp.Pivot) is not None:  # PIVOT groups by the columns it
        return names  # does not name
    for star in tree.find_all(exp.Star):
        if not isinstance(star.parent, exp.Count):
            return names
    if any(str(f.this).upper() == "IDENTIFIER" for f in tree.find_all(exp.Anonymous)):  # a name in a string
        return names
    for join in tree.find_all(exp.Join):
        if "NATURAL" in str(join.args.get("method") or "").upper():
            return names
    read: set[str] = set()  # a bare CURRENT_DATE is the identifier `CURRENT_DATE` (ir.outer): a column first
    for ident in tree.find_all(exp.Identifier):
        if not _WORD.fullmatch(ident.name):
            return names
        read.add(ident.name.lower())
    kept = tuple(c for c in names if c.lower() in read)
    return kept or names[:1]


def pruned_output(spec: rx.RecognizeSpec, outer_sql: str) -> rx.RecognizeSpec:
    """``spec`` with only the ``output`` columns (and their ``output_types``) that ``outer_sql`` reads
    (:func:`read_columns`), and only the measures among them (a measure only computes a value: which rows match
    does not depend on it); ``spec`` itself when it reads them all."""
    kept = read_columns(outer_sql, spec.output)
    if len(kept) == len(spec.output):
        return spec
    types = dict(zip(spec.output, spec.output_types, strict=True)) if spec.output_types else {}
    return replace(spec, output=kept, output_types=tuple(types[c] for c in kept) if types else (),
                   measures=tuple(m for m in spec.measures if m.name in kept))
