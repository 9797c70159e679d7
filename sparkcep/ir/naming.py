"""Names of result columns, shared by the compiler, the engines and the oracle.

Example::

    >>> from sparkcep.ir.ast import Attr, Func, ReturnItem
    >>> column_name(ReturnItem(Func("avg", (Attr("b", "period", "all"),))), 0)
    'avg_b_period'
    >>> column_name(ReturnItem(Attr("b", "ts", "last")), 1)
    'b_last_ts'
"""

from __future__ import annotations

import re

from sparkcep.ir.ast import Attr, Func, ReturnItem

_INDEX_WORD = {None: "", "all": "", "cur": "cur_", "prev": "prev_", "prefix": "prefix_", "last": "last_",
               "next": "next_"}


def attr_name(a: Attr) -> str:
    if a.var is None:
        return a.attr
    word = _INDEX_WORD[a.index] if not isinstance(a.index, int) else ("first_" if a.index == 1 else f"{a.index}_")
    return f"{a.var}_{word}{a.attr}"


def column_name(item: ReturnItem, position: int) -> str:
    """The alias if there is one; else a name derived from a simple expression; else ``col<position>``."""
    if item.alias:
        return item.alias
    e = item.expr
    if isinstance(e, Attr):
        return attr_name(e)
    if isinstance(e, Func):
        if e.star:
            return f"{e.name}_all"
        if len(e.args) == 1 and isinstance(e.args[0], Attr):
            return f"{e.name}_{attr_name(e.args[0])}"
    return f"col{position}"


def default_column(var: str, attr: str) -> str:
    """The column of attribute ``attr`` of component ``var`` in a query without RETURN."""
    return f"{var}_{attr}"


def safe_identifier(name: str) -> str:
    """A Spark/Python-safe column identifier for an arbitrary name."""
    out = re.sub(r"\W", "_", name)
    return out if out and not out[0].isdigit() else f"_{out}"


def implicit_namer(taken: set[str]):
    """``fresh(base)``: the variable name of an unnamed component of type ``base`` — ``base`` itself, else
    ``base_2``, ``base_3``, ... — never one in ``taken`` (which it extends).  Shared by analysis and oracle
    so that both name ``SEQ(A, B, A)`` as ``A, B, A_2``."""

    def fresh(base: str) -> str:
        base = safe_identifier(base)
        name, k = base, 1
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        return name

    return fresh


def dedupe(names: list[str]) -> list[str]:
    """Make names unique by suffixing ``_2``, ``_3``, ... in order."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        if n in seen:
            seen[n] += 1
            out.append(f"{n}_{seen[n]}")
        else:
            seen[n] = 1
            out.append(n)
    return out
