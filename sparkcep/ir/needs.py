"""What a query needs of the attributes it reads, from its AST alone: the input reader reads each attribute
with that type (:func:`sparkcep.spark.validate.read_validated`), so that one bad value becomes a dead letter
instead of retyping the column."""

from __future__ import annotations

from sparkcep.ir.ast import Attr, BinOp, EquivItem, Func, Literal, Unary, walk

#: What a query needs of an attribute (:func:`attribute_needs`).
NUMERIC, TEXT = "numeric", "string"

_ORDER = {"<", "<=", ">", ">="}
_ARITH = {"+", "-", "*", "/", "%"}


def attribute_needs(queries) -> dict[str, str]:
    """What the queries (AST :class:`~sparkcep.ir.ast.Query`) need of each attribute they read:
    :data:`NUMERIC` where an attribute is an operand of arithmetic, of an order comparison (``<``, ...) with
    anything but a string, of a comparison with a number, or of ``sum``/``avg``; :data:`TEXT` where it is
    compared with a string; absent where the query does not constrain it (equality between attributes, keys,
    RETURN items).  Numeric wins over text (a query cannot need both of one attribute meaningfully)."""
    needs: dict[str, str] = {}

    def mark(node, need: str) -> None:
        if isinstance(node, Attr) and (need == NUMERIC or needs.get(node.attr) != NUMERIC):
            needs[node.attr] = need

    def is_string(node) -> bool:
        return isinstance(node, Literal) and isinstance(node.value, str)

    def is_number(node) -> bool:
        return isinstance(node, Literal) and isinstance(node.value, int | float) and not isinstance(node.value, bool)

    for q in queries:
        roots = [q.where, *(r.expr for r in (q.returns or ()))]
        for root in roots:
            if root is None:
                continue
            for n in walk(root):
                if isinstance(n, BinOp) and n.op in _ARITH:
                    mark(n.left, NUMERIC)
                    mark(n.right, NUMERIC)
                elif isinstance(n, BinOp) and n.op in (_ORDER | {"=", "!=", "<>"}):
                    for side, other in ((n.left, n.right), (n.right, n.left)):
                        if is_string(other):
                            mark(side, TEXT)
                        elif n.op in _ORDER or is_number(other) or isinstance(other, BinOp | Unary | Func):
                            mark(side, NUMERIC)
                elif isinstance(n, Unary) and n.op == "-":
                    mark(n.operand, NUMERIC)
                elif isinstance(n, Func) and n.name in ("sum", "avg"):
                    for a in n.args:
                        mark(a, NUMERIC)
                elif isinstance(n, EquivItem) and n.value is not None:
                    needs.setdefault(n.attr, TEXT if isinstance(n.value.value, str) else NUMERIC)
    return needs
