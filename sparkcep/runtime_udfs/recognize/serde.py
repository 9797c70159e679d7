"""The engine's state as JSON text (``state_to_json`` / ``state_from_json``), for generated jobs and tests.

Rows are stored once, as lists under one column list; the threads' label chains share their prefixes, so
each node is stored once (``[row, var, excluded, parent, aggregates]``, the parent by its position in the node table).
Values JSON does not have (timestamps, dates, decimals, bytes, non-finite floats) are tagged lists.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

from sparkcep.runtime_udfs.recognize.engine import RecognizeState
from sparkcep.runtime_udfs.recognize.evaluate import node
from sparkcep.runtime_udfs.recognize.windows import window_from_data, window_to_data

__all__ = ["state_from_json", "state_to_json"]

VERSION = 1
_TAG = "__v"


def _enc(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else [_TAG, "f", repr(v)]
    if isinstance(v, dt.datetime):
        return [_TAG, "ts", v.isoformat()]
    if isinstance(v, dt.date):
        return [_TAG, "d", v.isoformat()]
    if isinstance(v, Decimal):
        return [_TAG, "dec", str(v)]
    if isinstance(v, (bytes, bytearray)):
        return [_TAG, "b", base64.b64encode(bytes(v)).decode("ascii")]
    if isinstance(v, dt.timedelta):
        return [_TAG, "td", v.total_seconds()]
    if isinstance(v, (list, tuple)):
        return [_TAG, "l", [_enc(x) for x in v]]
    if isinstance(v, dict):
        return [_TAG, "m", [[_enc(k), _enc(x)] for k, x in v.items()]]
    return [_TAG, "s", str(v)]


def _dec(v: Any) -> Any:
    if not isinstance(v, list):
        return v
    _, kind, x = v
    if kind == "f":
        return float(x)
    if kind == "ts":
        return dt.datetime.fromisoformat(x)
    if kind == "d":
        return dt.date.fromisoformat(x)
    if kind == "dec":
        return Decimal(x)
    if kind == "b":
        return base64.b64decode(x)
    if kind == "td":
        return dt.timedelta(seconds=x)
    if kind == "l":
        return [_dec(y) for y in x]
    if kind == "m":
        return {_dec(k): _dec(y) for k, y in x}
    return x


def state_to_json(state: RecognizeState) -> str:
    cols: list[str] = []
    col_pos: dict[str, int] = {}
    for row in state.rows:
        for c in row:
            if c not in col_pos:
                col_pos[c] = len(cols)
                cols.append(c)
    rows = [[_enc(row.get(c)) for c in cols] for row in state.rows]
    present = [[c in row for c in cols] for row in state.rows]
    nodes: list[list] = []
    ids: dict[int, int] = {}

    def ref(head) -> int:
        if head is None:
            return -1
        chain = []
        n = head
        while n is not None and id(n) not in ids:
            chain.append(n)
            n = n[3]
        for m in reversed(chain):
            ids[id(m)] = len(nodes)
            nodes.append([m[0], m[1], m[2], -1 if m[3] is None else ids[id(m[3])],
                          None if m[4] is None else [[count, _enc(value)] for count, value in m[4]]])
        return ids[id(head)]

    threads = [[s, leaf, ref(node)] for s, leaf, node in state.threads]
    matched = [[s, end, ref(node)] for s, (end, node) in state.matched.items()]
    return json.dumps({
        "v": VERSION, "cols": cols, "rows": rows,
        "present": None if all(all(p) for p in present) else present,
        "base": state.base, "pos": state.pos, "next_start": state.next_start, "mnum": state.mnum,
        "covered": state.covered, "ended": state.ended, "nodes": nodes, "threads": threads, "matched": matched,
        **({} if state.window is None else {"window": window_to_data(state.window, _enc)}),
    }, separators=(",", ":"))


def state_from_json(text: str) -> RecognizeState:
    d = json.loads(text)
    if d.get("v") != VERSION:
        raise ValueError(f"MATCH_RECOGNIZE engine state version {d.get('v')} is not supported")
    st = RecognizeState()
    cols, present = d["cols"], d["present"]
    st.rows = [{c: _dec(v) for k, (c, v) in enumerate(zip(cols, row, strict=True))
                if present is None or present[i][k]} for i, row in enumerate(d["rows"])]
    nodes: list = []
    for r, var, excl, parent, acc in d["nodes"]:
        acc = None if acc is None else tuple((count, _dec(value)) for count, value in acc)
        nodes.append(node(r, var, excl, None if parent < 0 else nodes[parent], acc))

    def at(k: int):
        return None if k < 0 else nodes[k]

    st.base, st.pos, st.next_start, st.mnum = d["base"], d["pos"], d["next_start"], d["mnum"]
    st.covered, st.ended = d["covered"], d["ended"]
    st.threads = [(s, leaf, at(k)) for s, leaf, k in d["threads"]]
    st.matched = {s: (end, at(k)) for s, end, k in d["matched"]}
    st.window = window_from_data(d.get("window"), _dec)
    return st
