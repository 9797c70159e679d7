"""What a parsed ``MATCH_RECOGNIZE`` may not say: :func:`check_recognize` refuses it with the reason and the place.

Refused (each with a :class:`CEPSemanticError` positioned in the statement):

* a function that is neither a row pattern function nor a Spark SQL function (nor, given ``functions``, one
  the session knows), with the closest name (``PREVV`` -> did you mean PREV?);
* a name that is neither a pattern variable nor a SUBSET (in DEFINE, SUBSET, AFTER MATCH SKIP, expressions),
  a variable defined twice, a SUBSET named like a variable or declared twice, a DEFINE of a SUBSET;
* FINAL or MATCH_NUMBER() in DEFINE;
* navigation nested other than FIRST/LAST directly inside PREV/NEXT, a navigation or aggregate argument that
  reads several variables (or none), an aggregate inside an aggregate or a navigation inside an aggregate;
* WITH UNMATCHED ROWS with an exclusion ``{- -}`` (the standard forbids it);
* no ORDER BY; in streaming an ORDER BY whose first item is not ascending, the anchor ``$`` and NEXT (both
  need rows after the current one, which a stream does not have yet);
* a measure named twice or like a partition column; PERMUTE of more than :data:`MAX_PERMUTE` items, a row
  pattern that compiles to more than :data:`MAX_PROGRAM` instructions;
* ``AFTER MATCH SKIP TO FIRST/LAST v`` where every match would resume at its own first row (the standard
  makes that an error; sparkcep refuses it when it follows from the pattern alone, and otherwise resumes at the
  next row).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterator

from sqlglot import exp

from sparkcep.grammar.recognize.expressions import parse_sql, span_of
from sparkcep.grammar.recognize.functions import is_known, suggestion
from sparkcep.ir import recognize as rx
from sparkcep.ir.ast import Attr, BinOp, Func, Literal, Unary
from sparkcep.ir.errors import CEPSemanticError, Span
from sparkcep.ir.limits import deeply

__all__ = ["check_recognize", "pattern_variables", "children", "walk", "MAX_PERMUTE"]

#: The most items of a PERMUTE (n! orders).
MAX_PERMUTE = 6
#: The most instructions of the compiled row pattern (the engine's limit).
MAX_PROGRAM = 10_000


def children(e: object) -> tuple:
    """The sub-expressions of an expression node."""
    if isinstance(e, Unary):
        return (e.operand,)
    if isinstance(e, BinOp):
        return (e.left, e.right)
    if isinstance(e, Func):
        return tuple(e.args)
    if isinstance(e, (rx.Nav, rx.Agg)):
        return () if e.arg is None else (e.arg,)
    return ()


def walk(e: object) -> Iterator[object]:
    """Every node of an expression, pre-order (iterative)."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def pattern_nodes(p: rx.RowPattern) -> Iterator[rx.RowPattern]:
    stack = [p]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, rx.PConcat):
            stack.extend(reversed(node.items))
        elif isinstance(node, rx.PAlt):
            stack.extend(reversed(node.alternatives))
        elif isinstance(node, rx.PPermute):
            stack.extend(reversed(node.items))
        elif isinstance(node, (rx.PQuant, rx.PExclude)):
            stack.append(node.inner)


def pattern_variables(p: rx.RowPattern) -> tuple[str, ...]:
    """The pattern's variables in order of first appearance."""
    seen: dict[str, None] = {}
    for node in pattern_nodes(p):
        if isinstance(node, rx.PVar):
            seen.setdefault(node.name)
    return tuple(seen)


def _reads(e: object) -> set[str | None]:
    """The rows an expression reads: the qualifiers of its column references (None: the universal row)."""
    out: set[str | None] = set()
    for node in walk(e):
        if isinstance(node, (Attr, rx.RowExpr)):
            out.add(node.var)
        elif isinstance(node, rx.Classifier):
            out.add(node.var)
    return out


class _Checker:
    def __init__(self, q: rx.Recognize, streaming: bool, functions: Callable[[str], bool] | None = None):
        self.q, self.streaming, self.text, self.functions = q, streaming, q.text, functions
        self.variables = pattern_variables(q.pattern)
        self.subsets = dict(q.subsets)

    def fail(self, message: str, span: Span | None):
        raise CEPSemanticError(message, span or self._find(r"MATCH_RECOGNIZE"), self.text)

    def _find(self, pattern: str, after: str | None = None, nth: int = 0) -> Span | None:
        return find_span(self.text, pattern, after, nth)

    def _unknown(self, name: str, span: Span | None, what: str = "pattern variable or SUBSET"):
        known = [*self.variables, *self.subsets]
        hint = [k for k in known if k.lower() == name.lower()] or difflib.get_close_matches(name, known, n=1)
        if hint:
            suffix = f", did you mean {hint[0]}? (names are case-sensitive)"
        else:
            suffix = f" (the pattern has {', '.join(self.variables) or 'none'})"
        self.fail(f"unknown {what} {name}{suffix}", span)

    def known(self, name: str) -> bool:
        return name in self.variables or name in self.subsets

    # --- the checks

    def run(self):
        q = self.q
        self.pattern()
        self.subset_clause()
        self.define_clause()
        if q.skip.var is not None and not self.known(q.skip.var):
            self._unknown(q.skip.var, q.skip.span)
        for _var, cond in q.defines:
            self.expression(cond, define=True)
        for m in q.measures:
            self.expression(m.expr, define=False)
        self.measures()
        self.order()
        self.skip()

    def pattern(self):
        for node in pattern_nodes(self.q.pattern):
            if isinstance(node, rx.PPermute) and len(node.items) > MAX_PERMUTE:
                self.fail(f"PERMUTE of {len(node.items)} items ({len(node.items)}! orders) is not supported: at "
                          f"most {MAX_PERMUTE}", node.span)
            if isinstance(node, rx.PExclude) and self.q.rows_per_match == rx.ALL_ROWS_WITH_UNMATCHED:
                self.fail("an exclusion {- -} cannot be used with ALL ROWS PER MATCH WITH UNMATCHED ROWS (the "
                          "standard forbids it: excluded rows would come out as unmatched)", node.span)
            if isinstance(node, rx.PAnchor) and node.kind == "end" and self.streaming:
                self.fail("the anchor $ (the end of the partition) is not supported in streaming: a stream's "
                          "partition has no end", node.span)

        size = program_size(self.q.pattern)
        if size > MAX_PROGRAM:
            self.fail(f"the row pattern compiles to {size:,} instructions, more than {MAX_PROGRAM:,} (bounded "
                      "quantifiers and PERMUTE are unrolled): use smaller bounds or fewer PERMUTE items",
                      self.q.pattern.span)

    def subset_clause(self):
        seen: set[str] = set()
        for name, members in self.q.subsets:
            span = self._find(rf"\b{re.escape(name)}\s*=", r"\bSUBSET\b", 1 if name in seen else 0)
            if name in seen:
                self.fail(f"SUBSET {name} is declared twice", span)
            seen.add(name)
            if name in self.variables:
                self.fail(f"SUBSET {name} has the name of a pattern variable", span)
            for member in members:
                if member not in self.variables:
                    where = rf"\bSUBSET\b.*?\b{re.escape(name)}\b"
                    self._unknown(member, self._find(rf"\b{re.escape(member)}\b", where), "pattern variable")

    def define_clause(self):
        seen: set[str] = set()
        for name, _cond in self.q.defines:
            nth = 1 if name in seen else 0
            span = self._find(rf"\b{re.escape(name)}\s+AS\b", r"\bDEFINE\b", nth)
            if name in seen:
                self.fail(f"the variable {name} is defined twice", span)
            seen.add(name)
            if name in self.subsets:
                self.fail(f"{name} is a SUBSET: DEFINE defines pattern variables only", span)
            if name not in self.variables:
                self._unknown(name, span, "pattern variable")

    def expression(self, e: object, *, define: bool):
        where = "DEFINE" if define else "MEASURES"
        for node in walk(e):
            if isinstance(node, (Attr, rx.RowExpr)) and node.var is not None and not self.known(node.var):
                self._unknown(node.var, node.span)
            if isinstance(node, (rx.Classifier, rx.Agg)) and node.var is not None and not self.known(node.var):
                self._unknown(node.var, node.span)
            if isinstance(node, (rx.Nav, rx.Agg, rx.Classifier)) and define and node.semantics == "FINAL":
                self.fail("FINAL is not allowed in DEFINE: conditions are evaluated while matching (RUNNING)",
                          node.span)
            if isinstance(node, rx.MatchNumber) and define:
                self.fail("MATCH_NUMBER() is not allowed in DEFINE", node.span)
            if isinstance(node, rx.RowExpr):
                self.row_functions(node)
            if isinstance(node, rx.Nav):
                self.navigation(node, where)
            if isinstance(node, rx.Agg):
                self.aggregate(node)
            if isinstance(node, Func) and node.name not in ("abs", "coalesce", "greatest", "least", "if"):
                self.fail(f"the function {node.name}() is not supported here", node.span)
            if isinstance(node, Literal) and isinstance(node.value, float) and node.value != node.value:
                self.fail("NaN literal is not supported", node.span)

    def row_functions(self, r: rx.RowExpr):
        """Every function a per-row expression calls is Spark's (or the session's, when ``functions`` says)."""
        (tree,) = parse_sql(r.sql)
        for call in tree.find_all(exp.Anonymous):
            name = call.name
            if is_known(name) or (self.functions is not None and self.functions(name)):
                continue
            span = r.span
            if span is not None and self.text:
                inside = re.compile(rf"(?<![\w`]){re.escape(name)}\s*\(", re.IGNORECASE).search(
                    self.text, span.start, span.end)
                if inside is not None:  # shown as written (sqlglot upper-cases the names it does not know)
                    name = self.text[inside.start():inside.start() + len(name)]
                    span = span_of(self.text, inside.start(), inside.start() + len(name))
            hint = suggestion(name)
            self.fail(f"unknown function {name}(): neither a row pattern function nor a Spark SQL function"
                      + (f", did you mean {hint}?" if hint else ""), span)

    def navigation(self, nav: rx.Nav, where: str):
        if nav.kind == "NEXT" and self.streaming:
            self.fail("NEXT is not supported in streaming: it reads a row that has not arrived yet", nav.span)
        inner = [n for n in walk(nav.arg) if isinstance(n, rx.Nav)]
        if inner:
            if nav.kind in ("FIRST", "LAST"):
                self.fail(f"{nav.kind} cannot contain another navigation (only FIRST/LAST inside PREV/NEXT)",
                          inner[0].span)
            if not (isinstance(nav.arg, rx.Nav) and nav.arg.kind in ("FIRST", "LAST")):
                self.fail(f"{nav.kind} may contain a navigation only as its whole argument, and only FIRST or "
                          f"LAST: {nav.kind}(LAST(A.x, 1), 2)", inner[0].span)
            return
        for node in walk(nav.arg):
            if isinstance(node, (rx.Agg, rx.MatchNumber)):
                what = "an aggregate" if isinstance(node, rx.Agg) else "MATCH_NUMBER()"
                self.fail(f"{nav.kind} cannot contain {what}", node.span)
        reads = _reads(nav.arg)
        if not reads and not any(isinstance(n, rx.Classifier) for n in walk(nav.arg)):
            self.fail(f"{nav.kind} needs a column reference in its argument", nav.span)
        if len(reads) > 1:
            self.fail(f"the argument of {nav.kind} reads several rows ({_names(reads)}): all its column references "
                      "must name the same variable", nav.span)

    def aggregate(self, agg: rx.Agg):
        if agg.arg is None:
            return
        for node in walk(agg.arg):
            if isinstance(node, rx.Agg):
                self.fail("an aggregate cannot contain another aggregate", node.span)
            if isinstance(node, rx.Nav):
                self.fail("a navigation (PREV, NEXT, FIRST, LAST) inside an aggregate is not supported", node.span)
            if isinstance(node, rx.MatchNumber):
                self.fail("MATCH_NUMBER() inside an aggregate is not supported", node.span)
        reads = _reads(agg.arg)
        if len(reads) > 1:
            self.fail(f"the argument of {agg.func.upper()} reads several variables ({_names(reads)}): all its "
                      "column references must name the same variable", agg.span)
        if reads and next(iter(reads)) != agg.var:
            self.fail(f"the argument of {agg.func.upper()} reads {_names(reads)}, not {agg.var or 'every row'}",
                      agg.span)

    def measures(self):
        partition = {c.lower() for c in self.q.partition_by}
        seen: set[str] = set()
        for m in self.q.measures:
            low = m.name.lower()
            if low in seen:
                self.fail(f"two measures are named {m.name}", m.span)
            seen.add(low)
            if low in partition:
                self.fail(f"the measure {m.name} has the name of a partition column (both would be output)", m.span)

    def order(self):
        q = self.q
        if not q.order_by:
            self.fail("ORDER BY is required in MATCH_RECOGNIZE: its first column is the event time", None)
        first = q.order_by[0]
        if self.streaming and not first.ascending:
            self.fail(f"in streaming the first ORDER BY item must be the event time ascending, not {first.column} "
                      "DESC", first.span)

    def skip(self):
        skip = self.q.skip
        if skip.kind not in (rx.SKIP_TO_FIRST, rx.SKIP_TO_LAST):
            return
        members = set(self.subsets.get(skip.var, (skip.var,)))
        first, later = _first_and_later(self.q.pattern)
        if first and first <= members and (skip.kind == rx.SKIP_TO_FIRST or not (later & members)):
            self.fail(f"AFTER MATCH SKIP {skip.kind} {skip.var} would resume every match at its own first row (an "
                      "endless loop, an error in the standard): skip to a variable that comes later in the pattern",
                      skip.span)


def program_size(p: rx.RowPattern) -> int:
    """The number of instructions the engine compiles ``p`` into (bounded quantifiers and PERMUTE unrolled,
    as ``runtime_udfs.recognize.program`` does), its final MATCH included."""
    return _size(p) + 1


def _size(p) -> int:
    if isinstance(p, (rx.PVar, rx.PAnchor)):
        return 1
    if isinstance(p, rx.PEmpty):
        return 0
    if isinstance(p, rx.PExclude):
        return _size(p.inner)
    if isinstance(p, rx.PConcat):
        return sum(_size(i) for i in p.items)
    if isinstance(p, rx.PAlt):
        return sum(_size(a) for a in p.alternatives) + 2 * (len(p.alternatives) - 1)
    if isinstance(p, rx.PPermute):
        orders = math.factorial(len(p.items))
        return orders * sum(_size(i) for i in p.items) + 2 * (orders - 1)
    inner = _size(p.inner)  # PQuant: the minimum unrolled, then a loop or the optional iterations
    rest = inner + 4 if p.max is None else (p.max - p.min) * (inner + 3)
    return p.min * inner + rest


def find_span(text: str, pattern: str, after: str | None = None, nth: int = 0) -> Span | None:
    """The span of the ``nth`` match of the regex ``pattern`` in ``text`` (after the first match of the regex
    ``after``), for names the IR keeps without a position (SUBSET and DEFINE names, partition columns)."""
    start = 0
    if after is not None:
        m = re.search(after, text, re.IGNORECASE)
        if m is None:
            return None
        start = m.end()
    matches = list(re.compile(pattern, re.IGNORECASE).finditer(text, start))
    if len(matches) <= nth:
        return None
    m = matches[nth]
    return span_of(text, m.start(), m.end())


def _names(reads: set[str | None]) -> str:
    return ", ".join(sorted(r if r is not None else "the current row" for r in reads))


def _first_and_later(p: rx.RowPattern) -> tuple[set[str], set[str]]:
    """Over-approximations of the variables that can label the first row of a non-empty match, and of those
    that can label any later row (over-approximating both only makes the SKIP refusal rarer)."""
    return _analyse(p)[1], _later(p)


def _analyse(p) -> tuple[bool, set[str], set[str]]:
    """(can match zero rows, variables that can label its first row, all its variables)."""
    if isinstance(p, rx.PVar):
        return False, {p.name}, {p.name}
    if isinstance(p, (rx.PEmpty, rx.PAnchor)):
        return True, set(), set()
    if isinstance(p, rx.PExclude):
        return _analyse(p.inner)
    if isinstance(p, rx.PQuant):
        nullable, first, every = _analyse(p.inner)
        return nullable or p.min == 0, first, every
    if isinstance(p, rx.PAlt):
        parts = [_analyse(a) for a in p.alternatives]
        return (any(n for n, _, _ in parts), set().union(*(f for _, f, _ in parts)),
                set().union(*(e for _, _, e in parts)))
    items = p.items  # PConcat / PPermute: any item may come first in a PERMUTE
    parts = [_analyse(i) for i in items]
    every = set().union(*(e for _, _, e in parts))
    if isinstance(p, rx.PPermute):
        return all(n for n, _, _ in parts), set().union(*(f for _, f, _ in parts)), every
    first: set[str] = set()
    for nullable, f, _ in parts:
        first |= f
        if not nullable:
            return False, first, every
    return True, first, every


def _later(p) -> set[str]:
    """Variables that can label a row that is not the first of the match (over-approximated: every variable
    that is not alone at the head of the whole pattern)."""
    if isinstance(p, rx.PConcat):
        head, *rest = p.items
        out = _later(head)
        for item in rest:
            out |= _analyse(item)[2]
        return out
    if isinstance(p, rx.PVar):
        return set()
    if isinstance(p, rx.PQuant) and (p.max is None or p.max > 1):
        return _analyse(p.inner)[2]
    if isinstance(p, (rx.PQuant, rx.PExclude)):
        return _later(p.inner)
    if isinstance(p, rx.PAlt):
        return set().union(*(_later(a) for a in p.alternatives))
    if isinstance(p, rx.PPermute):
        return _analyse(p)[2]
    return set()


@deeply
def check_recognize(q: rx.Recognize, *, streaming: bool, functions: Callable[[str], bool] | None = None) -> None:
    """Refuse what sparkcep does not run as the standard says (module docstring), with the reason.

    ``functions``: a test for function names besides Spark's built-ins (``spark.catalog.functionExists`` when
    a session is at hand, so that its registered SQL functions pass); without it such names are refused."""
    _Checker(q, streaming, functions).run()
