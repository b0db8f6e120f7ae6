"""Speculative RAG's chunk subsets: cluster the retrieved chunks, one chunk per cluster per draft.

    labels  = cluster(vectors, k)               # k-means over the chunks' MiniLM vectors
    subsets = make_subsets(labels, m)            # m unique subsets, one chunk per cluster
    subsets = shared_prefix_order(subsets)       # prompt order that lets drafts share KV prefixes
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Sequence

import numpy as np


def cluster(vectors: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """k-means labels (0..k'-1) of the chunk vectors; k' = min(k, distinct vectors)."""
    # Imported on first use: scikit-learn adds ~2.4 s to the start-up of everything that imports
    # the answer modes (python -X importtime -c "import localrag.modes"), and only Grounded needs it.
    from sklearn.cluster import KMeans

    n = len(vectors)
    k = min(k, n, len(np.unique(np.round(vectors, 6), axis=0)))
    if k <= 1:
        return np.zeros(n, dtype=int)
    return KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(vectors)


def make_subsets(labels: Sequence[int], m: int) -> list[tuple[int, ...]]:
    """m unique subsets taking one chunk per cluster (chunk indices are retrieval ranks).

    Every combination (one member of each cluster) is a candidate; they are ordered by the
    sum of their members' ranks, so the best-ranked chunks are drafted from first while each
    subset still mixes perspectives (clusters). Unique by construction; fewer than m if the
    clusters do not allow m combinations.
    """
    groups: dict[int, list[int]] = {}
    for i, lab in enumerate(labels):
        groups.setdefault(int(lab), []).append(i)
    members = [groups[c] for c in sorted(groups)]
    combos = sorted(itertools.product(*members), key=lambda c: (sum(c), c))
    return [tuple(sorted(c)) for c in combos[:m]]


def random_subsets(n_chunks: int, k: int, m: int, seed: int = 0) -> list[tuple[int, ...]]:
    """The no-clustering ablation: m unique random k-subsets of the chunks."""
    rng = np.random.default_rng(seed)
    k = min(k, n_chunks)
    total = math.comb(n_chunks, k)
    out: list[tuple[int, ...]] = []
    while len(out) < min(m, total):
        pick = tuple(sorted(int(i) for i in rng.choice(n_chunks, size=k, replace=False)))
        if pick not in out:
            out.append(pick)
    return out


def shared_prefix_order(subsets: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Each subset's chunks in the order its drafter prompt lists them, chosen so prompts share
    prefixes: the drafter prefills a prompt's common prefix with an earlier prompt once and copies
    its KV (``share_plan``), so (0, 1), (0, 2), (0, 4) prefill chunk 0 once, not three times.

    Greedy, subset by subset: the next chunk extends a prefix an earlier subset already placed if
    it can; otherwise it is the chunk most later subsets hold (so they can share it), then the
    best-ranked. Same chunks per subset; only the order inside each changes.
    """
    placed: set[tuple[int, ...]] = set()  # every prefix of the subsets ordered so far
    out: list[tuple[int, ...]] = []
    for i, sub in enumerate(subsets):
        later = collections.Counter(c for s in subsets[i + 1:] for c in s)
        prefix: tuple[int, ...] = ()
        rest = set(sub)
        while rest:
            pool = [c for c in rest if prefix + (c,) in placed] or rest
            chunk = min(pool, key=lambda c: (-later[c], c))
            prefix += (chunk,)
            rest.remove(chunk)
        placed.update(prefix[:j] for j in range(1, len(prefix) + 1))
        out.append(prefix)
    return out
