"""Retrieval datastore: suffix-array matches, incremental context, trie with counts, a long match in a large datastore."""

from __future__ import annotations

import numpy as np

from localrag.config import RasdConfig
from localrag.rasd.datastore import Datastore
from localrag.rasd.phases import fuse, prune_retrieval
from localrag.rasd.tree import DRAFT, TokenTree
from localrag.textindex import SuffixIndex, suffix_array


def test_suffix_array_sorts_suffixes_as_lists_compare():
    """Against sorting the suffixes themselves: small alphabets (long repeats, many doubling
    rounds), a suffix that is another's prefix first, token ids past 2**16."""
    rng = np.random.default_rng(1)
    texts = [[], [7], [3, 3, 3, 3, 3], [1, 2, 1, 2, 1, 2, 1], [70000, 5, 70000, 5]]
    texts += [rng.integers(0, int(rng.integers(1, 5)), size=int(rng.integers(2, 80))).tolist() for _ in range(200)]
    for text in texts:
        assert suffix_array(text).tolist() == sorted(range(len(text)), key=lambda i: text[i:]), text


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


def test_lookup_finds_a_long_match_in_a_large_datastore():
    """A 10-token copy in 200k tokens of noise (its time per lookup: ``lookup_ms_mean`` in ``bench speed``)."""
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 30000, size=20000).tolist() for _ in range(10)]  # 200k tokens
    ds = Datastore(separator=50000)
    ds.set_documents(docs)
    ctx = rng.integers(0, 30000, size=2000).tolist() + docs[3][500:510]
    ds.set_context(ctx)
    tree, k = ds.lookup(ctx, ctx[-1], 8)
    assert k >= 10 and tree.tokens[1] == docs[3][510]
    assert ds.lookup(ctx, ctx[-1], 8)[0].tokens == tree.tokens  # a second lookup finds the same


def test_trie_nodes_keep_the_corpus_position_they_were_copied_from():
    """Copy provenance: a node continuing a corpus occurrence knows its corpus position, which
    ``locate`` turns into (document, token offset); through pruning (select) and fusion with a
    draft tree (merge) it is kept; a continuation found only in the context has none."""
    ds = Datastore(separator=1000, max_match=8)
    ds.set_documents([[1, 2, 3, 4, 5, 6], [9, 2, 3, 4, 7, 8]])
    ds.set_context([60, 2, 3, 4, 40, 41, 50, 2, 3, 4])
    tree, k = ds.lookup([50, 2, 3, 4], 4, max_depth=3)
    assert k == 3
    where = {tuple(tree.tokens[v] for v in tree.path_to(n)[1:]): tree.origins[n] for n in range(1, len(tree))}
    assert [ds.locate(where[p]) for p in ((5,), (5, 6), (7,), (7, 8))] == [(0, 4), (0, 5), (1, 4), (1, 5)]
    assert where[(40,)] == -1 and where[(40, 41)] == -1  # the context's own text: no corpus origin
    pruned, cond = prune_retrieval(tree, RasdConfig(retrieval_top=8))
    draft = TokenTree(4)
    draft.add_node(0, 7, 0.9, DRAFT)  # the draft proposes 7 too: the fused node keeps the origin
    fused, _ = fuse(draft, [1.0, 0.9], pruned, cond)
    seven = fused.children[0][7]
    assert fused.sources[seven] == DRAFT | 2 and ds.locate(fused.origins[seven]) == (1, 4)
    assert fused.select([0, seven]).origins == [-1, fused.origins[seven]]
