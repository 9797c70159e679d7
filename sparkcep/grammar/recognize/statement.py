"""``SELECT ... FROM source MATCH_RECOGNIZE ( ... ) [AS alias] [WHERE ...] [GROUP BY ...] [ORDER BY ...]``
read into a :class:`~sparkcep.ir.recognize.Recognize`.

sqlglot tokenizes the whole statement (so every position is one of the statement); the clause inside
``MATCH_RECOGNIZE ( ... )`` is read here token by token; its expressions (MEASURES, DEFINE) by sqlglot
(:mod:`.expressions`), its row pattern by the Lark grammar ``rowpattern.lark`` (:mod:`.pattern`), and the
statement around it, with ``source MATCH_RECOGNIZE (...) [AS alias]`` replaced by the result view, by sqlglot
again (read, and kept as written: ``outer_sql``).  Clauses may come in any order, each at most once.
"""

from __future__ import annotations

import re
from dataclasses import replace

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from sparkcep.grammar.parser import without_bom
from sparkcep.grammar.recognize.expressions import (
    Converter,
    parse_sql,
    readable,
    span_of,
    tokenize,
    with_time_column,
)
from sparkcep.grammar.recognize.pattern import parse_pattern
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import Duration
from sparkcep.ir.errors import CEPSyntaxError, Span
from sparkcep.ir.limits import check_depth, check_duration, deeply
from sparkcep.ir.outer import OuterSpark

__all__ = ["parse_recognize"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_UNITS = {"MILLISECOND": "ms", "MILLISECONDS": "ms", "SECOND": "s", "SECONDS": "s", "MINUTE": "min",
          "MINUTES": "min", "HOUR": "h", "HOURS": "h", "DAY": "d", "DAYS": "d"}
_CLAUSES = ("PARTITION BY", "ORDER BY", "MEASURES", "ROWS PER MATCH", "AFTER MATCH SKIP", "PATTERN", "SUBSET",
            "DEFINE", "WITHIN")


@deeply
def parse_recognize(text: str) -> rx.Recognize:
    """Parse a ``MATCH_RECOGNIZE`` statement; :class:`CEPSyntaxError` (line, column, caret) if it is not one.

    Example::

        >>> q = parse_recognize("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B+) "
        ...                     "DEFINE B AS B.x > PREV(B.x))")
        >>> q.source, q.order_by[0].column, q.outer_sql
        ('t', 'ts', 'SELECT * FROM __sparkcep_matches')
    """
    text = without_bom(text)
    tokens = tokenize(text)
    while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
        tokens.pop()
    if not tokens:
        raise CEPSyntaxError("empty statement: expected SELECT ... FROM table MATCH_RECOGNIZE (...)",
                             span_of(text, 0, 1), text)
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            raise CEPSyntaxError("one statement expected: remove what follows ';'", _tok_span(text, tok), text)
    marks = [i for i, t in enumerate(tokens) if _word(t) == "MATCH_RECOGNIZE"]
    if not marks:
        raise CEPSyntaxError("no MATCH_RECOGNIZE clause: expected SELECT ... FROM table MATCH_RECOGNIZE (...)",
                             _tok_span(text, tokens[0]), text)
    if len(marks) > 1:
        raise CEPSyntaxError("one MATCH_RECOGNIZE per statement is supported", _tok_span(text, tokens[marks[1]]),
                             text)
    mark = marks[0]
    source, source_start = _source(text, tokens, mark)
    if mark + 1 >= len(tokens) or tokens[mark + 1].token_type != TokenType.L_PAREN:
        at = tokens[mark + 1] if mark + 1 < len(tokens) else tokens[mark]
        raise CEPSyntaxError("expected '(' after MATCH_RECOGNIZE", _tok_span(text, at), text)
    close = _closing(text, tokens, mark + 1)
    reader = _ClauseReader(text, tokens, mark + 2, close)
    q = reader.read()
    # [AS] alias
    after, alias = close + 1, None
    if after < len(tokens) and tokens[after].token_type == TokenType.ALIAS:
        if after + 1 >= len(tokens) or not _is_name(tokens[after + 1]):
            raise CEPSyntaxError("expected a name after AS", _tok_span(text, tokens[min(after + 1, len(tokens) - 1)]),
                                 text)
        alias, after = tokens[after + 1].text, after + 2
    elif after < len(tokens) and tokens[after].token_type in (TokenType.VAR, TokenType.IDENTIFIER):
        alias, after = tokens[after].text, after + 1
    end = tokens[after - 1].end + 1
    outer = _outer_sql(text, source_start, end, alias, q.result_view, (tokens[0].start, tokens[-1].end + 1))
    q = replace(q, source=source, alias=alias, outer_sql=outer, text=text,
                 span=span_of(text, tokens[0].start, tokens[-1].end + 1))
    check_depth(q, text)
    return q


# ------------------------------------------------------------------------------------------------ helpers


def _word(tok: Token) -> str:
    """The keyword a token spells, upper-case ('' for strings and quoted identifiers)."""
    if tok.token_type in (TokenType.STRING, TokenType.IDENTIFIER, TokenType.NATIONAL_STRING):
        return ""
    return " ".join(tok.text.upper().split())


def _is_name(tok: Token) -> bool:
    return tok.token_type == TokenType.IDENTIFIER or (tok.token_type not in (TokenType.STRING,) and
                                                      bool(_NAME.match(tok.text)))


def _tok_span(text: str, tok: Token) -> Span:
    return span_of(text, tok.start, tok.end + 1)


def _found(tok: Token | None) -> str:
    if tok is None:
        return "end of input"
    if tok.token_type == TokenType.STRING:
        return f"the string '{tok.text}'"
    return f"'{tok.text}'"


def _source(text: str, tokens: list[Token], mark: int) -> tuple[str, int]:
    """The table or view name before MATCH_RECOGNIZE (as written, dotted parts kept), and where it starts."""
    i = mark - 1
    parts: list[Token] = []
    while i >= 0 and _is_name(tokens[i]) and _word(tokens[i]) != "FROM":
        parts.append(tokens[i])
        if i - 1 >= 0 and tokens[i - 1].token_type == TokenType.DOT:
            i -= 2
        else:
            i -= 1
            break
    if not parts or i < 0 or tokens[i].token_type != TokenType.FROM:
        raise CEPSyntaxError("MATCH_RECOGNIZE must follow FROM and a table or view name (a subquery, a join or "
                             "an alias before MATCH_RECOGNIZE is not supported)", _tok_span(text, tokens[mark]), text)
    first = parts[-1]
    return text[first.start:parts[0].end + 1], first.start


def _closing(text: str, tokens: list[Token], open_index: int) -> int:
    depth = 0
    for i in range(open_index, len(tokens)):
        if tokens[i].token_type == TokenType.L_PAREN:
            depth += 1
        elif tokens[i].token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return i
    raise CEPSyntaxError("no ')' closes this '('", _tok_span(text, tokens[open_index]), text)


def _outer_sql(text: str, start: int, end: int, alias: str | None, view: str, bounds: tuple[int, int]) -> str:
    """The statement (``text[slice(*bounds)]``: from its first token to its last) with ``text[start:end]``
    replaced by the result view, as written: Spark reads it as the user's own query over the matches (its
    result columns named as Spark names them), with nothing re-spelt by sqlglot.  sqlglot reads it here (a
    ``SELECT`` query, else an error placed in the statement) and where it must be rewritten
    (:mod:`sparkcep.ir.outer`).

    For the reading, the replacement is padded to the replaced length (line breaks kept) so that sqlglot's
    error positions are those of the statement."""
    segment = text[start:end]
    replacement = view + (f" AS {alias}" if alias else "")
    if alias and not _NAME.match(alias):
        replacement = f"{view} AS `{alias.replace('`', '``')}`"
    # a word of its own: ``FROM`t`MATCH_RECOGNIZE (...)WHERE`` needs no blank around the part replaced
    if start > bounds[0] and not text[start - 1].isspace():
        replacement = " " + replacement
    if end < bounds[1] and not text[end].isspace():
        replacement += " "
    newlines = segment.count("\n")
    padded = replacement + "\n" * newlines
    outer = text[:start] + padded + " " * max(0, len(segment) - len(padded)) + text[end:]
    try:
        trees = [t for t in parse_sql(outer, OuterSpark) if t is not None]
    except ParseError as err:
        info = err.errors[0] if err.errors else {}
        line, col = info.get("line") or 1, info.get("col") or 1
        highlight = info.get("highlight") or None
        description = readable(str(info.get("description") or err).split("\n")[0], highlight)
        span = _line_col_span(text, line, col, len(highlight or "x"))
        raise CEPSyntaxError(f"cannot read the statement around MATCH_RECOGNIZE: {description}", span, text) from None
    if len(trees) != 1 or not isinstance(trees[0], exp.Query):
        raise CEPSyntaxError("expected a SELECT statement around MATCH_RECOGNIZE", span_of(text, 0, 1), text)
    return text[bounds[0]:start] + replacement + text[end:bounds[1]]


def _line_col_span(text: str, line: int, col: int, width: int) -> Span:
    lines = text.split("\n")
    line = max(1, min(line, len(lines)))
    offset = sum(len(x) + 1 for x in lines[:line - 1])
    end = offset + max(1, min(col, len(lines[line - 1])))
    start = max(offset, end - width)
    return span_of(text, start, end)


# ------------------------------------------------------------------------------------------------ the clause


class _ClauseReader:
    """Reads ``tokens[lo:hi]``: the inside of ``MATCH_RECOGNIZE ( ... )``."""

    def __init__(self, text: str, tokens: list[Token], lo: int, hi: int):
        self.text, self.tokens, self.i, self.hi = text, tokens, lo, hi
        self.conv = Converter(text, tokens)

    # --- token access

    def peek(self, k: int = 0) -> Token | None:
        j = self.i + k
        return self.tokens[j] if j < self.hi else None

    def at(self, *words: str) -> int:
        """How many tokens spell ``words`` from the cursor (0 if they do not)."""
        want = list(words)
        j = self.i
        while want:
            if j >= self.hi:
                return 0
            got = _word(self.tokens[j]).split()
            if not got or got != want[:len(got)]:
                return 0
            want = want[len(got):]
            j += 1
        return j - self.i

    def accept(self, *words: str) -> list[Token] | None:
        n = self.at(*words)
        if not n:
            return None
        toks = self.tokens[self.i:self.i + n]
        self.i += n
        return toks

    def expect(self, *words: str, what: str | None = None) -> list[Token]:
        toks = self.accept(*words)
        if toks is None:
            self.fail(f"expected {what or ' '.join(words)}")
        return toks

    def fail(self, message: str, tok: Token | None = None):
        tok = tok or self.peek()
        if tok is None:
            closing = self.tokens[self.hi]
            raise CEPSyntaxError(f"{message}, found ')'", _tok_span(self.text, closing), self.text)
        raise CEPSyntaxError(f"{message}, found {_found(tok)}", _tok_span(self.text, tok), self.text)

    def name(self, what: str) -> Token:
        tok = self.peek()
        if tok is None or not _is_name(tok) or self.clause_at() is not None:
            self.fail(f"expected {what}")
        self.i += 1
        return tok

    def punct(self, kind: TokenType, shown: str) -> Token:
        tok = self.peek()
        if tok is None or tok.token_type != kind:
            self.fail(f"expected '{shown}'")
        self.i += 1
        return tok

    def comma(self) -> bool:
        tok = self.peek()
        if tok is not None and tok.token_type == TokenType.COMMA:
            self.i += 1
            return True
        return False

    def clause_at(self, j: int | None = None, *, strict: bool = False) -> str | None:
        """The clause that starts at token ``j`` (default: the cursor), or None.  ``strict`` (inside an item
        list, where a column or measure may be named ``within``, ``subset``...): a word after '.' or AS never
        starts a clause, and SUBSET, DEFINE and WITHIN only with what follows them in a clause."""
        saved = self.i
        self.i = self.i if j is None else j
        if strict and self.i > 0 and self.tokens[self.i - 1].token_type in (TokenType.DOT, TokenType.ALIAS):
            self.i = saved
            return None
        try:
            if self.at("PARTITION", "BY"):
                return "PARTITION BY"
            if self.at("ORDER", "BY"):
                return "ORDER BY"
            if self.at("MEASURES"):
                return "MEASURES"
            if self.at("ONE", "ROW", "PER", "MATCH") or self.at("ALL", "ROWS", "PER", "MATCH"):
                return "ROWS PER MATCH"
            if self.at("AFTER", "MATCH"):
                return "AFTER MATCH SKIP"
            nxt = self.peek(1)
            if self.at("PATTERN") and nxt is not None and nxt.token_type == TokenType.L_PAREN:
                return "PATTERN"
            after = self.peek(2)
            if self.at("SUBSET") and (not strict or (after is not None and after.token_type == TokenType.EQ)):
                return "SUBSET"
            if self.at("DEFINE") and (not strict or (after is not None and after.token_type == TokenType.ALIAS)):
                return "DEFINE"
            if self.at("WITHIN") and nxt is not None and (
                    _word(nxt) == "INTERVAL" or nxt.token_type == TokenType.NUMBER or not strict and
                    _word(nxt) != "GROUP"):
                return "WITHIN"
            return None
        finally:
            self.i = saved

    # --- the clauses

    def read(self) -> rx.Recognize:
        seen: dict[str, Token] = {}
        fields: dict[str, object] = {}
        while self.peek() is not None:
            clause = self.clause_at()
            if clause is None:
                self.fail("expected " + ", ".join(_CLAUSES[:-1]) + " or " + _CLAUSES[-1]
                          if not seen else "expected another clause (" + ", ".join(
                              c for c in _CLAUSES if c not in seen) + ") or ')'")
            tok = self.peek()
            if clause in seen:
                raise CEPSyntaxError(f"{clause} given twice", _tok_span(self.text, tok), self.text)
            seen[clause] = tok
            getattr(self, "_" + clause.split()[0].lower())(fields)  # _partition, _order, _measures, ...
        if "PATTERN" not in seen:
            raise CEPSyntaxError("MATCH_RECOGNIZE needs a PATTERN ( ... ) clause",
                                 _tok_span(self.text, self.tokens[self.hi]), self.text)
        if fields.get("order_by"):
            time = fields["order_by"][0].column
            for key in ("measures", "defines"):
                if key in fields:
                    fields[key] = with_time_column(fields[key], time)
        return rx.Recognize(source="", **fields)

    def _partition(self, fields):
        self.expect("PARTITION", "BY")
        names = [self.name("a column").text]
        while self.comma():
            names.append(self.name("a column").text)
        fields["partition_by"] = tuple(names)

    def _order(self, fields):
        self.expect("ORDER", "BY")
        items = []
        while True:
            tok = self.name("a column")
            ascending, nulls_first = True, None
            if self.accept("DESC"):
                ascending = False
            else:
                self.accept("ASC")
            if self.accept("NULLS", "FIRST"):
                nulls_first = True
            elif self.accept("NULLS", "LAST"):
                nulls_first = False
            last = self.tokens[self.i - 1]
            span = span_of(self.text, tok.start, last.end + 1)
            items.append(rx.OrderItem(tok.text, ascending, nulls_first, span=span))
            if not self.comma():
                break
        fields["order_by"] = tuple(items)

    def _items(self) -> list[tuple[int, int]]:
        """Token ranges [a, b) of comma-separated items up to the next clause or the end (depth-0 commas)."""
        items, depth, a, j = [], 0, self.i, self.i
        while j < self.hi:
            tok = self.tokens[j]
            if depth == 0 and j > a and self.clause_at(j, strict=True) is not None:
                break
            if tok.token_type == TokenType.L_PAREN:
                depth += 1
            elif tok.token_type == TokenType.R_PAREN:
                depth -= 1
            elif tok.token_type == TokenType.COMMA and depth == 0:
                items.append((a, j))
                a = j + 1
            j += 1
        items.append((a, j))
        self.i = j
        for x, y in items:
            if x >= y:
                at = self.tokens[x] if x < self.hi else self.tokens[self.hi]
                raise CEPSyntaxError("expected an item before this", _tok_span(self.text, at), self.text)
        return items

    def _measures(self, fields):
        self.expect("MEASURES")
        measures = []
        for a, b in self._items():
            as_at = next((j for j in range(b - 1, a - 1, -1) if self.tokens[j].token_type == TokenType.ALIAS
                          and self._depth(a, j) == 0), None)
            if as_at is None or as_at == a or as_at != b - 2 or not _is_name(self.tokens[b - 1]):
                last = self.tokens[b - 1]
                raise CEPSyntaxError("a measure is written: expression AS name", span_of(
                    self.text, self.tokens[a].start, last.end + 1), self.text)
            expr = self.conv.expression(self.tokens[a].start, self.tokens[as_at - 1].end + 1)
            name = self.tokens[b - 1]
            measures.append(rx.Measure(expr, name.text, span=span_of(self.text, self.tokens[a].start, name.end + 1)))
        fields["measures"] = tuple(measures)

    def _depth(self, a: int, j: int) -> int:
        depth = 0
        for tok in self.tokens[a:j]:
            if tok.token_type == TokenType.L_PAREN:
                depth += 1
            elif tok.token_type == TokenType.R_PAREN:
                depth -= 1
        return depth

    def _rows(self, fields):
        if self.accept("ONE", "ROW", "PER", "MATCH"):
            fields["rows_per_match"] = rx.ONE_ROW
            return
        self.expect("ALL", "ROWS", "PER", "MATCH")
        mode = rx.ALL_ROWS
        if self.accept("SHOW", "EMPTY", "MATCHES"):
            mode = rx.ALL_ROWS
        elif self.accept("OMIT", "EMPTY", "MATCHES"):
            mode = rx.ALL_ROWS_OMIT_EMPTY
        elif self.accept("WITH", "UNMATCHED", "ROWS"):
            mode = rx.ALL_ROWS_WITH_UNMATCHED
        fields["rows_per_match"] = mode

    def _after(self, fields):
        first = self.expect("AFTER", "MATCH", "SKIP", what="AFTER MATCH SKIP")[0]
        if self.accept("PAST", "LAST", "ROW"):
            skip = rx.Skip(rx.SKIP_PAST_LAST_ROW)
        elif self.accept("TO", "NEXT", "ROW"):
            skip = rx.Skip(rx.SKIP_TO_NEXT_ROW)
        elif self.accept("TO", "FIRST"):
            skip = rx.Skip(rx.SKIP_TO_FIRST, self.name("a pattern variable").text)
        elif self.accept("TO", "LAST"):
            skip = rx.Skip(rx.SKIP_TO_LAST, self.name("a pattern variable").text)
        elif self.accept("TO"):
            skip = rx.Skip(rx.SKIP_TO_LAST, self.name("a pattern variable").text)
        else:
            self.fail("expected PAST LAST ROW, TO NEXT ROW, TO FIRST v, TO LAST v or TO v")
        last = self.tokens[self.i - 1]
        fields["skip"] = replace(skip, span=span_of(self.text, first.start, last.end + 1))

    def _pattern(self, fields):
        self.expect("PATTERN")
        open_index = self.i
        close = _closing(self.text, self.tokens, open_index)
        if close >= self.hi:
            raise CEPSyntaxError("no ')' closes this '('", _tok_span(self.text, self.tokens[open_index]), self.text)
        start, end = self.tokens[open_index].end + 1, self.tokens[close].start
        pattern = parse_pattern(self.text, start, end)
        fields["pattern"] = pattern
        self.i = close + 1

    def _subset(self, fields):
        self.expect("SUBSET")
        subsets = []
        while True:
            name = self.name("a SUBSET name")
            self.punct(TokenType.EQ, "=")
            self.punct(TokenType.L_PAREN, "(")
            members = [self.name("a pattern variable").text]
            while self.comma():
                members.append(self.name("a pattern variable").text)
            self.punct(TokenType.R_PAREN, ")")
            subsets.append((name.text, tuple(members)))
            if not self.comma():
                break
        fields["subsets"] = tuple(subsets)

    def _define(self, fields):
        self.expect("DEFINE")
        defines = []
        for a, b in self._items():
            var = self.tokens[a]
            if not _is_name(var) or b - a < 3 or self.tokens[a + 1].token_type != TokenType.ALIAS:
                raise CEPSyntaxError("a definition is written: variable AS condition",
                                     span_of(self.text, var.start, self.tokens[b - 1].end + 1), self.text)
            cond = self.conv.expression(self.tokens[a + 2].start, self.tokens[b - 1].end + 1)
            defines.append((var.text, cond))
        fields["defines"] = tuple(defines)

    def _within(self, fields):
        keyword = self.expect("WITHIN")[0]
        a = self.i
        while self.i < self.hi and self.clause_at() is None:
            self.i += 1
        if a == self.i:
            self.fail("expected INTERVAL '...' unit or a number after WITHIN")
        first, last = self.tokens[a], self.tokens[self.i - 1]
        span = span_of(self.text, keyword.start, last.end + 1)
        body = self.text[first.start:last.end + 1]
        try:
            trees = parse_sql(body)
            node = trees[0] if len(trees) == 1 else None
        except (ParseError, TokenError):
            node = None
        fields["within"] = _duration(node, span, self.text)


def _duration(node, span: Span, text: str) -> Duration:
    usage = "WITHIN takes INTERVAL 'n' unit (MILLISECOND, SECOND, MINUTE, HOUR or DAY) or a number"
    if isinstance(node, exp.Literal) and not node.is_string:
        value = _number(str(node.this))
        if value is not None and value > 0:
            return check_duration(Duration(value, None, span=span), text)
    if isinstance(node, exp.Interval) and isinstance(node.this, exp.Literal):
        unit = node.args.get("unit")
        unit_name = unit.name.upper() if unit is not None else ""
        value_text = str(node.this.this).strip()
        if not unit_name and " " in value_text:
            value_text, unit_name = value_text.split(None, 1)
            unit_name = unit_name.upper()
        value = _number(value_text)
        if unit_name in _UNITS and value is not None:
            if not value > 0:
                raise CEPSyntaxError("the WITHIN interval must be positive", span, text)
            return check_duration(Duration(value, _UNITS[unit_name], span=span), text)
    raise CEPSyntaxError(usage, span, text)


def _number(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            return None
        return value if value == value and value not in (float("inf"), float("-inf")) else None
