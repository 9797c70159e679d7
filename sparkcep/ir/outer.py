"""The sqlglot dialects of a MATCH_RECOGNIZE statement: :class:`SparkStrings` for the whole statement,
:class:`OuterSpark` for its outer query (``Recognize.outer_sql``).

The outer query (the ``SELECT ... WHERE ... ORDER BY`` around the clause) is given to Spark as the user wrote
it, only the clause replaced by the result view (:func:`renamed_view` renames that view in the text), so Spark
reads it, and names its result columns, as it would over a table of the matches.  sqlglot reads it (is it a
query, which columns it reads) and writes it back only where it must be rewritten: a stream's late side channel
and results' arrival (``sparkcep.spark.recognize.apply_outer``, which then gives the columns the names of the
query as written), and explain's one line (:func:`one_line`).  The clause's MEASURES and DEFINE are read by
sqlglot too, and their per-row parts written back for Spark.  sqlglot's ``spark`` dialect does not read or
write back what Spark reads in three places, and these dialects mend them:

- **A doubled quote in a string** (:class:`SparkStrings`, the whole statement).  Spark 4 reads ``'it''s'`` as
  ``it's`` (and ``"a""b"`` as ``a"b``); sqlglot's ``spark`` dialect read it as two adjacent strings,
  ``CONCAT('it', 's')``, which is ``its``.  A raw string (``r'...'``) has no escapes, as in Spark; one next
  to another string is joined to it (``r'a' 'b'`` is ``ab``), as sqlglot does for plain strings only.
- **A bare word that is a column first.**  Spark reads a bare ``current_timestamp`` (also ``current_date``,
  ``current_user``, ``session_user``, ``user``, ``current_time``, ``localtime``) as a column reference and
  resolves it to a column of that name when there is one (a measure named ``current_timestamp``); only when
  there is none is it the function.  A backquoted name behaves the same (Spark 4.3: the bare word *is*
  ``UnresolvedAttribute``, the function is its fallback).  sqlglot reads the words of its
  ``NO_PAREN_FUNCTIONS`` as calls and writes ``CURRENT_TIMESTAMP()`` / ``CURRENT_USER()``, which Spark always
  reads as the function.  :class:`OuterSpark` reads such a word without ``(`` as the backquoted column name
  as written (`` `current_timestamp` ``), so every later read and write keeps it.
- **A call written with parentheses.**  sqlglot writes ``current_date()``, ``session_user()``,
  ``current_catalog()``, ``localtimestamp()`` and ``localtime()`` back without them, which Spark reads as a
  column when there is one of that name (or, for ``current_catalog`` and ``localtimestamp``, refuses when there
  is none).  :class:`OuterSpark` writes them with ``()``.

Example::

    >>> parse_outer("SELECT current_timestamp, current_date() FROM m ORDER BY current_user").sql(dialect=OuterSpark)
    'SELECT `current_timestamp`, CURRENT_DATE() FROM m ORDER BY `current_user`'

Under ``spark.sql.ansi.enforceReservedKeywords=true`` (not Spark's default) Spark reads the bare words as the
functions even when a column has the name; a rewritten outer query (a stream's) keeps the column there.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType

__all__ = ["OuterSpark", "SparkStrings", "one_line", "outer_sql", "parse_outer", "renamed_view"]


#: The string tokens Spark joins when adjacent.
_STRINGS = {TokenType.STRING, TokenType.RAW_STRING}


def _called(name: str):
    """A generator transform writing ``name(...)`` with its parentheses even without arguments."""
    return lambda self, e: self.func(name, e.this)


class SparkStrings(Spark):
    """sqlglot's ``spark`` dialect, reading a doubled quote inside a string as Spark 4 does (see the module
    docstring)."""

    class Tokenizer(Spark.Tokenizer):
        STRING_ESCAPES = [*Spark.Tokenizer.STRING_ESCAPES, "'", '"']  # a quote doubled: the quote itself
        STRING_ESCAPES_ALLOWED_IN_RAW_STRINGS = False

    class Parser(Spark.Parser):
        def _adjacent_strings(self) -> bool:
            return (self._curr is not None and self._curr.token_type in _STRINGS and self._next is not None
                    and self._next.token_type in _STRINGS)

        def _parse_atom(self):
            return None if self._adjacent_strings() else super()._parse_atom()

        def _parse_primary(self):
            # adjacent strings are one, raw ones too (``r'a' 'b'`` is ab in Spark; sqlglot joins plain ones only)
            if not self._adjacent_strings():
                return super()._parse_primary()
            parts = []
            while self._match_set(_STRINGS):
                parts.append(self.PRIMARY_PARSERS[self._prev.token_type](self, self._prev))
            return self.expression(exp.Concat(expressions=parts, coalesce=self.dialect.CONCAT_COALESCE))


class OuterSpark(SparkStrings):
    """:class:`SparkStrings`, reading and writing a bare column-first word and a call with ``()`` as Spark does
    (see the module docstring)."""

    class Parser(SparkStrings.Parser):
        def _parse_function_call(self, functions=None, anonymous=False, optional_parens=True, any_token=False):
            tok = self._curr
            if (optional_parens and tok is not None and tok.token_type in self.NO_PAREN_FUNCTIONS
                    and (self._next is None or self._next.token_type != TokenType.L_PAREN)
                    and (self._prev is None or self._prev.token_type != TokenType.DOT)):
                self._advance()  # a bare word: Spark's column reference (the function only if no column)
                return self.expression(exp.Column(this=exp.to_identifier(tok.text, quoted=True)))
            return super()._parse_function_call(functions, anonymous, optional_parens, any_token)

    class Generator(Spark.Generator):
        TRANSFORMS = {
            **Spark.Generator.TRANSFORMS,
            exp.CurrentDate: _called("CURRENT_DATE"),
            exp.CurrentCatalog: _called("CURRENT_CATALOG"),
            exp.SessionUser: _called("SESSION_USER"),
            exp.Localtime: _called("LOCALTIME"),
            exp.Localtimestamp: _called("LOCALTIMESTAMP"),
        }


def parse_outer(text: str) -> exp.Expression:
    """The outer query ``text`` read as :class:`OuterSpark` (a ``sqlglot.errors.ParseError`` if it is not SQL)."""
    import sqlglot

    return sqlglot.parse_one(text, read=OuterSpark)


def outer_sql(tree: exp.Expression) -> str:
    """The outer query ``tree`` written as Spark SQL (:class:`OuterSpark`)."""
    return tree.sql(dialect=OuterSpark)


def one_line(text: str) -> str:
    """The outer query ``text`` on one line, without comments, as sqlglot writes it (:class:`OuterSpark`): how
    explain shows it."""
    return parse_outer(text).sql(dialect=OuterSpark, comments=False)


def renamed_view(text: str, old: str, new: str) -> str:
    """``text`` reading the table ``new`` where it read ``old``: every name ``old`` (ignoring case; not a part
    after a dot) replaced in the text itself, so that the rest of the query is left as written (the view's name
    is the parser's own, unquoted).

        >>> renamed_view("SELECT v.x, 'v' FROM v AS m JOIN db.v USING (x)", "v", "v_1")
        "SELECT v_1.x, 'v' FROM v_1 AS m JOIN db.v USING (x)"
    """
    tokens = SparkStrings().tokenize(text)
    parts, last = [], 0
    for i, tok in enumerate(tokens):
        if (tok.token_type == TokenType.VAR and tok.text.lower() == old.lower()
                and (i == 0 or tokens[i - 1].token_type != TokenType.DOT)):
            parts += [text[last:tok.start], new]
            last = tok.end + 1
    return "".join(parts) + text[last:]
