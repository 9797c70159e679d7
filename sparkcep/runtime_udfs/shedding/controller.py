"""When and how much to drop (gSPICE §III, tasks 1–2, after eSPICE): the drop ratio ρ from measured latency.

A fluid model of the operator's queue: over the next control interval ``Δ`` the kept arrivals ``λΔ(1 − ρ)``
add ``λΔ(1 − ρ)/μ`` seconds of work and the operator does ``Δ`` seconds of it.  With ``W`` the measured
latency, the controller picks the smallest ρ that brings the latency back to ``safety × bound`` (the paper's
safety bound: shedding starts when the latency reaches 80 % of the latency bound):

    ρ = 1 − μ (Δ + safety·bound − W − λΔ·c) / (λ Δ),   clipped to [0, max_rho]

(``c``: the shedder's own cost per arriving event, which dropping does not save)

so without overload (``λ ≤ μ`` and ``W`` below the safety bound) ρ is 0: shedding is off.

Example::

    >>> c = LatencyController(bound=1.0)
    >>> c.update(latency=0.2, arrival_rate=1000, service_rate=2000, interval=0.5)   # no overload
    0.0
    >>> c = LatencyController(bound=1.0)
    >>> round(c.update(latency=0.8, arrival_rate=2000, service_rate=1000, interval=0.5), 3)  # 2x overload
    0.5
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class LatencyController:
    """ρ from latency ``W`` (seconds), arrival rate λ and service rate μ (events/s) over an interval Δ (s);
    μ is smoothed exponentially (weight ``smoothing`` on the newest measurement)."""

    bound: float
    safety: float = 0.8
    max_rho: float = 0.99
    smoothing: float = 0.3
    rho: float = 0.0
    history: list[tuple[float, float]] = field(default_factory=list)
    _service: float | None = None

    @property
    def target(self) -> float:
        return self.safety * self.bound

    def update(self, latency: float, arrival_rate: float, service_rate: float, interval: float,
               overhead: float = 0.0) -> float:
        """The new ρ; ``overhead`` is the shedder's own cost per *arriving* event (seconds), which dropping
        does not save: it is taken off the time the operator has for kept events."""
        if service_rate > 0:  # the service rate is noisy (costs per event vary): exponential smoothing
            a = self.smoothing
            self._service = service_rate if self._service is None else a * service_rate + (1 - a) * self._service
            # at or above the safety bound, trust the worse of the smoothed and the newest measurement
            service_rate = min(self._service, service_rate) if latency >= self.target else self._service
        if arrival_rate <= 0 or interval <= 0:
            rho = 0.0
        elif service_rate <= 0:
            rho = self.max_rho if latency >= self.target else self.rho
        else:
            budget = interval + self.target - latency - arrival_rate * interval * overhead
            rho = 1.0 - service_rate * budget / (arrival_rate * interval)
        self.rho = _clip(rho, self.max_rho)
        self.history.append((latency, self.rho))
        return self.rho


def _clip(rho: float, max_rho: float) -> float:
    return min(max(rho, 0.0), max_rho)


def _settle(rho: float, wanted: float, max_rho: float, damping: float) -> float:
    """The next ρ of a batch controller: ``wanted`` clipped to [0, ``max_rho``]; it rises at once but falls by
    ``damping`` of the way from ``rho`` (0 below 0.01), so that one cheap batch does not switch shedding off."""
    wanted = _clip(wanted, max_rho)
    if wanted < rho:
        wanted = rho - damping * (rho - wanted)
        wanted = 0.0 if wanted < 0.01 else wanted
    return wanted


def _push(window: list, item, memory: int) -> None:
    """Append ``item`` and keep the last ``memory`` items."""
    window.append(item)
    del window[:-memory]


def fit_cost(kept, work, fixed: float | None = None) -> tuple[float, float]:
    """The cost of a batch as ``fixed + per_event × kept`` (seconds), fitted to measured batches.

    Least squares over the points when the kept counts spread enough (relative spread ≥ 10 %) to separate the
    two terms, both kept non-negative; otherwise (all batches about the same size, as with a steady ρ) the
    previous ``fixed`` estimate (0 if none) is kept and the per-event cost is the ratio of the rest:
    ``(Σwork − n·fixed) / Σkept``.

        >>> fit_cost([100, 200, 300], [1.5, 2.0, 2.5])
        (1.0, 0.005)
        >>> fit_cost([100, 100], [2.0, 2.0], fixed=1.0)
        (1.0, 0.01)
    """
    k, w = np.asarray(kept, dtype=float), np.asarray(work, dtype=float)
    if k.size == 0 or k.sum() <= 0:
        return (float(w.mean()) if w.size else 0.0), 0.0
    mean_k, mean_w = k.mean(), w.mean()
    if k.size >= 2 and k.std() >= 0.1 * mean_k:
        slope = float(((k - mean_k) * (w - mean_w)).sum() / ((k - mean_k) ** 2).sum())
        if slope > 0 and mean_w - slope * mean_k >= 0:
            return float(mean_w - slope * mean_k), slope
        if slope <= 0:  # the size does not explain the cost (noise): all of it fixed
            return float(mean_w), 0.0
        return 0.0, float((k * w).sum() / (k * k).sum())  # a negative intercept: the line through the origin
    fixed = min(max(fixed or 0.0, 0.0), float(w.min()))
    return fixed, float(max(w.sum() - k.size * fixed, 0.0) / k.sum())


def fit_batch_cost(offered, kept, work, read: float | None = None,
                   fixed: float | None = None) -> tuple[float, float, float]:
    """The cost of a batch as ``fixed + read × offered + kept_cost × kept`` (seconds), fitted to measured
    batches: ``(fixed, read, kept_cost)``, all non-negative (least squares over every subset of the three
    terms, the best feasible one).  ``read`` is what shedding does not save (reading, validating and deciding
    each offered event), ``kept_cost`` what it does.  The two can be told apart only when the kept shares of
    the batches spread (by ≥ 0.1: ρ changed); otherwise ``read`` is held at the given estimate (None: 0) and
    ``fixed``, ``kept_cost`` come from :func:`fit_cost` on the rest (``fixed``: the previous estimate).

        >>> n, k = [1000, 1000, 2000, 2000], [1000, 200, 2000, 600]
        >>> [round(x, 6) for x in fit_batch_cost(n, k, [1 + 0.0002 * a + 0.001 * b for a, b in zip(n, k)])]
        [1.0, 0.0002, 0.001]
        >>> [round(x, 6) for x in fit_batch_cost([1000, 2000], [1000, 2000], [2.0, 3.0], read=0.0002)]
        [1.0, 0.0002, 0.0008]
    """
    n, k, w = (np.asarray(x, dtype=float) for x in (offered, kept, work))
    read = max(read or 0.0, 0.0)
    share = k / np.maximum(n, 1.0)
    if n.size >= 3 and share.max() - share.min() >= 0.1:
        x = np.column_stack([np.ones_like(n), n, k])
        best, best_err = None, np.inf
        for cols in ([0, 1, 2], [0, 1], [0, 2], [1, 2], [0], [1], [2]):
            coef = np.linalg.lstsq(x[:, cols], w, rcond=None)[0]
            if (coef < 0).any():
                continue
            err = float(((x[:, cols] @ coef - w) ** 2).sum())
            if err < best_err - 1e-12:
                best, best_err = dict(zip(cols, coef.tolist(), strict=True)), err
        if best is not None:
            return best.get(0, 0.0), best.get(1, 0.0), best.get(2, 0.0)
    fixed, per_kept = fit_cost(k, np.maximum(w - read * n, 0.0), fixed)
    return fixed, read, per_kept


def cost_spread(durations, predicted) -> float:
    """The margin a batch plan needs for the spread of measured durations around the fitted cost: the largest
    relative excess of a duration over its prediction (0 if none is above it).

        >>> cost_spread([1.0, 1.3, 0.9], [1.0, 1.0, 1.0])
        0.3
    """
    return round(max([d / max(p, 1e-9) - 1.0 for d, p in zip(durations, predicted, strict=True)] + [0.0]), 12)


@dataclass
class BatchController:
    """The same goal for Spark micro-batches, from a query's progress (``StreamingQueryListener``).

    A batch that started at ``start`` and took ``duration`` seconds holds the events that arrived since the
    previous batch started, so its latency is ``start + duration − previous start``: the time since the
    previous start (``I``) plus its own duration.  Batches run back to back, so the next batch will hold the
    events that arrive while this one runs.  Like :class:`DampedController`, the controller works from what was
    measured over the last ``memory`` batches rather than from one batch:

    * the batch cost as ``F + c × kept`` (:func:`fit_cost`: a fixed cost per micro-batch, planning, scheduling
      and the state store, which shedding does not save, plus a cost per kept event), the arrival rate ``λ =
      offered / time`` and the gap ``g`` between a batch's end and the next one's start;
    * a margin from the spread: ``s``, the largest relative excess of a measured duration over the fit;
    * the next batch holds ``λ × I`` events (``I``: this batch's duration plus ``g``) and its latency will be
      ``I + d``; the controller aims at ``d = min((target − g) / 2, target − I)`` (``target`` = ``safety ×
      bound``, the paper's safety bound): half the target in steady state (back-to-back batches of ``d``
      have latency ``2d + g``), less while a long batch is draining.  It keeps the share ``keep = (d / (1 +
      s) − F) / (c λ I)`` of the events, ρ = 1 − keep clipped to [0, max_rho];
    * ρ rises at once (the next batch must fit) but falls by at most ``damping`` of the way per batch, so that
      one cheap batch does not switch shedding off; it is set to 0 when it would fall below 0.01.

    Without overload the predicted unshed batch fits (``keep ≥ 1``) and ρ is 0.

    Example (bound 10 s: target 8 s; batches cost 1 s + 1 ms per event)::

        >>> b = BatchController(bound=10.0)
        >>> b.on_batch(0.0, 2.0, 1000, 1000)   # 1 000 events in 2 s: the next batch fits, no shedding
        0.0

    The second batch (4 000 events in 2 s) took 5 s: the fit is F = 1 s, c = 1 ms, λ = 5 000 / 4 s; the next
    batch, 5 s of arrivals, would take 1 + 6.25 s (latency 12.25 s); it may take min(8 / 2, 8 − 5) = 3 s, so
    keep (3 − 1) / 6.25 = 32 %::

        >>> round(b.on_batch(2.0, 5.0, 4000, 4000), 2), b.latencies
        (0.68, [2.0, 7.0])
    """

    bound: float
    safety: float = 0.8
    max_rho: float = 0.99
    memory: int = 8
    damping: float = 0.5
    rho: float = 0.0
    latencies: list[float] = field(default_factory=list)
    #: the last ``memory`` batches with events: (time since the previous start, duration, offered, kept, gap)
    _window: list[tuple[float, float, int, int, float]] = field(default_factory=list)
    _prev_start: float | None = None
    _prev_duration: float | None = None
    _fixed: float | None = None

    @property
    def target(self) -> float:
        return self.safety * self.bound

    def on_batch(self, start: float, duration: float, offered: int, kept: int) -> float:
        """The ρ for the next batch after one that started at ``start`` (s), took ``duration`` s, was offered
        ``offered`` events and kept ``kept``."""
        prev, prev_duration = self._prev_start, self._prev_duration
        self._prev_start, self._prev_duration = start, duration
        if offered == 0:  # a no-data batch (only the watermark moves): nothing measured
            return self.rho
        since = start - prev if prev is not None and start > prev else max(duration, 1e-3)
        self.latencies.append(since + duration if prev is not None else duration)
        gap = max(since - prev_duration, 0.0) if prev_duration is not None and prev is not None else 0.0
        _push(self._window, (since, max(duration, 1e-3), offered, kept, gap), self.memory)
        fixed, per_event = fit_cost([w[3] for w in self._window], [w[1] for w in self._window], self._fixed)
        self._fixed = fixed
        spread = cost_spread([w[1] for w in self._window], [fixed + per_event * w[3] for w in self._window])
        rate = sum(w[2] for w in self._window) / sum(w[0] for w in self._window)
        gap = sum(w[4] for w in self._window) / len(self._window)
        interval = duration + gap
        goal = min((self.target - gap) / 2, self.target - interval) / (1 + spread)
        incoming = per_event * rate * interval
        if incoming <= 0:
            wanted = 0.0 if goal >= fixed else self.max_rho
        else:
            wanted = 1.0 - (goal - fixed) / incoming
        wanted = _settle(self.rho, wanted, self.max_rho, self.damping)
        self.rho = wanted
        return self.rho


@dataclass
class DampedController:
    """ρ from the overload measured over a longer interval, with a safety margin that follows the cost spread.

    :class:`LatencyController` reacts to each interval alone; when the cost per event varies widely (a
    Kleene query where one closing event constructs hundreds of matches) its ρ swings between 0 and ~0.8 from
    one interval to the next, and the spikes cross the bound.  This controller follows the paper's recipe for
    the drop amount (gSPICE §III, after eSPICE: a drop ratio from the overload, applied over a drop interval,
    with a safety bound) but measures what the shedder *actually* did rather than trusting ρ:

    * over the last ``memory`` intervals it sums the events that arrived, the events the shedder kept and the
      seconds of work the operator spent (shedding included): ``λ = arrived / time``, the cost per kept event
      ``c = (work − overhead) / kept`` and the shedder's own cost per arriving event ``o = overhead /
      arrived``.  A shedder that keeps the expensive events (gSPICE keeps the events that build matches) shows
      a higher ``c`` and gets a higher ρ, without any model of which event costs what;
    * it drains the excess latency over ``drain`` intervals ``H`` instead of one:
      ``ρ = 1 − (H + target − W − λH·o) / (λH·c)``, clipped to [0, max_rho];
    * the target latency is the paper's safety bound ``safety × bound``, lowered when a single interval's work
      (the largest in memory, ``spike``) does not fit in the remaining headroom: ``target = min(safety ×
      bound, bound − spike − Δ)`` (never below ``floor × bound``; ``Δ``: the interval, the time the events
      of one interval wait for its end).  A latency of ``target`` plus one more spike then still stays within
      the bound.  The spike is remembered over ``spike_memory`` intervals, and
      :meth:`prime` seeds it with interval costs measured before the overload (the paper measures the
      operator's throughput before shedding starts), so that the first spike does not cross the bound.

    Example (2x overload at the safety bound: keep half)::

        >>> c = DampedController(bound=1.0)
        >>> round(c.update(latency=0.8, arrived=100, kept=100, work=0.1, interval=0.05), 3)
        0.5
        >>> c = DampedController(bound=1.0)
        >>> c.update(latency=0.2, arrived=100, kept=100, work=0.05, interval=0.1)   # no overload
        0.0
    """

    bound: float
    safety: float = 0.8
    max_rho: float = 0.99
    memory: int = 20
    drain: int = 4
    floor: float = 0.3
    spike_memory: int = 400
    rho: float = 0.0
    history: list[tuple[float, float]] = field(default_factory=list)
    _window: list[tuple[float, float, float, float, float]] = field(default_factory=list)
    _works: list[float] = field(default_factory=list)

    @property
    def target(self) -> float:
        spike = max(self._works, default=0.0)
        interval = self._window[-1][4] if self._window else 0.0
        return max(self.floor * self.bound, min(self.safety * self.bound, self.bound - spike - interval))

    def prime(self, works) -> None:
        """Seed the spike memory with the work (seconds) of intervals measured before shedding started."""
        for w in works:
            _push(self._works, float(w), self.spike_memory)

    def update(self, latency: float, arrived: int, kept: int, work: float, interval: float,
               overhead: float = 0.0) -> float:
        """The new ρ after an interval of ``interval`` seconds in which ``arrived`` events came, the shedder
        kept ``kept`` and the operator worked ``work`` seconds (``overhead`` of them deciding what to drop);
        ``latency`` is the latency measured at its end."""
        _push(self._window, (float(arrived), float(kept), float(work), float(overhead), float(interval)), self.memory)
        self.prime([work])
        n_in = sum(a for a, _, _, _, _ in self._window)
        n_kept = sum(k for _, k, _, _, _ in self._window)
        busy = sum(w - o for _, _, w, o, _ in self._window)
        spent = sum(o for _, _, _, o, _ in self._window)
        elapsed = sum(d for _, _, _, _, d in self._window)
        if n_in <= 0 or elapsed <= 0:
            rho = 0.0
        elif n_kept <= 0:  # everything dropped lately: no cost measured, keep the ratio unless latency is fine
            rho = self.rho if latency >= self.target else self.rho / 2
        else:
            lam, c, o = n_in / elapsed, busy / n_kept, spent / n_in
            horizon = self.drain * (elapsed / len(self._window))
            budget = horizon + self.target - latency - lam * horizon * o
            rho = 1.0 - budget / (lam * horizon * c) if c > 0 else 0.0
        self.rho = _clip(rho, self.max_rho)
        self.history.append((latency, self.rho))
        return self.rho


@dataclass(frozen=True)
class Admission:
    """What :class:`BacklogController` decides for the next micro-batch: the drop ratio ``rho`` for the events
    it reads, ``admit``, the most events it may read (the source's admission bound, e.g. files per trigger
    times events per file; None: no bound), and ``expire``, the age (s) past which an event read can no
    longer make the bound and is dropped whatever its utility (None: none)."""

    rho: float
    admit: int | None
    expire: float | None


@dataclass
class BacklogController:
    """The drop ratio and the admission bound from what users feel: the arrival-to-result latency and the
    backlog, not the micro-batch's own duration (issue 17: a controller that only sees batch durations lets a
    backlog grow without limit while every batch looks fast).

    After each micro-batch it is told the batch's duration, the events it read (``offered``) and kept, the
    p99 arrival-to-result latency of what it read, the backlog (events arrived and not read yet) and the
    events shed whole, unread, since the previous batch (``expired``).  Over the last ``memory`` batches it
    fits the batch cost ``F + o × offered + c × kept`` (:func:`fit_batch_cost`: ``o``, reading and deciding
    per offered event, is the part shedding does not save; it is told apart from ``c`` once ρ has moved,
    before that it is held at ``overhead``) and the arrival rate ``λ`` (events read, expired and the
    backlog's growth, per second).

    * The first micro-batch with events is Spark's start-up (Python workers, planning, the first state
      store): it measures neither the cost nor the latency and sets nothing (ρ stays 0, no admission bound,
      and what arrived meanwhile is read, not expired: the start-up is not the load).
    * The next batch gets the budget ``d = (target − gap) / 2`` (``target`` = ``safety × bound``; an event
      waits at most one batch in the source and one in the operator, so back-to-back batches of ``d`` keep
      the latency at ``2d + gap``), shrunk by ``target / p99`` while the measured p99 is above the target,
      and, for the events kept (``rho``), with a margin for the spread of the measured durations around the
      fitted cost (``s``, :func:`cost_spread`: they are planned within ``d / (1 + s)``; on a shared machine a
      batch takes up to 40 % more than its cost, and the p99 is the slowest batches'); the admission bound
      and the expiry age keep ``d`` (a smaller admission would shed whole files, unread, not by utility).
    * ``admit``, the admission bound: the most events the next batch may read, those whose reading and
      deciding take at most half of what the budget leaves after ``F``, ``(d − F) / (2o)`` (the other half is
      for the events kept; ``o`` the median of the last ``memory`` fits', None while it is 0).  What waits
      beyond it is read by a later batch or, last resort, expires.
    * ``rho``: of the events the next batch will read, ``n = min(backlog + λ × gap, admit)``, it keeps what
      the operator does in the rest of the budget, ``(d − F − o × n) / c'`` (``c'``: :attr:`kept_cost`, an
      upper quantile of what recent batches' kept events cost), the rest dropped by utility; ρ
      rises at once and falls by ``damping`` of the way per batch (0 below 0.01).
    * ``expire``: an event older than ``bound − d'`` when its batch starts (``d'``: the larger of the budget
      and the predicted duration of that batch) misses the bound whatever is done: the source may shed it
      whole, unread (:func:`admit_files`).

    When the load fits (``λ (o + c) d + F ≤ d`` with the latency below the target) ρ is 0 and nothing expires.

        >>> b = BacklogController(bound=5.0)
        >>> b.on_batch(duration=12.0, offered=1000, kept=1000, latency=13.0, backlog=0, interval=12.0)  # start-up
        Admission(rho=0.0, admit=None, expire=None)
        >>> b.on_batch(duration=1.0, offered=1000, kept=1000, latency=1.5, backlog=0, interval=1.0)
        Admission(rho=0.0, admit=None, expire=3.0)
    """

    bound: float
    overhead: float = 0.0
    safety: float = 0.8
    max_rho: float = 0.99
    memory: int = 8
    damping: float = 0.5
    #: the upper quantile of the recent batches' cost per kept event that the plan uses (:attr:`kept_cost`)
    quantile: float = 0.9
    rho: float = 0.0
    #: per batch with events: (latency p99, backlog, rho for the next batch, admit)
    history: list[tuple[float, int, float, int | None]] = field(default_factory=list)
    #: the last ``memory`` batches with events: (interval, duration, offered, kept, arrived)
    _window: list[tuple[float, float, int, int, int]] = field(default_factory=list)
    _backlog: int = 0
    #: batches after which even dropping everything read could not fit the next batch in its budget (the
    #: fixed cost and reading alone exceed it: the bound cannot be kept by shedding), and the largest such
    #: floor ``F + o × n`` (s)
    over_budget: int = 0
    floor: float = 0.0
    #: the last margin for the spread of measured durations over the fitted cost (:func:`cost_spread`)
    spread: float = 0.0
    _warm: bool = False
    _fit: tuple[float, float, float] | None = None
    _reads: list[float] = field(default_factory=list)

    @property
    def target(self) -> float:
        return self.safety * self.bound

    @property
    def cost(self) -> tuple[float, float, float]:
        """The last fitted ``(F, o, c)`` (seconds; before any batch: ``(0, overhead, 0)``)."""
        return self._fit or (0.0, self.overhead, 0.0)

    @property
    def fitted(self) -> tuple[float, float, float] | None:
        """The last fitted ``(F, o, c)`` (seconds), None before a batch was measured."""
        return self._fit

    def on_batch(self, *, duration: float, offered: int, kept: int, latency: float | None, backlog: int,
                 interval: float, expired: int = 0) -> Admission:
        """The decision for the next batch after one that took ``duration`` s, ``interval`` s after the
        previous batch started (its duration plus the gap before it), read ``offered`` events and kept
        ``kept``, with p99 arrival-to-result ``latency`` (s; None if unknown) and ``backlog`` events left;
        ``expired``: events shed whole, unread, since the previous batch."""
        arrived = max(offered + backlog + expired - self._backlog, 0)
        self._backlog = backlog
        if offered == 0 and backlog == 0:
            return self._decide(self.rho, None, self._budget(None), 0.0)
        if not self._warm:  # Spark's start-up: not a measure of the cost or of the latency
            self._warm = True
            self.history.append((latency if latency is not None else float("nan"), backlog, self.rho, None))
            return Admission(self.rho, None, None)
        if self._fit is None:  # the first batch measured: its interval began with the start-up batch
            interval = duration
        _push(self._window, (max(interval, duration, 1e-3), max(duration, 1e-3), offered, kept, arrived),
              self.memory)
        fixed, read, _ = self.cost
        w = self._window
        self._fit = fit_batch_cost([x[2] for x in w], [x[3] for x in w], [x[1] for x in w], read,
                                   fixed if self._fit else None)
        fixed, read, _ = self._fit
        per_kept = self.kept_cost
        rate = sum(w[4] for w in self._window) / sum(w[0] for w in self._window)
        # the plan for the next batch leaves room for the largest overrun of a measured batch over the plan's
        # own cost (the kept events at the upper quantile of their cost)
        self.spread = cost_spread([x[1] for x in w], [fixed + read * x[2] + per_kept * x[3] for x in w])
        full = self._budget(latency)
        # the events kept are planned with that room; what is read is not (a smaller admission would shed
        # whole files, unread, instead of the least useful events)
        budget = full / (1 + self.spread)
        # the admission bound follows the median read cost fitted over the last batches: a fit that puts the
        # cost of reading on the events kept for one batch (ρ steady: the two terms cannot be told apart) must
        # not lift the bound, or the next batch reads the whole backlog at once
        _push(self._reads, read, self.memory)
        reading = float(np.median(self._reads))
        admit = int(max((full - fixed) / (2 * reading), 1)) if reading > 0 else None
        coming = backlog + rate * self._gap()  # the backlog is what arrived until this batch's end
        n = min(coming, admit) if admit is not None else coming
        if n > 0 and fixed + read * n > full:
            self.over_budget += 1
            self.floor = max(self.floor, fixed + read * n)
        if n <= 0:
            wanted = 0.0
        elif per_kept <= 0:
            wanted = 0.0 if fixed + read * n <= budget else self.max_rho
        else:
            wanted = 1.0 - (budget - fixed - read * n) / (per_kept * n)
        wanted = _settle(self.rho, wanted, self.max_rho, self.damping)
        self.rho = wanted
        self.history.append((latency if latency is not None else float("nan"), backlog, wanted, admit))
        return self._decide(wanted, admit, full, fixed + read * n + per_kept * n * (1 - wanted))

    @property
    def kept_cost(self) -> float:
        """The cost (s) the plan gives an event kept: the ``quantile`` of what the events kept by each batch in
        memory cost, ``(duration − F − o × offered) / kept``, and at least the fitted ``c``.  A shedder keeps
        the events it values, and gSPICE values the events that build matches, which cost the operator the
        most: as ρ rises the kept events cost more than the fit's average over batches at other ratios, and
        a plan at the average overruns (issue 17: 599 µs per kept event for gSPICE-H against 429 µs for
        random)."""
        fixed, read, per_kept = self.cost
        # batches that kept a few events only (ρ near its maximum) measure their cost by the noise of the rest
        costs = [(d - fixed - read * n) / k for _, d, n, k, _ in self._window if k > 0 and k >= 0.05 * n]
        if not costs:
            return per_kept
        return max(per_kept, float(np.quantile(costs, self.quantile)))

    def _gap(self) -> float:
        """The mean time between a batch's end and the next one's start (s)."""
        if not self._window:
            return 0.0
        return max(sum(w[0] - w[1] for w in self._window) / len(self._window), 0.0)

    def _budget(self, latency: float | None) -> float:
        budget = max((self.target - self._gap()) / 2, 1e-3)
        if latency is not None and latency > self.target:
            budget *= self.target / latency
        return budget

    def _decide(self, rho: float, admit: int | None, budget: float, predicted: float) -> Admission:
        return Admission(rho, admit, max(self.bound - max(budget, predicted, 0.0), 0.0))


def admit_files(pending: list[tuple[str, float]], now: float, admission: Admission | None,
                per_file: float) -> tuple[list[str], list[str]]:
    """What the source of a followed directory does with its waiting files when the next micro-batch may get
    some, from the controller's last :class:`Admission`: ``(admit, expire)``, the files to hand to the stream
    (oldest first: as many as ``admission.admit`` events allow at ``per_file`` events per file, at least one)
    and the files older than ``admission.expire`` at ``now``, which can no longer make the bound and are shed
    whole.  ``pending``: ``(name, arrival)`` (seconds), oldest first; no decision yet (None): every file is
    admitted.  The newest file is never shed this way: a micro-batch must run for the controller to see the
    load again (after one long batch its expiry age can be 0, and shedding everything would stop the run).

        >>> waiting = [("f1", 0.0), ("f2", 8.0), ("f3", 9.0), ("f4", 9.5)]
        >>> admit_files(waiting, 10.0, Admission(rho=0.5, admit=2500, expire=4.0), per_file=1000)
        (['f2', 'f3'], ['f1'])
        >>> admit_files(waiting, 10.0, Admission(rho=0.9, admit=None, expire=0.0), per_file=1000)
        (['f4'], ['f1', 'f2', 'f3'])
    """
    if admission is None:
        return [name for name, _ in pending], []
    expire = [name for name, arrived in pending[:-1]
              if admission.expire is not None and now - arrived > admission.expire]
    gone = set(expire)
    waiting = [name for name, _ in pending if name not in gone]
    if admission.admit is None or per_file <= 0:
        return waiting, expire
    return waiting[:max(int(admission.admit // per_file), 1)], expire
