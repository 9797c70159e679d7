"""The limits of query text (docs/language.md, "Limits"), and the deep stack that makes them safe.

The LALR parser is iterative, but the passes after it (the Transformer's AST, the analysis, the optimizer, the
printer, code generation, sqlglot and the engines' expression compiler) walk the tree recursively.  So that
any query within the limits compiles, :func:`deep` runs a pass in a thread with a large stack and a raised
recursion limit; a query over the limits is refused right after parsing with a positioned error naming the
limit, never a ``RecursionError``.

Example::

    >>> deep(lambda: sum(range(10)))
    45
"""

from __future__ import annotations

import functools
import math
import sys
import threading
from dataclasses import fields, is_dataclass

from sparkcep.ir.ast import UNITS_MS, Duration
from sparkcep.ir.errors import CEPSyntaxError, Span

#: The deepest nesting of a query's tree: each SEQ(...), negation, Kleene group, operator (AND, OR, NOT,
#: comparison, + - * / %, unary minus) and function call is one level; parentheses alone are not.
MAX_DEPTH = 2000
#: The longest integer literal, in digits (Python's int/str conversion limit is 4,300).
MAX_INT_DIGITS = 4300
#: Python frames per level of tree, with room to spare: the deepest pass (sqlglot's SQL generator and parser)
#: takes up to ~10 per level.
_FRAMES_PER_LEVEL = 25
_RECURSION_LIMIT = MAX_DEPTH * _FRAMES_PER_LEVEL + 10_000
#: Bytes of thread stack: generous, as frames that go through C (generators, ``map``, dataclass ``replace``)
#: use the C stack; it is reserved address space, only touched pages take memory.
_STACK_BYTES = 256 * 1024 * 1024

_local = threading.local()


def raise_recursion_limit() -> None:
    """Raise the interpreter's recursion limit (process-wide) to what :data:`MAX_DEPTH` needs; never lowers
    it.  Enough on its own for pure Python recursion (Python 3.11+ does not use the C stack for it)."""
    if sys.getrecursionlimit() < _RECURSION_LIMIT:
        sys.setrecursionlimit(_RECURSION_LIMIT)


def deep(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` on a thread with a large stack and a raised recursion limit (directly when
    already on one); its result or exception is passed through."""
    if getattr(_local, "deep", False):
        return fn(*args, **kwargs)
    raise_recursion_limit()
    box: dict = {}

    def target():
        _local.deep = True
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = err

    old = threading.stack_size()
    try:
        threading.stack_size(_STACK_BYTES)
    except (ValueError, RuntimeError):  # a platform that cannot size thread stacks: the raised limit only
        return fn(*args, **kwargs)
    try:
        # a daemon: Ctrl-C in the caller's thread ends the process instead of waiting for the pass
        thread = threading.Thread(target=target, name="sparkcep-deep", daemon=True)
        thread.start()
    finally:
        threading.stack_size(old)
    thread.join()
    if "error" in box:
        raise box["error"].with_traceback(box["error"].__traceback__)
    return box.get("result")


def deeply(fn):
    """Decorator: run ``fn`` with :func:`deep`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return deep(fn, *args, **kwargs)

    return wrapper


def check_depth(tree, source: str | None) -> None:
    """Refuse a tree (a Workload, Query or any AST node) nested deeper than :data:`MAX_DEPTH`, at the first
    node too deep.  Iterative: it never recurses itself."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (tuple, list)):
            stack.extend((n, depth) for n in node)
            continue
        if not is_dataclass(node) or isinstance(node, (type, Span)):
            continue
        if depth > MAX_DEPTH:
            raise CEPSyntaxError(f"the query is nested too deeply: more than {MAX_DEPTH:,} levels (the limit; "
                                 "see docs/language.md, Limits)", getattr(node, "span", None), source)
        for f in fields(node):
            if f.name != "span":
                stack.append((getattr(node, f.name), depth + 1))


def check_duration(d: Duration, source: str | None = None) -> Duration:
    """``d``, or a positioned error if it is too long to hold: the engines and the generated jobs carry a duration
    (WITHIN, SLIDE, a shedding latency bound) as a double in the units of ts, nanoseconds at the finest, so its
    length in nanoseconds (a bare duration: its value) must be a finite double."""
    if not finite(d.value * (1 if d.unit is None else UNITS_MS[d.unit] * 10**6)):
        length = "its value" if d.unit is None else "its length in nanoseconds"
        raise CEPSyntaxError(f"the duration is too large: {length} is not a finite double (up to about 1.8e308; "
                             "see docs/language.md, Limits)", d.span, source)
    return d


def finite(value: int | float) -> bool:
    """Whether ``value`` is a finite double, or an int that converts to one (a query's number, a duration's
    length: the engines and the generated jobs carry them as doubles)."""
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large to convert to float
        return False
