"""Acceptance is lossless: greedy follows the argmax; sampling keeps the target distribution.

The sampling test is statistical: many seeded runs, chi-square of the emitted
tokens against p' (the Sampler's temperature/top-k/top-p distribution), for the
first token and for the second token given the first was a drafted child.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from localrag.config import GenerationConfig
from localrag.generation import Sampler
from localrag.rasd.accept import accept, accept_greedy
from localrag.rasd.tree import TokenTree

N_RUNS = 20000


def _tree() -> TokenTree:
    t = TokenTree(0)
    t.add_path([2, 3], [0.6, 0.3])
    t.add_path([2, 4], [0.6, 0.2])
    t.add_path([5], [0.5])
    t.add_path([1], [0.1])
    return t  # nodes: 0 root, 1:'2', 2:'3', 3:'4', 4:'5', 5:'1'


def _emitted(tree: TokenTree, rows: np.ndarray, sampler: Sampler) -> list[int]:
    path, bonus = accept(tree, rows, sampler)
    return [tree.tokens[i] for i in path[1:]] + [bonus]


def _check(tree: TokenTree, rows: np.ndarray, cfg: GenerationConfig) -> None:
    sampler = Sampler(cfg)
    V = rows.shape[1]
    first = np.zeros(V)
    second = np.zeros(V)  # second emitted token, given the first was the drafted child at node 1
    child = tree.tokens[1]
    for _ in range(N_RUNS):
        out = _emitted(tree, rows, sampler)
        first[out[0]] += 1
        if out[0] == child:
            second[out[1]] += 1
    for counts, row in ((first, rows[0]), (second, rows[1])):
        ids, probs = Sampler(cfg).distribution(row)
        p = np.zeros(V)
        p[ids] = probs
        assert counts[p == 0].sum() == 0, "emitted a token outside the target's support"
        support = p > 0
        expected = p[support] * counts.sum()
        stat, pval = chisquare(counts[support], expected)
        assert pval > 1e-3, (pval, counts[support], expected)


@pytest.mark.parametrize(
    "cfg",
    [
        GenerationConfig(temperature=1.0, seed=1),
        GenerationConfig(temperature=0.7, top_k=5, seed=2),
        GenerationConfig(temperature=1.3, top_p=0.8, seed=3),
    ],
)
def test_sampling_keeps_target_distribution_synthetic(cfg):
    rng = np.random.default_rng(7)
    rows = rng.normal(0, 1.5, size=(6, 8)).astype(np.float32)
    rows[0, 2] += 1.0  # make the drafted child likely so the conditional has data
    _check(_tree(), rows, cfg)


def test_greedy_follows_argmax():
    t = _tree()
    rows = np.zeros((6, 8), dtype=np.float32)
    rows[0, 2] = 5  # root -> '2'
    rows[1, 4] = 5  # '2' -> '4'
    rows[3, 6] = 5  # after '4' -> bonus 6
    path, bonus = accept_greedy(t, rows)
    assert path == [0, 1, 3] and bonus == 6


@pytest.mark.slow
def test_sampling_keeps_target_distribution_real_slice(smollm2):
    """Real smollm2 logits over a 12-token vocabulary slice, a real draft tree."""
    be = smollm2
    be.reset()
    logits = np.array(be.prefill(be.tokenize("The three primary colors are", add_special=True)))
    top = np.argsort(-logits)[:3].tolist()
    tree_tokens = [int(np.argmax(logits)), top[0], top[1], top[2]]
    rows = np.array(be.eval_tree(tree_tokens, [-1, 0, 0, 0]))  # (4, V)
    be.commit_path([])
    after_root = rows[0]
    ids = list(dict.fromkeys(top + np.argsort(-after_root)[:6].tolist() + np.argsort(-rows[1])[:6].tolist()))[
        :12
    ]
    remap = {t: i for i, t in enumerate(ids)}
    sl = rows[:, ids]  # (4, 12): the vocabulary slice
    t = TokenTree(0)
    for tok in top:
        if tok in remap:
            t.add_path([remap[tok]], [0.5])
    # row i of the slice is "after tree node i": root row = after_root, child rows follow
    sub = np.stack([sl[0]] + [sl[1 + top.index(ids[t.tokens[c]])] for c in range(1, len(t))])
    _check(t, sub, GenerationConfig(temperature=1.0, seed=11))
    be.reset()
