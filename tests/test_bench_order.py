"""The run order of ``bench/match_recognize.py``: rotated rounds favour no pattern and no side."""

from collections import Counter

import pytest

from bench.match_recognize import SIDES, balanced, by_position, schedule

NAMES = ["abc", "reluctant", "alt", "vshape"]


def positions(runs, names):
    """``Counter((pattern, position in its round))`` and ``Counter((pattern, side run first))`` of the counted
    runs of ``schedule``."""
    counted = [(n, side) for n, side, c in runs if c]
    per_round = 2 * len(names)
    rounds = [counted[i:i + per_round] for i in range(0, len(counted), per_round)]
    where, first = Counter(), Counter()
    for rnd in rounds:
        patterns = [n for n, _ in rnd[::2]]
        assert sorted(patterns) == sorted(names)  # every pattern once a round, its two sides back to back
        assert all(rnd[2 * i][0] == rnd[2 * i + 1][0] and {rnd[2 * i][1], rnd[2 * i + 1][1]} == set(SIDES)
                   for i in range(len(names)))
        where.update((n, i) for i, n in enumerate(patterns))
        first.update((n, side) for n, side in rnd[::2])
    return where, first


@pytest.mark.parametrize("names", [NAMES, NAMES[:2], NAMES[:3], NAMES[:1]])
def test_rotated_rounds_are_balanced(names):
    k = len(names)
    repeat = 2 * (k * 2 if k % 2 else k)  # two full cycles of lcm(k, 2) rounds
    assert balanced(k, repeat)
    runs = schedule(names, repeat)
    assert runs[:2 * k] == [(n, side, False) for n in names for side in SIDES]  # warm-ups first
    assert all(c for _, _, c in runs[2 * k:]) and len(runs) == 2 * k * (repeat + 1)
    where, first = positions(runs, names)
    assert set(where.values()) == {repeat // k} and len(where) == k * k  # each pattern at each position alike
    assert set(first.values()) == {repeat // 2} and len(first) == 2 * k  # each side first as often


def test_rotation_moves_every_pattern():
    where, _ = positions(schedule(NAMES, 4), NAMES)
    assert {i for (n, i) in where if n == "vshape"} == {0, 1, 2, 3}
    assert not balanced(4, 5) and not balanced(3, 4) and balanced(3, 6)


def test_fixed_order_is_the_former_one():
    runs = schedule(["abc", "alt"], 2, "fixed")
    assert runs == [("abc", "plain", False), ("abc", "plain", True), ("abc", "plain", True),
                    ("abc", "sparkcep", False), ("abc", "sparkcep", True), ("abc", "sparkcep", True),
                    ("alt", "plain", False), ("alt", "plain", True), ("alt", "plain", True),
                    ("alt", "sparkcep", False), ("alt", "sparkcep", True), ("alt", "sparkcep", True)]
    with pytest.raises(ValueError):
        schedule(["abc"], 1, "random")


def test_ratios_by_position_follow_the_rotation():
    # pattern 1 of 3: round 0 at position 1, round 1 at 0, round 2 at 2, round 3 at 1 again
    got = by_position(1, 3, [2.0, 3.0, 1.0, 4.0], [1.0, 1.0, 1.0, 1.0])
    assert got == [(0, 3.0), (1, 3.0), (2, 1.0)]
    runs = [(n, side) for n, side, c in schedule(["a", "b", "c"], 4) if c]
    assert [runs[2 * j][0] for j in range(12)].index("b") % 3 == 1  # round 0: "b" second
