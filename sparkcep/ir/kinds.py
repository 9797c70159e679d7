"""The kind of value an expression has as Spark SQL types it: ``int`` (BIGINT), ``float`` (DOUBLE), ``str``,
``bool``, ``null`` (the NULL constant), or None where it depends on what the expression reads and its type is
not known.  The SQL writer uses it with the input's column types (to ``TRY_CAST`` a string that meets a
number); the engines use it without (to give ``coalesce`` and ``CASE`` the type Spark gives them).

    >>> from sparkcep.ir.ast import Attr, Call, Literal
    >>> kind_of(Call("coalesce", (Attr("a", "x"), Literal(1.5))))
    'float'
    >>> kind_of(Call("coalesce", (Attr("a", "x"), Literal(1)))) is None
    True
    >>> kind_of(Call("coalesce", (Attr("a", "x"), Literal(1))), {"x": "bigint"})
    'int'

Where the type of a ``coalesce`` or ``CASE`` depends on the columns' types, :func:`typed` writes it into the
call (its ``type``), so that the engines, which see values and not columns, give Spark's:

    >>> e = typed(Call("coalesce", (Attr("a", "x"), Attr("b", "d"))), {"x": "bigint", "d": "double"})
    >>> e.type, kind_of(e)
    ('DOUBLE', 'float')
"""

from __future__ import annotations

import re
from dataclasses import replace

from sparkcep.ir.ast import Attr, BinOp, Call, Literal, Unary, map_nodes

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: Spark type names (``DataType.simpleString()``) by the kind of value the engines see.
TYPE_KINDS = {"bigint": "int", "int": "int", "smallint": "int", "tinyint": "int", "double": "float",
              "float": "float", "string": "str", "boolean": "bool"}
_CALL_KINDS = {"isnull": "bool", "isnotnull": "bool", "in": "bool", "between": "bool", "like": "bool",
               "length": "int", "lower": "str", "upper": "str", "concat": "str", "substring": "str",
               "substr": "str"}
CAST_KINDS = {"BIGINT": "int", "LONG": "int", "INT": "int", "INTEGER": "int", "SMALLINT": "int", "SHORT": "int",
              "TINYINT": "int", "BYTE": "int", "DOUBLE": "float", "STRING": "str", "BOOLEAN": "bool"}
_COMPARISONS = frozenset({"=", "!=", "<", "<=", ">", ">="})


def kind_of(e, types=None) -> str | None:
    """The kind of ``e``'s values; ``types`` maps an attribute name to its Spark type name, where known."""
    types = types or {}
    if isinstance(e, Literal):
        v = e.value
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, int):
            return "int" if _INT64_MIN <= v <= _INT64_MAX else "float"
        return "float" if isinstance(v, float) else ("str" if isinstance(v, str) else None)
    if isinstance(e, Attr):
        return TYPE_KINDS.get(str(types.get(e.attr, "")).lower())
    if isinstance(e, Unary):
        inner = kind_of(e.operand, types)
        return "bool" if e.op == "NOT" else ("float" if inner == "str" else inner)
    if isinstance(e, BinOp):
        if e.op in _COMPARISONS or e.op in ("AND", "OR"):
            return "bool"
        kinds = {kind_of(e.left, types), kind_of(e.right, types)} - {"str"}
        if e.op == "/" or "float" in kinds:
            return "float"
        return "int" if kinds == {"int"} else None
    if isinstance(e, Call):
        if e.name == "cast":
            return CAST_KINDS.get((e.type or "").upper())
        if e.name == "abs" and e.args:
            inner = kind_of(e.args[0], types)
            return "float" if inner == "str" else inner
        if e.name in ("coalesce", "case"):
            if e.type is not None:  # the type the columns give it (:func:`typed`)
                return CAST_KINDS.get(e.type.upper())
            return common_kind([kind_of(v, types) for v in values_of(e)])
        return _CALL_KINDS.get(e.name)
    return None


#: the Spark type name of each kind (the ``type`` :func:`typed` gives a call)
KIND_TYPES = {"int": "BIGINT", "float": "DOUBLE", "str": "STRING", "bool": "BOOLEAN"}


def typed(node, types: dict[str, str]):
    """``node`` (an expression, or a query or engine spec holding expressions) with each ``coalesce`` and
    ``CASE`` whose Spark type depends on the types of the attributes it reads marked with that type (its
    ``type``: ``coalesce(a.x, b.d)`` over a BIGINT ``x`` and a DOUBLE ``d`` is DOUBLE); ``types`` maps a column
    name to its Spark type name (``DataType.simpleString()``).  The engines then widen the value as Spark does
    (``3`` is ``3.0``, a string among numbers is try_cast to their type)."""
    def mark(n):
        if isinstance(n, Call) and n.name in ("coalesce", "case") and n.type is None and kind_of(n) is None:
            kind = KIND_TYPES.get(kind_of(n, types))
            return n if kind is None else replace(n, type=kind)
        return n
    return map_nodes(node, mark)


def values_of(call: Call) -> tuple:
    """The arguments whose value a ``coalesce`` or ``CASE`` gives (not a CASE's conditions)."""
    if call.name == "case":
        args = call.args
        return tuple(args[k + 1] for k in range(0, len(args) - 1, 2)) + ((args[-1],) if len(args) % 2 else ())
    return tuple(call.args)


def common_kind(kinds) -> str | None:
    """The type Spark (ANSI) gives values of these kinds together (``coalesce``, ``CASE``): DOUBLE if one is
    DOUBLE, BIGINT for BIGINTs (a string among numbers is cast to the number's type), else the one kind; None
    where an unknown kind could change it."""
    known = {k for k in kinds if k != "null"}
    if "float" in known and known <= {"int", "float", "str", None}:
        return "float"
    if None in known:
        return None
    if known in ({"int"}, {"int", "str"}):
        return "int"
    return known.pop() if len(known) == 1 else None


# ------------------------------------------------------------------------------------------------ LIKE patterns
#: A LIKE pattern Spark accepts, as a Java regular expression: its escape ``\`` precedes only ``_``, ``%`` or
#: ``\`` (Spark raises INVALID_FORMAT on any other, and on a trailing ``\``; sparkcep gives NULL instead).
LIKE_PATTERN_VALID = r"\A(?:[^\\]|\\[_%\\])*\z"
_LIKE_VALID = re.compile(r"(?:[^\\]|\\[_%\\])*", re.DOTALL)


def like_pattern_valid(pattern: str) -> bool:
    """Whether Spark's LIKE accepts ``pattern`` (see :data:`LIKE_PATTERN_VALID`)."""
    return _LIKE_VALID.fullmatch(pattern) is not None
