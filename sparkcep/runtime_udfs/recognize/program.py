"""The row pattern of a MATCH_RECOGNIZE compiled into a program for a prioritized NFA (a Pike VM).

Instructions (``(op, a, b)`` tuples):

* ``CHAR v``: label the next row with variable ``v`` if its DEFINE holds (``b`` = 1: the row is inside
  ``{- -}``, part of the match but not output by ALL ROWS PER MATCH);
* ``SPLIT x, y``: go on at ``x`` and at ``y``, ``x`` preferred;
* ``JMP x``; ``MATCH``; ``ANCHOR ^`` (only before the partition's first row), ``ANCHOR $`` (only after its
  last row);
* ``ITER k`` / ``ITER_END k``: the bounds of an iteration of a quantified sub-pattern beyond its minimum; a
  thread that reaches ``ITER_END k`` without having consumed a row since ``ITER k`` dies (an empty iteration
  beyond the minimum is not allowed; iterations up to the minimum may be empty).

Bounded quantifiers are unrolled (``X{2,4}`` is ``X X (X X?)?``), ``PERMUTE`` expanded into the alternation of
its orders (lexicographic in its list), a reluctant quantifier is a ``SPLIT`` preferring the exit.  A program
longer than :data:`MAX_INSTRUCTIONS` is refused with a :class:`ProgramTooLarge` (a ``ValueError``).

Example::

    >>> from sparkcep.ir import recognize as R
    >>> prog = compile_pattern(R.PConcat((R.PVar("A"), R.PQuant(R.PVar("B"), 1, None))), ("A", "B"))
    >>> print("\\n".join(prog.describe()))
    0: CHAR A
    1: CHAR B
    2: SPLIT 3, 7
    3: ITER 0
    4: CHAR B
    5: ITER_END 0
    6: JMP 2
    7: MATCH
"""

from __future__ import annotations

from itertools import permutations

from sparkcep.ir import recognize as R

__all__ = ["BOL", "CHAR", "EOL", "ITER", "ITER_END", "JMP", "MATCH", "MAX_INSTRUCTIONS", "SPLIT", "Program",
           "ProgramTooLarge", "compile_pattern"]

CHAR, SPLIT, JMP, MATCH, BOL, EOL, ITER, ITER_END = range(8)
_NAMES = {CHAR: "CHAR", SPLIT: "SPLIT", JMP: "JMP", MATCH: "MATCH", BOL: "ANCHOR ^", EOL: "ANCHOR $",
          ITER: "ITER", ITER_END: "ITER_END"}

#: The most instructions a compiled row pattern may have (bounded quantifiers and PERMUTE are unrolled).
MAX_INSTRUCTIONS = 10_000


class ProgramTooLarge(ValueError):
    """The row pattern compiles to more than :data:`MAX_INSTRUCTIONS` instructions."""


class Program:
    """The instructions, the variables (``CHAR``'s operand indexes them), and the epsilon closures.

    ``closure(pc, bol, eol)`` is the tuple of *leaves* reachable from ``pc`` without consuming a row, in
    preferment order: the pc of a ``CHAR`` or of ``MATCH``, or a negative number for a thread waiting at
    ``ANCHOR $`` for the partition's end (``resume(leaf)`` goes on from there once the end is known).  Those
    numbers are given in the order closures are first computed, which is the same in every process (the
    engine computes the closures after every CHAR when it compiles a spec, then the two at the start), so a
    state saved as JSON means the same threads when loaded elsewhere."""

    def __init__(self, code: list[tuple[int, int, int]], variables: tuple[str, ...]):
        self.code = tuple(code)
        self.variables = variables
        self.match_pc = len(code) - 1
        self._closures: dict[tuple, tuple[int, ...]] = {}
        self._waits: list[tuple[int, frozenset]] = []
        self._wait_ids: dict[tuple[int, frozenset], int] = {}

    def describe(self) -> list[str]:
        out = []
        for pc, (op, a, b) in enumerate(self.code):
            if op == CHAR:
                text = f"CHAR {self.variables[a]}" + (" (excluded)" if b else "")
            elif op == SPLIT:
                text = f"SPLIT {a}, {b}"
            elif op in (JMP, ITER, ITER_END):
                text = f"{_NAMES[op]} {a}"
            else:
                text = _NAMES[op]
            out.append(f"{pc}: {text}")
        return out

    def closure(self, pc: int, bol: bool, eol: bool, begun: frozenset = frozenset()) -> tuple[int, ...]:
        key = (pc, bol, eol, begun)
        got = self._closures.get(key)
        if got is None:
            got = self._closures[key] = self._walk(pc, bol, eol, begun)
        return got

    def resume(self, leaf: int) -> tuple[int, ...]:
        """The leaves after a thread waiting at ``ANCHOR $`` (``leaf`` < 0) once the partition has ended."""
        pc, begun = self._waits[-leaf - 1]
        return self.closure(pc + 1, False, True, begun)

    def _walk(self, pc: int, bol: bool, eol: bool, begun: frozenset) -> tuple[int, ...]:
        code = self.code
        leaves: list[int] = []
        seen: set[int] = set()
        # depth first, preferred branch first; each path carries the ITERs it began since the last row.  Every
        # cycle of the program is a loop's ITER k ... ITER_END k: a path cannot go round it without a row.
        # A (pc, begun) reached again by a less preferred path gives only leaves already listed: not walked
        # again (else `(A?|B?){30}` would walk 2^30 paths)
        stack = [(pc, begun)]
        visited: set[tuple[int, frozenset]] = set()
        while stack:
            pc, begun = stack.pop()
            if (pc, begun) in visited:
                continue
            visited.add((pc, begun))
            op, a, b = code[pc]
            if op == CHAR or op == MATCH:
                if pc not in seen:
                    seen.add(pc)
                    leaves.append(pc)
            elif op == SPLIT:
                stack.append((b, begun))
                stack.append((a, begun))
            elif op == JMP:
                stack.append((a, begun))
            elif op == ITER:
                stack.append((pc + 1, begun | {a}))
            elif op == ITER_END:
                if a not in begun:  # the iteration consumed a row
                    stack.append((pc + 1, begun))
            elif op == BOL:
                if bol:
                    stack.append((pc + 1, begun))
            elif op == EOL:
                if eol:
                    stack.append((pc + 1, begun))
                else:
                    key = (pc, begun)
                    wid = self._wait_ids.get(key)
                    if wid is None:
                        wid = self._wait_ids[key] = len(self._waits)
                        self._waits.append(key)
                    leaf = -wid - 1
                    if leaf not in seen:
                        seen.add(leaf)
                        leaves.append(leaf)
        return tuple(leaves)


class _Compiler:
    def __init__(self, variables: tuple[str, ...]):
        self.var_index = {v: i for i, v in enumerate(variables)}
        self.code: list[list[int]] = []
        self.iters = 0

    def emit(self, op: int, a: int = 0, b: int = 0) -> int:
        if len(self.code) >= MAX_INSTRUCTIONS:
            raise ProgramTooLarge(
                f"the row pattern compiles to more than {MAX_INSTRUCTIONS:,} instructions (bounded quantifiers "
                "and PERMUTE are unrolled): use smaller bounds or fewer PERMUTE items")
        self.code.append([op, a, b])
        return len(self.code) - 1

    def pattern(self, p, excluded: bool) -> None:
        if isinstance(p, R.PVar):
            if p.name not in self.var_index:
                raise ValueError(f"the row pattern variable {p.name} is not in the spec's variables")
            self.emit(CHAR, self.var_index[p.name], int(excluded))
        elif isinstance(p, R.PConcat):
            for item in p.items:
                self.pattern(item, excluded)
        elif isinstance(p, R.PAlt):
            self.alternation([lambda alt=alt: self.pattern(alt, excluded) for alt in p.alternatives])
        elif isinstance(p, R.PPermute):
            orders = list(permutations(range(len(p.items))))
            if len(orders) > MAX_INSTRUCTIONS:
                self.emit(MATCH)  # fail the same way as a long program
                raise ProgramTooLarge(f"PERMUTE of {len(p.items)} items has {len(orders):,} orders: too many")

            def one(order):
                for k in order:
                    self.pattern(p.items[k], excluded)

            self.alternation([lambda order=order: one(order) for order in orders])
        elif isinstance(p, R.PQuant):
            self.quantifier(p, excluded)
        elif isinstance(p, R.PExclude):
            self.pattern(p.inner, True)
        elif isinstance(p, R.PAnchor):
            self.emit(BOL if p.kind == "start" else EOL)
        elif isinstance(p, R.PEmpty):
            pass
        else:
            raise ValueError(f"unknown row pattern node {type(p).__name__}")

    def alternation(self, branches) -> None:
        jumps = []
        for k, branch in enumerate(branches):
            if k < len(branches) - 1:
                split = self.emit(SPLIT)
                self.code[split][1] = len(self.code)
                branch()
                jumps.append(self.emit(JMP))
                self.code[split][2] = len(self.code)
            else:
                branch()
        for j in jumps:
            self.code[j][1] = len(self.code)

    def quantifier(self, q: R.PQuant, excluded: bool) -> None:
        for _ in range(q.min):
            self.pattern(q.inner, excluded)
        if q.max is None:
            top = self.emit(SPLIT)
            k = self.iters
            self.iters += 1
            self.emit(ITER, k)
            self.pattern(q.inner, excluded)
            self.emit(ITER_END, k)
            self.emit(JMP, top)
            self._branch(top, top + 1, len(self.code), q.greedy)
            return
        splits = []
        for _ in range(q.max - q.min):
            split = self.emit(SPLIT)
            splits.append(split)
            k = self.iters
            self.iters += 1
            self.emit(ITER, k)
            self.pattern(q.inner, excluded)
            self.emit(ITER_END, k)
        for split in splits:
            self._branch(split, split + 1, len(self.code), q.greedy)

    def _branch(self, split: int, body: int, exit_: int, greedy: bool) -> None:
        self.code[split][1:] = [body, exit_] if greedy else [exit_, body]


def compile_pattern(pattern, variables: tuple[str, ...]) -> Program:
    """The program of ``pattern`` (variables numbered as in ``variables``), ending with ``MATCH``."""
    c = _Compiler(tuple(variables))
    c.pattern(pattern, False)
    c.emit(MATCH)
    return Program([tuple(i) for i in c.code], tuple(variables))
