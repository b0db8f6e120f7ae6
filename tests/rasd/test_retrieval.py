"""Retrieval datastore: suffix-array matches, incremental context, trie with counts, speed."""

from __future__ import annotations

import time

import numpy as np

from localrag.rasd.retrieval import Datastore, SuffixIndex


def test_suffix_index_finds_all_occurrences():
    rng = np.random.default_rng(0)
    text = rng.integers(0, 5, size=400).tolist()
    idx = SuffixIndex(text)
    for k in (1, 2, 3, 4):
        pat = text[100 : 100 + k]
        want = sorted(i for i in range(len(text) - k + 1) if text[i : i + k] == pat)
        assert sorted(idx.find(pat)) == want
    assert len(idx.find([9, 9])) == 0


def test_lookup_longest_match_and_counts():
    ds = Datastore(separator=1000, max_match=8)
    ds.set_documents([[1, 2, 3, 4, 5, 6], [9, 2, 3, 4, 7, 8]])
    ds.set_context([50, 51, 2, 3, 4])
    tree, k = ds.lookup([50, 51, 2, 3, 4], 4, max_depth=3)
    assert k == 3  # "2 3 4" occurs in both documents
    kids = {tree.tokens[c]: c for c in tree.children[0].values()}
    assert set(kids) == {5, 7}
    assert tree.scores[kids[5]] == 0.5 and tree.counts[0] == 2
    assert tree.max_depth() == 2  # continuations stop at the document separator


def test_context_index_tracks_generated_tokens():
    ds = Datastore(separator=1000, max_match=8, rebuild_every=4)
    ctx = [10, 11, 12, 13, 14, 15]
    ds.set_context(ctx)
    for t in [10, 11, 12, 13, 20, 21, 10, 11]:  # appended one by one (tail index, then rebuilds)
        ctx = ctx + [t]
        ds.set_context(ctx)
    tree, k = ds.lookup(ctx, 11, max_depth=4)
    assert k == 2
    conts = sorted(tuple(tree.tokens[v] for v in tree.path_to(leaf)[1:]) for leaf in tree.leaves())
    assert conts == [(12, 13, 14, 15), (12, 13, 20, 21)]
    tree, k = ds.lookup(ctx + [99], 99, max_depth=4)
    assert k == 0 and len(tree) == 1


def test_lookup_is_fast_on_a_large_datastore():
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 30000, size=20000).tolist() for _ in range(10)]  # 200k tokens
    ds = Datastore(separator=50000)
    ds.set_documents(docs)
    ctx = rng.integers(0, 30000, size=2000).tolist() + docs[3][500:510]
    ds.set_context(ctx)
    ds.lookup(ctx, ctx[-1], 8)
    t0 = time.perf_counter()
    for _ in range(20):
        tree, k = ds.lookup(ctx, ctx[-1], 8)
    per = (time.perf_counter() - t0) / 20
    assert k >= 10 and tree.tokens[1] == docs[3][510]
    assert per < 0.005, f"lookup took {per * 1e3:.2f} ms"  # one target forward is >= ~7 ms here
