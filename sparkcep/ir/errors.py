"""Errors raised for bad queries: one message per problem, with line, column and a caret.

Example::

    >>> err = CEPError("unknown variable 'q'", Span(1, 8, 1, 9, 7, 8), "RETURN q.x PATTERN A a WITHIN 1")
    >>> print(err)
    line 1, column 8: unknown variable 'q'
      RETURN q.x PATTERN A a WITHIN 1
             ^
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A source range as Lark reports it: 1-based line and column of the first character, ``end_column``
    one past the last character (exclusive), and 0-based offsets ``[start, end)``."""

    line: int
    column: int
    end_line: int
    end_column: int
    start: int
    end: int


class CEPError(Exception):
    """Base of every error sparkcep raises for bad user input (queries, options, events)."""

    def __init__(self, message: str, span: Span | None = None, source: str | None = None):
        self.message = message
        self.span = span
        self.source = source
        super().__init__(self.render())

    @property
    def line(self) -> int | None:
        return self.span.line if self.span else None

    @property
    def column(self) -> int | None:
        return self.span.column if self.span else None

    def render(self) -> str:
        if self.span is None:
            return self.message
        head = f"line {self.span.line}, column {self.span.column}: {self.message}"
        if not self.source:
            return head
        lines = self.source.splitlines() or [""]
        if self.span.line > len(lines):
            return head
        text = lines[self.span.line - 1]
        # underline to the end of the span on its first line (at least one caret)
        if self.span.end_line == self.span.line:
            width = max(1, self.span.end_column - self.span.column)
        else:
            width = max(1, len(text) - self.span.column + 1)
        caret = " " * (self.span.column - 1) + "^" * width
        return f"{head}\n  {text}\n  {caret}"

    def __str__(self) -> str:  # pragma: no cover - same as render()
        return self.render()


class CEPSyntaxError(CEPError):
    """The text is not in the grammar."""


class CEPSemanticError(CEPError):
    """The text parses but means nothing (unknown variable, bad NEXT(), P+/P- mix, ...)."""

