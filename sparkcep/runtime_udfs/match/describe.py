"""What explain says about the match engine's physical choices for a spec, as the engine makes them: the
engine per alternative, negations searched generally over their gap, the batch prefilter, the columnar
construction and its streaming step.  The face passes :func:`sparkcep.runtime_udfs.describe.describe` into the
compiler's explain, so that the compiler never imports an engine."""

from __future__ import annotations

from sparkcep.ir.ast import EventPat, Kleene, Not
from sparkcep.ir.errors import CEPError
from sparkcep.ir.printer import format_pattern_as_written
from sparkcep.runtime_udfs.match import columnar as match_columnar
from sparkcep.runtime_udfs.match import engine as match_engine
from sparkcep.runtime_udfs.match import prefilter as match_prefilter
from sparkcep.runtime_udfs.match import stream_columnar as match_stream


def describe(spec) -> tuple[str, list[str]]:
    """``(engine, lines)``: the ``engine=`` of the Sequence line and the lines under it."""
    engine, per_alternative = _match_engines(spec)
    return engine, (per_alternative + _general_searches(spec) + explosion_warnings(spec) + _prefiltered(spec)
                   + _columnar(spec) + _streaming(spec))


def _match_engines(spec) -> tuple[str, list[str]]:
    """What runs the match query, as the engine dispatches (:func:`match_engine.engines`): one name when every
    alternative runs on the same engine, else ``per alternative`` and a line per alternative with its
    variables; ``none`` and the reason when the match engine refuses the pattern."""
    try:
        alternatives = match_engine.engines(spec)
    except CEPError as e:
        return "none", [f"refused by the match engine: {e.message}"]
    names = {name for _, name in alternatives}
    if len(names) == 1:
        return names.pop(), []
    return "per alternative", [f"alternative {k} ({', '.join(vs)}): {name}"
                               for k, (vs, name) in enumerate(alternatives)]


def _general_searches(spec) -> list[str]:
    """A line per negation that runs as the general existence search over its gap
    (:func:`match_engine.general_negations`): where the exponential worst case can arise."""
    try:
        nodes = match_engine.general_negations(spec)
    except CEPError:
        return []  # refused: _match_engines says why
    return [f"negation {format_pattern_as_written(n)}: general search over the gap (exponential in the worst case)"
            for n in nodes]


def explosion_warnings(spec) -> list[str]:
    """A warning per Kleene closure (``T+``, ``T*``, a repeated group) of a match query's positive pattern under
    skip_till_any_match without collapsed output: every subset of its events in a window is a match, so n
    such events can make 2^n matches (the match budget, docs/operations.md, stops such a run).  The way out
    named: collapsed output (one Kleene variable of single events) and a trend aggregate, on a second line."""
    if spec.collapsed or (spec.strategy or "skip_till_any_match") != "skip_till_any_match" or spec.pattern is None:
        return []
    found: list = []

    def visit(node, negated: bool) -> None:
        if isinstance(node, Not):
            return  # a negated closure only blocks: no match is made of it
        if isinstance(node, Kleene) and node.op in ("+", "*") and not negated:
            found.append(node)
        for child in _children(node):
            visit(child, negated)

    visit(spec.pattern, False)
    singles = [k for k in found if isinstance(k.inner, EventPat) and k.op == "+"]  # T*: an alternative without it
    collapsible = len(found) == 1 and len(singles) == 1
    if any(k.bounds is not None for k in found):  # neither collapsed output nor trend aggregates take {n,m}
        way_out = "narrow the window or the bound"
    elif any(k.until is not None for k in found):  # nor UNTIL
        way_out = "narrow the window or the stop condition (UNTIL)"
    else:
        way_out = ("use collapsed output (run --collapsed, collapsed=True) or a trend aggregate (RETURN COUNT(*) ...)"
                   if collapsible else "use a trend aggregate (RETURN COUNT(*) ...)")
    out = []
    for k in found:
        if isinstance(k.inner, EventPat):
            over = f"events of {' or '.join(k.inner.types)}"
        else:
            over = "iterations"
        text = format_pattern_as_written(k)
        many = f"n^{k.bounds[1]}" if k.bounds is not None and k.bounds[1] is not None else "2^n"
        out += [f"warning: {text} under skip_till_any_match can produce {many} matches over n {over} in a window;",
                f"         {way_out}"]
    return out


def _children(node):
    for f in getattr(node, "__dataclass_fields__", {}):
        if f == "span":
            continue
        value = getattr(node, f)
        for v in value if isinstance(value, tuple) else (value,):
            if hasattr(v, "__dataclass_fields__") and not isinstance(v, EventPat):
                yield v


def _prefiltered(spec) -> list[str]:
    """The batch prefilter's line (:mod:`sparkcep.runtime_udfs.match.prefilter`), if the spec has one."""
    scan = match_prefilter.prefilter(spec)
    if scan is None:
        return []
    return [f"batch prefilter: sequence scan over {len(scan.shapes)} chain(s), drops rows in no chain inside the "
            "window"]


def _columnar(spec) -> list[str]:
    """The columnar construction's line (:mod:`sparkcep.runtime_udfs.match.columnar`), if the spec has one."""
    cc = match_columnar.columnar(spec)
    if cc is None:
        return []
    predicates = sum(map(len, cc.checks))
    parts = getattr(cc, "parts", (cc,))  # several alternatives (OR, T?): the union of each one's chains
    over = (f"{len(cc.bits)} position(s)" if len(parts) == 1 else
            f"{len(parts)} sequences of {'/'.join(str(len(p.bits)) for p in parts)} position(s)")
    return [f"batch construction: columnar over {over}, all keys at once in numpy"
            + (f", {predicates} predicate(s) vectorized" if predicates else "")]


def _streaming(spec) -> list[str]:
    """The streaming columnar step's line (:mod:`sparkcep.runtime_udfs.match.stream_columnar`), if the spec has
    one: it runs when a Spark group holds several keys (the keys hashed into buckets: the default grouping of
    such a query, ``sparkcep.spark.operator.stream_buckets``) or the query has no key; with one group per key
    (``buckets=0``, or a checkpoint made so) the per-event engine streams (``MatchOperator.stream_path``)."""
    if match_stream.ineligible(spec) is not None:
        return []
    if not spec.key:
        return ["streaming: columnar micro-batches, rows of the last window carried"]
    return ["streaming: columnar micro-batches, keys hashed into spark.sql.shuffle.partitions buckets (all keys of "
            "a bucket at once, rows of the last window carried); one group per key (buckets=0): per-event engine"]
