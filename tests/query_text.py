"""Hypothesis strategies that write random query *texts* from the language's constructs (LANGUAGE.md §2).

Unlike :mod:`tests.strategies` (event streams), these build the text a user types: patterns (SEQ, Kleene
``+ * ?`` and bounded ``{n,m}``, ``NEXT`` steps, negation, ANY, OR, nesting), WHERE conditions (equivalence
tests, comparisons, arithmetic, NOT, OR, indexed references, NEXT(), aggregates over attributes and over
expressions), RETURN before or after, match and trend-aggregate RETURN forms, strategies, GROUP BY, WITHIN and
SLIDE.  They mix valid and invalid combinations on purpose: the property tests only need "check accepts ⇒
everything after it works" and "check refuses ⇒ one positioned CEPError".

Example::

    from hypothesis import given
    from tests.query_text import query_texts

    @given(query_texts())
    def test_contract(text): ...
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

TYPES = "ABC"
ATTRS = ("x", "id")
STRATEGIES = ("strict_contiguity", "partition_contiguity", "skip_till_next_match", "skip_till_any_match")
AGGS = ("sum", "avg", "min", "max", "count")
#: bounded quantifiers (``B{2,3} b[]``, ``(P){1,2}``)
BOUNDS = ("{2}", "{1,2}", "{2,}", "{0,2}")


@dataclass
class _Vars:
    """The variables a generated pattern binds: name → (kleene, negated)."""

    kinds: dict[str, tuple[bool, bool]] = field(default_factory=dict)

    def fresh(self, kleene: bool, negated: bool) -> str:
        name = f"v{len(self.kinds)}"
        self.kinds[name] = (kleene, negated)
        return name


@st.composite
def _event(draw, vars_: _Vars, negated: bool) -> str:
    types = draw(st.sampled_from(["single", "any"]))
    spec = draw(st.sampled_from(TYPES)) if types == "single" else \
        "ANY(" + ", ".join(draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True))) + ")"
    form = draw(st.sampled_from(["plain", "plain", "plus", "star", "opt", "bare", "var_plus", "bounded"]))
    if form == "bare":
        return spec
    if form == "bounded":
        return f"{spec}{draw(st.sampled_from(BOUNDS))} {vars_.fresh(True, negated)}[]"
    if form == "plain":
        return f"{spec} {vars_.fresh(False, negated)}"
    if form == "opt":
        return f"{spec}? {vars_.fresh(True, negated)}"
    if form == "var_plus":
        return f"{spec} {vars_.fresh(True, negated)}+"
    op = "+" if form == "plus" else "*"
    return f"{spec}{op} {vars_.fresh(True, negated)}[]"


@st.composite
def _pattern(draw, vars_: _Vars, depth: int = 0, negated: bool = False) -> str:
    kind = draw(st.sampled_from(["event", "event", "seq", "seq", "not", "group"] if depth < 2 else ["event"]))
    if kind == "event":
        return draw(_event(vars_, negated))
    if kind == "not":
        inner = draw(_pattern(vars_, depth + 1, True))
        spelling = draw(st.sampled_from(["!({})", "NOT {}", "~{}", "¬({})"]))
        return spelling.format(inner)
    if kind == "group":
        inner = draw(_pattern(vars_, depth + 1, negated))
        return f"({inner}){draw(st.sampled_from(['+', '*', '?', *BOUNDS]))}"
    items = [draw(_pattern(vars_, depth + 1, negated)) for _ in range(draw(st.integers(1, 4)))]
    return "SEQ(" + ", ".join(draw(st.sampled_from(["", "", "", "NEXT "])) + i for i in items) + ")"


@st.composite
def _ref(draw, vars_: _Vars) -> str:
    """An attribute reference, of any form, to one of the pattern's variables (or a type, or nothing)."""
    names = list(vars_.kinds) or ["A"]
    var = draw(st.sampled_from(names + list(TYPES)))
    attr = draw(st.sampled_from(ATTRS))
    form = draw(st.sampled_from(["plain", "plain", "cur", "prev", "first", "last", "next", "bare", "k"]))
    return {"plain": f"{var}.{attr}", "cur": f"{var}[i].{attr}", "prev": f"{var}[i-1].{attr}",
            "first": f"{var}[1].{attr}", "last": f"{var}[{var}.len].{attr}", "next": f"NEXT({var}).{attr}",
            "bare": attr, "k": f"{var}[2].{attr}"}[form]


@st.composite
def _aggregate(draw, vars_: _Vars, depth: int) -> str:
    names = list(vars_.kinds) or ["A"]
    var = draw(st.sampled_from(names))
    name = draw(st.sampled_from(AGGS)).upper() if draw(st.booleans()) else draw(st.sampled_from(AGGS))
    arg = draw(st.sampled_from(["all", "all", "prefix", "expr", "const", "not", "star", "plain", "var"]))
    attr = draw(st.sampled_from(ATTRS))
    if arg == "all":
        return f"{name}({var}[].{attr})"
    if arg == "prefix":
        return f"{name}({var}[..i-1].{attr})"
    if arg == "expr":  # an aggregate over an expression (issue 20)
        return f"{name}({var}[].{attr} + {draw(st.integers(0, 3))})"
    if arg == "const":
        return f"{name}({draw(st.sampled_from(['1', 'TRUE', 'NULL', chr(39) + 's' + chr(39)]))})"
    if arg == "not":
        return f"{name}(NOT {var}[].{attr})"
    if arg == "star":
        return f"{name}(*)"
    if arg == "var":
        return f"{name}({var})"
    return f"{name}({draw(_expr(vars_, depth + 1))})"


@st.composite
def _expr(draw, vars_: _Vars, depth: int = 0) -> str:
    leaf = depth >= 3
    kind = draw(st.sampled_from(["ref", "ref", "lit"] if leaf else
                                ["ref", "ref", "lit", "cmp", "cmp", "arith", "not", "or", "and", "agg", "neg",
                                 "paren"]))
    if kind == "ref":
        return draw(_ref(vars_))
    if kind == "lit":
        return draw(st.sampled_from(["0", "1", "2.5", "-3", "'a'", "\"b\"", "TRUE", "FALSE", "NULL", "1e3"]))
    if kind == "agg":
        return draw(_aggregate(vars_, depth))
    if kind == "neg":
        return "-" + draw(_expr(vars_, depth + 1))
    if kind == "paren":
        return "(" + draw(_expr(vars_, depth + 1)) + ")"
    if kind == "not":
        return draw(st.sampled_from(["NOT ", "¬"])) + draw(_expr(vars_, depth + 1))
    left, right = draw(_expr(vars_, depth + 1)), draw(_expr(vars_, depth + 1))
    op = {"cmp": st.sampled_from(["=", "!=", "<>", "<", "<=", ">", ">=", "≥", "≠"]),
          "arith": st.sampled_from(["+", "-", "*", "/", "%"]),
          "or": st.sampled_from(["OR", "∨"]), "and": st.sampled_from(["AND", "∧"])}[kind]
    return f"({left} {draw(op)} {right})" if kind in ("or", "arith") else f"{left} {draw(op)} {right}"


@st.composite
def _equivalence(draw, vars_: _Vars) -> str:
    items = []
    for _ in range(draw(st.integers(1, 2))):
        attr = draw(st.sampled_from(ATTRS))
        form = draw(st.sampled_from(["attr", "attr", "const", "var"]))
        if form == "attr":
            items.append(attr)
        elif form == "const":
            items.append(f"{attr} = {draw(st.sampled_from(['0', '1', chr(39) + 'k' + chr(39), '-1']))}")
        else:
            items.append(f"{draw(st.sampled_from(list(vars_.kinds) or ['A']))}.{attr}")
    return "[" + ", ".join(items) + "]"


@st.composite
def _match_return(draw, vars_: _Vars) -> str:
    items = []
    for _ in range(draw(st.integers(1, 3))):
        item = draw(st.one_of(_ref(vars_), _aggregate(vars_, 1), _expr(vars_, 1)))
        if draw(st.booleans()):
            item += f" AS r{len(items)}"
        items.append(item)
    return ", ".join(items)


@st.composite
def _trend_return(draw, vars_: _Vars, group: list[str]) -> str:
    names = list(vars_.kinds) + list(TYPES)
    items = list(group) if draw(st.booleans()) else []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(names))
        items.append(draw(st.sampled_from([
            "COUNT(*)", f"COUNT({name})", f"SUM({name}.x)", f"AVG({name}.x)", f"MIN({name}.id)",
            f"MAX({name}.x)", f"sum({name}.x + 1)", f"COUNT({name}[].x)"])))
    return ", ".join(items)


@st.composite
def query_texts(draw) -> str:
    """One query text (valid or not) built from the language's constructs."""
    vars_ = _Vars()
    pattern = draw(_pattern(vars_))
    if draw(st.integers(0, 5)) == 0:  # a disjunction of patterns (gSPICE Q2)
        pattern = f"{pattern} OR {draw(_pattern(vars_, 1))}"
    parts = []
    trend = draw(st.booleans())
    group = [draw(st.sampled_from(ATTRS))] if trend and draw(st.booleans()) else []
    returns = None
    if draw(st.integers(0, 3)) > 0:
        returns = draw(_trend_return(vars_, group)) if trend else draw(_match_return(vars_))
    first = returns is not None and draw(st.booleans())
    if draw(st.booleans()):
        parts.append("q1:")
    if first:
        parts.append(f"RETURN {returns}")
    parts.append(f"{draw(st.sampled_from(['PATTERN', 'EVENT', 'pattern']))} {pattern}")
    if draw(st.integers(0, 3)) == 0:
        parts.append(f"USING {draw(st.sampled_from(STRATEGIES))}")
    conditions = []
    for _ in range(draw(st.integers(0, 3))):
        conditions.append(draw(_equivalence(vars_)) if draw(st.integers(0, 2)) == 0 else draw(_expr(vars_)))
    if conditions:
        parts.append("WHERE " + " AND ".join(conditions))
    if group:
        parts.append(f"{draw(st.sampled_from(['GROUP BY', 'GROUP-BY']))} {', '.join(group)}")
    within = draw(st.integers(1, 12))
    parts.append(f"WITHIN {within}")
    if trend and draw(st.booleans()):
        parts.append(f"SLIDE {draw(st.integers(1, within))}")
    if returns is not None and not first:
        parts.append(f"RETURN {returns}")
    return " ".join(parts)
