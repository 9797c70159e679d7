"""Helpers shared by optimizer rules: reach the operator spec of a plan and replace it."""

from __future__ import annotations

from dataclasses import replace

from sparkcep.compiler.plan.nodes import Node, Sequence, Trend, operator_spec, rebuild

__all__ = ["operator_spec", "with_spec"]


def with_spec(plan: Node, spec) -> Node:
    """The plan with its operator's spec replaced by ``spec``."""
    return rebuild(plan, lambda n: replace(n, spec=spec) if isinstance(n, (Sequence, Trend)) else n)
