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
