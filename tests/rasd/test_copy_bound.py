"""The copy bound of bench speed: what any drafter that copies text could gain at a cost curve."""

from __future__ import annotations

import pytest

from localrag.bench.speed import copy_bound, copyable


def test_copyable_needs_the_pair_earlier_in_a_source_or_the_output():
    doc, prompt = [1, 2, 3, 4], [9, 1]
    #          (1,2) yes, (2,3) yes, (3,7) no, (7,1) no, (1,2) yes, (2,3) yes, (3,7) yes: it occurred above
    assert copyable([doc, prompt], [2, 3, 7, 1, 2, 3, 7]) == [True, True, False, False, True, True, True]
    assert copyable([[5, 6]], [6]) == [False]  # the prompt ends with 6: (6, 6) never occurred


def test_nothing_to_copy_bounds_the_speedup_at_one():
    assert copy_bound([[1, 2, 3]], [7, 8, 9, 10, 11], lambda k: 1.0, max_depth=12) == 1.0
    assert copy_bound([[1, 2]], [3], lambda k: 1.0, max_depth=12) == 1.0


def test_bound_follows_the_cost_curve():
    doc = list(range(100, 140))
    out = list(range(100, 121))  # a verbatim copy: every token after the first is copyable
    # a flat curve: one forward verifies the whole answer (20 tokens after the first, paths of 19 + bonus)
    assert copy_bound([doc, [99]], out, lambda k: 1.0, max_depth=40) == pytest.approx(20.0)
    # paths of at most 4: every step emits 5 tokens at the cost of one
    assert copy_bound([doc, [99]], out, lambda k: 1.0, max_depth=4) == pytest.approx(5.0)
    # a linear curve (no batching gain): copying saves nothing
    assert copy_bound([doc, [99]], out, lambda k: float(k), max_depth=40) == pytest.approx(1.0)
    # T(k) = 1 + (k - 1) / 2: a step of r drafted tokens emits r + 1 tokens in 1 + r / 2; best is the
    # longest path: 20 tokens in one step, 1 + 19 / 2 = 10.5
    assert copy_bound([doc, [99]], out, lambda k: 1 + (k - 1) / 2, max_depth=40) == pytest.approx(20 / 10.5)
