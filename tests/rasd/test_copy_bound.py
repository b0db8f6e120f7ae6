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


def test_a_draft_model_adds_its_forward_per_uncopyable_token():
    # nothing to copy: a flat curve (T(k) = 1) and a free draft make every answer one step
    assert copy_bound([[1, 2, 3]], [7, 8, 9, 10, 11], lambda k: 1.0, max_depth=12, draft_s=0.0) == pytest.approx(4.0)
    # the draft's forward costs what a target token does on a flat curve: r drafted tokens and the
    # bonus cost 1 + r, exactly the r + 1 plain steps they replace
    assert copy_bound([[1, 2, 3]], [7, 8, 9, 10, 11], lambda k: 1.0, max_depth=12, draft_s=1.0) == pytest.approx(1.0)
    # a copy with one uncopyable token in the middle: 20 tokens after the first, token 10 new
    # (the pair (7, 110) is in a second source, so the copy goes on after it)
    doc = list(range(100, 140))
    out = list(range(100, 110)) + [7] + list(range(110, 120))
    copying = copy_bound([doc, [7, 110], [99]], out, lambda k: 1.0, max_depth=40)
    assert copying == pytest.approx(20 / 2)  # copy 9 + bonus (the new token), then a copy of 9 + bonus
    # drafting the new token at 0.5 of a forward: one step of 19 drafted + bonus, 1.5 in all
    assert copy_bound([doc, [7, 110], [99]], out, lambda k: 1.0, max_depth=40, draft_s=0.5) == pytest.approx(20 / 1.5)
    # never below what copying alone gives: drafting is a choice, not a must
    assert copy_bound([doc, [7, 110], [99]], out, lambda k: 1.0, max_depth=40, draft_s=5.0) == pytest.approx(copying)
