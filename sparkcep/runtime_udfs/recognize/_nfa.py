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
def _keep(th_s, th_leaf, th_node, c, nt, keep, lo):
    """Keep the threads (row ``c``) of start ``keep`` and of starts ``lo`` or later, in order; their number."""
    w = 0
    for t in range(nt):
        if th_s[c, t] == keep or th_s[c, t] >= lo:
            th_s[c, w] = th_s[c, t]
            th_leaf[c, w] = th_leaf[c, t]
            th_node[c, w] = th_node[c, t]
            w += 1
    return w


@njit(cache=True)
def _ge(gap, within):  # _compare(">=", gap, within): NaN is above every number
    return True if gap != gap else gap >= within


@njit(cache=True)
def _lt(gap, within):
    return False if gap != gap else gap < within


@njit(cache=True)
def match(bits, bounds, char_var, char_excl, after_off, after, start_bol, start_plain, resume_off, resume,
          match_pc, skip, skip_mask, has_within, within, monotone, ts, ts_ok, quiet, max_threads, track, caps,
          look, look_need, look_wait, merge_ok, merged):
    """Run every partition ``bounds[k]:bounds[k+1]``.  Returns the events in output order (a 5-column array:
    kind 0 match / 1 unmatched row, start, end, match number, offset of its rows' variables in the second
    arrays), the variables of every match's rows and whether each is inside ``{- -}`` (flattened), and a code:
    0 done, 1 too many threads, ``2 + k`` ``caps[k]`` is too small (run again with it larger).  ``caps`` are the
    sizes of the arrays of threads, nodes, events and match variables: they never grow here, because an array
    variable assigned inside a loop costs numba two atomic reference counts per iteration of that loop (a third
    of the time, measured).

    ``track`` False: no node per consumed row (nothing reads a match's variables: every measure reads all its
    rows, nothing is excluded); a thread's third field is then what AFTER MATCH SKIP TO FIRST/LAST v reads of
    its history, the row it would skip to (-1 none yet, -2 no row consumed), and a match's variables in the
    second arrays are 0, its rows not excluded.  The threads, matches and events are those of ``track`` True.

    ``look``: a start row's thread at a start leaf whose next leaves cannot take the row after it is not made
    (the look-ahead): it would consume the start row (or die on it) and die on the next one, never matching,
    never reaching a leaf before a thread of its own start, the least preferred of all (so it drops no other
    thread); ``look_need[leaf]`` the variables of the CHARs after ``leaf`` (-1 where a MATCH follows: never
    skipped), ``look_wait[leaf]`` whether a thread waiting at ``ANCHOR $`` follows (it lives on at the
    partition's last row).  The starts it leaves out are decided as those whose threads died; the one thing
    they could change is the thread budget, so a row where it is in reach answers code 6 (run again without
    ``look``).

    ``merge_ok[leaf + nwait]``: the leaves of :func:`.engine.merge_leaves` (all False: none); a later start's
    thread is dropped at a leaf the earliest undecided start reached on the row while every leaf it reached
    before on the row was one of them (``ok_row``); ``merged[0]`` counts them."""
    n = len(bits)
    npc = len(char_var)
    nwait = len(resume_off) - 1
    # events
    ev = np.empty((caps[2], 5), dtype=np.int64)
    nev = 0
    flat = np.empty(caps[3], dtype=np.int64)
    fexcl = np.empty(caps[3], dtype=np.bool_)
    nflat = 0
    # nodes (reset per partition)
    nrow = np.empty(caps[1], dtype=np.int64)
    nvar = np.empty(caps[1], dtype=np.int64)
    nexc = np.empty(caps[1], dtype=np.bool_)
    npar = np.empty(caps[1], dtype=np.int64)
    # threads: row c current, row 1 - c next (swapped by flipping c, not by swapping array variables)
    th_s = np.empty((2, caps[0]), dtype=np.int64)
    th_leaf = np.empty((2, caps[0]), dtype=np.int64)
    th_node = np.empty((2, caps[0]), dtype=np.int64)
    c = 0
    # matched[start] = (end, node)
    m_has = np.zeros(n, dtype=np.bool_)
    m_end = np.zeros(n, dtype=np.int64)
    m_node = np.zeros(n, dtype=np.int64)
    # stamps per leaf (index leaf + nwait): the row at which a thread of s0 / of seen_s reached it
    first_row = np.full(npc + nwait, -1, dtype=np.int64)
    seen_row = np.full(npc + nwait, -1, dtype=np.int64)
    seen_s = np.full(npc + nwait, -1, dtype=np.int64)
    ok_row = np.full(npc + nwait, -1, dtype=np.int64)
    cross = not has_within and np.any(merge_ok)
    every = cross and skip == 0  # PAST LAST ROW: every leaf, ok_row is first_row
    nmerged = 0
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
            if nt == 0 and mcount == 0:
                nnode = 0  # no thread nor pending match holds a node: the arena starts again
            if i < a1:
                # a thread for start row i, least preferred of all
                bol = i == a0
                unmade = 0
                for k in range(len(start_bol) if bol else len(start_plain)):
                    leaf = start_bol[k] if bol else start_plain[k]
                    if leaf == match_pc:
                        if not m_has[i]:
                            mcount += 1
                        m_has[i] = True
                        m_end[i] = i
                        m_node[i] = -1
                        break
                    if look:
                        if (bits[i] >> char_var[leaf]) & 1 == 0:
                            continue  # it dies on row i
                        if look_need[leaf] >= 0 and (
                                (bits[i + 1] & look_need[leaf]) == 0 if i + 1 < a1 else not look_wait[leaf]):
                            unmade += after_off[leaf + 1] - after_off[leaf]
                            continue  # it dies on row i + 1, or at the partition's end
                    if nt >= th_s.shape[1]:
                        return ev[:0], flat[:0], fexcl[:0], 2
                    th_s[c, nt] = i
                    th_leaf[c, nt] = leaf
                    th_node[c, nt] = -1 if track else -2
                    nt += 1
                bi = bits[i]
                s0 = next_start
                open_ = cross and not every
                cut = -1
                new_match = False
                nn = 0
                for t in range(nt):
                    s = th_s[c, t]
                    if s == cut:
                        continue
                    leaf = th_leaf[c, t]
                    if leaf < 0:  # waiting at ANCHOR $: a row came, the path dies
                        continue
                    var = char_var[leaf]
                    if has_within and monotone and s != i and ts_ok[i] and ts_ok[s]:
                        if _ge(ts[i] - ts[s], within):
                            continue
                    if (bi >> var) & 1 == 0:
                        continue
                    if track:
                        if nnode >= len(nrow):
                            return ev[:0], flat[:0], fexcl[:0], 3
                        nrow[nnode] = i
                        nvar[nnode] = var
                        nexc[nnode] = char_excl[leaf] != 0
                        npar[nnode] = th_node[c, t]
                        node = nnode
                        nnode += 1
                    else:  # the skip target so far: TO FIRST v the first row of v, TO LAST v the last
                        node = th_node[c, t]
                        if (skip_mask >> var) & 1 and (skip == 3 or node < 0):
                            node = i
                        elif node == -2:
                            node = -1
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
                            if open_:
                                if merge_ok[x]:
                                    ok_row[x] = i
                                else:
                                    open_ = False
                        else:
                            if every:
                                if first_row[x] == i:
                                    nmerged += 1
                                    continue
                            elif ok_row[x] == i:
                                nmerged += 1
                                continue
                            if seen_row[x] == i and seen_s[x] == s:
                                continue
                            seen_row[x] = i
                            seen_s[x] = s
                        if nn >= th_s.shape[1]:
                            return ev[:0], flat[:0], fexcl[:0], 2
                        th_s[1 - c, nn] = s
                        th_leaf[1 - c, nn] = nxt
                        th_node[1 - c, nn] = node
                        nn += 1
                if nn > max_threads:
                    return ev[:nev], flat[:nflat], fexcl[:nflat], 1
                if nn + unmade > max_threads:
                    return ev[:0], flat[:0], fexcl[:0], 6
                c = 1 - c
                nt = nn
                pos = i + 1
                if new_match and skip == 0:
                    # _prune_inside: the starts before the end of s0's match are skipped whatever happens
                    s = next_start
                    if m_has[s] and m_end[s] > s + 1:
                        e = m_end[s]
                        nt = _keep(th_s, th_leaf, th_node, c, nt, s, e)
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
                elif th_s[c, 0] == next_start:
                    continue
            else:
                # _finish: the partition has ended; threads waiting at ANCHOR $ go on, the others die
                cut = -1
                for t in range(nt):
                    s = th_s[c, t]
                    leaf = th_leaf[c, t]
                    if leaf >= 0 or s == cut:
                        continue
                    w = -leaf - 1
                    for k in range(resume_off[w], resume_off[w + 1]):
                        if resume[k] == match_pc:
                            node = th_node[c, t]
                            rows = node >= 0 if track else node != -2
                            if rows and has_within:
                                last = nrow[node] if track else a1 - 1  # a live thread has consumed every row
                                if not (ts_ok[last] and ts_ok[s] and _lt(ts[last] - ts[s], within)):
                                    continue
                            if not m_has[s]:
                                mcount += 1
                            m_has[s] = True
                            m_end[s] = a1 if rows else s
                            m_node[s] = node
                            cut = s
                            break
                nt = 0
            # _decide: the earliest undecided starts that have no live thread left, in order
            while next_start < pos:
                s = next_start
                if nt > 0 and th_s[c, 0] == s:
                    break
                if m_has[s]:
                    m_has[s] = False
                    mcount -= 1
                    end = m_end[s]
                    node = m_node[s]
                    mnum += 1
                    if nev >= len(ev):
                        return ev[:0], flat[:0], fexcl[:0], 4
                    if nflat + end - s > len(flat):
                        return ev[:0], flat[:0], fexcl[:0], 5
                    ev[nev, 0] = 0
                    ev[nev, 1] = s
                    ev[nev, 2] = end
                    ev[nev, 3] = mnum
                    ev[nev, 4] = nflat
                    nev += 1
                    if track:
                        nd = node
                        while nd >= 0:
                            flat[nflat + nrow[nd] - s] = nvar[nd]
                            fexcl[nflat + nrow[nd] - s] = nexc[nd]
                            nd = npar[nd]
                    else:
                        flat[nflat:nflat + end - s] = 0
                        fexcl[nflat:nflat + end - s] = False
                    nflat += end - s
                    if end > s:
                        covered = max(covered, end - 1)
                    # _next_start
                    if end == s or skip == 1:
                        nxt_start = s + 1
                    elif skip == 0:
                        nxt_start = end
                    else:
                        target = -1 if track else node
                        nd = node if track else -1
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
                            return ev[:0], flat[:0], fexcl[:0], 4
                        ev[nev, 0] = 1
                        ev[nev, 1] = s
                        ev[nev, 2] = s
                        ev[nev, 3] = 0
                        ev[nev, 4] = nflat
                        nev += 1
                    nxt_start = s + 1
                next_start = nxt_start
                if nt > 0 and th_s[c, 0] < nxt_start:
                    nt = _keep(th_s, th_leaf, th_node, c, nt, -1, nxt_start)
                if mcount > 0:
                    for k in range(s + 1, nxt_start):
                        if m_has[k]:
                            m_has[k] = False
                            mcount -= 1
        # anything left of this partition (there is none once decided) must not leak into the next
        for k in range(a0, a1):
            m_has[k] = False
    merged[0] = nmerged
    return ev[:nev], flat[:nflat], fexcl[:nflat], 0


@njit(cache=True)
def expand(ev, fexcl, mode):
    """The output rows of the events: (event, head, row).  ``mode`` 0 ONE ROW PER MATCH (one per event, the
    head its last row), 1 ALL ROWS (one per row of a match not inside ``{- -}``; an empty match one row, head
    -1), 2 OMIT EMPTY MATCHES (none for an empty match); an unmatched row is one row, head -1.  The head is
    the index in the match of the last row RUNNING sees."""
    m = len(ev)
    total = 0
    for j in range(m):
        total += max(ev[j, 2] - ev[j, 1], 1) if mode != 0 else 1
    oj = np.empty(total, dtype=np.int64)
    oq = np.empty(total, dtype=np.int64)
    orow = np.empty(total, dtype=np.int64)
    k = 0
    for j in range(m):
        s = ev[j, 1]
        length = ev[j, 2] - s
        if mode == 0 or length == 0 or ev[j, 0] != 0:
            if mode == 2 and ev[j, 0] == 0 and length == 0:
                continue
            oj[k] = j
            oq[k] = length - 1 if mode == 0 else -1
            orow[k] = s
            k += 1
            continue
        o = ev[j, 4]
        for q in range(length):
            if not fexcl[o + q]:
                oj[k] = j
                oq[k] = q
                orow[k] = s + q
                k += 1
    return oj[:k], oq[:k], orow[:k]


@njit(cache=True)
def locate(ev, flat, oj, oq, mset, nth, shift, final, pstart, pend):
    """Per output row: the row a reference reads among the rows of its match up to the head (``final``: all
    of them), the last one whose variable is in ``mset`` (-1: every row), or ``nth`` k + 1: the (k+1)-th from
    the first, -(k + 1): the (k+1)-th from the last; moved ``shift`` rows; -1 where there is none or it is off
    the output row's partition (``pstart[x]`` to ``pend[x]``).  Output rows of one match come together, heads
    rising: one pass over each match."""
    total = len(oj)
    out = np.full(total, -1, dtype=np.int64)
    want = nth - 1 if nth > 0 else (-nth - 1 if nth < 0 else 0)
    if mset == -1:  # every row counts: the (k+1)-th from the first or the last of ``limit`` rows, no pass
        for x in range(total):
            j = oj[x]
            if ev[j, 0] != 0:
                continue
            s = ev[j, 1]
            limit = ev[j, 2] - s if final else oq[x] + 1
            if limit <= want:
                continue
            r = s + shift + (want if nth > 0 else limit - 1 - want)
            if r >= pstart[x] and r < pend[x]:
                out[x] = r
        return out
    ring = np.empty(want + 1, dtype=np.int64)
    cur_j = -1
    seen = 0
    count = 0
    firstpos = -1
    for x in range(total):
        j = oj[x]
        if ev[j, 0] != 0:
            continue
        s = ev[j, 1]
        length = ev[j, 2] - s
        o = ev[j, 4]
        if j != cur_j:
            cur_j = j
            seen = 0
            count = 0
            firstpos = -1
        limit = length if final else oq[x] + 1
        while seen < limit:
            if (mset >> flat[o + seen]) & 1:
                if nth > 0 and count == want:
                    firstpos = seen
                ring[count % (want + 1)] = seen
                count += 1
            seen += 1
        r = -1
        if nth > 0:
            r = firstpos
        elif count > want:
            r = ring[(count - 1 - want) % (want + 1)]
        if r >= 0:
            r += s + shift
            if r < pstart[x] or r >= pend[x]:
                r = -1
        out[x] = r
    return out


@njit(cache=True)
def classify(ev, flat, oj, oq, rows, final):
    """Per output row: the variable of row ``rows[x]`` if it is one of the rows of the match up to the head
    (``final``: of the match), else -1."""
    total = len(oj)
    out = np.full(total, -1, dtype=np.int64)
    for x in range(total):
        j = oj[x]
        r = rows[x]
        s = ev[j, 1]
        limit = ev[j, 2] - s if final else oq[x] + 1
        if ev[j, 0] == 0 and r >= s and r < s + limit:
            out[x] = flat[ev[j, 4] + r - s]
    return out


@njit(cache=True)
def aggregate(ev, flat, oj, oq, ivals, fvals, valid, kind, mset, func, final):
    """Per output row, over the rows of its match up to the head (``final``: all) whose variable is in
    ``mset``, the non-NULL values (``kind`` 0 int64 ``ivals``, 1 float64 ``fvals``, 2 only counted): COUNT,
    and the fold of SUM/AVG (``+`` in row order; a BIGINT overflow makes it NULL for good), MIN/MAX.  Returns
    (int result, float result, count, not NULL); one pass over each match."""
    total = len(oj)
    iout = np.zeros(total, dtype=np.int64)
    fout = np.zeros(total, dtype=np.float64)
    cnt = np.zeros(total, dtype=np.int64)
    ok = np.zeros(total, dtype=np.bool_)
    cur_j = -1
    seen = 0
    c = 0
    inull = False
    iv = np.int64(0)
    fv = 0.0
    for x in range(total):
        j = oj[x]
        if ev[j, 0] != 0:
            continue
        s = ev[j, 1]
        o = ev[j, 4]
        if j != cur_j:
            cur_j = j
            seen = 0
            c = 0
            inull = False
            iv = np.int64(0)
            fv = 0.0
        limit = ev[j, 2] - s if final else oq[x] + 1
        while seen < limit:
            q = seen
            seen += 1
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
                y = fvals[r]
                if c == 0:
                    fv = y
                elif func == 1 or func == 2:
                    fv = fv + y
                elif func == 3:
                    if y < fv:
                        fv = y
                elif func == 4:
                    if y > fv:
                        fv = y
            c += 1
        cnt[x] = c
        ok[x] = c > 0 and not inull
        if func == 2 and ok[x]:
            fout[x] = float(iv) / float(c) if kind == 0 else fv / float(c)
        elif kind == 0:
            iout[x] = iv
        else:
            fout[x] = fv
    return iout, fout, cnt, ok
