"""TokenTree: longest-prefix fusion, pruning to a budget, export layouts."""

from __future__ import annotations

import numpy as np
import pytest

from localrag.rasd.tree import BOTH, DRAFT, RETRIEVAL, TokenTree


def test_add_path_fuses_on_longest_prefix():
    t = TokenTree(1)
    a = t.add_path([5, 6, 7], [0.9, 0.8, 0.7], RETRIEVAL)
    b = t.add_path([5, 6, 9], [0.9, 0.8, 0.1], RETRIEVAL)
    assert a[:2] == b[:2] and a[2] != b[2]
    assert len(t) == 5 and t.depths == [0, 1, 2, 3, 3]
    assert t.counts[a[0]] == 2 and t.counts[a[2]] == 1


def test_merge_keeps_both_sources_and_max_score():
    d = TokenTree(1)
    d.add_path([5, 6], [0.5, 0.4], DRAFT)
    r = TokenTree(1)
    r.add_path([5, 8], [0.7, 0.2], RETRIEVAL)
    m = d.merge(r)
    assert d.tokens == [1, 5, 6, 8]
    assert d.sources[1] == BOTH and d.sources[2] == DRAFT and d.sources[3] == RETRIEVAL
    assert d.scores[1] == 0.7 and m == {0: 0, 1: 1, 2: 3}
    with pytest.raises(ValueError):
        d.merge(TokenTree(2))


def test_prune_is_ancestor_closed_and_best_first():
    t = TokenTree(0)
    t.add_path([1, 2, 3], [0.9, 0.85, 0.2])
    t.add_path([4], [0.5])
    t.add_path([1, 7], [0.9, 0.6])
    p = t.prune(3)
    assert sorted(p.tokens[1:]) == [1, 2, 7]
    for i in range(1, len(p)):  # every kept node's parent is kept
        assert p.parents[i] < i
    p2 = t.prune(10, min_score=0.55)
    assert sorted(p2.tokens[1:]) == [1, 2, 7]
    assert t.prune(0).tokens == [0]


def test_layout_mask_and_leaves():
    t = TokenTree(0)
    t.add_path([1, 2])
    t.add_path([3])
    lay = t.layout()
    assert lay["leaves"] == [2, 3]
    want = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 1]], dtype=bool)
    assert (lay["mask"] == want).all()
    assert t.path_to(2) == [0, 1, 2]


def test_select_rejects_orphans():
    t = TokenTree(0)
    t.add_path([1, 2])
    with pytest.raises(ValueError):
        t.select([0, 2])


def test_graft_hangs_retrieval_continuations_below_the_chain_tip():
    from localrag.rasd.budget import Calibrator
    from localrag.rasd.phases import Proposal, graft, keys_for

    chain = TokenTree(9)
    a = chain.add_node(0, 1, 0.9, DRAFT)
    tip = chain.add_node(a, 2, 0.8, DRAFT)
    cond = [1.0, 0.9, 0.8 / 0.9]
    sub = TokenTree(2)  # continuations after the tip's token: 3 4 (twice) and 5 (once)
    sub.add_path([3, 4], scores=[2 / 3, 2 / 3], source=RETRIEVAL)
    sub.add_node(0, 5, 1 / 3, RETRIEVAL)
    sub_cond = [1.0, 2 / 3, 1.0, 1 / 3]
    graft(chain, cond, tip, sub, sub_cond)
    assert len(chain) == 6 and len(cond) == 6
    three, five = chain.children[tip][3], chain.children[tip][5]
    four = chain.children[three][4]
    assert chain.depths[four] == 4 and chain.sources[four] == RETRIEVAL
    assert cond[three] == pytest.approx(2 / 3) and cond[four] == 1.0 and cond[five] == pytest.approx(1 / 3)
    prop = Proposal(chain, cond, draft_scored=True, graft_from=3, graft_match_len=6)
    keys = keys_for(prop, Calibrator())
    assert keys[tip][0] == f"d{DRAFT}" and keys[four][0] == f"r{RETRIEVAL}" and keys[four][2] == 4
