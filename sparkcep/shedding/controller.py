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
        self.rho = min(max(rho, 0.0), self.max_rho)
        self.history.append((latency, self.rho))
        return self.rho


@dataclass
class BatchController:
    """The same goal for Spark micro-batches, from a query's progress (``StreamingQueryListener``).

    A batch that started at ``start`` and took ``duration`` seconds holds the events that arrived since the
    previous batch started, so its latency is ``start + duration − previous start``; with batches running
    back to back that is about two batch durations.  The controller therefore aims at batches of ``target /
    2`` seconds (``target`` = ``safety × bound``): the next batch will hold about ``λ × duration`` rows (what
    arrives while this one runs, λ measured over this batch's interval), and the operator processed ``kept /
    duration`` rows per second, so it keeps ``keep = (kept / duration · target / 2) / (λ · duration)`` of them
    (capped at 1: no shedding).  Fixed per-batch costs are ignored, which the next batches correct.
    """

    bound: float
    safety: float = 0.8
    max_rho: float = 0.99
    rho: float = 0.0
    _prev_start: float | None = None
    latencies: list[float] = field(default_factory=list)

    @property
    def target(self) -> float:
        return self.safety * self.bound

    def on_batch(self, start: float, duration: float, offered: int, kept: int) -> float:
        prev = self._prev_start
        self._prev_start = start
        if offered == 0:
            return self.rho
        since = start - prev if prev is not None and start > prev else max(duration, 1e-3)
        self.latencies.append(start + duration - (prev if prev is not None else start))
        duration = max(duration, 1e-3)
        arrival = offered / since
        allowed = kept / duration * (self.target / 2)
        keep = allowed / max(arrival * duration, 1.0)
        self.rho = min(max(1.0 - keep, 0.0), self.max_rho)
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
        self._works.extend(float(w) for w in works)
        del self._works[:-self.spike_memory]

    def update(self, latency: float, arrived: int, kept: int, work: float, interval: float,
               overhead: float = 0.0) -> float:
        """The new ρ after an interval of ``interval`` seconds in which ``arrived`` events came, the shedder
        kept ``kept`` and the operator worked ``work`` seconds (``overhead`` of them deciding what to drop);
        ``latency`` is the latency measured at its end."""
        self._window.append((float(arrived), float(kept), float(work), float(overhead), float(interval)))
        del self._window[:-self.memory]
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
        self.rho = min(max(rho, 0.0), self.max_rho)
        self.history.append((latency, self.rho))
        return self.rho
