"""The numba functions of the columnar kernel (:mod:`.kernel`): the prioritized NFA over per-row variable bits
and the per-match gathers of the measures.  :func:`match` is :mod:`.engine`'s ``_run``/``_finish``/
``_decide``/``_prune_inside``/``_next_start`` over integer arrays, for specs whose DEFINEs are history-free
(threads of one start at one instruction merged); keep the two in step.

Leaves are the program's (``pc`` of a ``CHAR`` or ``MATCH``, ``-w - 1`` for a thread waiting at ``ANCHOR $``);
a node of a partial match is ``(row, variable, parent)`` in three arrays, the parent -1 for the first row.
Compiled once per machine (``cache=True``)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _grow(a, need):
    if need <= len(a):
        return a
    out = np.empty(max(need, 2 * len(a)), dtype=a.dtype)
    out[:len(a)] = a
    return out


@njit(cache=True)
def _ge(gap, within):  # _compare(">=", gap, within): NaN is above every number
    return True if gap != gap else gap >= within


@njit(cache=True)
def _lt(gap, within):
    return False if gap != gap else gap < within


@njit(cache=True)
def match(bits, bounds, char_var, after_off, after, start_bol, start_plain, resume_off, resume, match_pc, skip,
          skip_mask, has_within, within, monotone, ts, ts_ok, quiet, max_threads):
    """Run every partition ``bounds[k]:bounds[k+1]``.  Returns the events in output order (a 5-column array:
    kind 0 match / 1 unmatched row, start, end, match number, offset of its rows' variables in the second
    array), the variables of every match's rows (flattened), and an error flag (too many threads)."""
    n = len(bits)
    npc = len(char_var)
    nwait = len(resume_off) - 1
    # events
    ev = np.empty((16, 5), dtype=np.int64)
    nev = 0
    flat = np.empty(16, dtype=np.int64)
    nflat = 0
    # nodes (reset per partition)
    nrow = np.empty(1024, dtype=np.int64)
    nvar = np.empty(1024, dtype=np.int64)
    npar = np.empty(1024, dtype=np.int64)
    # threads: current and next
    cap = 64
    th_s = np.empty(cap, dtype=np.int64)
    th_leaf = np.empty(cap, dtype=np.int64)
    th_node = np.empty(cap, dtype=np.int64)
    nw_s = np.empty(cap, dtype=np.int64)
    nw_leaf = np.empty(cap, dtype=np.int64)
    nw_node = np.empty(cap, dtype=np.int64)
    # matched[start] = (end, node)
    m_has = np.zeros(n, dtype=np.bool_)
    m_end = np.zeros(n, dtype=np.int64)
    m_node = np.zeros(n, dtype=np.int64)
    # stamps per leaf (index leaf + nwait): the row at which a thread of s0 / of seen_s reached it
    first_row = np.full(npc + nwait, -1, dtype=np.int64)
    seen_row = np.full(npc + nwait, -1, dtype=np.int64)
    seen_s = np.full(npc + nwait, -1, dtype=np.int64)
    cross = skip == 0 and not has_within
    for p in range(len(bounds) - 1):
        a0 = bounds[p]
        a1 = bounds[p + 1]
        if a1 == a0:
            continue
        nt = 0
        nnode = 0
        next_start = a0
        mnum = 0
        covered = a0 - 1
        mcount = 0
        pruned_s = -1
        pruned_to = 0
        for i in range(a0, a1 + 1):
            pos = i
            if i < a1:
                # a thread for start row i, least preferred of all
                starts = start_bol if i == a0 else start_plain
                for k in range(len(starts)):
                    leaf = starts[k]
                    if leaf == match_pc:
                        if not m_has[i]:
                            mcount += 1
                        m_has[i] = True
                        m_end[i] = i
                        m_node[i] = -1
                        break
                    if nt >= len(th_s):
                        th_s = _grow(th_s, nt + 1)
                        th_leaf = _grow(th_leaf, nt + 1)
                        th_node = _grow(th_node, nt + 1)
                    th_s[nt] = i
                    th_leaf[nt] = leaf
                    th_node[nt] = -1
                    nt += 1
                bi = bits[i]
                s0 = next_start
                cut = -1
                new_match = False
                nn = 0
                for t in range(nt):
                    s = th_s[t]
                    if s == cut:
                        continue
                    leaf = th_leaf[t]
                    if leaf < 0:  # waiting at ANCHOR $: a row came, the path dies
                        continue
                    var = char_var[leaf]
                    if has_within and monotone and s != i and ts_ok[i] and ts_ok[s]:
                        if _ge(ts[i] - ts[s], within):
                            continue
                    if (bi >> var) & 1 == 0:
                        continue
                    if nnode >= len(nrow):
                        nrow = _grow(nrow, nnode + 1)
                        nvar = _grow(nvar, nnode + 1)
                        npar = _grow(npar, nnode + 1)
                    nrow[nnode] = i
                    nvar[nnode] = var
                    npar[nnode] = th_node[t]
                    node = nnode
                    nnode += 1
                    for k in range(after_off[leaf], after_off[leaf + 1]):
                        nxt = after[k]
                        if nxt == match_pc:
                            if has_within:
                                if not (ts_ok[i] and ts_ok[s] and _lt(ts[i] - ts[s], within)):
                                    continue
                            if not m_has[s]:
                                mcount += 1
                            m_has[s] = True
                            m_end[s] = i + 1
                            m_node[s] = node
                            cut = s
                            new_match = True
                            break
                        x = nxt + nwait
                        if s == s0:
                            if first_row[x] == i:
                                continue
                            first_row[x] = i
                        else:
                            if cross and first_row[x] == i:
                                continue
                            if seen_row[x] == i and seen_s[x] == s:
                                continue
                            seen_row[x] = i
                            seen_s[x] = s
                        if nn >= len(nw_s):
                            nw_s = _grow(nw_s, nn + 1)
                            nw_leaf = _grow(nw_leaf, nn + 1)
                            nw_node = _grow(nw_node, nn + 1)
                        nw_s[nn] = s
                        nw_leaf[nn] = nxt
                        nw_node[nn] = node
                        nn += 1
                if nn > max_threads:
                    return ev[:nev], flat[:nflat], True
                th_s, nw_s = nw_s, th_s
                th_leaf, nw_leaf = nw_leaf, th_leaf
                th_node, nw_node = nw_node, th_node
                nt = nn
                pos = i + 1
                if new_match and skip == 0:
                    # _prune_inside: the starts before the end of s0's match are skipped whatever happens
                    s = next_start
                    if m_has[s] and m_end[s] > s + 1:
                        e = m_end[s]
                        w = 0
                        for t in range(nt):
                            if th_s[t] == s or th_s[t] >= e:
                                th_s[w] = th_s[t]
                                th_leaf[w] = th_leaf[t]
                                th_node[w] = th_node[t]
                                w += 1
                        nt = w
                        lo = s + 1 if pruned_s != s else max(s + 1, pruned_to)
                        for k in range(lo, e):
                            if m_has[k]:
                                m_has[k] = False
                                mcount -= 1
                        pruned_s = s
                        pruned_to = e
                if nt == 0:
                    if quiet and mcount == 0:
                        next_start = i + 1
                        continue
                elif th_s[0] == next_start:
                    continue
            else:
                # _finish: the partition has ended; threads waiting at ANCHOR $ go on, the others die
                cut = -1
                for t in range(nt):
                    s = th_s[t]
                    leaf = th_leaf[t]
                    if leaf >= 0 or s == cut:
                        continue
                    w = -leaf - 1
                    for k in range(resume_off[w], resume_off[w + 1]):
                        if resume[k] == match_pc:
                            node = th_node[t]
                            if node >= 0 and has_within:
                                last = nrow[node]
                                if not (ts_ok[last] and ts_ok[s] and _lt(ts[last] - ts[s], within)):
                                    continue
                            if not m_has[s]:
                                mcount += 1
                            m_has[s] = True
                            m_end[s] = a1 if node >= 0 else s
                            m_node[s] = node
                            cut = s
                            break
                nt = 0
            # _decide: the earliest undecided starts that have no live thread left, in order
            while next_start < pos:
                s = next_start
                if nt > 0 and th_s[0] == s:
                    break
                if m_has[s]:
                    m_has[s] = False
                    mcount -= 1
                    end = m_end[s]
                    node = m_node[s]
                    mnum += 1
                    if nev >= len(ev):
                        grown = np.empty((2 * len(ev), 5), dtype=np.int64)
                        grown[:nev] = ev[:nev]
                        ev = grown
                    ev[nev, 0] = 0
                    ev[nev, 1] = s
                    ev[nev, 2] = end
                    ev[nev, 3] = mnum
                    ev[nev, 4] = nflat
                    nev += 1
                    flat = _grow(flat, nflat + end - s)
                    nd = node
                    while nd >= 0:
                        flat[nflat + nrow[nd] - s] = nvar[nd]
                        nd = npar[nd]
                    nflat += end - s
                    if end > s:
                        covered = max(covered, end - 1)
                    # _next_start
                    if end == s or skip == 1:
                        nxt_start = s + 1
                    elif skip == 0:
                        nxt_start = end
                    else:
                        target = -1
                        nd = node
                        while nd >= 0:
                            if (skip_mask >> nvar[nd]) & 1:
                                target = nrow[nd]
                                if skip == 3:
                                    break
                            nd = npar[nd]
                        nxt_start = s + 1 if target < 0 or target == s else target
                else:
                    if not quiet and s > covered:
                        if nev >= len(ev):
                            grown = np.empty((2 * len(ev), 5), dtype=np.int64)
                            grown[:nev] = ev[:nev]
                            ev = grown
                        ev[nev, 0] = 1
                        ev[nev, 1] = s
                        ev[nev, 2] = s
                        ev[nev, 3] = 0
                        ev[nev, 4] = nflat
                        nev += 1
                    nxt_start = s + 1
                next_start = nxt_start
                if nt > 0 and th_s[0] < nxt_start:
                    w = 0
                    for t in range(nt):
                        if th_s[t] >= nxt_start:
                            th_s[w] = th_s[t]
                            th_leaf[w] = th_leaf[t]
                            th_node[w] = th_node[t]
                            w += 1
                    nt = w
                if mcount > 0:
                    for k in range(s + 1, nxt_start):
                        if m_has[k]:
                            m_has[k] = False
                            mcount -= 1
        # anything left of this partition (there is none once decided) must not leak into the next
        for k in range(a0, a1):
            m_has[k] = False
    return ev[:nev], flat[:nflat], False


@njit(cache=True)
def locate(ev, flat, mset, nth, shift, pstart, pend):
    """Per event: the row a reference reads (the last row whose variable is in ``mset``, -1 every row; ``nth``
    k + 1: FIRST(.., k), -(k + 1): LAST(.., k)), moved ``shift`` rows, or -1 (none, off the partition, not a
    match)."""
    m = len(ev)
    out = np.full(m, -1, dtype=np.int64)
    for j in range(m):
        if ev[j, 0] != 0:
            continue
        s = ev[j, 1]
        length = ev[j, 2] - s
        o = ev[j, 4]
        r = -1
        if nth >= 0:
            want = nth - 1 if nth > 0 else 0
            if nth > 0:
                cnt = 0
                for q in range(length):
                    if (mset >> flat[o + q]) & 1:
                        if cnt == want:
                            r = s + q
                            break
                        cnt += 1
            else:
                for q in range(length - 1, -1, -1):
                    if (mset >> flat[o + q]) & 1:
                        r = s + q
                        break
        else:
            want = -nth - 1
            cnt = 0
            for q in range(length - 1, -1, -1):
                if (mset >> flat[o + q]) & 1:
                    if cnt == want:
                        r = s + q
                        break
                    cnt += 1
        if r >= 0:
            r += shift
            if r < pstart[j] or r >= pend[j]:
                r = -1
        out[j] = r
    return out


@njit(cache=True)
def classify(ev, flat, rows):
    """Per event: the variable of row ``rows[j]`` in match j, or -1 if that row is not in the match."""
    m = len(ev)
    out = np.full(m, -1, dtype=np.int64)
    for j in range(m):
        r = rows[j]
        s = ev[j, 1]
        if ev[j, 0] == 0 and r >= s and r < ev[j, 2]:
            out[j] = flat[ev[j, 4] + r - s]
    return out


@njit(cache=True)
def aggregate(ev, flat, ivals, fvals, valid, kind, mset, func):
    """Per event, over the rows of the match whose variable is in ``mset``, the non-NULL values (``kind`` 0
    int64 ``ivals``, 1 float64 ``fvals``, 2 only counted): COUNT, and the fold of SUM/AVG (``+`` in row
    order; a BIGINT overflow makes it NULL for good), MIN/MAX.  Returns (int result, float result, count,
    not NULL)."""
    m = len(ev)
    iout = np.zeros(m, dtype=np.int64)
    fout = np.zeros(m, dtype=np.float64)
    cnt = np.zeros(m, dtype=np.int64)
    ok = np.zeros(m, dtype=np.bool_)
    for j in range(m):
        if ev[j, 0] != 0:
            continue
        s = ev[j, 1]
        o = ev[j, 4]
        c = 0
        inull = False
        iv = np.int64(0)
        fv = 0.0
        for q in range(ev[j, 2] - s):
            if not (mset >> flat[o + q]) & 1:
                continue
            r = s + q
            if not valid[r]:
                continue
            if kind == 0:
                v = ivals[r]
                if c == 0:
                    iv = v
                elif func == 1 or func == 2:
                    if not inull:
                        t = iv + v
                        if (iv > 0 and v > 0 and t < 0) or (iv < 0 and v < 0 and t >= 0):
                            inull = True
                        iv = t
                elif func == 3:
                    if v < iv:
                        iv = v
                elif func == 4:
                    if v > iv:
                        iv = v
            elif kind == 1:
                x = fvals[r]
                if c == 0:
                    fv = x
                elif func == 1 or func == 2:
                    fv = fv + x
                elif func == 3:
                    if x < fv:
                        fv = x
                elif func == 4:
                    if x > fv:
                        fv = x
            c += 1
        cnt[j] = c
        ok[j] = c > 0 and not inull
        if func == 2 and ok[j]:
            if kind == 0:
                fout[j] = float(iv) / float(c)
            else:
                fout[j] = fv / float(c)
        elif kind == 0:
            iout[j] = iv
            fout[j] = float(iv)
        else:
            fout[j] = fv
    return iout, fout, cnt, ok
