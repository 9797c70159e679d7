"""The grammar of the sparkcep language (``cep.lark``) and the parser that builds the AST."""

from __future__ import annotations

from sparkcep.grammar.parser import parse_query, parse_workload

__all__ = ["parse_query", "parse_workload"]
