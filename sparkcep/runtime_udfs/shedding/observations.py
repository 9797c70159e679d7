"""gSPICE statistics (§III-B1): contributions, predecessor-pane type frequencies, binned attributes, and the
aggregated observations ⟨T_e, F, E_e, M, O⟩.

Contributions are derived without touching the engine (gSPICE is black-box): every event gets a hidden id
column (:data:`SID`), and the engine runs on a *traced* spec whose outputs are the ids of the events bound to
each variable, so each complex event names the events that contributed to it.  For a negated component
(the paper's abandoned partial matches, §III-B1 last paragraph) the same query runs once more with that
component made positive: each match of it is a would-be match that the negative event abandoned, and
credits that negative event.

Example (the paper's Table I → Table II)::

    >>> import numpy as np
    >>> types = np.zeros(8, dtype=np.int64)                       # all of type A (code 0)
    >>> F = np.array([[1, 2]] * 3 + [[2, 1]] * 5)                 # (F_A, F_B) of each event's pane
    >>> E = np.array([[5], [5], [5], [7], [7], [8], [8], [8]])    # binned attribute E_e
    >>> M = np.array([1, 0, 1, 0, 1, 0, 0, 1], dtype=float)       # complex events each contributed to
    >>> agg = aggregate(types, F, E, M)
    >>> [(k, round(m / o, 2)) for k, (m, o) in sorted(agg.items())]
    [((0, (1, 2), (5,)), 0.67), ((0, (2, 1), (7,)), 0.5), ((0, (2, 1), (8,)), 0.33)]
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from sparkcep.ir.ast import Attr, Func, Not
from sparkcep.ir.spec import MatchSpec, OutputColumn
from sparkcep.runtime_udfs.match import engine as match_engine

#: The hidden event-id column the shedder's statistics run on (position of the event in the observed stream).
SID = "_sid"
#: A Kleene variable's events are traced through ``v[1] .. v[KLEENE_SLOTS]`` and ``v[v.len]``.
KLEENE_SLOTS = 8


# ----------------------------------------------------------------------------------------------- traced specs


def traced_spec(spec: MatchSpec, kleene_slots: int = KLEENE_SLOTS) -> MatchSpec:
    """``spec`` with outputs naming the ids of the events bound to every positive variable.

    A single variable ``v`` gives column ``v``; a Kleene variable gives ``v#1 .. v#k``, ``v#last`` and ``v#n``
    (its length): events beyond the first ``k`` and the last are not traced (:func:`contributions` counts
    them in ``untraced``).  Unbound variables (other alternatives of an ``OR``) are None.
    """
    outs = []
    for c in spec.components:
        if c.negated:
            continue
        if c.kleene:
            outs += [OutputColumn(f"{c.var}#{k}", Attr(c.var, SID, k)) for k in range(1, kleene_slots + 1)]
            outs.append(OutputColumn(f"{c.var}#last", Attr(c.var, SID, "last")))
            outs.append(OutputColumn(f"{c.var}#n", Func("count", (Attr(c.var, SID, None),))))
        else:
            outs.append(OutputColumn(c.var, Attr(c.var, SID)))
    return replace(spec, outputs=tuple(outs))


def _unnegate(node, var: str):
    """The pattern AST with the negation binding ``var`` made positive."""
    if isinstance(node, Not) and var in _bound_vars(node.inner):
        return node.inner
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        if isinstance(v, tuple):
            nv = tuple(_unnegate(x, var) for x in v)
        elif dataclasses.is_dataclass(v):
            nv = _unnegate(v, var)
        else:
            continue
        if nv != v:
            changes[f.name] = nv
    return replace(node, **changes) if changes else node


def _bound_vars(node) -> set[str]:
    out = set()
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        var = getattr(node, "var", None)
        if isinstance(var, str):
            out.add(var)
        for f in dataclasses.fields(node):
            v = getattr(node, f.name)
            for x in v if isinstance(v, tuple) else (v,):
                if dataclasses.is_dataclass(x):
                    out |= _bound_vars(x)
    return out


def abandonment_specs(spec: MatchSpec) -> list[tuple[str, MatchSpec]]:
    """For each negated component ``v``: ``(v, spec with v positive)``.  A match of it is a match of ``spec``
    that ``v``'s event abandons (dropping that event would turn it into a false positive)."""
    out = []
    for k, c in enumerate(spec.components):
        if not c.negated:
            continue
        comps = tuple(replace(x, negated=False) if i == k else x for i, x in enumerate(spec.components))
        pattern = _unnegate(spec.pattern, c.var) if spec.pattern is not None else None
        out.append((c.var, replace(spec, components=comps, pattern=pattern)))
    return out


def _run(spec: MatchSpec, events: list[dict]) -> list[dict]:
    """Every match of ``spec`` over ``events`` (batch: partitioned by ``spec.key``, flushed)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for ev in events:
        groups[tuple(ev.get(k) for k in spec.key)].append(ev)
    rows: list[dict] = []
    for evs in groups.values():
        state, _ = match_engine.step(spec, match_engine.init_state(), evs)
        _, out = match_engine.advance(spec, state, math.inf)
        rows += out
    return rows


def _ids_of(row: dict, var: str, kleene: bool, slots: int) -> tuple[tuple, int]:
    """The traced ids of ``var`` in a match row, and how many of its events were not traced."""
    if not kleene:
        sid = row.get(var)
        return ((sid,) if sid is not None else ()), 0
    ids = [row.get(f"{var}#{k}") for k in range(1, slots + 1)]
    ids = [i for i in ids if i is not None]
    n = row.get(f"{var}#n") or 0
    last = row.get(f"{var}#last")
    if n > len(ids) and last is not None:
        ids.append(last)
    return tuple(ids), max(0, n - len(ids))


def match_keys(spec: MatchSpec, events: list[dict], kleene_slots: int = KLEENE_SLOTS) -> set[tuple]:
    """The complex events of ``spec`` over ``events`` (which carry :data:`SID`), each identified by the ids of
    its events per variable: the unit false negatives and false positives are counted in."""
    traced = traced_spec(spec, kleene_slots)
    pos = [c for c in spec.components if not c.negated]
    return {tuple(_ids_of(r, c.var, bool(c.kleene), kleene_slots)[0] for c in pos) for r in _run(traced, events)}


@dataclass
class Contributions:
    """Per event (indexed by :data:`SID`): ``m`` the weighted number of complex events it contributed to
    (plus, for negated components, the weighted partial matches it abandoned); ``matches`` the weighted
    number of complex events; ``untraced`` Kleene events not traced (see :func:`traced_spec`)."""

    m: np.ndarray
    matches: float = 0.0
    abandoned: float = 0.0
    untraced: int = 0


def contributions(queries: Sequence[tuple[MatchSpec, float]], events: list[dict],
                  kleene_slots: int = KLEENE_SLOTS) -> Contributions:
    """The weighted contributions of ``events`` (dicts with ``type``, ``ts``, attributes and :data:`SID` =
    0..n-1) to the complex events of ``queries`` (``(spec, weight w_q)`` pairs, gSPICE §II-C)."""
    n = len(events)
    out = Contributions(np.zeros(n, dtype=np.float64))
    for spec, weight in queries:
        runs = [(None, spec)] + abandonment_specs(spec)
        for neg_var, s in runs:
            traced = traced_spec(s, kleene_slots)
            comps = [c for c in s.components if not c.negated]
            for row in _run(traced, events):
                if neg_var is None:
                    out.matches += weight
                    for c in comps:
                        ids, lost = _ids_of(row, c.var, bool(c.kleene), kleene_slots)
                        out.untraced += lost
                        for i in ids:
                            out.m[i] += weight
                else:
                    out.abandoned += weight
                    sid = row.get(neg_var)
                    if sid is not None:
                        out.m[sid] += weight
    return out


# ----------------------------------------------------------------------------------------------- features


def pane_frequencies(type_codes: np.ndarray, n_types: int, pane_length: int,
                     history: Sequence[int] = ()) -> np.ndarray:
    """``F`` of every event (§II-B): row ``j`` counts each type among the ``pane_length`` events before event
    ``j`` (count-based pane).  ``history`` are the type codes of events before this batch (oldest first).

    >>> pane_frequencies(np.array([0, 1, 2, 0, 2]), 3, 4).tolist()   # R0 C1 X2 R3 X4 (R=0, C=1, X=2)
    [[0, 0, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1], [2, 1, 1]]

    Events of other types (code ``-1``) neither get counted nor take a place in the pane.
    """
    hist = [int(t) for t in history if 0 <= t < n_types][-pane_length:] if pane_length else []
    codes = np.asarray(type_codes, dtype=np.int64)
    valid = (codes >= 0) & (codes < n_types)
    seq = np.concatenate([np.asarray(hist, dtype=np.int64), codes[valid]])
    onehot = np.zeros((len(seq) + 1, n_types), dtype=np.int64)
    onehot[np.arange(1, len(seq) + 1), seq] = 1
    cum = np.cumsum(onehot, axis=0)
    # number of pane-eligible events before each event of the batch
    before = len(hist) + np.concatenate([[0], np.cumsum(valid)[:-1]]) if len(codes) else np.zeros(0, dtype=np.int64)
    before = before.astype(np.int64)
    return cum[before] - cum[np.maximum(before - pane_length, 0)]


def pane_history(history: Sequence[int], type_codes: np.ndarray, n_types: int, pane_length: int) -> list[int]:
    """The predecessor pane after a batch: the last ``pane_length`` type codes of ``history`` then the batch
    (events of other types take no place), the ``history`` of the next batch's :func:`pane_frequencies`.

    >>> pane_history([0, 1], np.array([2, -1, 0]), 3, 3)
    [1, 2, 0]
    """
    if pane_length <= 0:
        return []
    codes = np.asarray(type_codes, dtype=np.int64)
    valid = codes[(codes >= 0) & (codes < n_types)]
    return (list(history) + valid[-pane_length:].tolist())[-pane_length:]


@dataclass(frozen=True)
class Binning:
    """Fixed-size bins (§III-B3) for numeric attributes and for pane frequencies.

    ``attributes`` is ``((name, low, width, n_bins), ...)``: value ``v`` goes to bin ``floor((v - low) / width)``
    clipped to ``[0, n_bins - 1]``; a missing value gets bin ``n_bins``.  ``freq_width`` bins frequencies.
    """

    attributes: tuple[tuple[str, float, float, int], ...] = ()
    freq_width: int = 1

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a[0] for a in self.attributes)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Number of distinct bin values per attribute (the missing-value bin included)."""
        return tuple(a[3] + 1 for a in self.attributes)

    def bin_attributes(self, values: np.ndarray) -> np.ndarray:
        """``values`` (n × attributes, float, NaN for missing) → bin indices (n × attributes, int)."""
        values = np.asarray(values, dtype=np.float64).reshape(len(values), len(self.attributes))
        out = np.empty(values.shape, dtype=np.int64)
        for j, (_, low, width, n) in enumerate(self.attributes):
            col = values[:, j]
            missing = np.isnan(col)
            b = np.floor((np.where(missing, low, col) - low) / width)
            out[:, j] = np.where(missing, n, np.clip(b, 0, n - 1))
        return out

    def bin_frequencies(self, freq: np.ndarray) -> np.ndarray:
        return np.asarray(freq, dtype=np.int64) // self.freq_width

    @staticmethod
    def uniform(names: Iterable[str], events: list[dict], n_bins: int = 10) -> Binning:
        """Equal-width bins over the observed range of each attribute (at most ``n_bins``; integers keep one
        value per bin when their range is small)."""
        attrs = []
        for name in names:
            vals = [e.get(name) for e in events]
            vals = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]
            if not vals:
                attrs.append((name, 0.0, 1.0, 1))
                continue
            lo, hi = min(vals), max(vals)
            integral = all(v.is_integer() for v in vals)
            if integral and hi - lo + 1 <= n_bins:
                attrs.append((name, lo, 1.0, int(hi - lo + 1)))
            else:
                attrs.append((name, lo, max((hi - lo) / n_bins, 1e-12), n_bins))
        return Binning(tuple(attrs))


def attribute_matrix(events: list[dict], names: Sequence[str]) -> np.ndarray:
    """``n × len(names)`` floats from event dicts; NaN where missing or non-numeric."""
    out = np.full((len(events), len(names)), np.nan)
    for i, ev in enumerate(events):
        for j, name in enumerate(names):
            v = ev.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[i, j] = v
    return out


# ----------------------------------------------------------------------------------------------- aggregation


def aggregate(type_codes: np.ndarray, freq: np.ndarray, attr_bins: np.ndarray,
              m: np.ndarray) -> dict[tuple, tuple[float, int]]:
    """Equation 3: observations with equal ``(T_e, F, E_e)`` aggregated into ``key → (M, O)``; ``M`` sums the
    weighted complex events, ``O`` counts the observations.  Keys are ``(type code, F tuple, E tuple)``."""
    out: dict[tuple, list] = {}
    freq = np.asarray(freq, dtype=np.int64)
    attr_bins = np.asarray(attr_bins, dtype=np.int64).reshape(len(freq), -1)
    for t, f, e, mm in zip(np.asarray(type_codes).tolist(), map(tuple, freq.tolist()),
                           map(tuple, attr_bins.tolist()), np.asarray(m, dtype=float).tolist(), strict=True):
        acc = out.get((t, f, e))
        if acc is None:
            out[(t, f, e)] = [mm, 1]
        else:
            acc[0] += mm
            acc[1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def utilities(agg: dict[tuple, tuple[float, int]]) -> dict[tuple, float]:
    """Equation 4: ``U = M / O`` per aggregated observation."""
    return {k: m / o for k, (m, o) in agg.items()}
