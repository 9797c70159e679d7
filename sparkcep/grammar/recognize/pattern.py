"""The row pattern of ``MATCH_RECOGNIZE`` (the text of ``PATTERN ( ... )``): parsed by ``rowpattern.lark`` into
the nodes of :mod:`sparkcep.ir.recognize`, and printed back (:func:`pattern_text`).

Positions are those of the whole SQL statement: the pattern text is parsed at its place in the statement (the
text before it blanked, line breaks kept), so spans and error carets point into the statement.

Example::

    >>> pattern_text(parse_pattern("A  B+?  (C | D){2,}"))
    'A B+? (C | D){2,}'
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from lark import Lark, Transformer_NonRecursive, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, VisitError

from sparkcep.grammar.parser import _expected, _point, _short, _span
from sparkcep.ir import recognize as rx
from sparkcep.ir.errors import CEPSyntaxError
from sparkcep.ir.limits import MAX_INT_DIGITS, deeply

__all__ = ["parse_pattern", "pattern_text", "MAX_REPEAT"]

_GRAMMAR = Path(__file__).with_name("rowpattern.lark")

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: The largest bound of a ``{n,m}`` quantifier: the engine's program grows with the bounds.
MAX_REPEAT = 10_000


@functools.cache
def _parser() -> Lark:
    return Lark(_GRAMMAR.read_text(encoding="utf-8"), parser="lalr", lexer="contextual",
                propagate_positions=True, maybe_placeholders=True)


def parse_pattern(text: str, start: int = 0, end: int | None = None) -> rx.RowPattern:
    """The row pattern ``text[start:end]`` (positions in ``text``); :class:`CEPSyntaxError` if it is not one."""
    end = len(text) if end is None else end
    padded = "".join(c if c == "\n" else " " for c in text[:start]) + text[start:end]
    if not padded[start:].strip():
        raise CEPSyntaxError("empty PATTERN: write a row pattern, or () for the empty pattern",
                             _point(text, max(start - 1, 0)), text)
    try:
        tree = _parser().parse(padded)
    except UnexpectedInput as err:
        raise _syntax_error(err, padded, text, end) from None
    try:
        return _ToPattern().transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, CEPSyntaxError):
            raise CEPSyntaxError(err.orig_exc.message, err.orig_exc.span, text) from None
        raise


@v_args(meta=True)
class _ToPattern(Transformer_NonRecursive):
    """One IR node per rule (groups ``( p )`` are the inner pattern)."""

    def alternation(self, meta, items):
        return rx.PAlt(tuple(items), span=_span(meta))

    def concatenation(self, meta, items):
        return rx.PConcat(tuple(items), span=_span(meta))

    def quantified(self, meta, children):
        inner, (low, high, greedy) = children
        return rx.PQuant(inner, low, high, greedy, span=_span(meta))

    def variable(self, meta, children):
        (name,) = children
        return rx.PVar(str(name), span=_span(meta))

    def quoted_variable(self, meta, children):
        (name,) = children
        return rx.PVar(str(name)[1:-1].replace("``", "`"), span=_span(meta))

    def empty(self, meta, children):
        return rx.PEmpty(span=_span(meta))

    def permute(self, meta, items):
        return rx.PPermute(tuple(items), span=_span(meta))

    def exclusion(self, meta, children):
        (inner,) = children
        return rx.PExclude(inner, span=_span(meta))

    def start_anchor(self, meta, children):
        return rx.PAnchor("start", span=_span(meta))

    def end_anchor(self, meta, children):
        return rx.PAnchor("end", span=_span(meta))

    # quantifiers: (min, max, greedy)

    def star(self, meta, children):
        return 0, None, children[-1] is None

    def plus(self, meta, children):
        return 1, None, children[-1] is None

    def optional(self, meta, children):
        return 0, 1, children[-1] is None

    def exactly(self, meta, children):
        n, reluctant = children
        return _bound(n), _bound(n), reluctant is None

    def at_least(self, meta, children):
        n, reluctant = children
        return _bound(n), None, reluctant is None

    def at_most(self, meta, children):
        m, reluctant = children
        return 0, _bound(m), reluctant is None

    def between(self, meta, children):
        n, m, reluctant = children
        low, high = _bound(n), _bound(m)
        if low > high:
            raise CEPSyntaxError(f"the quantifier {{{low},{high}}} has its minimum above its maximum",
                                 _span(meta))
        return low, high, reluctant is None


def _bound(token) -> int:
    text = str(token)
    if len(text.lstrip("0")) > MAX_INT_DIGITS or int(text) > MAX_REPEAT:
        raise CEPSyntaxError(f"the quantifier bound {_short(text)} is too large: the limit is {MAX_REPEAT:,}",
                             _span(token))
    return int(text)


# --------------------------------------------------------------------------------------------- printing


@deeply
def pattern_text(p: rx.RowPattern) -> str:
    """The row pattern as text that :func:`parse_pattern` reads back to an equal pattern."""
    if isinstance(p, rx.PVar):
        return variable_text(p.name)
    if isinstance(p, rx.PEmpty):
        return "()"
    if isinstance(p, rx.PAnchor):
        return "^" if p.kind == "start" else "$"
    if isinstance(p, rx.PAlt):
        return " | ".join(_grouped(a, (rx.PAlt,)) for a in p.alternatives)
    if isinstance(p, rx.PConcat):
        return " ".join(_grouped(item, (rx.PAlt, rx.PConcat)) for item in p.items)
    if isinstance(p, rx.PPermute):
        return "PERMUTE(" + ", ".join(pattern_text(item) for item in p.items) + ")"
    if isinstance(p, rx.PExclude):
        return "{- " + pattern_text(p.inner) + " -}"
    if isinstance(p, rx.PQuant):
        return _grouped(p.inner, (rx.PAlt, rx.PConcat, rx.PQuant)) + quantifier_text(p)
    raise TypeError(f"not a row pattern: {p!r}")


def variable_text(name: str) -> str:
    """A pattern variable as written in a pattern: plain, or in backticks when it is not a plain word or is
    PERMUTE."""
    if _PLAIN.match(name) and name.upper() != "PERMUTE":
        return name
    return "`" + name.replace("`", "``") + "`"


def quantifier_text(q: rx.PQuant) -> str:
    """``*``, ``+?``, ``{2,5}``, ... for the bounds and greediness of ``q``."""
    shorthand = {(0, None): "*", (1, None): "+", (0, 1): "?"}
    if (q.min, q.max) in shorthand:
        text = shorthand[q.min, q.max]
    elif q.max is None:
        text = f"{{{q.min},}}"
    elif q.min == q.max:
        text = f"{{{q.min}}}"
    elif q.min == 0:
        text = f"{{,{q.max}}}"
    else:
        text = f"{{{q.min},{q.max}}}"
    return text if q.greedy else text + "?"


def _grouped(p: rx.RowPattern, kinds: tuple[type, ...]) -> str:
    text = pattern_text(p)
    return f"({text})" if isinstance(p, kinds) else text


# --------------------------------------------------------------------------------------------- error messages

_WORDS = {
    "NAME": "a pattern variable", "QUOTED_NAME": "a pattern variable", "_PERMUTE": "PERMUTE", "_LPAR": "'('",
    "_LEXCL": "'{-'", "_CARET": "'^'",
    "_DOLLAR": "'$'", "STAR": "'*'", "PLUS": "'+'", "QMARK": "'?'", "_LBRACE": "'{'", "INT": "a number",
    "_COMMA": "','", "_BAR": "'|'", "_RBRACE": "'}'", "_REXCL": "'-}'", "_RPAR": "')'",
    "$END": "the end of the pattern",
}
_RANK = {name: rank for rank, name in enumerate(_WORDS)}
_PRIMARY = {"NAME", "QUOTED_NAME", "_PERMUTE", "_LPAR", "_LEXCL", "_CARET", "_DOLLAR"}
_QUANTIFIER = {"STAR", "PLUS", "QMARK", "_LBRACE"}


def _describe(expected: set[str]) -> str:
    words: dict[str, int] = {}
    rest = set(expected)
    if _PRIMARY <= rest:
        words["a pattern variable, '(' or PERMUTE"] = -2
        rest -= _PRIMARY
    if _QUANTIFIER <= rest:
        words["a quantifier"] = -1
        rest -= _QUANTIFIER
    for name in rest:
        word = _WORDS.get(name, name.strip("_$").lower())
        words[word] = min(words.get(word, len(_RANK)), _RANK.get(name, len(_RANK)))
    ordered = sorted(words, key=lambda w: (words[w], w))
    return ordered[0] if len(ordered) == 1 else ", ".join(ordered[:-1]) + " or " + ordered[-1]


def _syntax_error(err: UnexpectedInput, padded: str, text: str, end: int) -> CEPSyntaxError:
    expected = _expected(err)
    if isinstance(err, UnexpectedCharacters):
        pos = err.pos_in_stream
        char = padded[pos]
        if char == "-" and padded[pos + 1:pos + 2] == "}":
            return CEPSyntaxError("unexpected '-}': no '{-' before it", _point(text, pos), text)
        return CEPSyntaxError(f"unexpected character '{char}' in the row pattern: expected "
                              f"{_describe(expected)}", _point(text, pos), text)
    token = getattr(err, "token", None)
    if token is None or token.type == "$END":
        # point at what ends the pattern (the closing parenthesis), or at its last character
        pos = end if end < len(text) else max(len(padded.rstrip()) - 1, 0)
        return CEPSyntaxError(f"unexpected end of the pattern: expected {_describe(expected - {'$END'})}",
                              _point(text, pos), text)
    return CEPSyntaxError(f"unexpected '{token}' in the row pattern: expected {_describe(expected)}",
                          _span(token), text)
