"""MEASURES and DEFINE expressions of ``MATCH_RECOGNIZE``: Spark SQL parsed by sqlglot, turned into IR.

The nodes the engines evaluate across rows are built natively (``Attr``, ``Literal``, ``BinOp``, ``Unary``,
``Nav``, ``Classifier``, ``MatchNumber``, ``Agg``, and ``Func`` for ``abs/coalesce/greatest/least/if`` over
several rows, a CASE over several rows as nested ``if``, BETWEEN and IN lists as comparisons); any other
sub-expression whose column references all name one row (CASE, LIKE, IN, CAST, any Spark function) becomes a
:class:`~sparkcep.ir.recognize.RowExpr`: Spark computes it per row before the shuffle, as a hidden column
(``__rx0``, ``__rx1``, ... in order of first appearance; equal SQL shares one column).

Two things sqlglot does not read as MATCH_RECOGNIZE means them are rewritten in the text first, keeping every
position: the ``RUNNING``/``FINAL`` prefix of a row pattern function is blanked (and remembered by the
position of the function), and ``FIRST``/``LAST`` calls are renamed to placeholders of the same length
(sqlglot's Spark ``first(x, ignoreNulls)`` would drop the offset).

Example::

    >>> conv = Converter("A.price > PREV(A.price, 2)", tokenize("A.price > PREV(A.price, 2)"))
    >>> conv.expression(0, 26)
    BinOp(op='>', left=Attr(var='A', attr='price', index=None), right=Nav(kind='PREV', arg=Attr(var='A', \
attr='price', index=None), offset=2, semantics=None))
"""

from __future__ import annotations

import bisect
import logging
import math
from dataclasses import fields, is_dataclass, replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from sparkcep.grammar.parser import _short
from sparkcep.grammar.recognize.functions import is_known, suggestion
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import Attr, BinOp, Func, Literal, Unary
from sparkcep.ir.errors import CEPSyntaxError, Span
from sparkcep.ir.outer import SparkStrings

__all__ = ["Converter", "tokenize", "span_of", "readable", "parse_sql", "with_time_column", "TIME_COLUMN",
           "ENGINE_FUNCTIONS", "NAVIGATIONS", "AGGREGATES"]

NAVIGATIONS = ("PREV", "NEXT", "FIRST", "LAST")
AGGREGATES = ("count", "sum", "avg", "min", "max")
#: Scalar functions the engines evaluate over values of different rows (elsewhere a RowExpr does it).
ENGINE_FUNCTIONS = {exp.Abs: "abs", exp.Coalesce: "coalesce", exp.Greatest: "greatest", exp.Least: "least"}

#: Stands for the first ORDER BY column until the clause is read (Flink's MATCH_ROWTIME() is LAST(time)).
TIME_COLUMN = "\x00time"

#: FIRST/LAST renamed to these (same length) so that sqlglot reads them as plain calls.
_PLACEHOLDERS = {"FIRST": "_FST_", "LAST": "_LS_"}
_FROM_PLACEHOLDER = {v: k for k, v in _PLACEHOLDERS.items()}
_SEMANTICS_TARGETS = {"PREV", "NEXT", "FIRST", "LAST", "CLASSIFIER", "MATCH_ROWTIME", *map(str.upper, AGGREGATES)}

_BINARY = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.EQ: "=", exp.NEQ: "!=",
           exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=", exp.And: "AND", exp.Or: "OR"}
#: The operators the engine evaluates itself (over one row or several).
_NATIVE = (*_BINARY, exp.Neg, exp.Not, exp.Is)
_AGG_NODES = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
#: Spark's ANSI operators that raise on one row's data (overflow, a zero divisor), as the ``try_`` functions
#: that give NULL instead (:func:`try_forms`).
_TRY_FUNCTIONS = {exp.Add: "try_add", exp.Sub: "try_subtract", exp.Mul: "try_multiply", exp.Div: "try_divide",
                  exp.Mod: "try_mod"}


def try_forms(tree: exp.Expression) -> exp.Expression:
    """``tree`` (Spark SQL that Spark computes per row, a hidden column) with an error on one row's data NULL, as
    docs/language.md §12 says: ``CAST`` of a value as ``TRY_CAST`` (a cast of a constant stays: a bad literal is
    the statement's error), ``+ - * / %`` as ``try_add``, ``try_subtract``, ``try_multiply``, ``try_divide``,
    ``try_mod`` (each takes what its operator takes: numbers, intervals, dates and timestamps)."""
    def safe(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Cast) and not node.args.get("safe") and not isinstance(node.this, exp.Literal):
            return exp.TryCast(**{**node.args, "this": node.this.transform(safe), "safe": True})
        function = _TRY_FUNCTIONS.get(type(node))
        if function is not None:
            return exp.Anonymous(this=function, expressions=[node.this.transform(safe),
                                                             node.expression.transform(safe)])
        return node

    return tree.transform(safe)


def tokenize(text: str) -> list[Token]:
    """sqlglot's Spark tokens of ``text``; an unreadable text is a :class:`CEPSyntaxError` with its place."""
    try:
        return SparkStrings().tokenize(text)
    except TokenError as err:
        pos = _unclosed_quote(text)
        if pos is not None:
            raise CEPSyntaxError(f"unterminated quote: no closing {text[pos]}", span_of(text, pos, pos + 1),
                                 text) from None
        raise CEPSyntaxError(f"cannot read the statement: {err}", span_of(text, 0, 1), text) from None


def _unclosed_quote(text: str) -> int | None:
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("--", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif c in "'\"`":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                return i
            i = j
        i += 1
    return None


def with_time_column(e: object, column: str) -> object:
    """``e`` with the :data:`TIME_COLUMN` placeholder replaced by ``column``."""
    if isinstance(e, tuple):
        items = tuple(with_time_column(x, column) for x in e)
        return e if all(a is b for a, b in zip(items, e, strict=True)) else items
    if isinstance(e, Attr):
        return replace(e, attr=column) if e.attr == TIME_COLUMN else e
    if not is_dataclass(e) or isinstance(e, (type, Span)):
        return e
    changes = {f.name: with_time_column(getattr(e, f.name), column) for f in fields(e) if f.name != "span"}
    changes = {k: v for k, v in changes.items() if v is not getattr(e, k)}
    return replace(e, **changes) if changes else e


def parse_sql(text: str, read=SparkStrings) -> list:
    """``sqlglot.parse(text, read=read)`` (default Spark SQL: ``ir.outer.SparkStrings``) without sqlglot's
    warnings (a text it cannot read as SQL becomes a ``Command`` with a logged warning; sparkcep refuses it with
    its own message instead)."""
    log = logging.getLogger("sqlglot")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return sqlglot.parse(text, read=read)
    finally:
        log.setLevel(level)


def span_of(text: str, start: int, end: int) -> Span:
    """The span of ``text[start:end]`` (``end`` exclusive)."""
    end = max(end, start + 1)
    line = text.count("\n", 0, start) + 1
    column = start - (text.rfind("\n", 0, start) + 1) + 1
    end_line = text.count("\n", 0, end - 1) + 1
    end_column = end - (text.rfind("\n", 0, end - 1) + 1) + 1
    return Span(line, column, end_line, end_column, start, end)


class Converter:
    """Turns expressions of one statement into IR; shares the RowExpr columns across the statement."""

    def __init__(self, text: str, tokens: list[Token]):
        self.text = text
        self.tokens = tokens
        self._by_start = {t.start: i for i, t in enumerate(tokens)}
        self._starts = [t.start for t in tokens]
        self.row_columns: dict[str, str] = {}  # Spark SQL -> hidden column
        self._semantics: dict[int, tuple[str, Token]] = {}
        self._renamed: dict[int, str] = {}
        self._base = 0

    # --- entry

    def expression(self, start: int, end: int) -> object:
        """The IR of the expression ``text[start:end]``."""
        first = bisect.bisect_left(self._starts, start)
        last = bisect.bisect_left(self._starts, end, lo=first)
        toks = [t for t in self.tokens[first:last] if t.end < end]
        if not toks:
            raise CEPSyntaxError("expected an expression", span_of(self.text, start, start + 1), self.text)
        # sqlglot reads the slice alone (a padded copy of the whole statement made long statements quadratic);
        # its positions are shifted by ``self._base``
        self._base = start
        chars = list(self.text[start:end])
        semantics: dict[int, tuple[str, Token]] = {}
        for k, tok in enumerate(toks):
            word = tok.text.upper()
            call = k + 1 < len(toks) and toks[k + 1].token_type == TokenType.L_PAREN
            if word in ("RUNNING", "FINAL") and tok.token_type != TokenType.STRING and k + 2 < len(toks) \
                    and toks[k + 2].token_type == TokenType.L_PAREN:
                target = toks[k + 1]
                if target.text.upper() not in _SEMANTICS_TARGETS:
                    raise CEPSyntaxError(f"{word} applies to a row pattern function (PREV, NEXT, FIRST, LAST, "
                                         "CLASSIFIER or an aggregate), not to "
                                         f"{target.text}()", self._tok_span(tok), self.text)
                chars[tok.start - start:tok.end + 1 - start] = " " * (tok.end + 1 - tok.start)
                semantics[target.start] = (word, tok)
            elif word in _PLACEHOLDERS and call and tok.token_type != TokenType.STRING:
                chars[tok.start - start:tok.end + 1 - start] = _PLACEHOLDERS[word]
                self._renamed[tok.start] = word
        self._semantics = semantics
        sliced = "".join(chars)
        try:
            trees = parse_sql(sliced)
        except ParseError as err:
            raise self._parse_error(err, start, end) from None
        except TokenError:
            tokenize(self.text[:end])  # raises with the place
            raise
        trees = [t for t in trees if t is not None]
        if len(trees) != 1:
            raise CEPSyntaxError("expected one expression", span_of(self.text, start, end), self.text)
        tree = trees[0]
        if isinstance(tree, exp.Alias):
            alias = tree.args["alias"]
            raise CEPSyntaxError(f"unexpected '{alias.name}': expected an operator, ',' or the end of the "
                                 "expression", self._node_span(alias), self.text)
        if not isinstance(tree, exp.Expression) or isinstance(tree, (exp.Query, exp.Command)):
            raise CEPSyntaxError("expected an expression", span_of(self.text, start, end), self.text)
        result = self._convert(tree)
        if self._semantics:
            word, tok = next(iter(self._semantics.values()))
            raise CEPSyntaxError(f"{word} applies to a row pattern function (PREV, NEXT, FIRST, LAST, CLASSIFIER "
                                 "or an aggregate)", self._tok_span(tok), self.text)
        return result

    # --- conversion

    def _convert(self, node: exp.Expression) -> object:
        span = self._node_span(node)
        if isinstance(node, exp.Paren):
            return self._convert(node.this)
        if isinstance(node, _NATIVE) and self._spark_only(node):
            return self._per_row(node, span)
        if isinstance(node, exp.Column):
            return self._column(node, span)
        if isinstance(node, exp.Literal):
            value = _literal(node)
            if value is None:
                raise CEPSyntaxError(f"the number {_short(str(node.this))} is out of range: at most 38 digits, or a "
                                     "finite double", span, self.text)
            return Literal(value, span=span)
        if isinstance(node, exp.Boolean):
            return Literal(bool(node.this), span=span)
        if isinstance(node, exp.Null):
            return Literal(None, span=span)
        if isinstance(node, exp.Neg):
            inner = self._convert(node.this)
            if isinstance(inner, Literal) and isinstance(inner.value, (int, float)) \
                    and not isinstance(inner.value, bool):
                return Literal(-inner.value, span=span)
            return Unary("-", inner, span=span)
        if isinstance(node, exp.Not):
            if isinstance(node.this, exp.Is) and isinstance(node.this.expression, exp.Null):
                return Unary("IS NOT NULL", self._convert(node.this.this), span=span)
            return Unary("NOT", self._convert(node.this), span=span)
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            return Unary("IS NULL", self._convert(node.this), span=span)
        if type(node) in _BINARY:
            return BinOp(_BINARY[type(node)], self._convert(node.this), self._convert(node.expression), span=span)
        special = self._pattern_function(node, span)
        if special is not None:
            return special
        return self._per_row(node, span)

    def _spark_only(self, node: exp.Expression) -> bool:
        """Whether ``node``, an operator the engine evaluates, reads one row (no row pattern function, every
        column of one variable) and has an operand only Spark computes (a DECIMAL or typed literal, an INTERVAL,
        CAST, any function): then Spark computes the operator with its operands per row, so that it means what
        Spark means (``v > 0.5BD`` compares as DECIMAL, ``ts - INTERVAL 1 MINUTE`` is a TIMESTAMP), not the
        engine's operator over Spark's value.  Only the operator over it: the engine still evaluates ``AND``,
        ``OR``, ``NOT``, ``IS NULL`` over it and the operators around it (a comparison with a value of another
        row), their types checked by ``compiler.recognize.types.check_engine_types``."""
        if isinstance(node, (exp.And, exp.Or, exp.Not, exp.Is)):  # over Spark's boolean or value: the engine's
            return False
        operands = [node.this] if isinstance(node, exp.Neg) else [node.this, node.expression]
        while any(isinstance(o, exp.Paren) for o in operands):
            operands = [o.this if isinstance(o, exp.Paren) else o for o in operands]
        if not any(o is not None and not isinstance(o, (*_NATIVE, exp.Column, exp.Literal, exp.Boolean, exp.Null))
                   for o in operands):
            return False
        qualifiers = set()
        for sub in node.walk():
            if self._function_name(sub) is not None or isinstance(sub, exp.AggFunc):
                return False
            if isinstance(sub, exp.Column):
                qualifiers.add(sub.table or None)
        return len(qualifiers) <= 1

    def _column(self, node: exp.Column, span: Span) -> Attr:
        if isinstance(node.this, exp.Star):
            raise CEPSyntaxError("'*' is only allowed in COUNT(*) and COUNT(v.*)", span, self.text)
        if node.args.get("db") is not None or node.args.get("catalog") is not None:
            raise CEPSyntaxError(f"'{node.sql(dialect='spark')}': a column is written c or v.c (v a pattern "
                                 "variable or SUBSET)", span, self.text)
        return Attr(node.table or None, node.name, span=span)

    def _function_name(self, node: exp.Expression) -> str | None:
        """PREV/NEXT/FIRST/LAST/CLASSIFIER/MATCH_NUMBER, or an aggregate, as written; else None."""
        start = self._start(node)
        if isinstance(node, exp.Anonymous):
            name = str(node.this)
            if start in self._renamed and name in _FROM_PLACEHOLDER:
                return self._renamed[start]
            if name.upper() in ("PREV", "NEXT", "CLASSIFIER", "MATCH_NUMBER", "MATCH_ROWTIME", "MATCH_PROCTIME"):
                return name.upper()
            return None
        if type(node) in _AGG_NODES:
            return _AGG_NODES[type(node)].upper()
        return None

    def _pattern_function(self, node: exp.Expression, span: Span) -> object | None:
        name = self._function_name(node)
        if name is None:
            if isinstance(node, exp.AggFunc):
                raise CEPSyntaxError(f"the aggregate {node.sql(dialect='spark')} is not supported in "
                                     "MATCH_RECOGNIZE: COUNT, SUM, AVG, MIN and MAX are", span, self.text)
            return None
        start = self._start(node)
        semantics = self._semantics.pop(start, (None,))[0] if start is not None else None
        if name in NAVIGATIONS:
            args = list(node.expressions)
            if not args or len(args) > 2:
                raise CEPSyntaxError(f"{name} takes an expression and an optional offset: {name}(e) or "
                                     f"{name}(e, n)", span, self.text)
            offset = 1 if name in ("PREV", "NEXT") else 0
            if len(args) == 2:
                offset = self._offset(name, args[1])
            return rx.Nav(name, self._convert(args[0]), offset, semantics, span=span)
        if name == "CLASSIFIER":
            args = list(node.expressions)
            if len(args) > 1 or (args and not (isinstance(args[0], exp.Column) and not args[0].table)):
                raise CEPSyntaxError("CLASSIFIER takes no argument, or one pattern variable or SUBSET name",
                                     span, self.text)
            return rx.Classifier(args[0].name if args else None, semantics, span=span)
        if name == "MATCH_PROCTIME":
            raise CEPSyntaxError("MATCH_PROCTIME() (Flink's processing time) is not supported: sparkcep matches in "
                                 "event time", span, self.text)
        if name == "MATCH_ROWTIME":  # Flink: the event time of the match's last row
            if node.expressions:
                raise CEPSyntaxError("MATCH_ROWTIME() takes no argument", span, self.text)
            return rx.Nav("LAST", Attr(None, TIME_COLUMN, span=span), 0, semantics, span=span)
        if name == "MATCH_NUMBER":
            if node.expressions:
                raise CEPSyntaxError("MATCH_NUMBER() takes no argument", span, self.text)
            return rx.MatchNumber(span=span)
        return self._aggregate(node, name.lower(), semantics, span)

    def _offset(self, name: str, node: exp.Expression) -> int:
        if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit():
            return int(str(node.this))
        raise CEPSyntaxError(f"the offset of {name} must be a non-negative integer literal",
                             self._node_span(node), self.text)

    def _aggregate(self, node: exp.Expression, func: str, semantics, span: Span) -> rx.Agg:
        arg = node.this
        if isinstance(arg, exp.Distinct):
            raise CEPSyntaxError(f"{func.upper()}(DISTINCT ...) is not supported in MATCH_RECOGNIZE", span,
                                 self.text)
        extra = [e for e in node.expressions] if func != "count" else []
        if arg is None or extra or (func == "count" and node.expressions):
            raise CEPSyntaxError(f"{func.upper()} takes one argument", span, self.text)
        if isinstance(arg, exp.Star):
            if func != "count":
                raise CEPSyntaxError(f"{func.upper()}(*) is not an aggregate: only COUNT(*) is", span, self.text)
            return rx.Agg("count", None, None, semantics, span=span)
        if isinstance(arg, exp.Column) and isinstance(arg.this, exp.Star):
            if func != "count":
                raise CEPSyntaxError(f"{func.upper()}({arg.table}.*) is not an aggregate: only COUNT({arg.table}.*) "
                                     "is", span, self.text)
            return rx.Agg("count", None, arg.table or None, semantics, span=span)
        inner = self._convert(arg)
        qualifiers = [c.table or None for c in arg.find_all(exp.Column)]
        var = next((q for q in qualifiers if q is not None), None)
        return rx.Agg(func, inner, var, semantics, span=span)

    def _per_row(self, node: exp.Expression, span: Span) -> object:
        """A sub-expression with no IR node of its own: a RowExpr when it reads one row, else an engine
        function over converted arguments."""
        for sub in node.walk():
            if isinstance(sub, (exp.Query, exp.Subquery)):
                raise CEPSyntaxError("a subquery is not supported in MATCH_RECOGNIZE", self._node_span(sub), self.text)
            if isinstance(sub, exp.Window):
                raise CEPSyntaxError("a window function is not supported in MATCH_RECOGNIZE",
                                     self._node_span(sub), self.text)
        crossing = any(sub is not node and (self._function_name(sub) is not None or isinstance(sub, exp.AggFunc))
                       for sub in node.walk())
        qualifiers = {c.table or None for c in node.find_all(exp.Column)}
        if not crossing and len(qualifiers) <= 1:
            return self._row_expr(node, next(iter(qualifiers), None), span)
        if isinstance(node, exp.If):
            other = node.args.get("false")
            return Func("if", (self._convert(node.this), self._convert(node.args["true"]),
                               Literal(None, span=span) if other is None else self._convert(other)), span=span)
        if isinstance(node, exp.Case):
            return self._case(node, span)
        if isinstance(node, exp.NullSafeEQ):  # x <=> y: coalesce(x = y, x IS NULL AND y IS NULL)
            x, y = self._convert(node.this), self._convert(node.expression)
            return Func("coalesce", (BinOp("=", x, y, span=span), BinOp(
                "AND", Unary("IS NULL", x, span=span), Unary("IS NULL", y, span=span), span=span)), span=span)
        if isinstance(node, exp.Between) and not node.args.get("symmetric"):  # x BETWEEN lo AND hi
            x = self._convert(node.this)
            return BinOp("AND", BinOp(">=", x, self._convert(node.args["low"]), span=span),
                         BinOp("<=", x, self._convert(node.args["high"]), span=span), span=span)
        if isinstance(node, exp.In) and node.expressions and not node.args.get("query") \
                and not node.args.get("unnest") and not node.args.get("field"):  # x IN (a, b): x = a OR x = b
            x = self._convert(node.this)
            result = None
            for item in node.expressions:
                test = BinOp("=", x, self._convert(item), span=span)
                result = test if result is None else BinOp("OR", result, test, span=span)
            return result
        if type(node) in ENGINE_FUNCTIONS:
            args = [node.this, *node.expressions] if node.this is not None else list(node.expressions)
            return Func(ENGINE_FUNCTIONS[type(node)], tuple(self._convert(a) for a in args), span=span)
        if isinstance(node, exp.Anonymous) and not is_known(node.name):
            hint = suggestion(node.name)
            raise CEPSyntaxError(f"unknown function {node.name}(): neither a row pattern function nor a Spark SQL "
                                 "function" + (f", did you mean {hint}?" if hint else ""), span, self.text)
        what = ("row pattern functions (PREV, NEXT, FIRST, LAST, aggregates, CLASSIFIER)" if crossing
                else "columns of different rows (" + ", ".join(sorted(q or "the current row" for q in qualifiers))
                + ")")
        raise CEPSyntaxError(f"{_describe_node(node)} over {what} is not supported: arithmetic, comparisons, "
                             "AND/OR/NOT, IS NULL, <=>, BETWEEN, IN (...), CASE, if, abs, coalesce, greatest and least "
                             "combine rows; any "
                             "other function or operator must read a single row", span, self.text)

    def _case(self, node: exp.Case, span: Span) -> Func:
        """CASE over several rows as nested ``if(cond, then, else)`` (a NULL condition takes the else branch, as
        in CASE)."""
        default = node.args.get("default")
        result = Literal(None, span=span) if default is None else self._convert(default)
        subject = node.this
        for branch in reversed(node.args.get("ifs") or []):
            cond = self._convert(branch.this)
            if subject is not None:
                cond = BinOp("=", self._convert(subject), cond, span=self._node_span(branch))
            result = Func("if", (cond, self._convert(branch.args["true"]), result), span=span)
        return result

    def _row_expr(self, node: exp.Expression, var: str | None, span: Span) -> rx.RowExpr:
        bare = try_forms(node.copy())
        for column in bare.find_all(exp.Column):
            column.set("table", None)
        sql = bare.sql(dialect="spark")
        column = self.row_columns.setdefault(sql, f"__rx{len(self.row_columns)}")
        return rx.RowExpr(sql, column, var, span=span)

    # --- positions

    def _node_span(self, node: exp.Expression) -> Span:
        starts, ends = [], []
        for sub in node.walk():
            meta = sub.meta if sub._meta else None  # noqa: SLF001 - sqlglot creates meta lazily
            if meta and "start" in meta:
                starts.append(meta["start"] + self._base)
                end = meta["end"] + self._base
                if isinstance(sub, exp.Func) or sub is node:
                    end = self._call_end(meta["start"] + self._base, end)
                ends.append(end)
        if not starts:
            return span_of(self.text, 0, 1)
        first = min(starts)
        i = self._by_start.get(first)
        if isinstance(node, (exp.Neg, exp.Not)) and i:  # the operator before the operand has no position
            before = self.tokens[i - 1]
            if before.token_type in (TokenType.DASH, TokenType.NOT):
                first = before.start
        return span_of(self.text, first, max(ends) + 1)

    def _call_end(self, start: int, end: int) -> int:
        """The position of the ')' closing the call whose name starts at ``start`` (else ``end``)."""
        i = self._by_start.get(start)
        if i is None or i + 1 >= len(self.tokens) or self.tokens[i + 1].token_type != TokenType.L_PAREN:
            return end
        depth = 0
        for tok in self.tokens[i + 1:]:
            if tok.token_type == TokenType.L_PAREN:
                depth += 1
            elif tok.token_type == TokenType.R_PAREN:
                depth -= 1
                if depth == 0:
                    return tok.end
        return end

    def _tok_span(self, tok: Token) -> Span:
        return span_of(self.text, tok.start, tok.end + 1)

    def _start(self, node: exp.Expression) -> int | None:
        """Where sqlglot saw ``node`` begin, in the statement."""
        start = (node.meta or {}).get("start") if node._meta else None  # noqa: SLF001 - meta is made lazily
        return None if start is None else start + self._base

    def _parse_error(self, err: ParseError, start: int, end: int) -> CEPSyntaxError:
        info = err.errors[0] if err.errors else {}
        line, col = info.get("line"), info.get("col")
        if line is not None and col is not None:  # sqlglot's place in the slice -> in the statement
            if line == 1:
                col += start - (self.text.rfind("\n", 0, start) + 1)
            line += self.text.count("\n", 0, start)
        description = str(info.get("description") or err).split("\n")[0]
        for tok in self.tokens:
            if start <= tok.start < end and tok.line == line and tok.col == col:
                return CEPSyntaxError(f"cannot read the expression: {readable(description, tok.text)}",
                                      self._tok_span(tok), self.text)
        return CEPSyntaxError(f"cannot read the expression: {readable(description, None)}",
                              span_of(self.text, start, end), self.text)


def readable(description: str, found: str | None) -> str:
    """sqlglot's parse error description in the words of sparkcep's messages."""
    if description.startswith("Required keyword"):
        return f"an operand is missing near '{found}'" if found else "an operand is missing"
    if description.startswith("Invalid expression") or description.startswith("Unexpected token"):
        return f"unexpected '{found}'" if found else "unexpected token"
    if description.startswith("Expecting "):
        return f"expected '{description[len('Expecting '):]}'" + (f", found '{found}'" if found else "")
    return description


def _literal(node: exp.Literal) -> object:
    """The value of a literal; None for a number Spark cannot hold (over 38 digits, or not a finite double)."""
    if node.is_string:
        return str(node.this)
    text = str(node.this)
    if text.isdigit():
        return int(text) if len(text.lstrip("0")) <= 38 else None
    try:
        value = float(text.rstrip("dDfF"))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _describe_node(node: exp.Expression) -> str:
    if isinstance(node, exp.Func):
        return f"{node.sql_name() if not isinstance(node, exp.Anonymous) else node.name}()"
    return f"'{type(node).__name__}'"
