"""A guard on match explosion: a budget on the matches (and partial matches) one partition may hold.

Under ``skip_till_any_match`` a Kleene variable has up to 2^n matches over n candidate events in a window
(``SEQ(A+ a[], B b)`` over 28 A's and a B: 268M rows); enumerating them runs a Python worker out of memory
with no message.  The match engines (:mod:`match_ais`, :mod:`match_runs`, :mod:`match_columnar`) count the
matches they build, and the partial matches they keep (the runs of :mod:`match_runs`; the active instance
stacks and the buffered events grow only with the input), against a :class:`Budget` handed to them by the
caller, and stop with :class:`MatchBudgetError` as soon as the count *exceeds* the limit: before the rows
are kept, not after.

The Spark adapters (``MatchOperator``) give one budget per Spark partition of a batch (every key of the
partition together) and per group and micro-batch of a stream; its limit is ``max_matches`` (``sparkcep run
--max-matches N``, ``sparkcep.compile(..., match_budget=N)``), else :func:`default_max_matches`: a quarter of
the memory one task may use, over an estimate of the bytes a result row costs.

Example::

    >>> b = Budget(2)
    >>> b.charge(2)
    >>> try:
    ...     b.charge(1)
    ... except MatchBudgetError as err:
    ...     print(err.message[:59])
    match budget exceeded: more than 2 matches in one partition
"""

from __future__ import annotations

import os
import re

from sparkcep.ir.errors import CEPError

__all__ = ["BYTES_PER_COLUMN", "BYTES_PER_ROW", "MEMORY_SHARE", "Budget", "MatchBudgetError", "available_memory",
           "budget_message", "default_max_matches", "raised_message", "resolve_max_matches"]

#: Estimated bytes of one result row while a partition's rows are held (a Python dict per row, then its
#: pandas/Arrow copy): a fixed part plus one per output column.
BYTES_PER_ROW = 400
BYTES_PER_COLUMN = 120
#: The share of one task's memory the held result rows may take by default.
MEMORY_SHARE = 0.25
#: Bounds of the default (whatever the memory reads): at least this many rows, at most that many.
DEFAULT_MIN, DEFAULT_MAX = 100_000, 50_000_000


class MatchBudgetError(CEPError):
    """A match query built more matches (or kept more partial matches) in one partition than its budget."""


def budget_message(limit: int, what: str = "matches") -> str:
    """The one-line message of an exceeded budget (``what``: ``matches`` or ``partial matches``)."""
    return (f"match budget exceeded: more than {limit:,} {what} in one partition (--max-matches / "
            f"match_budget={limit}). A Kleene variable under skip_till_any_match can produce 2^n matches over n "
            "events in a window; use collapsed output (run --collapsed, compile(..., collapsed=True)) or a trend "
            "aggregate (RETURN COUNT(*) ...), or raise the budget")


class Budget:
    """The matches one partition may still produce: ``limit`` (None: no limit) and ``used`` so far; shared by
    the engine calls of one partition (the keys of a batch partition, one group's micro-batch)."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int | None):
        if limit is not None and limit < 0:
            raise CEPError(f"the match budget must be a positive number, got {limit}")
        self.limit, self.used = limit, 0

    def room(self) -> int | None:
        """How many more matches fit (None: no limit)."""
        return None if self.limit is None else self.limit - self.used

    def charge(self, n: int) -> None:
        """Count ``n`` more matches; raise :class:`MatchBudgetError` once the count exceeds the limit."""
        self.used += n
        if self.limit is not None and self.used > self.limit:
            raise MatchBudgetError(budget_message(self.limit))

    def check_partial(self, n: int) -> None:
        """Raise :class:`MatchBudgetError` if ``n`` partial matches held at once exceed the limit."""
        if self.limit is not None and n > self.limit:
            raise MatchBudgetError(budget_message(self.limit, "partial matches"))


def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
    return None


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_memory() -> int | None:
    """Bytes one task's Python worker may use: ``spark.executor.pyspark.memory`` when Spark sets it for the
    worker (``PYSPARK_EXECUTOR_MEMORY_MB``), else the machine's (or container's) available memory shared by
    its cores (one task per core); None if nothing can be read."""
    mb = os.environ.get("PYSPARK_EXECUTOR_MEMORY_MB")
    if mb and mb.isdigit():
        return int(mb) << 20
    readings = [m for m in (_cgroup_limit(), _meminfo_available()) if m]
    if not readings:
        return None
    return min(readings) // max(1, os.cpu_count() or 1)


def default_max_matches(columns: int, memory: int | None = None) -> int:
    """The default budget for result rows of ``columns`` columns: :data:`MEMORY_SHARE` of ``memory`` (default:
    :func:`available_memory`) over ``BYTES_PER_ROW + columns * BYTES_PER_COLUMN``, within
    ``[DEFAULT_MIN, DEFAULT_MAX]`` (a 1 GB worker and 8 columns: about 190,000 rows).

    >>> default_max_matches(8, memory=1 << 30)
    197379
    """
    memory = available_memory() if memory is None else memory
    if memory is None:
        return DEFAULT_MIN * 10
    per_row = BYTES_PER_ROW + max(1, columns) * BYTES_PER_COLUMN
    return int(min(DEFAULT_MAX, max(DEFAULT_MIN, memory * MEMORY_SHARE // per_row)))


def resolve_max_matches(max_matches: int | None, columns: int) -> int | None:
    """The limit a partition runs with: ``max_matches`` as given (0: no limit), else the default."""
    if max_matches is None:
        return default_max_matches(columns)
    if max_matches < 0:
        raise CEPError(f"--max-matches must be 0 (no limit) or a positive number, got {max_matches}")
    return max_matches or None


_RAISED = re.compile(r"MatchBudgetError: (match budget exceeded: [^\n]*)")


def raised_message(error: BaseException | str) -> str | None:
    """The message of a :class:`MatchBudgetError` raised inside a Spark task, found in the text of the error
    the driver gets (a ``PythonException``, ``Py4JJavaError`` or ``StreamingQueryException`` carrying the
    worker's traceback), or None if ``error`` is not one."""
    if isinstance(error, MatchBudgetError):
        return error.message
    texts = [error] if isinstance(error, str) else [str(error), *(str(a) for a in getattr(error, "args", ()))]
    for attr in ("desc", "stackTrace", "java_exception"):
        value = getattr(error, attr, None)
        if value is not None:
            texts.append(str(value))
    for text in texts:
        m = _RAISED.search(text)
        if m:
            return m.group(1).strip()
    return None
