"""The SQL front end of ``MATCH_RECOGNIZE``: a statement read into :class:`sparkcep.ir.recognize.Recognize`.

:func:`parse_recognize` reads ``SELECT ... FROM t MATCH_RECOGNIZE (...) ...``; :func:`pattern_text` prints a
row pattern back as text (explain uses it; ``parse_pattern(pattern_text(p)) == p``), :func:`recognize_text` the
whole statement (``parse_recognize(recognize_text(q)) == q``) and :func:`expression_text` one expression.
"""

from __future__ import annotations

from sparkcep.grammar.recognize.pattern import parse_pattern, pattern_text, quantifier_text
from sparkcep.grammar.recognize.printer import expression_text, recognize_text
from sparkcep.grammar.recognize.statement import parse_recognize

__all__ = ["parse_recognize", "parse_pattern", "pattern_text", "quantifier_text", "recognize_text", "expression_text"]
