"""Print AST nodes back as query text, one clause per line.

The output is valid source: ``parse_query(format_query(q)) == q`` for every query the parser produces.
Parentheses are added only where precedence needs them.

Example::

    >>> from sparkcep.grammar import parse_query
    >>> q = parse_query("pattern seq(A a, b+ x[]) where [id] and x[i].v>x[i-1].v within 10 s")
    >>> print(format_query(q))
    PATTERN SEQ(A a, b+ x[])
    WHERE [id] AND x[i].v > x[i-1].v
    WITHIN 10 s
"""

from __future__ import annotations

import re
from dataclasses import replace

from sparkcep.ir import ast
from sparkcep.ir.naming import safe_identifier

__all__ = ["format_expr", "format_pattern", "format_query", "format_workload"]

# Binding strength of expression operators, loosest first (as in cep.lark).
_OR, _AND, _NOT, _COMPARE, _SUM, _PRODUCT, _UNARY, _ATOM = range(8)
_BINARY = {"OR": _OR, "AND": _AND, "=": _COMPARE, "!=": _COMPARE, "<": _COMPARE, "<=": _COMPARE,
           ">": _COMPARE, ">=": _COMPARE, "+": _SUM, "-": _SUM, "*": _PRODUCT, "/": _PRODUCT, "%": _PRODUCT}

_INDEX = {"all": "[]", "cur": "[i]", "prev": "[i-1]", "prefix": "[..i-1]"}


def format_workload(workload: ast.Workload) -> str:
    """The queries of ``workload``, each ended by ``;`` and separated by a blank line, after its ``WITH RATES``
    clause if it has one."""
    head = ""
    if workload.rates:
        head = "WITH RATES (" + ", ".join(f"{t} = {_number_text(r)}" for t, r in workload.rates) + ");\n\n"
    return head + "\n\n".join(format_query(q) + ";" for q in workload.queries) + "\n"


def _number_text(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def format_query(query: ast.Query) -> str:
    """One query, one clause per line; RETURN is printed where ``query.return_first`` says."""
    lines = []
    if query.name is not None:
        lines.append(f"{query.name}:")
    returns = "RETURN " + ", ".join(_return_item(r) for r in query.returns) if query.returns else None
    if returns and query.return_first:
        lines.append(returns)
    lines.append("PATTERN " + format_pattern(query.pattern))
    if query.strategy is not None and query.strategy_vars is None:
        lines.append("USING " + query.strategy)
    if query.strategy_vars is not None:
        variables = ", ".join(_strategy_var(v, query.pattern) for v in query.strategy_vars)
        condition = "" if query.where is None else f" {format_expr(query.where)} "
        lines.append(f"WHERE {query.strategy}({variables}) {{{condition}}}")
    elif query.where is not None:
        lines.append("WHERE " + format_expr(query.where))
    if query.group_by:
        lines.append("GROUP BY " + ", ".join(format_expr(a) for a in query.group_by))
    if query.having is not None:
        lines.append("HAVING " + format_expr(query.having))
    window = "WITHIN " + _duration(query.within)
    if query.slide is not None:
        window += " SLIDE " + _duration(query.slide)
    lines.append(window)
    if query.skip is not None:
        target = "" if query.skip.var is None else " " + query.skip.var
        lines.append(f"AFTER MATCH SKIP {query.skip.kind}{target}")
    if returns and not query.return_first:
        lines.append(returns)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- patterns


def format_pattern(pattern: ast.Pattern) -> str:
    """A pattern in canonical spelling: ``SEQ(A a, B+ b[], NOT C c)``, ``(SEQ(A+, B))+``, ``P OR Q``."""
    if isinstance(pattern, ast.EventPat):
        return _event(pattern, "")
    if isinstance(pattern, ast.Seq):
        strict = pattern.strict or (False,) * len(pattern.items)
        return "SEQ(" + ", ".join(("NEXT " if s else "") + format_pattern(p)
                                  for p, s in zip(pattern.items, strict, strict=True)) + ")"
    if isinstance(pattern, ast.Kleene):
        op = pattern.op
        if pattern.bounds is not None:
            lo, hi = pattern.bounds
            op = f"{{{lo}}}" if lo == hi else f"{{{lo},{'' if hi is None else hi}}}"
        if not pattern.greedy:
            op += "?"
        until = "" if pattern.until is None else \
            f" UNTIL {'ANY ' if pattern.until_any else ''}({format_expr(pattern.until)})"
        if isinstance(pattern.inner, ast.EventPat):
            return _event(pattern.inner, op) + until
        return f"({format_pattern(pattern.inner)}){op}{until}"
    if isinstance(pattern, ast.Not):
        inner = format_pattern(pattern.inner)
        return f"NOT ({inner})" if isinstance(pattern.inner, ast.Or) else f"NOT {inner}"
    if isinstance(pattern, ast.Or):
        return " OR ".join(f"({format_pattern(p)})" if isinstance(p, ast.Or) else format_pattern(p)
                           for p in pattern.alternatives)
    raise TypeError(f"not a pattern node: {pattern!r}")


def _event(event: ast.EventPat, op: str) -> str:
    """``T v``, ``ANY(T1, T2) v``, with the Kleene operator after the type: ``T+ v[]``."""
    types = f"ANY({', '.join(event.types)})" if event.any_ else event.types[0]
    if event.var is None:
        return types + op
    return f"{types}{op} {event.var}{'[]' if event.array else ''}"


def _strategy_var(name: str, pattern: ast.Pattern) -> str:
    """``b[]`` if the pattern declares ``b`` as an array variable, else ``b``."""
    arrays = {n.var for n in ast.walk(pattern) if isinstance(n, ast.EventPat) and n.array}
    return name + "[]" if name in arrays else name


# ------------------------------------------------------------------------------------------------ expressions


def format_expr(expr: ast.Expr) -> str:
    """An expression with the fewest parentheses that keep its structure."""
    text, _ = _expr(expr)
    return text


def _expr(expr: ast.Expr) -> tuple[str, int]:
    """The text of ``expr`` and the binding strength of its outermost operator."""
    if isinstance(expr, ast.BinOp):
        level = _BINARY[expr.op]
        # left-associative, except comparisons, which do not chain
        left = _operand(expr.left, level if level != _COMPARE else level + 1)
        right = _operand(expr.right, level + 1)
        return f"{left} {expr.op} {right}", level
    if isinstance(expr, ast.Unary):
        if expr.op == "NOT":
            inner = expr.operand
            if isinstance(inner, ast.Call) and inner.name == "isnull" and len(inner.args) == 1:  # as written
                return f"{_operand(inner.args[0], _SUM)} IS NOT NULL", _COMPARE
            return "NOT " + _operand(expr.operand, _NOT), _NOT
        operand = _operand(expr.operand, _UNARY)
        # `--` would start a comment
        return ("-(" + operand + ")" if operand.startswith("-") else "-" + operand), _UNARY
    if isinstance(expr, ast.Literal):
        return _literal(expr.value), _UNARY if _negative(expr.value) else _ATOM
    if isinstance(expr, ast.Attr):
        return _attr(expr), _ATOM
    if isinstance(expr, ast.Func):
        args = "*" if expr.star else ", ".join(format_expr(a) for a in expr.args)
        return f"{expr.name.upper()}({args})", _ATOM
    if isinstance(expr, ast.Call):
        return _call(expr)
    if isinstance(expr, ast.EquivTest):
        return "[" + ", ".join(_equiv_item(i) for i in expr.items) + "]", _ATOM
    raise TypeError(f"not an expression node: {expr!r}")


def _call(expr: ast.Call) -> tuple[str, int]:
    """A scalar function, or a special form in its SQL syntax (comparison level but CASE and CAST)."""
    args = expr.args
    if expr.name == "isnull" and len(args) == 1:
        return f"{_operand(args[0], _SUM)} IS NULL", _COMPARE
    if expr.name == "in" and len(args) >= 2:
        return f"{_operand(args[0], _SUM)} IN ({', '.join(format_expr(a) for a in args[1:])})", _COMPARE
    if expr.name == "between" and len(args) == 3:
        return f"{_operand(args[0], _SUM)} BETWEEN {_operand(args[1], _SUM)} AND {_operand(args[2], _SUM)}", \
            _COMPARE
    if expr.name == "like" and len(args) == 2:
        return f"{_operand(args[0], _SUM)} LIKE {_operand(args[1], _SUM)}", _COMPARE
    if expr.name == "case" and len(args) >= 2:
        whens = " ".join(f"WHEN {format_expr(args[k])} THEN {format_expr(args[k + 1])}"
                         for k in range(0, len(args) - 1, 2))
        default = f" ELSE {format_expr(args[-1])}" if len(args) % 2 else ""
        return f"CASE {whens}{default} END", _ATOM
    if expr.name == "cast" and len(args) == 1 and expr.type:
        return f"CAST({format_expr(args[0])} AS {expr.type})", _ATOM
    return f"{expr.name.upper()}({', '.join(format_expr(a) for a in args)})", _ATOM


def _operand(expr: ast.Expr, minimum: int) -> str:
    """``expr`` parenthesized if it binds looser than ``minimum``."""
    text, level = _expr(expr)
    return f"({text})" if level < minimum else text


def _attr(attr: ast.Attr) -> str:
    if attr.var is None:
        return attr.attr
    if attr.index is None:
        return f"{attr.var}.{attr.attr}"
    if attr.index == "next":
        return f"NEXT({attr.var}).{attr.attr}"
    if attr.index == "last":
        return f"{attr.var}[{attr.var}.len].{attr.attr}"
    if isinstance(attr.index, int):
        return f"{attr.var}[{attr.index}].{attr.attr}"
    return f"{attr.var}{_INDEX[attr.index]}.{attr.attr}"


def _equiv_item(item: ast.EquivItem) -> str:
    text = item.attr if item.var is None else f"{item.var}.{item.attr}"
    return text if item.value is None else f"{text} = {_literal(item.value.value)}"


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _negative(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and str(value).startswith("-")


# ---------------------------------------------------------------------------------------------------- clauses


def _return_item(item: ast.ReturnItem) -> str:
    text = format_expr(item.expr)
    return text if item.alias is None else f"{text} AS {item.alias}"


def _duration(duration: ast.Duration) -> str:
    return repr(duration.value) if duration.unit is None else f"{duration.value!r} {duration.unit}"


def format_pattern_as_written(pattern: ast.Pattern) -> str:
    """The pattern as written: implicit variables (named after their type by analysis) are not shown."""
    def unname(n):
        base = safe_identifier(n.types[0]) if isinstance(n, ast.EventPat) and len(n.types) == 1 else "any"
        if isinstance(n, ast.EventPat) and n.var is not None and re.fullmatch(rf"{re.escape(base)}(_\d+)?", n.var):
            return replace(n, var=None)
        return n

    return format_pattern(ast.map_nodes(pattern, unname))
