"""The optimizer: pure plan → plan rules, one per module, applied in ``RULES`` order.

Example::

    >>> [r.__name__ for r in RULES]
    ['push_local_predicates', 'equalities_to_equivalence', 'partition_by_equivalence', \
'project_event_expressions', 'push_window', 'prune_columns']
"""

from __future__ import annotations

from sparkcep.compiler.optimizer.equalities_to_equivalence import equalities_to_equivalence
from sparkcep.compiler.optimizer.partition_by_equivalence import partition_by_equivalence
from sparkcep.compiler.optimizer.project_event_expressions import project_event_expressions
from sparkcep.compiler.optimizer.prune_columns import prune_columns
from sparkcep.compiler.optimizer.push_local_predicates import push_local_predicates
from sparkcep.compiler.optimizer.push_window import push_window
from sparkcep.compiler.plan.nodes import Node

RULES = (push_local_predicates, equalities_to_equivalence, partition_by_equivalence, project_event_expressions,
         push_window, prune_columns)


def optimize(plan: Node, rules=RULES) -> Node:
    for rule in rules:
        plan = rule(plan)
    return plan
