r'''The one way a value goes into generated Python: :func:`py_literal`.

Every value that code generation places into a job file or a notebook cell (the query text, the plan's
explain text, names, file names, column names, option values, the engine spec and the Spark SQL filter)
becomes a Python literal made here, so that no text of a query, a file name or an option is ever read as
code, and the literal evaluates (``ast.literal_eval``) to exactly the value::

    >>> print(py_literal("it's"))
    "it's"
    >>> print(py_literal({"key": ["id"], "window": 10}))
    {'key': ['id'], 'window': 10}
    >>> print(py_literal("s = 'a\\b'\n" + '"' * 3 + " NUL \x00 end"))
    """s = 'a\\b'
    \"\"" NUL \x00 end"""

A string of several lines becomes a triple-quoted literal that keeps its lines readable (the job's
docstring, the engine spec's JSON, the SQL filter): backslashes are doubled, a ``"`` is escaped where it
could close the literal (before another ``"`` and at the end), and every other character that is not
printable (NUL, control characters, ``\r``, Unicode line separators, lone surrogates) is written as its
visible escape (``\x00``, ``\u2028``).  Other values go through ``repr``; a float that is not finite has no
literal and is refused.
'''

from __future__ import annotations

import math

__all__ = ["py_literal"]


def py_literal(value) -> str:
    """Python source that evaluates to ``value``: None, bool, int, finite float, str, and lists, tuples and
    dicts of those."""
    if value is None or isinstance(value, (bool, int)):
        return repr(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"no Python literal for the non-finite float {value!r}")
        return repr(value)
    if isinstance(value, str):
        return _text(value) if "\n" in value else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(py_literal(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no Python literal for a {type(value).__name__}")


def _text(value: str) -> str:
    """A triple-quoted literal of ``value`` with its line breaks kept as lines (see the module docstring)."""
    out = []
    for i, ch in enumerate(value):
        if ch == "\n":
            out.append(ch)
        elif ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            closes = i + 1 == len(value) or value[i + 1] == '"'
            out.append('\\"' if closes else ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])  # \x00, \t, \r, \u2028, \ud800
    return '"""' + "".join(out) + '"""'
