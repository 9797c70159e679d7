"""Spark's ``GroupState``, simulated without a JVM: how ``applyInPandasWithState`` with event-time timeouts calls
a stream function (:meth:`~sparkcep.spark.operator.MatchOperator.stream_function`), for tests and benches.

Per micro-batch Spark calls the function once for each group with rows, then once for each other group whose
event-time timeout the watermark has passed (no rows); a group keeps its state (one binary column, as bytes) and
its timeout between calls, and loses both when the function removes the state::

    groups = GroupStates(op.stream_function())
    for frame in groups.micro_batch({key: [pdf]}, watermark_ms):
        ...
    assert not groups  # every group's state dropped

Imports no PySpark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["GroupStates", "SimulatedGroup"]


class SimulatedGroup:
    """One group's ``GroupState`` as a stream function uses it: the stored state (bytes, or None), the
    watermark of the micro-batch (ms) and the timeout the function set (ms, or None).  ``update`` keeps the
    state as bytes, as Spark's state store does; ``setTimeoutTimestamp`` refuses a timeout before the watermark,
    as PySpark does."""

    def __init__(self, stored: bytes | None = None, watermark_ms: int = 0):
        self.stored, self.watermark_ms, self.timeout = stored, watermark_ms, None

    @property
    def exists(self) -> bool:
        return self.stored is not None

    @property
    def get(self) -> tuple:
        return (self.stored,)

    def update(self, row) -> None:
        self.stored = bytes(row[0])

    def remove(self) -> None:
        self.stored = None

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 - Spark's name
        return self.watermark_ms

    def setTimeoutTimestamp(self, ms: int) -> None:  # noqa: N802 - Spark's name
        if ms <= 0 or ms < self.watermark_ms:
            raise ValueError(f"timeout timestamp {ms} is before the current watermark {self.watermark_ms}")
        self.timeout = ms


class GroupStates:
    """The groups of one stateful operator across micro-batches: group → ``(stored state, timeout)``, driving
    ``fn(key, pdfs, group)`` as Spark does (:meth:`micro_batch`).  False when no group holds state."""

    def __init__(self, fn: Callable[[Any, Iterator, SimulatedGroup], Iterator]):
        self.fn = fn
        self.groups: dict[Any, tuple[bytes, int | None]] = {}

    def __bool__(self) -> bool:
        return bool(self.groups)

    def __len__(self) -> int:
        return len(self.groups)

    def micro_batch(self, pdfs: dict[Any, list], watermark_ms: int) -> Iterator:
        """The output frames of one micro-batch: each group of ``pdfs`` (group → its frames) called with its
        frames, then each other group whose timeout ``watermark_ms`` has passed, without rows."""
        due = [g for g, (_, t) in self.groups.items() if g not in pdfs and t is not None and watermark_ms > t]
        for g in [*pdfs, *due]:
            stored, _ = self.groups.get(g, (None, None))
            group = SimulatedGroup(stored, watermark_ms)
            yield from self.fn(g, iter(pdfs.get(g, [])), group)
            if group.stored is None:
                self.groups.pop(g, None)
            else:
                self.groups[g] = (group.stored, group.timeout)
