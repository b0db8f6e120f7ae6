"""Mask and cache correctness of the transformers backend on tiny random Llama models.

The reference for every check is the model run without our cache tricks: one
causal forward pass over the full token sequence (prompt + a root-to-node path).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from localrag.backends.hf import HFBackend, is_chain, tree_geometry
from tests.hf.conftest import tiny_backend

ATOL = 1e-4  # fp32: tree vs one-by-one differ only by summation order


def reference_logits(be: HFBackend, tokens: list[int]) -> np.ndarray:
    """(V,) logits after `tokens`, from one plain causal pass without any cache."""
    with torch.inference_mode():
        out = be.model(input_ids=torch.tensor([tokens]), use_cache=False)
    return out.logits[0, -1].float().numpy()


def path_to(parents: list[int], node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def random_tree(rng: np.random.Generator, n: int, vocab: int) -> tuple[list[int], list[int]]:
    """n nodes; each node's parent is a random earlier node or the context (-1)."""
    parents = [-1] + [int(rng.integers(-1, i)) for i in range(1, n)]
    tokens = [int(t) for t in rng.integers(3, vocab, size=n)]
    return tokens, parents


def test_tree_geometry():
    depth, anc = tree_geometry([-1, 0, 0, 1, -1])
    assert depth.tolist() == [0, 1, 1, 2, 0]
    assert anc[3].tolist() == [True, True, False, True, False]
    assert anc[4].tolist() == [False, False, False, False, True]
    assert is_chain([-1, 0, 1]) and not is_chain([-1, 0, 0])
    with pytest.raises(ValueError):
        tree_geometry([-1, 2, 0])


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_logits_equal_each_path_decoded_alone(attn):
    be = tiny_backend(seed=1, attn=attn)
    rng = np.random.default_rng(0)
    prompt = [1] + [int(t) for t in rng.integers(3, 64, size=11)]
    be.prefill(prompt)
    tokens, parents = random_tree(rng, 24, be.n_vocab)
    rows = be.eval_tree(tokens, parents).copy()  # (n, V)
    assert rows.shape == (24, be.n_vocab) and rows.dtype == np.float32
    for i in range(len(tokens)):
        ref = reference_logits(be, prompt + [tokens[j] for j in path_to(parents, i)])
        np.testing.assert_allclose(rows[i], ref, atol=ATOL, rtol=0)
    # nothing was committed by eval_tree
    assert be.tokens == prompt


def test_chain_fast_path_equals_masked_tree():
    """A chain takes the plain-causal path; the same chain inside a tree takes the 4D-mask path."""
    be = tiny_backend(seed=2)
    prompt = [1, 5, 6, 7, 8]
    be.prefill(prompt)
    chain = be.eval_tree([9, 10, 11], [-1, 0, 1]).copy()
    tree = be.eval_tree([9, 30, 10, 11, 31], [-1, -1, 0, 2, 0]).copy()
    np.testing.assert_allclose(tree[[0, 2, 3]], chain, atol=ATOL, rtol=0)


def test_commit_path_compacts_cache_over_many_steps():
    """Random trees, random accepted paths (including non-prefix ones) for many steps:
    the logits after each step, and the whole KV cache, match a fresh plain pass."""
    be = tiny_backend(seed=3)
    rng = np.random.default_rng(1)
    context = [1, 4, 5, 6]
    logits = be.prefill(context)
    for _step in range(40):
        tokens, parents = random_tree(rng, int(rng.integers(1, 12)), be.n_vocab)
        rows = be.eval_tree(tokens, parents).copy()
        path = path_to(parents, int(rng.integers(0, len(tokens))))
        be.commit_path(path)
        context += [tokens[i] for i in path]
        assert be.tokens == context
        logits = rows[path[-1]]
        np.testing.assert_allclose(logits, reference_logits(be, context), atol=ATOL, rtol=0)
        bonus = int(np.argmax(logits))  # the plain-decoding step after acceptance
        logits = be.decode_one(bonus).copy()
        context.append(bonus)
        np.testing.assert_allclose(logits, reference_logits(be, context), atol=ATOL, rtol=0)
    # the compacted cache equals the cache of one fresh prefill of the same tokens
    fresh = tiny_backend(seed=3)
    fresh.prefill(context)
    for ours, ref in zip(be._cache.layers, fresh._cache.layers, strict=True):
        assert ours.keys.shape == ref.keys.shape == (1, 2, len(context), 8)
        torch.testing.assert_close(ours.keys, ref.keys, atol=ATOL, rtol=0)
        torch.testing.assert_close(ours.values, ref.values, atol=ATOL, rtol=0)


def test_commit_nothing_truncate_and_reset():
    be = tiny_backend(seed=4)
    prompt = [1, 7, 8, 9, 10, 11]
    base = be.prefill(prompt).copy()
    be.eval_tree([12, 13], [-1, -1])
    be.commit_path([])  # reject the whole tree
    assert be.tokens == prompt
    np.testing.assert_allclose(be.eval_tree([12], [-1])[0], reference_logits(be, prompt + [12]), atol=ATOL)
    be.truncate(3)  # drops the uncommitted tree and 3 committed tokens
    assert be.tokens == prompt[:3]
    np.testing.assert_allclose(be.prefill(prompt[3:]), base, atol=ATOL)
    be.reset()
    assert be.tokens == [] and be.n_past == 0
    np.testing.assert_allclose(be.prefill(prompt), base, atol=ATOL)


def test_commit_path_must_be_a_root_to_node_chain():
    be = tiny_backend(seed=5)
    be.prefill([1, 3])
    be.eval_tree([4, 5, 6], [-1, 0, -1])
    with pytest.raises(ValueError):
        be.commit_path([1])  # node 1 is not a root
    with pytest.raises(ValueError):
        be.commit_path([0, 2])  # node 2 is not a child of 0
    be.commit_path([0, 1])
    assert be.tokens == [1, 3, 4, 5]


def test_context_limit_and_chunked_prefill():
    be = tiny_backend(seed=6)
    be.n_batch = 7  # force several prefill chunks
    prompt = [1] + [3 + i % 60 for i in range(40)]
    np.testing.assert_allclose(be.prefill(prompt), reference_logits(be, prompt), atol=ATOL)
    be.n_ctx = len(prompt) + 2
    with pytest.raises(ValueError, match="context full"):
        be.eval_tree([3, 4, 5], [-1, 0, 1])
