"""Lossless acceptance of a verified token tree: greedy and exact sampling.

Given the tree and the target's logits after every node (one ``eval_tree``),
walk from the root and return the accepted node path plus the bonus token the
target emits after it. Output is distributed exactly as plain decoding's.

    path, bonus = accept(tree, rows, sampler)     # rows: (n, V) target logits

Tests: ``pytest tests/rasd/test_verify.py`` (chi-square on a real vocabulary slice).
"""

from __future__ import annotations

import numpy as np

from localrag.generation import Sampler
from localrag.rasd.tree import TokenTree


def accept_greedy(tree: TokenTree, rows: np.ndarray) -> tuple[list[int], int]:
    """Follow the child whose token is the target's argmax; stop when none matches.

    rows: (n, V) target logits, row i = next-token logits after node i.
    The target's argmax at the stop node is the bonus token (always correct).
    """
    path = [0]
    node = 0
    while True:
        best = int(np.argmax(rows[node]))
        child = tree.children[node].get(best)
        if child is None:
            return path, best
        path.append(child)
        node = child


def accept_sample(tree: TokenTree, rows: np.ndarray, sampler: Sampler) -> tuple[list[int], int]:
    """Exact multi-candidate speculative sampling with deterministic candidates.

    At each node, p' = the target distribution after temperature/top-k/top-p
    (Sampler.distribution). Try the distinct child tokens c_1, c_2, ... in score
    order; accept c_j with probability p_res(c_j), where p_res is p' with the
    already-rejected children zeroed and renormalised. If all are rejected,
    sample the bonus token from the final residual. Why exact: for a candidate
    set chosen independently of the verification randomness,
        P(emit c_1) = p(c_1),
        P(emit c_2) = (1 - p(c_1)) * p(c_2) / (1 - p(c_1)) = p(c_2), ...
        P(emit x not a child) = (1 - sum_j p(c_j)) * p(x) / (1 - sum_j p(c_j)) = p(x).
    Every accepted child then recurses with the target's distribution after it.
    """
    rng = sampler.rng
    path = [0]
    node = 0
    while True:
        ids, probs = sampler.distribution(rows[node])  # (m,), (m,) non-zero support of p'
        p = dict(zip(ids.tolist(), probs.tolist(), strict=True))
        mass = 1.0  # total mass of p_res before renormalising
        kids = sorted(tree.children[node].items(), key=lambda kv: -tree.scores[kv[1]])
        moved = False
        for tok, child in kids:
            pc = p.get(tok, 0.0)
            if pc <= 0.0:
                continue
            # accept with p_res(c) = p(c) / mass  (the rejected children's mass is removed)
            if rng.random() * mass < pc:
                path.append(child)
                node = child
                moved = True
                break
            mass -= pc
            p[tok] = 0.0
        if moved:
            continue
        # all children rejected: bonus ~ p_res = p with rejected children zeroed, renormalised
        keys = np.fromiter(p.keys(), dtype=np.int64, count=len(p))
        w = np.fromiter(p.values(), dtype=np.float64, count=len(p))
        if w.sum() <= 0.0:  # float round-off: every candidate's mass was rejected
            return path, int(ids[int(np.argmax(probs))])
        w /= w.sum()
        return path, int(keys[rng.choice(len(keys), p=w)])


def accept(tree: TokenTree, rows: np.ndarray, sampler: Sampler) -> tuple[list[int], int]:
    """Greedy or sampled acceptance, as the sampler's config says."""
    if sampler.greedy:
        return accept_greedy(tree, rows)
    return accept_sample(tree, rows, sampler)
