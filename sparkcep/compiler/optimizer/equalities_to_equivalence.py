"""Recognize equivalence tests written as equalities (SASE: ``x.id = y.id ∧ x.id = z.id`` is ``[id]``).

When conjuncts ``u.attr = v.attr`` (same attribute, ``v[i].attr`` for Kleene variables: every event) connect
*every* component of the pattern, positive and negative, all events of a match share ``attr``: the
conjuncts become the equivalence test ``[attr]``, which ``partition_by_equivalence`` turns into the shuffle
key.  The components present in every match (not ``T?``, ``T*``, ``{0,m}``, nor inside an ``OR`` alternative
or such a group) must be tied by equalities among themselves; a negated one must be bound in every occurrence
of its negation (read with the match's or an enclosing negation's variables).  Over an absent component an
equality is NULL, so no match (``SEQ(A+ a[], C? c) WHERE c.x = a.x`` needs a ``C``), or it holds at no
position (``b[i].x = c.x`` of an empty ``B* b[]``): so a component that may be absent must be equated directly
with one present in every match (then its events, when there, have the key's value), and its equalities stay
predicates (they are what requires it); through another maybe-absent one nothing changes.  A loop that is the
only component present in every match gets no key (nothing ties its events to each other).  Under
``skip_till_next_match`` see :func:`_next_match_safe`.  Nor does it where the positive components are tied together
only through a negated one (``b.x = n.x AND n.x = a.x`` is a negation predicate: ``b`` may have another
``x``).  If one component stays unconnected (say a negated ``!(C z)`` that any C invalidates), partitioning
would hide events from it, so nothing changes; nor under a contiguity strategy (the partition of
``partition_contiguity`` is the query's own equivalence test, and events it would hide still break
contiguity); nor with an ``ANY(...)`` component, which may lack the
attribute (SASE §2.2: then the equality holds, so that event belongs to every partition).  An event whose
``attr`` is NULL satisfies none of the equalities; ``[attr]`` would group NULLs together, so the rule also
filters ``attr IS NOT NULL`` (such events are dropped, as the equalities would drop them).  Not with a single
positive component (``SEQ(A a, !(C z)) WHERE z.x = a.x``): an ``a`` with a NULL ``x`` matches (no ``C``
equals it), so the key keeps NULLs as a partition and the equalities stay (NULL there: no ``C`` invalidates).

    before: where a.job_id = b[i].job_id, a.job_id = c.job_id       (SASE++ Hadoop Q1)
    after:  where [job_id]
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from sparkcep.compiler.optimizer._spec import operator_spec, with_spec
from sparkcep.compiler.plan.nodes import Filter, Node, rebuild
from sparkcep.ir.ast import Attr, BinOp, Call, EquivItem, EquivTest, EventPat, Kleene, Not, Or, Seq, Unary
from sparkcep.ir.spec import reads_every_event


def _same_attr_equality(p) -> tuple[str, str, str] | None:
    """``(attr, u, v)`` for ``u.attr = v.attr`` between two different variables, else None."""
    if not (isinstance(p, BinOp) and p.op == "="):
        return None
    sides = (p.left, p.right)
    if not all(isinstance(s, Attr) and s.var is not None and s.index in (None, "cur") for s in sides):
        return None
    if p.left.attr != p.right.attr or p.left.var == p.right.var:
        return None
    return p.left.attr, p.left.var, p.right.var


def _always_bound(p) -> set[str]:
    """The variables of ``p`` outside negations that every match of ``p`` binds to at least one event."""
    if isinstance(p, EventPat):
        return {p.var}
    if isinstance(p, Kleene):
        return _always_bound(p.inner) if p.repeat[0] >= 1 else set()
    if isinstance(p, Seq):
        return set().union(*(_always_bound(i) for i in p.items))
    if isinstance(p, Or):
        return set.intersection(*(_always_bound(a) for a in p.alternatives))
    return set()  # a negation binds nothing


def _scopes(p, scope: tuple = (), out: dict | None = None, absent: set | None = None) -> dict[str, tuple] | None:
    """``{var: negations enclosing it}`` (outermost first, each a position path), or None if some variable
    is not bound in every occurrence of its negation (negated) or, unless ``absent`` collects them, in every
    match (positive)."""
    out = {} if out is None else out
    bound = _always_bound(p)
    stack = [(p, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, EventPat):
            if node.var not in bound:
                if absent is None:
                    return None
                absent.add(node.var)
            out[node.var] = scope
        elif isinstance(node, Not):
            if _scopes(node.inner, (*scope, path), out) is None:
                return None
        else:
            children = (node.inner,) if isinstance(node, Kleene) else (
                node.items if isinstance(node, Seq) else node.alternatives)
            stack += [(c, (*path, k)) for k, c in enumerate(children)]
    return out


def equalities_to_equivalence(plan: Node) -> Node:
    spec = operator_spec(plan)
    if reads_every_event(spec):  # contiguity, NEXT steps: the partition decides which events are adjacent
        return plan
    variables = [c.var for c in spec.components]
    absent: set[str] = set()  # positive components a match may leave out (T?, T*, an OR alternative's, ...)
    scopes = _scopes(spec.pattern, absent=absent) if spec.pattern is not None else None
    if scopes is None or set(scopes) != set(variables) or any(c.any_ for c in spec.components):
        return plan
    graphs: dict[str, nx.Graph] = {}
    for p in spec.predicates:
        found = _same_attr_equality(p)
        if found and _read_together(scopes, found[1], found[2]):
            attr, u, v = found
            graphs.setdefault(attr, nx.Graph()).add_edge(u, v)
    present = {v: s for v, s in scopes.items() if v not in absent}
    # one positive component, tied to the negated ones only: its event matches with a NULL attr (no negative
    # event equals it), so NULLs stay (one partition) and so do the equalities (NULL there: none invalidates)
    several = sum(1 for s in present.values() if not s) > 1
    # a loop's events are tied to each other only through another component always present
    if not several and any(c.kleene for c in spec.components if c.var in present and not present[c.var]):
        return plan
    keyed = {i.attr for p in spec.predicates if isinstance(p, EquivTest) for i in p.items
             if i.var is None and i.value is None}
    covered = [attr for attr, g in graphs.items() if set(g.nodes) == set(variables)
               and _ties(g.subgraph(present), present) and _anchored(g, present, absent)
               and _next_match_safe(spec, g, present) and (several or attr not in keyed)]
    if not covered:
        return plan
    implied = covered if several else []
    # an equality with a component that may be absent stays: it is what requires that component (NULL when it
    # is absent) or ties its events to the key when present
    keep = [p for p in spec.predicates
            if not ((f := _same_attr_equality(p)) and f[0] in implied and _read_together(scopes, f[1], f[2])
                    and not {f[1], f[2]} & absent)]
    keep.append(EquivTest(tuple(EquivItem(attr) for attr in covered)))
    not_null = tuple(Unary("NOT", Call("isnull", (Attr(None, attr),))) for attr in implied)
    plan = with_spec(plan, replace(spec, predicates=tuple(keep)))
    return rebuild(plan, lambda n: replace(n, residual=n.residual + not_null) if isinstance(n, Filter) else n)


def _anchored(g: nx.Graph, present: dict[str, tuple], absent: set[str]) -> bool:
    """Is every positive component that may be absent equated directly with one always present?  Then its
    events, when the match has them, have the key's value (the equality is evaluated, both being bound); a
    path through another such component would not say so when that one is absent (``b[i].x = c.x`` of an
    empty ``B* b[]`` holds at no position)."""
    return all(any(u in present and not present[u] for u in g.neighbors(v)) for v in absent)


def _next_match_safe(spec, g: nx.Graph, present: dict[str, tuple]) -> bool:
    """Under skip_till_next_match an event the partition would hide must be one the match could not have
    taken where it was skipped: each positive component after the pattern's first event is equated with an
    always present one before it (bound by then, so the equality is decidable and an event of another value
    fails it).  ``SEQ(A a, C c, B b) WHERE a.x = b.x AND c.x = b.x`` has no match over A(x=1) C(x=2) C(x=1)
    B(x=1): C(x=2) could follow ``a`` (no equality decides it yet), so it may not be skipped; a key ``[x]`` would
    hide it.  Only a flat ``SEQ`` of events, Kleene events and negations (the order of its components is the
    order of their events)."""
    if getattr(spec, "strategy", None) != "skip_till_next_match":
        return True
    items = spec.pattern.items if isinstance(spec.pattern, Seq) else (spec.pattern,)
    order: dict[str, int] = {}
    for k, item in enumerate(items):
        inner = item.inner if isinstance(item, Kleene) else item
        if isinstance(item, Not):
            continue
        if not isinstance(inner, EventPat):
            return False
        order[inner.var] = k
        if (k > 0 or isinstance(item, Kleene)) and not any(
                u in present and not present[u] and order.get(u, k) < k for u in g.neighbors(inner.var)):
            return False
    return True


def _ties(g: nx.Graph, scopes: dict[str, tuple]) -> bool:
    """Does every variable reach all positive ones through equalities read where it is bound: a positive
    variable through positive ones, a negated one through its own negation's or enclosing ones (an equality
    with a deeper negation's variable only says when that negation excuses, not what the outer one needs)?"""
    positive = {v for v, s in scopes.items() if not s}
    for v, scope in scopes.items():
        outer = [w for w, s in scopes.items() if s == scope[:len(s)]]
        if not positive <= nx.node_connected_component(g.subgraph(outer), v):
            return False
    return True


def _read_together(scopes: dict[str, tuple], u: str, v: str) -> bool:
    """Are ``u`` and ``v`` both bound where ``u.attr = v.attr`` is read: in the match, or in one occurrence of
    a negation (one variable's negations enclose the other's)?  Not two sibling negations."""
    a, b = sorted((scopes.get(u), scopes.get(v)), key=lambda s: len(s or ()))
    return a is not None and b is not None and b[:len(a)] == a
