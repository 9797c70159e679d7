"""The compiled GRETA graph of a trend query (_Compiled), its check and its description for explain."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache, reduce
from operator import itemgetter, or_
from typing import TYPE_CHECKING, Any

import numpy as np

from sparkcep.ir.ast import (
    Attr,
    BinOp,
    EquivTest,
    EventPat,
    Func,
    Kleene,
    Not,
    map_nodes,
    walk,
)
from sparkcep.ir.errors import CEPError
from sparkcep.ir.naming import safe_identifier
from sparkcep.ir.printer import format_expr, format_pattern
from sparkcep.ir.spec import TrendSpec
from sparkcep.runtime_udfs.expr.components import component_mask, component_table, is_stop, stop_rows, stop_table
from sparkcep.runtime_udfs.expr.scalar import compile_expr
from sparkcep.runtime_udfs.match.engine import EngineUnsupportedError
from sparkcep.runtime_udfs.trend.aggregates import BIG_BITS, _CountAlgebra, _exact, _mpz, _VectorAlgebra
from sparkcep.runtime_udfs.trend.scanner import _count_scanner
from sparkcep.runtime_udfs.trend.template import (
    _FLIP,
    EQUAL,
    GUARDED,
    LINK,
    ORDERED,
    PLAIN,
    SCAN,
    _Edge,
    _event_fn,
    _Graph,
    _guard,
    _mandatory,
    _minimal,
    _pair_fn,
    _refs,
    _rename,
    _scope_info,
    _State,
    _TemplateBuilder,
    _Trans,
    not_next_marker,
)

if TYPE_CHECKING:
    from sparkcep.runtime_udfs.trend.template import _Positions

__all__ = ["describe"]

#: The owner of the negated event of a ``NEXT !(C c)`` (no graph of its own; -1 is the positive graph, 0, 1, ...
#: the negations')
NOT_NEXT = -2


class _Compiled:
    """Everything the engine needs from a :class:`TrendSpec`, compiled once."""

    def __init__(self, spec: TrendSpec):
        if not isinstance(spec, TrendSpec):
            raise CEPError(f"the trend engine needs a TrendSpec, got {type(spec).__name__}")
        if not (spec.window > 0 and spec.slide > 0):
            raise CEPError(f"window and slide must be positive, got {spec.window} and {spec.slide}")
        comps = spec.components
        if not comps or spec.pattern is None:
            raise EngineUnsupportedError("a trend query needs a pattern with at least one component")
        if isinstance(spec.pattern, Not):
            raise EngineUnsupportedError("negation cannot be the whole pattern")
        self.window, self.slide = spec.window, spec.slide
        self.n = len(comps)
        self.full = (1 << self.n) - 1
        self.group_by = tuple(spec.group_by)
        self.partial = bool(set(spec.key) - set(self.group_by))
        missing = [g for g in self.group_by if g not in spec.key]
        if missing:
            raise EngineUnsupportedError(
                f"GROUP BY {', '.join(missing)} is not part of the partition key {spec.key}: the trend engine "
                "takes group values from the events of one partition")
        position_of = {c.var: k for k, c in enumerate(comps)}
        for node in walk(spec.pattern):
            if isinstance(node, EventPat) and node.var not in position_of:
                raise EngineUnsupportedError(f"pattern variable {node.var!r} has no component")
        #: the loops with a stop condition (UNTIL), whose inner edges stop events cut, and component → its loop
        self.until = stop_table(spec.pattern, comps)
        self.loop_of = {position_of[v]: i for i, stop in enumerate(self.until) for v in stop.loop}
        builder = _TemplateBuilder(position_of)
        pos = builder.build(spec.pattern)
        negs = builder.negs
        if not pos.first:
            raise EngineUnsupportedError("the pattern has no positive event")
        any_vars = frozenset(c.var for c in comps if c.any_ or len(c.types) > 1)
        self._any_vars = any_vars
        self._positive_vars = {c.var for c in comps if not c.negated}
        self._negated_vars = {c.var for c in comps if c.negated}
        is_list = _scope_info(spec.pattern)
        mandatory = _mandatory(spec.pattern)

        # which graph each component belongs to: -1 the positive one, else the negation's id
        owner = dict.fromkeys(range(self.n), -1)
        #: the negated events of ``NEXT !(C c)``, by index (:attr:`_Trans.not_next`), as their components
        self.not_next = tuple(position_of[e.var] for e in builder.not_next)
        self.not_next_gap = tuple(builder.in_gap)  # ``!(NEXT C c)``: the C must also lie inside the gap
        #: ``NOT SEQ(NEXT B y, C z, ...)``: the graph of its unlinked sub-pattern (else None)
        self.not_next_neg = tuple(builder.linked)
        for k in self.not_next:
            owner[k] = NOT_NEXT
        for nid, neg in enumerate(negs):
            for k in neg.components:
                owner[k] = nid  # a negation's positions exclude those of the negations nested in it
        for k, c in enumerate(comps):
            if c.negated != (owner[k] != -1):
                raise EngineUnsupportedError(f"component {c.var!r} is inconsistent with the pattern")

        # classify the non-local predicates (§6: vertex predicates, edge predicates)
        vertex_filters: dict[int, list] = {}
        edges: list[_Edge] = []
        class_items: list = []
        self.never = False
        #: position → component: a bounded quantifier's iterations are copies of its components' positions
        self.comp_of = comp_of = builder.comp_of
        self.iteration_of = builder.iteration_of
        self.links = builder.links
        # predicates are classified on components: an edge predicate of v restricts every copy of v's edges
        follow_sets = {-1: {(comp_of[x], comp_of[y]) for x, y in pos.follow},
                       **{nid: set(neg.positions.follow) for nid, neg in enumerate(negs)}}
        first_sets = {-1: {comp_of[x] for x in pos.first},
                      **{nid: set(neg.positions.first) for nid, neg in enumerate(negs)}}
        #: per WHERE conjunct, how it is evaluated: a description, or the _Edge it became (for describe())
        self.classified: list[tuple[Any, Any]] = []
        self._follow = pos.follow
        #: per component of a NEXT !(C c), the predicates relating c to the pick right before it (``_p``, ``_e`` = c)
        nn_pairs: dict[int, list] = {}
        self._nn_pairs = nn_pairs
        for conj in spec.predicates:
            how = self._classify(conj, comps, position_of, owner, is_list, mandatory, any_vars, follow_sets,
                                 first_sets, negs, vertex_filters, edges, class_items)
            self.classified.append((conj, how))
        for i, nid in enumerate(self.not_next_neg):
            if nid is not None and any(e.graph == nid and self.not_next[i] in (e.src, e.dst) for e in edges):
                raise EngineUnsupportedError(
                    f"a predicate relating {comps[self.not_next[i]].var!r}, the linked first event of a negation, to "
                    "another of its events is not supported by the trend engine")
        #: per ``NEXT !(C c)``, the predicates on its event alone (its local ones are in the component's mask bit)
        self.not_next_filters = tuple(tuple(vertex_filters.get(k, ())) for k in self.not_next)
        #: and those relating it to the pick right before it, ``f(pick, event)``
        self.not_next_pairs = tuple(tuple(nn_pairs.get(k, ())) for k in self.not_next)
        self.neg_nodes = tuple(neg.node for neg in negs)
        self.components = comps
        self.class_var: str | None = None
        self.class_attrs: tuple[str, ...] = ()
        if class_items:
            var_names = {v for v, _ in class_items}
            if len(var_names) > 1:
                raise EngineUnsupportedError(
                    "scoped equivalence tests on several variables are not supported by the trend engine")
            self.class_var = var_names.pop()
            if self.class_var not in mandatory:
                raise EngineUnsupportedError(
                    f"[{self.class_var}.attr] needs {self.class_var!r} in every trend (not optional)")
            self.class_attrs = tuple(dict.fromkeys(a for _, a in class_items))

        # aggregates (Theorem 9.1)
        measures: list[tuple[str, str, str | None]] = []

        def measure(kind: str, target: str, attr: str | None) -> int:
            key = (kind, target, attr)
            if key not in measures:
                measures.append(key)
            return measures.index(key) + 1

        self.outputs: list[tuple[str, str, int, int]] = []
        for a in spec.aggregates:
            func = a.func.lower()
            if func == "count" and a.var is None:
                self.outputs.append((a.name, "count_all", 0, 0))
            elif func == "count":
                self.outputs.append((a.name, "count", measure("n", a.var, a.attr), 0))
            elif func in ("sum", "avg", "min", "max") and a.var is not None and a.attr is not None:
                n = measure("n", a.var, a.attr)
                x = measure("s" if func in ("sum", "avg") else func, a.var, a.attr)
                self.outputs.append((a.name, func, n, x))
            else:
                raise EngineUnsupportedError(f"aggregate {a.func}({a.var or '*'}) is not supported")
        self.measures = tuple(measures)
        self.alg = _VectorAlgebra(tuple(m[0] for m in measures)) if measures else _CountAlgebra()

        # graphs: the positive one and one per negation
        self.positive = self._graph(pos, [x for x, k in enumerate(comp_of) if owner[k] == -1], comps, edges,
                                    vertex_filters, any_vars, positive=True)
        self.negs = []
        for nid, neg in enumerate(negs):
            np_ = neg.positions
            if any(_guard(m) is not None for m in (*np_.first.values(), *np_.last.values())):
                raise EngineUnsupportedError(
                    "a negation at the start or end of a negated sub-pattern is not supported")
            self.negs.append(self._graph(np_, [k for k in range(self.n) if owner[k] == nid], comps, edges,
                                         vertex_filters, any_vars, positive=False))

        # component → roles: ("pos", state) or ("neg", nid, state)
        self.roles_of: dict[int, list] = {k: [] for k in range(self.n)}
        for st in self.positive.states:
            self.roles_of[st.comp].append((-1, st))
        for nid, g in enumerate(self.negs):
            for st in g.states:
                self.roles_of[st.comp].append((nid, st))
        self._roles: dict[int, tuple] = {}
        self.by_type = component_table(comps, any_vars)
        #: type → component bitmask, when no component has a local predicate to evaluate
        self.type_masks = None if any(c.local is not None for c in comps) else {
            t: sum(1 << k for k, _, _ in entries) for t, entries in self.by_type.items()}
        #: per loop with UNTIL, the component bits an event has iff it is of the loop's stop types (components
        #: without a local predicate, whose types cover them), or 0 if the masks do not tell
        self.stop_bits = tuple(_type_bits(comps, stop.types) if self.n < 63 else 0 for stop in self.until)
        #: UNTIL, what :func:`engine.step` reads of an event as it buffers it: the bits of a candidate stop event
        #: (one of the loops' types; 0: its type tells), the types (None: any event, UNTIL ANY), the attributes
        #: the conditions read
        self.stop_watch = 0 if not all(self.stop_bits) else reduce(or_, self.stop_bits, 0)
        self.stop_types = None if any(s.types is None for s in self.until) else frozenset(
            t for s in self.until for t in s.types)
        self.stop_attrs = tuple(sorted({a for s in self.until if s.vector is not None for _, a in s.vector.reads}))
        self.n_states = len(self.positive.states)
        #: the entries of a window's running aggregates ``R`` before the final one: per state, then per source of
        #: a plain edge inside a loop with UNTIL (:attr:`_State.cut_slot`)
        self.n_slots = self.n_states + sum(s.cut_slot is not None for s in self.positive.states)
        #: COUNT(*) over one positive graph whose edges need no stored vertices: the specialized scan
        self.counts_only = (not self.alg.vector and not self.negs and self.class_var is None and not self.not_next
                            and all(t.kind in (PLAIN, ORDERED, EQUAL, LINK) for t in self.positive.trans)
                            and not any(s.filters for s in self.positive.states))
        self._plans: dict[int, tuple] = {}
        self._scanner: Callable | None = None
        self.ordered = any(t.kind == ORDERED for t in self.positive.trans)
        #: counts flow through running counts only (no vertex tree or hash map): promote big ones to GMP
        self.promote = (self.counts_only and _mpz is not None
                        and all(t.kind == PLAIN for t in self.positive.trans))

    # ------------------------------------------------------------------------------------------ predicates

    def _classify(self, conj, comps, position_of, owner, is_list, mandatory, any_vars, follow_sets, first_sets,
                  negs, vertex_filters, edges, class_items) -> str | _Edge:
        """Sort one conjunct of WHERE into a vertex filter, an edge predicate or a scoped equivalence; returns
        how it is evaluated (the :class:`_Edge` for an edge predicate), for :func:`describe`."""
        if isinstance(conj, EquivTest):
            how = []
            for item in conj.items:
                if item.var is None:
                    raise EngineUnsupportedError(
                        f"the equivalence test [{item.attr}] must be the partition key of the trend engine")
                if item.var not in position_of:
                    raise CEPError(f"equivalence test refers to unknown variable {item.var!r}")
                k = position_of[item.var]
                if item.value is not None:
                    attr, value = item.attr, item.value.value
                    vertex_filters.setdefault(k, []).append(lambda ev, a=attr, v=value: ev.get(a) == v)
                    how.append(f"vertex filter on {item.var} (in the engine)")
                elif owner[k] == NOT_NEXT:
                    how.append(f"holds for the single event of {item.var}")
                elif owner[k] == -1:
                    class_items.append((item.var, item.attr))
                    how.append(f"scoped equivalence: one graph per value of {item.var}.{item.attr}")
                elif len(negs[owner[k]].components) > 1:
                    raise EngineUnsupportedError(
                        f"[{item.var}.{item.attr}] inside a negated sub-sequence is not supported")
                else:
                    how.append(f"holds for the single event of {item.var}")
            return "; ".join(dict.fromkeys(how))
        if any(isinstance(n, (Func, EquivTest)) for n in walk(conj)):
            raise EngineUnsupportedError("aggregates over a Kleene variable are not supported in a trend query's "
                                         "WHERE (GRETA predicates relate adjacent events)")
        names = _refs(conj)
        if None in names:
            raise EngineUnsupportedError("a bare attribute in WHERE is ambiguous here: name its variable")
        unknown = names - position_of.keys()
        if unknown:
            raise CEPError(f"predicate refers to unknown variable {sorted(unknown)[0]!r}")
        if not names:
            if compile_expr(conj)({}) is not True:
                self.never = True
                return "constant, false: no trend"
            return "constant, true"
        graphs = {owner[position_of[v]] for v in names}
        if graphs == {NOT_NEXT, -1} and len(names) == 2:
            how = self._not_next_pair(conj, names, position_of, owner, is_list, any_vars)
            if how is not None:
                return how
        if len(graphs) > 1:
            raise EngineUnsupportedError(
                f"the predicate {_show(conj)} relates a negated variable to variables outside its negated "
                "sub-pattern: not supported by the trend engine")
        gid = graphs.pop()
        indexes = {(n.var, n.index) for n in walk(conj) if isinstance(n, Attr)}
        single = {None, "cur", "last", 1}
        if gid == NOT_NEXT:  # one event (check refuses relating it to others): a test of the partition's next event
            (v,) = names
            if not {i for _, i in indexes} <= single:
                raise EngineUnsupportedError(f"{v!r} is a single event: index unknown")
            vertex_filters.setdefault(position_of[v], []).append(self._filter(conj, v))
            return f"vertex filter on {v} (in the engine), read on the event right after the previous pick"
        follow = follow_sets[gid]
        if len(names) == 1:
            (v,) = names
            k = position_of[v]
            idx = {i for _, i in indexes}
            if not is_list[v]:
                if not idx <= single:
                    raise EngineUnsupportedError(f"{v!r} is a single event: index {sorted(map(str, idx))} unknown")
                vertex_filters.setdefault(k, []).append(self._filter(conj, v))
                return f"vertex filter on {v} (in the engine)"
            if idx <= {None, "cur"}:
                vertex_filters.setdefault(k, []).append(self._filter(conj, v))
                return f"vertex filter on {v} (in the engine)"
            if idx <= {None, "cur", "next"}:
                names_ = {(v, None): "_p", (v, "cur"): "_p", (v, "next"): "_e"}
            elif idx <= {None, "cur", "prev"}:
                names_ = {(v, "prev"): "_p", (v, None): "_e", (v, "cur"): "_e"}
            else:
                raise EngineUnsupportedError(
                    f"predicate {_show(conj)} relates non-adjacent events of {v!r}: GRETA edge predicates "
                    "relate an event and the next (NEXT(v), v[i-1])")
            if (k, k) in follow:
                edges.append(_Edge(k, k, _rename(conj, names_), gid))
                return edges[-1]
            return f"holds vacuously: no two events of {v} are adjacent"
        if len(names) == 2:
            u, v = sorted(names, key=position_of.get)
            if is_list[u] or is_list[v] or not {i for _, i in indexes} <= single:
                raise EngineUnsupportedError(
                    f"predicate {_show(conj)} relates a Kleene variable to another variable: not supported by "
                    "the trend engine")
            ku, kv = position_of[u], position_of[v]
            required = mandatory if gid == -1 else _mandatory(negs[gid].node)
            for a, b, ka, kb in ((u, v, ku, kv), (v, u, kv, ku)):
                preds = {x for x, y in follow if y == kb}
                if preds == {ka} and kb not in first_sets[gid] and {a, b} <= required:
                    edges.append(_Edge(ka, kb, _rename(conj, {a: "_p", b: "_e"}), gid))
                    return edges[-1]
        raise EngineUnsupportedError(
            f"predicate {_show(conj)} does not relate adjacent events of a trend: not supported by the trend "
            "engine")

    def _not_next_pair(self, conj, names, position_of, owner, is_list, any_vars) -> str | None:
        """``c.x = a.x`` for ``NEXT !(C c)`` right after the single event ``a``: a test of ``a``'s vertex and the
        partition's next event, if every edge across that negation leaves a vertex of ``a`` (else None)."""
        c, v = sorted(names, key=lambda n: owner[position_of[n]] != NOT_NEXT)
        kc, kv = position_of[c], position_of[v]
        ids = {i for i, k in enumerate(self.not_next) if k == kc}
        sources = {self.comp_of[x] for (x, _), alts in self._follow.items() for a in alts for m in a
                   if m < 0 and not_next_marker(m) in ids}
        indexes = {n.index for n in walk(conj) if isinstance(n, Attr)}
        if is_list[v] or sources != {kv} or not indexes <= {None, "cur", "last", 1}:
            return None
        anys = frozenset(n for n, var in (("_p", v), ("_e", c)) if var in any_vars)
        self._nn_pairs.setdefault(kc, []).append(_pair_fn(_rename(conj, {v: "_p", c: "_e"}), anys))
        return f"test of {v}'s vertex and the event right after it (NEXT !(...)), in the engine"

    def _filter(self, conj, var: str) -> Callable[[dict], bool]:
        fn = compile_expr(_rename(conj, {var: "_e"}), frozenset({"_e"}) if var in self._any_vars else frozenset())
        return lambda ev: fn({"_e": ev}) is True

    # ------------------------------------------------------------------------------------------ graphs

    def _graph(self, p: _Positions, members: list[int], comps, edges: list[_Edge], vertex_filters,
               any_vars, positive: bool) -> _Graph:
        comp_of = self.comp_of
        state_of = {x: j for j, x in enumerate(members)}
        states = [_State(j, comp_of[x], comps[comp_of[x]].var, self._label(x), self.iteration_of.get(x))
                  for j, x in enumerate(members)]
        for k, alts in p.first.items():
            s = states[state_of[k]]
            # NEXT !(C c) with no pick before it constrains nothing (as a NEXT step with none before it)
            s.first, s.start_guard = True, _guard(_minimal(frozenset(m for m in a if m >= 0) for a in alts))
        for k, alts in p.last.items():
            s = states[state_of[k]]
            if any(m < 0 for a in alts for m in a):
                held = {m for a in alts for m in a}
                if len(alts) != 1 or len(held) != 1 or self.not_next_gap[not_next_marker(next(iter(held)))]:
                    raise EngineUnsupportedError("NEXT !(...) after which a trend may end, next to a negation or "
                                                 "one of several ways to end, is not supported by the trend engine")
                if not positive:
                    raise EngineUnsupportedError("NEXT !(...) at the end of a negation is not supported by the trend "
                                                 "engine")
                s.last, s.end_held = True, not_next_marker(held.pop())
                continue
            s.last, s.end_guard = True, _guard(alts)
        for s in states:
            if s.comp in vertex_filters:
                s.filters = tuple(vertex_filters[s.comp])
        trans: list[_Trans] = []
        for (x, y), alts in sorted(p.follow.items()):
            held = {m for a in alts for m in a if m < 0}
            if held and (len(alts) != 1 or len(held) != 1):
                raise EngineUnsupportedError(
                    "NEXT !(...) on an edge several paths of the pattern give is not supported by the trend engine")
            # next to a negation (GRETA's marker on the same edge): a guarded queue or store the vertex enters late
            guard = _guard(tuple(frozenset(m for m in a if m >= 0) for a in alts)) if held else _guard(alts)
            mine = [e for e in edges if (e.src, e.dst) == (comp_of[x], comp_of[y])]
            link = (x, y) in self.links
            if held and link:
                raise EngineUnsupportedError("NEXT !(...) right before a NEXT step is not supported by the trend "
                                             "engine")
            # a NEXT step's edge joins events adjacent in the partition: no negation can lie between them
            t = _Trans(len(trans), state_of[x], state_of[y], LINK if link else PLAIN, None if link else guard)
            src_any, dst_any = comps[comp_of[x]].var in any_vars, comps[comp_of[y]].var in any_vars
            if mine and positive and guard is None and len(mine) == 1 and not (src_any or dst_any or link):
                self._index(t, mine[0].expr)
            if mine and t.kind in (PLAIN, LINK):
                t.kind = t.kind if link else SCAN
                fns = [_pair_fn(e.expr, frozenset(n for n, a in (("_p", src_any), ("_e", dst_any)) if a))
                       for e in mine]
                t.pred = fns[0] if len(fns) == 1 else (lambda p_, e_, fs=tuple(fns): all(f(p_, e_) for f in fs))
            elif t.kind == PLAIN and t.guard is not None:
                t.kind = GUARDED
            loop = self.loop_of.get(comp_of[x])
            if positive and loop is not None and self.loop_of.get(comp_of[y]) == loop:
                _cut(t, loop)
            if held:  # its own running aggregate, index or store, which a vertex enters one event late
                t.not_next = not_next_marker(held.pop())
                if t.kind == PLAIN and t.guard is None and positive:  # (a negation's graph: its largest start)
                    t.kind, t.key, t.probe = EQUAL, _constant, _constant
                if self.not_next_neg[t.not_next] is not None and t.key is not _constant:
                    raise EngineUnsupportedError(
                        "NOT SEQ(NEXT ...) next to another negation, with a predicate across it or inside a loop "
                        "with UNTIL is not supported by the trend engine")
            for e in mine:
                e.trans = e.trans or t  # the first of its transitions (a bounded quantifier's copies: several)
            trans.append(t)
            states[t.dst].ins.append(t)
            src = states[t.src]
            if t.not_next is not None:
                src.held_out.append(t)
            elif t.kind == PLAIN and t.cut is not None:  # its source's own running aggregate, after the states'
                if src.cut_slot is None:
                    src.cut_slot = len(states) + sum(s.cut_slot is not None for s in states)
                t.slot = src.cut_slot
            elif t.kind == PLAIN:
                src.plain_out = True
            elif t.kind in (ORDERED, EQUAL):
                src.ordered_out.append(t)
            elif t.kind == GUARDED:
                src.guarded_out.append(t)
            elif t.kind == LINK:
                src.link_out = True
            elif t.cut is not None:
                src.cut_stored = True
            else:
                src.stored = True
        if positive:
            for s in states:
                s.classed = s.var == self.class_var
                if self.alg.vector:
                    s.contrib = self._contrib(s)
        return _Graph(states, trans)

    def _label(self, x: int) -> str:
        """Position ``x``'s state name: its variable, with ``#i`` for iteration ``i`` of a bounded quantifier
        (``#n+`` for the looping last state of ``P{n,}``)."""
        var = self.components[self.comp_of[x]].var
        if x not in self.iteration_of:
            return var
        i, loops = self.iteration_of[x]
        return f"{var}#{i}{'+' if loops else ''}"

    @staticmethod
    def _index(t: _Trans, expr) -> None:
        """Make ``t`` ORDERED/EQUAL if ``expr`` compares an expression of the earlier event with one of the
        later: ``f(_p) op g(_e)``."""
        if not (isinstance(expr, BinOp) and expr.op in _FLIP and expr.op != "!="):
            return
        left, right = _refs(expr.left), _refs(expr.right)
        if left == {"_p"} and right == {"_e"}:
            early, late, op = expr.left, expr.right, expr.op
        elif left == {"_e"} and right == {"_p"}:
            early, late, op = expr.right, expr.left, _FLIP[expr.op]
        else:
            return
        t.kind = EQUAL if op == "=" else ORDERED
        t.op = op
        t.key = _event_fn(_rename(early, {"_p": "_e"}), False)
        t.probe = _event_fn(late, False)

    def _contrib(self, s: _State) -> Callable[[dict], tuple]:
        """``event → per-measure values`` for events entering state ``s`` (see :class:`_VectorAlgebra`)."""
        plan = []
        for kind, target, attr in self.measures:
            if target in self._positive_vars:
                applies: Any = target == s.var
            elif target in self._negated_vars:
                applies = False
            else:
                applies = target  # an event type: decided per event
            plan.append((kind, applies, attr))

        def values(ev: dict) -> tuple:
            out = []
            for kind, applies, attr in plan:
                if applies is False or (applies is not True and ev.get("type") != applies):
                    out.append(None)
                    continue
                if attr is None:
                    out.append(1)
                    continue
                v = ev.get(attr)
                if v is None:
                    out.append(None)
                elif kind == "n":
                    out.append(1)
                elif kind == "s":
                    out.append(_exact(v))
                else:
                    out.append(v)
            return tuple(out)

        return values

    # ------------------------------------------------------------------------------------------ runtime helpers

    def roles(self, mask: int) -> tuple:
        """The (graph, state) roles of an event with component bitmask ``mask`` (memoized per mask)."""
        out = self._roles.get(mask)
        if out is None:
            out = self._roles[mask] = tuple(r for k in range(self.n) if mask >> k & 1 for r in self.roles_of[k])
        return out

    def plans(self, mask: int) -> tuple:
        """For :func:`_scan_counts`: per state an event with ``mask`` enters, ``(j, start, plain predecessor
        slots, probes, plain_out, keys, last, links, link_out, cut_slot)``; probes and keys are the ORDERED/EQUAL
        transitions into and out of the state, links its LINK transitions (a NEXT step), the slots the entries of
        ``R`` its PLAIN transitions read (:attr:`_Trans.slot`)."""
        out = self._plans.get(mask)
        if out is None:
            plans = []
            for _, s in self.roles(mask):
                probes = tuple(t for t in s.ins if t.kind in (ORDERED, EQUAL))
                keys = tuple(s.ordered_out)
                plans.append((s.j, int(s.first), tuple(t.slot for t in s.ins if t.kind == PLAIN), probes,
                              s.plain_out, keys, s.last, tuple(t for t in s.ins if t.kind == LINK), s.link_out,
                              s.cut_slot))
            out = self._plans[mask] = tuple(plans)
        return out

    @property
    def scanner(self) -> Callable:
        """The generated hot loop (:func:`_count_scanner`), built on first use."""
        if self._scanner is None:
            self._scanner = _count_scanner(self)
        return self._scanner

    def stops_at(self, event: dict) -> tuple[int, ...]:
        """The loops (indexes into :attr:`until`) ``event`` is a stop event of (:func:`is_stop`)."""
        return tuple(i for i, stop in enumerate(self.until) if is_stop(stop, event))

    def stop_marks(self, ready: list) -> dict[int, tuple[int, ...]]:
        """Position in ``ready`` (``(ts, mask, event)`` triples) → the loops the event there is a stop event of
        (UNTIL), for the stop events only: read from the masks, where :func:`engine.step` marked them
        (:meth:`mark_stops`)."""
        n, total = self.n, self.n + len(self.until)
        if total < 63:
            masks = np.fromiter(map(itemgetter(1), ready), dtype=np.int64, count=len(ready))
            at = np.flatnonzero(masks >> n).tolist()
        else:
            at = [i for i, (_, m, _) in enumerate(ready) if m >> n]
        return {i: self.loops_of(ready[i][1]) for i in at}

    def loops_of(self, mask: int) -> tuple[int, ...]:
        """The loops a pending event's mask marks it a stop event of (the bits above the components')."""
        marked = mask >> self.n
        return tuple(i for i in range(len(self.until)) if marked >> i & 1) if marked else ()

    def mark_stops(self, pending: list, seen: list[int], columns: dict[str, list] | None = None) -> None:
        """Mark the stop events (UNTIL) among the buffered events at positions ``seen`` of ``pending`` (those of
        the stop types) in their masks, one bit per loop above the components' (``columns``: the attributes the
        conditions read, per such event, if read already), each condition evaluated once for them all
        (:func:`stop_rows`); drop those that fill no component and are no stop event, unless every event is kept
        (``NEXT``, ``NEXT !(...)``: an event of no component breaks adjacency)."""
        events = _Picked(pending, seen)
        marked: dict[int, int] = {}
        for i, (stop, bits) in enumerate(zip(self.until, self.stop_bits, strict=True)):
            rows = None
            if stop.types is None or (bits == self.stop_watch and (bits or len(self.until) == 1)):
                rows = range(len(seen))  # (every candidate is of its types)
            elif bits:
                rows = [y for y, x in enumerate(seen) if pending[x][1] & bits]
            for y in stop_rows(stop, events, rows, columns):
                marked[y] = marked.get(y, 0) | 1 << i
        n = self.n
        for y, loops in marked.items():
            ts, mask, ev = pending[seen[y]]
            pending[seen[y]] = (ts, mask | loops << n, ev)
        if not self.stop_watch and not (self.links or self.not_next):  # candidates by type: some may fill no component
            drop = {x for y, x in enumerate(seen) if not pending[x][1]}
            if drop:
                start = min(drop)
                pending[start:] = [p for x, p in enumerate(pending[start:], start) if x not in drop]

    def mask_of(self, event: dict) -> int:
        """Type test and local predicates, for an event that arrived without a ``_mask``."""
        return component_mask(self.by_type, event)

    def windows_of(self, t) -> range:
        """The indices ``k`` of the windows ``[k·slide, k·slide + window)`` that contain ``t``."""
        s = self.slide
        hi = int(t // s)
        while hi * s > t:
            hi -= 1
        while (hi + 1) * s <= t:
            hi += 1
        return range(self.first_open(t), hi + 1)

    def first_open(self, limit) -> int:
        """The smallest ``k`` whose window has not ended at ``limit`` (``k·slide + window > limit``)."""
        w, s = self.window, self.slide
        k = int((limit - w) // s) + 1
        while k * s + w <= limit:
            k += 1
        while (k - 1) * s + w > limit:
            k -= 1
        return k


class _Picked(Sequence):
    """The events at positions ``seen`` of ``pending`` (``(ts, mask, event)`` triples), read on demand."""

    __slots__ = ("pending", "seen")

    def __init__(self, pending: list, seen: list[int]) -> None:
        self.pending, self.seen = pending, seen

    def __len__(self) -> int:
        return len(self.seen)

    def __getitem__(self, y):
        return self.pending[self.seen[y]][2]


def _type_bits(comps, types: tuple[str, ...] | None) -> int:
    """The bits of the components that take only events of ``types`` and have no local predicate (their bit is
    the type test), if every one of ``types`` is such a component's, else 0."""
    if types is None:
        return 0
    plain = [(k, c) for k, c in enumerate(comps) if c.local is None and set(c.types) <= set(types)]
    covered = {t for _, c in plain for t in c.types}
    return sum(1 << k for k, _ in plain) if covered == set(types) else 0


def _show(e) -> str:
    return format_expr(e)


def _constant(ev: dict) -> int:
    return 0


def _cut(t: _Trans, loop: int) -> None:
    """Make ``t``, an edge inside ``loop`` (with UNTIL), one whose predecessors a stop event can drop all at once:
    its own running aggregate (a plain edge: its source state's :attr:`_State.cut_slot`), index or store of
    vertices, emptied by each stop event (GRETA: a stop resets the loop's self-edge sums)."""
    if t.kind not in (PLAIN, ORDERED, EQUAL, SCAN):
        raise EngineUnsupportedError(f"a {t.kind} edge inside a loop with UNTIL is not supported")
    t.cut = loop


@lru_cache(maxsize=64)
def _compiled(spec: TrendSpec) -> _Compiled:
    return _Compiled(spec)

#: How each transition kind finds a new event's predecessors, for :func:`describe`.
_INDEX_NAMES = {
    PLAIN: "running aggregate per state and window",
    ORDERED: "vertex tree (Fenwick tree + sorted levels)",
    EQUAL: "hash map",
    GUARDED: "invalidation queue",
    SCAN: "scan of the stored vertices",
    LINK: "the vertex of the partition's previous event (NEXT)",
}


def _markers(guard: tuple) -> str:
    """Negation marker alternatives as text: ``N0``, ``N0 & N1``, ``N0 | N1``."""
    return " | ".join(" & ".join(f"N{n}" for n in alt) for alt in guard)


def _as_written(p) -> str:
    """A (negated) sub-pattern as written: variables that analysis named after their type are not shown."""
    def unname(n):
        if isinstance(n, EventPat) and n.var is not None and len(n.types) == 1 and re.fullmatch(
                rf"{re.escape(safe_identifier(n.types[0]))}(_\d+)?", n.var):
            return replace(n, var=None)
        return n

    return format_pattern(map_nodes(p, unname))


def describe(spec: TrendSpec) -> list[str]:
    """The GRETA template this engine builds for ``spec``, as lines for ``explain`` (read from the compiled
    template itself, so the text cannot drift from what runs): per graph (the positive pattern and each
    negative sub-pattern split off by Algorithm 3) its states with their types and START/END roles and its
    transitions (``SEQ``, Kleene loops) with the index that sums their predecessors, and what each negation
    invalidates; how each WHERE conjunct is evaluated (vertex filter, edge predicate on a transition with its
    index, scoped equivalence); and the executor.

    >>> import sparkcep
    >>> spec = sparkcep.compile("RETURN COUNT(*) PATTERN Stock S+ WHERE S.price > NEXT(S).price WITHIN 10").spec()
    >>> print("\\n".join(describe(spec)))
    template (GRETA §4.1): 1 state, 1 transition
      state S: Stock, START, END
      S -> S (Kleene +): vertex tree (Fenwick tree + sorted levels)
    predicates (GRETA §6):
      S.price > NEXT(S).price: edge predicate on S -> S, index: vertex tree (Fenwick tree + sorted levels)
        keyed by S.price of the earlier event, probed with S.price of the later one
    executor: generated COUNT(*) scan (Algorithm 2, Theorem 4.3), exact Python ints
    """
    try:
        cs = _compiled(spec)
    except CEPError as e:
        return [f"template: not supported by the trend engine: {e}"]
    comps = cs.components
    untils = [f"{'ANY ' if n.until_any else ''}({_show(n.until)})" for n in walk(spec.pattern)
              if isinstance(n, Kleene) and n.until is not None]  # in stop_table's order

    def name(g: _Graph, j: int) -> str:
        return g.states[j].label

    def var(g: _Graph, j: int) -> str:
        return comps[g.states[j].comp].var

    def graph_lines(g: _Graph, indent: str) -> list[str]:
        lines = []
        for st_ in g.states:
            c = comps[st_.comp]
            roles = [r for r, on in (("START", st_.first), ("END", st_.last)) if on] or ["MID"]
            if st_.start_guard:
                roles.append(f"START only if no {_markers(st_.start_guard)} trend lies between the window start "
                             "and it")
            if st_.end_guard:
                roles.append(f"END only if no {_markers(st_.end_guard)} trend follows it in the window")
            if st_.end_held is not None:
                roles.append(f"END only if its next event in the partition is no {comps[cs.not_next[st_.end_held]].var}"
                             " or lies outside the window (NEXT !(...)), counted one event late")
            if st_.comp in cs.loop_of and g is cs.positive:
                roles.append(f"UNTIL {untils[cs.loop_of[st_.comp]]}: a stop event is none of its vertices")
            it = st_.iteration
            if it is not None:
                roles.append(f"trends with {'at least ' if it[1] else ''}{it[0]} iteration{'s' * (it[0] != 1)} "
                             "of its bounded quantifier")
            lines.append(f"{indent}state {st_.label}: {' | '.join(c.types)}, {', '.join(roles)}")
        for t in g.trans:
            src, dst = g.states[t.src], g.states[t.dst]
            i, j = (src.iteration or (0,))[0], (dst.iteration or (0,))[0]
            label = ("next iteration" if i and j > i else "Kleene +" if dst.comp <= src.comp and i >= j else "SEQ")
            guard = f", invalid if an {_markers(t.guard)} trend lies between the two events" if t.guard else ""
            index = "running aggregate per window" if t.cut is not None and t.op is None else _INDEX_NAMES[t.kind]
            if t.not_next is not None:
                index = ("largest trend start of its released vertices" if g is not cs.positive and t.kind == PLAIN
                         else "store of its released vertices, scanned" if g is not cs.positive and t.kind == SCAN
                         else "invalidation queue of its released vertices" if g is not cs.positive else
                         "running aggregate per window" if t.op is None else _INDEX_NAMES[t.kind])
                nid = cs.not_next_neg[t.not_next]
                guard += (f", only from a vertex whose next event in the partition is no "
                          f"{comps[cs.not_next[t.not_next]].var} (NEXT !(...)), entered one event late" if nid is None
                          else f", entered one event late: from a vertex whose next event in the partition is a "
                          f"{comps[cs.not_next[t.not_next]].var} inside the gap (NOT SEQ(NEXT ...)) until an N{nid} "
                          "trend starting at its ts or later has finished (a queue in the order of that ts), from "
                          "any other for good")
            if t.cut is not None:
                guard += ", emptied by each stop event (UNTIL)"
            lines.append(f"{indent}{name(g, t.src)} -> {name(g, t.dst)} ({label}): {index}{guard}")
        return lines

    n_states, n_trans = len(cs.positive.states), len(cs.positive.trans)
    out = [f"template (GRETA §4.1): {n_states} state{'s' * (n_states != 1)}, "
           f"{n_trans} transition{'s' * (n_trans != 1)}"]
    out += graph_lines(cs.positive, "  ")
    graphs = [cs.positive, *cs.negs]
    for nid, (node, g) in enumerate(zip(cs.neg_nodes, cs.negs, strict=True)):
        hits = [f"{name(h, t.src)} -> {name(h, t.dst)}" for h in graphs for t in h.trans
                if (t.guard and any(nid in alt for alt in t.guard))
                or (t.not_next is not None and cs.not_next_neg[t.not_next] == nid)]
        hits += [f"START {comps[x.comp].var}" for h in graphs for x in h.states
                 if x.start_guard and any(nid in alt for alt in x.start_guard)]
        hits += [f"END {comps[x.comp].var}" for h in graphs for x in h.states
                 if x.end_guard and any(nid in alt for alt in x.end_guard)]
        out.append(f"negation N{nid} = NOT {_as_written(node)} (GRETA §5, its own graph), a finished trend "
                   f"invalidates: {', '.join(hits) or 'nothing'}")
        out += graph_lines(g, "  ")
    locals_ = [(c.var, c.local) for c in comps if c.local is not None]
    if cs.classified or locals_ or spec.key:
        out.append("predicates (GRETA §6):")
    if spec.key:
        out.append(f"  [{', '.join(spec.key)}]: partition key (equivalence tests and GROUP BY), one graph per value")
    for name_, local in locals_:  # (not ``var``: the helper above reads a transition's variable)
        out.append(f"  {_show(local)}: vertex filter on {name_}, pushed to the Spark SQL filter")
    for conj, how in cs.classified:
        if not isinstance(how, _Edge):
            out.append(f"  {_show(conj)}: {how}")
            continue
        t = how.trans
        g = graphs[how.graph + 1]
        src, dst = var(g, t.src), var(g, t.dst)
        out.append(f"  {_show(conj)}: edge predicate on {src} -> {dst}, index: {_INDEX_NAMES[t.kind]}")
        if t.kind in (ORDERED, EQUAL):
            ex = how.expr
            early, late = (ex.left, ex.right) if _refs(ex.left) == {"_p"} else (ex.right, ex.left)
            out.append(f"    keyed by {_show(_rename(early, {'_p': src}))} of the earlier event, probed with "
                       f"{_show(_rename(late, {'_e': dst}))} of the later one")
    if cs.counts_only:
        ints = f"exact integers, GMP above {BIG_BITS} bits" if cs.promote else "exact Python ints"
        out.append(f"executor: generated COUNT(*) scan (Algorithm 2, Theorem 4.3), {ints}"
                   + ("; the events at a stop event's ts (UNTIL) through the template interpreter" if cs.until
                      else ""))
    else:
        names = {"n": "COUNT", "s": "SUM", "min": "MIN", "max": "MAX"}
        measures = "".join(f", {names[k]}({t}{'.' + a if a else ''})" for k, t, a in cs.measures)
        out.append(f"executor: template interpreter (Algorithm 2 with §5 invalidation), per vertex and window "
                   f"[count{measures}] (Theorem 9.1)")
    return out
