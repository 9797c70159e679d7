"""Numeric ts as Spark event time, exactly (pure: no pyspark).

A stream's watermark, its allowed lateness and its event-time timeouts run on a Spark ``TIMESTAMP`` column
(microseconds since the epoch, 64 bits; the watermark is read back in whole milliseconds).  Numeric ts ``t``
becomes the event time ``t × unit + EVENT_TIME_OFFSET`` where ``unit`` is the length of one ts unit:

* a declared unit (``ts_unit``: ns, us, ms, s, min, h, d): its length, so that epoch nanoseconds (~1.7e18),
  microseconds, milliseconds and seconds all land in Spark's range (a ts in ns is floored to the microsecond);
* no declared unit: 1 ts unit is 1 ms, as ever (ts up to :attr:`EventTimeScale.limit`, ~9.2e15; beyond it a
  stream's records are dead letters whose reason says to declare the unit).

The operator reads the watermark back in ts units rounded down and sets its timeouts rounded up, so that
rounding where a unit is finer than Spark's millisecond watermark only ever makes the watermark a little
older: an event is never called late unless it is older than the newest seen minus the allowed lateness
(LANGUAGE.md §1), and a timeout never fires before the watermark in ts units reaches its time.

    >>> ns = EventTimeScale.of("ns")
    >>> ns.watermark_ts(EVENT_TIME_OFFSET + 1_700_000_000_123)  # a watermark in ms, read in ns
    1700000000123000000
    >>> ns.timeout_ms(1_700_000_000_123_000_001) - EVENT_TIME_OFFSET  # due 1 ns after a ms: the next ms
    1700000000124
    >>> ns.delay_ms(500), EventTimeScale.of("s").delay_ms(1.5), EventTimeScale.of(None).delay_ms(3)
    (1, 1500, 3)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from sparkcep.ir.ast import TS_UNITS_NS

#: Numeric ts ``t`` is event time ``t × unit + EVENT_TIME_OFFSET`` ms: Spark's watermark starts at 0 and drops
#: rows at or before it as late, which would lose every event with ``ts <= 0`` (ts counted from 0 is common).
EVENT_TIME_OFFSET = 10**12
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class EventTimeScale:
    """One ts unit is ``ns`` nanoseconds of event time (undeclared: 1 ms)."""

    ns: int
    declared: bool

    @classmethod
    def of(cls, ts_unit: str | None) -> EventTimeScale:
        return cls(TS_UNITS_NS[ts_unit], True) if ts_unit else cls(TS_UNITS_NS["ms"], False)

    @property
    def micros(self) -> tuple[int, int]:
        """``(num, den)``: one ts unit is ``num / den`` microseconds, in lowest terms."""
        g = math.gcd(self.ns, 1000)
        return self.ns // g, 1000 // g

    @property
    def limit(self) -> int:
        """The largest ``|ts|`` whose event time (microseconds, offset included) fits in 64 bits."""
        num, den = self.micros
        return (_LONG_MAX - EVENT_TIME_OFFSET * 1000) * den // num

    def watermark_ts(self, raw_ms: int) -> int | float:
        """Spark's watermark (ms, offset included) in ts units, rounded down (exact where it is whole)."""
        exact = Fraction((raw_ms - EVENT_TIME_OFFSET) * 10**6, self.ns)
        if exact.denominator == 1:
            return int(exact)
        x = float(exact)
        return x if Fraction(x) <= exact else math.nextafter(x, -math.inf)

    def timeout_ms(self, due: float) -> int:
        """The first watermark (ms, offset included) at which the watermark in ts units has reached ``due``."""
        return math.ceil(Fraction(due) * self.ns / 10**6) + EVENT_TIME_OFFSET

    def event_ms(self, ts: float) -> int:
        """Spark's event time of numeric ts in whole ms (offset included), as its watermark reads it: the
        microseconds ``sparkcep.spark.adapters.event_time_of`` computes (exactly for whole ts, in floating
        point for fractional ones, as Spark does), divided by 1000 as Spark's watermark statistics do."""
        num, den = self.micros
        micros = ts * num // den if isinstance(ts, int) else math.floor(ts * num / den)
        return (micros + EVENT_TIME_OFFSET * 1000) // 1000

    def delay_ms(self, lateness: float) -> int:
        """Spark's watermark delay (whole ms) for an allowed lateness in ts units, rounded up."""
        return math.ceil(Fraction(lateness) * self.ns / 10**6)
