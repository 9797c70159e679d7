"""Parse query text into the AST of :mod:`sparkcep.ir.ast`.

The grammar lives in ``cep.lark`` next to this module; the Lark parser is built once (LALR, contextual lexer,
positions) and the :class:`_ToAst` Transformer turns its parse tree into AST nodes with spans.  Every
syntax error becomes a :class:`~sparkcep.ir.errors.CEPSyntaxError` with the span of the offending token
and the source text, so that the message shows a caret.

Example::

    >>> q = parse_query("PATTERN SEQ(A a, B+ b[]) WHERE [id] WITHIN 10 seconds")
    >>> q.pattern.items[1]  # doctest: +ELLIPSIS
    Kleene(inner=EventPat(types=('B',), var='b', any_=False, array=True), op='+', greedy=True, bounds=None, ...)
    >>> q.within
    Duration(value=10, unit='s')
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, replace
from pathlib import Path

from lark import Lark, Token, Transformer_NonRecursive, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError
from lark.lexer import PatternStr

from sparkcep.ir import ast
from sparkcep.ir.errors import CEPError, CEPSyntaxError, Span
from sparkcep.ir.limits import MAX_INT_DIGITS, check_depth, check_duration, finite

__all__ = ["parse_query", "parse_workload"]

_GRAMMAR = Path(__file__).with_name("cep.lark")

#: Unit spellings (lower-cased) → the keys of :data:`sparkcep.ir.ast.UNITS_MS`.
_UNITS = {
    "ms": "ms", "millisecond": "ms", "milliseconds": "ms",
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "min": "min", "mins": "min", "minute": "min", "minutes": "min",
    "h": "h", "hour": "h", "hours": "h",
    "d": "d", "day": "d", "days": "d",
}

#: Operator spellings → the normalized ``BinOp.op``.
_BINOPS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "≠": "!=", "<": "<", "<=": "<=", "≤": "<=",
           ">": ">", ">=": ">=", "≥": ">=", "+": "+", "-": "-", "*": "*", "/": "/", "%": "%"}


def parse_workload(text: str) -> ast.Workload:
    """Parse a file of one or more queries separated by ``;``.

    Raises :class:`CEPSyntaxError` (with line, column and ``source=text``) when ``text`` is not in the
    grammar.
    """
    text = without_bom(text)
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as err:
        raise _syntax_error(err, text) from None
    try:
        workload = _ToAst().transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, CEPSyntaxError):
            # raised by the Transformer, which does not know the source text
            raise CEPSyntaxError(err.orig_exc.message, err.orig_exc.span, text) from None
        raise
    check_depth(workload, text)
    return workload


def without_bom(text: str) -> str:
    """The text without a leading byte order mark (some editors write one; it is not part of the query, and
    an editor does not show it: columns count from the character after it).  Every front end reads its text
    through it: anything but a string is one message, not an AttributeError further on."""
    if not isinstance(text, str):
        hint = " (decode the bytes first, e.g. data.decode('utf-8'))" if isinstance(text, (bytes, bytearray)) else ""
        raise CEPError(f"the query text must be a string, got {type(text).__name__}{hint}")
    return text[1:] if text.startswith("\ufeff") else text


def parse_query(text: str) -> ast.Query:
    """Parse exactly one query (a trailing ``;`` is allowed)."""
    text = without_bom(text)
    workload = parse_workload(text)
    if len(workload.queries) != 1:
        extra = workload.queries[1]
        raise CEPSyntaxError(f"expected one query, found {len(workload.queries)}", extra.span, text)
    return workload.queries[0]


@functools.cache
def _parser() -> Lark:
    return Lark(_GRAMMAR.read_text(encoding="utf-8"), parser="lalr", lexer="contextual",
                propagate_positions=True, maybe_placeholders=True)


# ------------------------------------------------------------------------------------------------ transformer


def _bounds(meta, lo: int, hi: int | None) -> tuple[int, int | None]:
    """A bounded quantifier ``{n}``, ``{n,}``, ``{n,m}``: at least one iteration possible, ``n <= m``."""
    if hi is not None and hi < lo:
        raise CEPSyntaxError(f"{{{lo},{hi}}}: the upper bound is below the lower one", _span(meta))
    if hi == 0:
        raise CEPSyntaxError("a quantifier {0} or {0,0} matches nothing: leave the component out",
                             _span(meta))
    return lo, hi


@dataclass(frozen=True)
class _Next:
    """A ``NEXT P`` item of a SEQ, until :meth:`_ToAst.seq` records it in ``Seq.strict``."""

    pattern: ast.Pattern


def _kleene(inner, op: str | tuple, greedy: bool, meta, until=None) -> ast.Kleene:
    """``P+``/``P*``/``P?``, or a bounded ``P{n,m}`` (``op`` a ``(n, m)`` pair; ``{1,}``/``{0,}`` are ``+``/``*``);
    ``greedy`` False for the reluctant forms (``P+?``); ``until`` the ``(condition, any)`` of ``UNTIL [ANY]
    (...)``."""
    cond, any_ = until if until is not None else (None, False)
    stop = {"until": cond, "until_any": any_}
    if isinstance(op, str):
        return ast.Kleene(inner, op, span=_span(meta), greedy=greedy, **stop)
    lo, hi = op
    plain = "+" if lo else "*"
    if hi is None and lo <= 1:
        return ast.Kleene(inner, plain, span=_span(meta), greedy=greedy, **stop)
    return ast.Kleene(inner, plain, span=_span(meta), greedy=greedy, bounds=(lo, hi), **stop)


def _span(meta) -> Span:
    """A Lark ``meta`` or ``Token`` as a :class:`Span`."""
    return Span(meta.line, meta.column, meta.end_line, meta.end_column, meta.start_pos, meta.end_pos)


@dataclass(frozen=True)
class _Var:
    """A pattern variable as written: ``v`` or ``v[]``."""

    name: str
    array: bool


@dataclass(frozen=True)
class _Returns:
    """A RETURN clause; its span locates the error when RETURN is written twice."""

    items: tuple[ast.ReturnItem, ...]
    span: Span


@dataclass(frozen=True)
class _Having:
    """A HAVING clause; its span locates the error when HAVING is written twice."""

    expr: ast.Expr
    span: Span


@dataclass(frozen=True)
class _Where:
    """A WHERE clause, plain or in the SASE+ form ``WHERE strategy(vars) { expr }``."""

    expr: ast.Expr | None
    strategy: str | None = None
    strategy_vars: tuple[str, ...] | None = None
    span: Span | None = None


@dataclass(frozen=True)
class _LastOf:
    """``[v.len]`` before the Transformer checks that ``v`` is the indexed variable."""

    var: str
    span: Span


@v_args(meta=True)
class _ToAst(Transformer_NonRecursive):
    """Builds one AST node per rule; spellings are normalized here (see the module docstring of ``ast``)."""

    # --- workload and query

    def workload(self, meta, children):
        shedding, rates, *queries = children
        return ast.Workload(tuple(queries), span=_span(meta), shedding_latency=shedding, rates=rates)

    def rates_clause(self, meta, children):
        seen: dict[str, float] = {}
        for type_token, rate in children:
            if type_token.value in seen:
                raise CEPSyntaxError(f"the rate of {type_token.value} is declared twice",
                                     _span(type_token))
            seen[type_token.value] = rate
        return tuple(seen.items())

    def rate(self, meta, children):
        type_token, number = children
        return type_token, float(_number(number))

    def shedding_clause(self, meta, children):
        number, unit = children
        latency = check_duration(ast.Duration(_number(number), _UNITS[unit.lower()], span=_span(meta)))
        if not latency.value > 0:
            raise CEPSyntaxError("the shedding latency bound must be positive", latency.span)
        return latency

    def query(self, meta, children):
        name, ret_first, pattern, using, where, group_by, having_first, window, skip, ret_last, having_last = children
        if ret_first is not None and ret_last is not None:
            raise CEPSyntaxError("RETURN given twice: write it either before PATTERN or after WITHIN",
                                 ret_last.span)
        if having_first is not None and having_last is not None:
            raise CEPSyntaxError("HAVING given twice: write it either after GROUP BY or last", having_last.span)
        having = having_first or having_last
        if using is not None and where is not None and where.strategy is not None:
            raise CEPSyntaxError("selection strategy given twice: in USING and in WHERE", where.span)
        returns = ret_first or ret_last
        within, slide = window
        where = where or _Where(None)
        return ast.Query(
            pattern=pattern,
            within=within,
            name=name,
            returns=None if returns is None else returns.items,
            strategy=using or where.strategy,
            strategy_vars=where.strategy_vars,
            where=where.expr,
            group_by=group_by or (),
            slide=slide,
            return_first=ret_first is not None,
            span=_span(meta),
            having=None if having is None else having.expr,
            skip=skip,
        )

    def query_name(self, meta, children):
        (name,) = children
        return str(name)

    def return_clause(self, meta, items):
        return _Returns(tuple(items), _span(meta))

    def having_clause(self, meta, children):
        (expr,) = children
        return _Having(expr, _span(meta))

    def return_item(self, meta, children):
        expr, alias = children
        return ast.ReturnItem(expr, None if alias is None else str(alias), span=_span(meta))

    def pattern_clause(self, meta, children):
        (pattern,) = children
        return pattern

    def using_clause(self, meta, children):
        (strategy,) = children
        return strategy.lower()

    def where_plain(self, meta, children):
        (expr,) = children
        return _Where(expr, span=_span(meta))

    def where_strategy(self, meta, children):
        strategy, *variables, expr = children
        return _Where(expr, strategy.lower(), tuple(variables), _span(meta))

    def strategy_var(self, meta, children):
        (name,) = children
        return str(name)

    def group_by_clause(self, meta, attrs):
        return tuple(attrs)

    def within_clause(self, meta, children):
        within, slide = children
        return within, slide

    def skip_past_last(self, meta, children):
        return ast.AfterMatchSkip(ast.SKIP_PAST_LAST_EVENT, span=_span(meta))

    def skip_to_next(self, meta, children):
        return ast.AfterMatchSkip(ast.SKIP_TO_NEXT_EVENT, span=_span(meta))

    def skip_to_first(self, meta, children):
        (name,) = children
        return ast.AfterMatchSkip(ast.SKIP_TO_FIRST, str(name), span=_span(meta))

    def skip_to_last(self, meta, children):
        (name,) = children
        return ast.AfterMatchSkip(ast.SKIP_TO_LAST, str(name), span=_span(meta))

    def duration(self, meta, children):
        number, unit = children
        unit = None if unit is None else _UNITS[unit.lower()]
        return check_duration(ast.Duration(_number(number), unit, span=_span(meta)))

    # --- patterns

    def or_pattern(self, meta, alternatives):
        return ast.Or(tuple(alternatives), span=_span(meta))

    def not_pattern(self, meta, children):
        (inner,) = children
        return ast.Not(inner, span=_span(meta))

    def not_next_pattern(self, meta, children):
        # `!(NEXT C c)`: no C right after the match's event before the gap (the first item of a negated SEQ
        # links to that event), the same node as `NOT SEQ(NEXT C c)`
        (inner,) = children
        return ast.Not(ast.Seq((inner,), span=_span(meta), strict=(True,)), span=_span(meta))

    def kleene(self, meta, children):
        inner, (op, greedy), until = children
        return _kleene(inner, op, greedy, meta, until)

    def event_kleene(self, meta, children):
        event, (op, greedy), var, until = children
        return _kleene(_bind(event, var, meta), op, greedy, meta, until)

    def var_kleene(self, meta, children):
        event, var, (op, greedy), until = children
        return _kleene(_bind(event, var, meta), op, greedy, meta, until)

    def until(self, meta, children):
        (cond,) = children
        return cond, False

    def until_any(self, meta, children):
        (cond,) = children
        return cond, True

    def event(self, meta, children):
        event, var = children
        return _bind(event, var, meta)

    def seq(self, meta, items):
        strict = tuple(isinstance(i, _Next) for i in items)
        items = tuple(i.pattern if isinstance(i, _Next) else i for i in items)
        return ast.Seq(items, span=_span(meta), strict=strict if any(strict) else ())

    def next_item(self, meta, children):
        (pattern,) = children
        return _Next(pattern)

    def single_type(self, meta, children):
        (name,) = children
        return ast.EventPat((str(name),), span=_span(meta))

    def any_type(self, meta, names):
        return ast.EventPat(tuple(str(n) for n in names), any_=True, span=_span(meta))

    def plain_var(self, meta, children):
        (name,) = children
        return _Var(str(name), False)

    def array_var(self, meta, children):
        (name,) = children
        return _Var(str(name), True)

    def kleene_op(self, meta, children):
        (op,) = children
        return str(op)

    def bound_exact(self, meta, children):
        (n,) = children
        return _bounds(meta, int(n), int(n))

    def bound_at_least(self, meta, children):
        (n,) = children
        return _bounds(meta, int(n), None)

    def bound_range(self, meta, children):
        n, m = children
        return _bounds(meta, int(n), int(m))

    def greedy(self, meta, children):
        (op,) = children
        return op, True

    def reluctant(self, meta, children):
        op, _ = children
        return op, False

    # --- expressions

    def or_op(self, meta, children):
        left, right = children
        return ast.BinOp("OR", left, right, span=_span(meta))

    def and_op(self, meta, children):
        left, right = children
        return ast.BinOp("AND", left, right, span=_span(meta))

    def not_op(self, meta, children):
        (operand,) = children
        return ast.Unary("NOT", operand, span=_span(meta))

    def binop(self, meta, children):
        left, op, right = children
        return ast.BinOp(_BINOPS[str(op)], left, right, span=_span(meta))

    def negate(self, meta, children):
        _minus, operand = children
        if isinstance(operand, ast.Literal) and _is_number(operand.value):
            return ast.Literal(-operand.value, span=_span(meta))
        return ast.Unary("-", operand, span=_span(meta))

    def number(self, meta, children):
        (token,) = children
        return ast.Literal(_number(token), span=_span(meta))

    def negative_number(self, meta, children):
        _minus, token = children
        return ast.Literal(-_number(token), span=_span(meta))

    def string(self, meta, children):
        (token,) = children
        quote = token[0]
        return ast.Literal(token[1:-1].replace(quote * 2, quote), span=_span(meta))

    def true(self, meta, children):
        return ast.Literal(True, span=_span(meta))

    def false(self, meta, children):
        return ast.Literal(False, span=_span(meta))

    def null(self, meta, children):
        return ast.Literal(None, span=_span(meta))

    def bare_attr(self, meta, children):
        (name,) = children
        return ast.Attr(None, str(name), span=_span(meta))

    def var_attr(self, meta, children):
        var, attr = children
        return ast.Attr(str(var), str(attr), span=_span(meta))

    def indexed_attr(self, meta, children):
        var, index, attr = children
        if isinstance(index, _LastOf):
            if index.var != var:
                raise CEPSyntaxError(f"expected {var}.len, found {index.var}.len", index.span)
            index = "last"
        return ast.Attr(str(var), str(attr), index, span=_span(meta))

    def next_attr(self, meta, children):
        var, attr = children
        return ast.Attr(str(var), str(attr), "next", span=_span(meta))

    def index_all(self, meta, children):
        return "all"

    def index_cur(self, meta, children):
        return "cur"

    def index_prev(self, meta, children):
        return "prev"

    def index_prefix(self, meta, children):
        return "prefix"

    def index_last(self, meta, children):
        var, _len = children
        return _LastOf(str(var), _span(var))

    def index_k(self, meta, children):
        (k,) = children
        return int(k)

    def func_star(self, meta, children):
        name, _star = children
        return ast.Func(name.lower(), star=True, span=_span(meta))

    def func(self, meta, children):
        name, *args = children
        if name.lower() in ast.AGGREGATES:
            return ast.Func(name.lower(), tuple(args), span=_span(meta))
        return ast.Call(name.lower(), tuple(args), span=_span(meta))

    # Spark SQL's special forms (ast.Call); the NOT forms wrap the form in NOT

    def is_null(self, meta, children):
        return ast.Call("isnull", (children[0],), span=_span(meta))

    def is_not_null(self, meta, children):
        return ast.Unary("NOT", self.is_null(meta, children), span=_span(meta))

    def in_list(self, meta, children):
        return ast.Call("in", tuple(children), span=_span(meta))

    def not_in_list(self, meta, children):
        return ast.Unary("NOT", self.in_list(meta, children), span=_span(meta))

    def between(self, meta, children):
        return ast.Call("between", tuple(children), span=_span(meta))

    def not_between(self, meta, children):
        return ast.Unary("NOT", self.between(meta, children), span=_span(meta))

    def like(self, meta, children):
        return ast.Call("like", tuple(children), span=_span(meta))

    def not_like(self, meta, children):
        return ast.Unary("NOT", self.like(meta, children), span=_span(meta))

    def when_clause(self, meta, children):
        return tuple(children)

    def case_searched(self, meta, children):
        *whens, default = children
        args = tuple(x for w in whens for x in w) + (() if default is None else (default,))
        return ast.Call("case", args, span=_span(meta))

    def case_simple(self, meta, children):
        subject, *whens, default = children
        args = tuple(x for v, r in whens for x in (ast.BinOp("=", subject, v, span=v.span), r))
        return ast.Call("case", args + (() if default is None else (default,)), span=_span(meta))

    def cast(self, meta, children):
        value, type_name = children
        return ast.Call("cast", (value,), type=str(type_name).upper(), span=_span(meta))

    def equiv_test(self, meta, items):
        return ast.EquivTest(tuple(items), span=_span(meta))

    def equiv_attr(self, meta, children):
        attr, value = children
        return ast.EquivItem(str(attr), None, value, span=_span(meta))

    def equiv_var_attr(self, meta, children):
        var, attr, value = children
        return ast.EquivItem(str(attr), str(var), value, span=_span(meta))


def _bind(event: ast.EventPat, var: _Var | None, meta) -> ast.EventPat:
    """The event of a type spec bound to its variable (if any), spanning both."""
    if var is None:
        return replace(event, span=_span(meta))
    return replace(event, var=var.name, array=var.array, span=_span(meta))


def _number(token: Token) -> int | float:
    text = str(token)
    double = any(c in text for c in ".eE")
    if len(text.lstrip("0")) > MAX_INT_DIGITS and not double:
        raise CEPSyntaxError(f"the integer {_short(text)} has {len(text):,} digits: the limit is "
                             f"{MAX_INT_DIGITS:,} (see docs/language.md, Limits)", _span(token))
    value = float(text) if double else int(text)
    if not finite(value):  # an integer beyond 64 bits is a DOUBLE: beyond the doubles, no number at all
        raise CEPSyntaxError(f"the number {_short(text)} is too large: it is not a finite double "
                             "(up to about 1.8e308)", _span(token))
    return value


def _short(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:10]}...{text[-10:]}"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --------------------------------------------------------------------------------------------- error messages

#: How the terminals of cep.lark are named in messages, in the order messages list them.  Terminals with the
#: same words are mentioned once.
_WORDS = {
    "NAME": "a name", "TYPE_NAME": "an event type", "NUMBER": "a number", "INT": "a number",
    "STRING": "a string", "TRUE": "TRUE", "FALSE": "FALSE", "NULL": "NULL", "UNIT": "a time unit",
    "STRICT_CONTIGUITY": "a selection strategy", "PARTITION_CONTIGUITY": "a selection strategy",
    "SKIP_TILL_NEXT_MATCH": "a selection strategy", "SKIP_TILL_ANY_MATCH": "a selection strategy",
    "INDEX_I": "'i'", "INDEX_ONE": "'1'", "LEN": "'len'", "_SEQ": "SEQ", "_ANY": "ANY", "_NEXT": "NEXT",
    "_UNTIL": "UNTIL", "COMP_OP": "a comparison", "_EQ": "'='", "PLUS": "'+'", "MINUS": "'-'", "STAR": "'*'",
    "SLASH": "'/'", "PERCENT": "'%'", "QMARK": "'?'", "DOTDOT": "'..'", "_DOT": "'.'", "_LPAR": "'('", "_LSQB": "'['",
    "_LBRACE": "'{'", "_AND": "AND", "_AND_SIGN": "AND", "_OR": "OR", "_OR_SIGN": "OR", "_BANG": "NOT",
    "_TILDE": "NOT", "_NOT": "NOT", "_NOT_SIGN": "NOT", "_AS": "AS", "_IS": "IS", "_IN": "IN",
    "_BETWEEN": "BETWEEN", "_LIKE": "LIKE", "_CASE": "CASE", "_WHEN": "WHEN", "_THEN": "THEN", "_ELSE": "ELSE",
    "_END": "END", "_CAST": "CAST",
    "_RETURN": "RETURN", "_PATTERN": "PATTERN", "_EVENT": "PATTERN", "_USING": "USING", "_WHERE": "WHERE",
    "_GROUP_BY": "GROUP BY", "_HAVING": "HAVING", "_WITHIN": "WITHIN", "_SLIDE": "SLIDE", "_AFTER": "AFTER MATCH SKIP",
    "_MATCH": "MATCH", "_SKIP": "SKIP", "_PAST": "PAST", "_TO": "TO", "_FIRST": "FIRST", "_LAST": "LAST",
    "_ROW": "EVENT",
    "_COMMA": "','", "_COLON": "':'", "_RPAR": "')'", "_RSQB": "']'", "_RBRACE": "'}'", "_SEMI": "';'",
    "_WITH": "WITH", "_SHEDDING": "SHEDDING", "_LATENCY": "LATENCY", "_RATES": "RATES",
    "WS": "white space", "LINE_COMMENT": "a comment", "BLOCK_COMMENT": "a comment",
    "$END": "end of input",
}
_RANK = {name: rank for rank, name in enumerate(_WORDS)}

#: When a state accepts many terminals, they are summarized: if all of ``trigger`` are expected, every
#: expected terminal of ``members`` is replaced by ``word``.
_SUMMARIES = (
    ("a query", {"_PATTERN", "_RETURN"}, {"_PATTERN", "_EVENT", "_RETURN", "NAME"}),
    ("a pattern", {"TYPE_NAME", "_SEQ"},
     {"TYPE_NAME", "_SEQ", "_ANY", "_LPAR", "_BANG", "_TILDE", "_NOT", "_NOT_SIGN"}),
    ("an expression", {"NAME", "NUMBER"},
     {"NAME", "NUMBER", "STRING", "TRUE", "FALSE", "NULL", "_NEXT", "_LPAR", "_LSQB", "MINUS", "_NOT",
      "_NOT_SIGN", "_CASE", "_CAST"}),
    ("an operator", {"PLUS", "STAR", "COMP_OP"}, {"PLUS", "MINUS", "STAR", "SLASH", "PERCENT", "COMP_OP", "_IS",
                                                 "_IN", "_BETWEEN", "_LIKE", "_NOT"}),
    ("an operator", {"PLUS", "SLASH"}, {"PLUS", "MINUS", "STAR", "SLASH", "PERCENT"}),
)

#: Keywords that are also plausible event types or attribute names (``Event``, ``x.next``): an error right
#: after one of them, read as a name, is not blamed on it.  INDEX_I and LEN are keywords only in an index.
_NOT_RESERVED = {"_EVENT", "_ANY", "_NEXT", "INDEX_I", "LEN"}


def _syntax_error(err: UnexpectedInput, text: str) -> CEPSyntaxError:
    typo = _keyword_typo(err)
    if typo is not None:
        word, keyword = typo
        return CEPSyntaxError(f"unknown keyword {word}, did you mean {keyword}?", _span(word), text)
    misused = _misused_keyword(err)
    if misused is not None:
        keyword, expected = misused
        return CEPSyntaxError(f"unexpected '{keyword}' (a reserved word): expected {_describe(expected)}",
                              _span(keyword), text)
    expected = _expected(err)
    if isinstance(err, UnexpectedCharacters):
        char, span = text[err.pos_in_stream], _point(text, err.pos_in_stream)
        if char in "'\"":
            return CEPSyntaxError(f"unterminated string: no closing {char}", span, text)
        found = f"character '{char}'"
    elif isinstance(err, UnexpectedToken) and err.token.type != "$END":
        found, span = f"'{err.token}'", _span(err.token)
    else:
        found, span = "end of input", _point(text, len(text.rstrip()))
    if "_WITHIN" in expected and found in ("end of input", "';'"):
        return CEPSyntaxError(f"unexpected {found}: expected WITHIN (every query needs a window)", span, text)
    return CEPSyntaxError(f"unexpected {found}: expected {_describe(expected)}", span, text)


def _keyword_typo(err: UnexpectedInput) -> tuple[Token, str] | None:
    """A misspelt keyword (``PATERN``, ``WHER``) read as a name: the word that failed, or the name just before
    it (``PATERN SEQ(...)`` reads PATERN as a query name and fails at SEQ), when it is close to a keyword that
    the grammar accepts at that word's place."""
    interactive = getattr(err, "interactive_parser", None)
    if interactive is None:
        return None
    candidates = []
    if isinstance(err, UnexpectedToken) and err.token.type in ("NAME", "TYPE_NAME"):
        candidates.append((err.token, _expected(err)))
    state = interactive.parser_state
    previous = state.value_stack[-1] if state.value_stack else None
    if isinstance(previous, Token) and previous.type in ("NAME", "TYPE_NAME") and len(state.state_stack) > 1:
        table = state.parse_conf.parse_table.states[state.state_stack[-2]]
        candidates.append((previous, set(table)))
    keywords = _keywords()
    for token, expected in candidates:
        word = str(token).upper()
        if word in keywords.values():
            continue
        allowed = sorted({keywords[name] for name in expected if name in keywords})
        match = difflib.get_close_matches(word, allowed, n=1, cutoff=0.75)
        if match:
            return token, match[0]
    return None


@functools.cache
def _keywords() -> dict[str, str]:
    """Terminal name → its keyword in capitals, for every keyword terminal of the grammar."""
    return {t.name: t.pattern.value.upper() for t in _parser().terminals
            if isinstance(t.pattern, PatternStr) and t.pattern.value.isidentifier()
            and t.name not in _NOT_RESERVED and len(t.pattern.value) > 2}


def _misused_keyword(err: UnexpectedInput) -> tuple[Token, set[str]] | None:
    """A keyword that was read as a name just before the error, with what was expected in its place.

    The contextual lexer only recognizes keywords where the grammar accepts them, so in ``PATTERN WITHIN 1``
    the word WITHIN becomes an event type and the parser only fails at ``1``.  Blaming the keyword is clearer.
    An attribute after a dot (``x.where``) is never blamed.
    """
    interactive = getattr(err, "interactive_parser", None)
    if interactive is None:
        return None
    state = interactive.parser_state
    *_, before, previous = [None, None, *state.value_stack]
    if not (isinstance(previous, Token) and previous.type in ("NAME", "TYPE_NAME")
            and previous.lower() in _reserved_words()):
        return None
    if isinstance(before, Token) and before.type == "_DOT":
        return None
    terminals = {t.name for t in _parser().terminals}
    return previous, {name for name in state.parse_conf.parse_table.states[state.state_stack[-2]]
                      if name in terminals}


@functools.cache
def _reserved_words() -> frozenset[str]:
    return frozenset(
        t.pattern.value.lower() for t in _parser().terminals
        if isinstance(t.pattern, PatternStr) and t.pattern.value.isidentifier()
        and t.name not in _NOT_RESERVED
    )


def _expected(err: UnexpectedInput) -> set[str]:
    """The terminals that could really come next.

    An LALR state's lookahead set merges the contexts the state is reachable from; feeding each candidate to a
    copy of the parser (``accepts()``) keeps only the ones valid here.
    """
    interactive = getattr(err, "interactive_parser", None)
    if interactive is not None:
        return set(interactive.accepts())
    return set(getattr(err, "expected", None) or getattr(err, "allowed", None) or ())


def _describe(expected: set[str]) -> str:
    """The expected terminals in words, e.g. ``"an expression, ')' or WITHIN"``."""
    ranks: dict[str, int] = {}
    remaining = set(expected)
    for word, trigger, members in _SUMMARIES:
        if trigger <= remaining:
            ranks.setdefault(word, min(_RANK[name] for name in members & remaining))
            remaining -= members
    for name in remaining:
        # every terminal of cep.lark has words (a test walks them); never show an internal name
        word = _WORDS.get(name) or name.strip("_$").replace("_", " ").lower()
        ranks[word] = min(ranks.get(word, len(_RANK)), _RANK.get(name, len(_RANK)))
    words = sorted(ranks, key=lambda w: (ranks[w], w))
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _point(text: str, pos: int) -> Span:
    """A one-character span at offset ``pos`` of ``text``."""
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return Span(line, column, line, column + 1, pos, pos + 1)
