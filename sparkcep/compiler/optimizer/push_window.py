"""Push the window into sequence construction (SASE §4.3).

Checking ``WITHIN`` after matches are built constructs every too-long sequence first and lets state grow
with the stream; inside the operator, construction stops at the window and state older than it is pruned.

    before: Window[Sequence[window: inf], 10]      after: Sequence[window: 10]
"""

from __future__ import annotations

from dataclasses import replace

from sparkcep.compiler.plan.nodes import Node, Sequence, Window, rebuild


def push_window(plan: Node) -> Node:
    def fix(n):
        if isinstance(n, Window) and isinstance(n.input, Sequence):
            seq = n.input
            return replace(seq, spec=replace(seq.spec, window=min(seq.spec.window, n.window)))
        return n

    return rebuild(plan, fix)
