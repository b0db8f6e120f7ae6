"""Clustering, subset construction, score arithmetic and selection (no LLM; fast).

Run: .venv/bin/python -m pytest tests/grounded/test_subsets.py -q
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from localrag.config import GroundedConfig
from localrag.grounded.drafting import DrafterOutput, SpanCopy, share_plan
from localrag.grounded.extras import GroundedDraft
from localrag.grounded.scoring import combined_score, select, short_answer
from localrag.grounded.subsets import cluster, make_subsets, random_subsets, shared_prefix_order


def test_kmeans_separates_two_blobs():
    rng = np.random.default_rng(1)
    a = rng.normal([5, 0, 0], 0.1, size=(4, 3))
    b = rng.normal([0, 5, 0], 0.1, size=(3, 3))
    labels = cluster(np.vstack([a, b]), k=2, seed=0)
    assert len(set(labels[:4])) == 1 and len(set(labels[4:])) == 1 and labels[0] != labels[4]


def test_kmeans_degenerate_inputs():
    assert list(cluster(np.ones((3, 4)), k=2)) == [0, 0, 0]  # identical vectors: one cluster
    assert list(cluster(np.eye(4)[:1], k=2)) == [0]  # one chunk


def test_subsets_take_one_chunk_per_cluster_unique_and_best_ranked_first():
    labels = [0, 0, 1, 1, 0, 1]  # chunk i has retrieval rank i
    subsets = make_subsets(labels, m=5)
    assert len(subsets) == 5 and len(set(subsets)) == 5
    for sub in subsets:
        assert sorted(labels[i] for i in sub) == [0, 1]
    assert subsets[0] == (0, 2)  # the two best-ranked chunks of different clusters
    sums = [sum(s) for s in subsets]
    assert sums == sorted(sums)


def test_subsets_fewer_combinations_than_m():
    assert make_subsets([0, 1], m=5) == [(0, 1)]
    assert make_subsets([0, 0, 0], m=2) == [(0,), (1,)]  # one cluster: single-chunk drafts
    three = make_subsets([0, 1, 2, 0], m=10)
    assert len(three) == 2 and all(len(s) == 3 for s in three)


def test_chunk_order_lets_drafter_prompts_share_prefixes():
    subsets = [(0, 1), (0, 2), (1, 3), (0, 4), (2, 3)]
    ordered = shared_prefix_order(subsets)
    assert [sorted(s) for s in ordered] == [sorted(s) for s in subsets]  # same chunks, same subsets
    # chunk 3 leads (1, 3): the later (2, 3) can then share it
    assert ordered == [(0, 1), (0, 2), (3, 1), (0, 4), (3, 2)]

    def prefilled(order):  # chunk "tokens" the drafter prefills, as share_plan plans it
        prompts = [[-1, *s, 99] for s in order]  # instructions, chunks, question
        _, shared, _ = share_plan(prompts)
        return sum(len(p) - n for p, n in zip(prompts, shared, strict=True))

    assert prefilled(ordered) < prefilled(subsets)
    rng = np.random.default_rng(0)
    for _ in range(50):  # never worse than rank order, on random cluster layouts
        subs = make_subsets(rng.integers(0, 3, size=10).tolist(), m=5)
        assert prefilled(shared_prefix_order(subs)) <= prefilled(subs)


def test_random_subsets_for_the_no_clustering_ablation():
    subs = random_subsets(10, k=2, m=5, seed=3)
    assert len(subs) == 5 and len(set(subs)) == 5 and all(len(s) == 2 and s[0] < s[1] for s in subs)
    assert subs == random_subsets(10, k=2, m=5, seed=3)
    assert len(random_subsets(3, k=2, m=5)) == 3  # C(3,2) = 3 is all there is


def test_combined_score_is_the_mean_draft_log_prob_plus_the_reflection():
    d = DrafterOutput(prompt=[1], rationale=[5, 6, 7], answer=[8], rationale_lp=[-1.0, -2.0, -0.5], answer_lp=[-0.5])
    assert d.logprob == pytest.approx(-4.0)
    # mean draft log-prob (-4/4) + log p(Yes)
    assert combined_score(d.logprob, d.n_tokens, -0.25) == pytest.approx(-1.0 - 0.25)
    assert combined_score(d.logprob, d.n_tokens, None) == pytest.approx(-1.0)  # drafter-only ablation
    assert math.isfinite(combined_score(0.0, 0, -1.0))  # an empty draft


def _draft(answer: str, score: float) -> GroundedDraft:
    return GroundedDraft(answer=answer, rationale="", citations=[], draft_logprob=0.0, reflection=0.0,
                 score=score)


def test_select_skips_refusals_and_applies_the_threshold():
    cfg = GroundedConfig(min_score=-3.0)
    best, ok = select([_draft("not in the documents", 0.0), _draft("30 days", -2.0), _draft("14 days", -2.5)], cfg)
    assert best.answer == "30 days" and ok
    best, ok = select([_draft("30 days", -4.0)], cfg)
    assert best.answer == "30 days" and not ok
    assert select([_draft("", 0.0), _draft("Unknown.", 0.0)], cfg) == (None, False)


def test_share_plan_reuses_the_longest_earlier_prefix():
    sys_, a, b, c = [1, 2, 3], [10, 11], [20, 21], [30, 31]
    prompts = [sys_ + a + b, sys_ + a + c, sys_ + b + c, sys_ + a + b]
    parent, shared, waves = share_plan(prompts)
    assert parent == [-1, 0, 0, 0]
    assert shared == [0, 5, 3, 6]  # the identical prompt still decodes its last token
    assert waves == [[0], [1, 2, 3]]


def test_span_copy_allows_exactly_the_continuations_of_a_copied_span():
    copy = SpanCopy([[5, 6, 7, 6, 8], [6, 9]])
    assert copy.next_tokens() == {5, 6, 7, 8, 9}  # any token of any source may start a span
    copy.take(6)  # occurs at source 0 positions 1 and 3, source 1 position 0
    assert copy.next_tokens() == {7, 8, 9}
    copy.take(8)  # "6 8" ends source 0: nothing can follow
    assert copy.next_tokens() == set()
    copy.restart()
    copy.take(5)
    copy.take(6)
    assert copy.next_tokens() == {7}


@pytest.mark.parametrize(("reply", "phrase"), [
    ("Answer: The answer is Paris.", "Paris"),
    ("According to the documents, 1066.\nRationale: the text says so", "1066"),
    ('  \n**"Rollo"**', "Rollo"),
    ("Based on the text, the Normans came from Normandy.", "the Normans came from Normandy"),
    ("Denmark, Iceland and Norway", "Denmark, Iceland and Norway"),
])
def test_short_answer_keeps_the_phrase_only(reply, phrase):
    assert short_answer(reply) == phrase
