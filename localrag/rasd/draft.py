"""Draft-model drafter: a small model with the target's vocabulary grows a dynamic tree.

* ``load_draft`` loads a draft model and checks its vocabulary against the
  target's token by token (``ModelError`` naming the first differing id).
* ``DraftModel.sync`` keeps the draft's KV cache in step with the accepted
  tokens: only the tokens accepted since the last step are prefilled (longest
  common prefix with what the draft already holds), never the whole context.
* ``DraftModel.grow`` expands from the root where the cumulative draft
  probability is highest (EAGLE-2-style dynamic tree): each round evaluates the
  best ``width`` unexpanded nodes in one forward pass and adds their top
  ``branch`` children, until ``draft_nodes`` or ``draft_depth`` rounds. Or, where
  the draft's batched forwards are not cheaper per token (a CPU), a greedy chain
  decoded incrementally on the draft's KV, stopped where the next node's
  calibrated acceptance no longer pays for it. The chain stays in the draft's KV,
  so the next ``sync`` prefills only what the target did not accept. The draft's
  distribution at every expanded node is kept (for RASD pruning).
* ``DraftModel.score`` gives draft probabilities to retrieval-tree nodes the
  draft tree did not reach, in ONE batched draft pass over those nodes' parents
  (a tree draft; a chain draft scores only what its chain already evaluated).

    draft = load_draft(target, "smollm2-135m-instruct")
    dm = DraftModel(draft, RasdConfig())
    root_probs = dm.sync(target.tokens + [root])
    tree, dists = dm.grow(root, root_probs)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from localrag.backends.base import Backend
from localrag.backends.loader import load_backend
from localrag.config import ModelConfig, RasdConfig
from localrag.generation import backend_sync
from localrag.models import ModelError
from localrag.rasd.tree import DRAFT, TokenTree


def softmax(logits: np.ndarray) -> np.ndarray:
    """(V,) logits -> (V,) float32 probabilities (a fresh array, safe to keep)."""
    z = logits.astype(np.float32, copy=True)
    z -= z.max()
    np.exp(z, out=z)
    z /= z.sum()
    return z


def check_vocab(target: Backend, draft: Backend) -> None:
    """Raise ModelError unless the two models have the same vocabulary, token by token."""
    tname, dname = target.name, draft.name
    if target.n_vocab != draft.n_vocab:
        raise ModelError(
            f"draft model {dname} cannot draft for {tname}: vocabulary sizes differ "
            f"({draft.n_vocab} vs {target.n_vocab} tokens); a draft model must share the target's tokenizer"
        )
    tp, dp = target.vocab_pieces(), draft.vocab_pieces()
    for i, (a, b) in enumerate(zip(tp, dp, strict=True)):
        if a != b:
            raise ModelError(
                f"draft model {dname} cannot draft for {tname}: token {i} is {b!r} in the draft "
                f"but {a!r} in the target; a draft model must share the target's tokenizer"
            )


def load_draft(target: Backend, model: str, config: ModelConfig | None = None) -> Backend:
    """Load `model` (registry name or path) as a draft for `target`; check the vocabulary.

    The draft gets the target's context length; it never needs more KV sequences
    than the draft tree has leaves.
    """
    cfg = config or ModelConfig(
        model=model,
        n_ctx=target.n_ctx,
        n_threads=target.config.n_threads,
        n_gpu_layers=target.config.n_gpu_layers,
    )
    draft = load_backend(cfg)
    try:
        check_vocab(target, draft)
    except ModelError:
        draft.close()
        raise
    return draft


class DraftModel:
    """The draft backend plus the tree-growing policy of a RasdConfig.

    chain: grow one greedy chain, one incremental ``decode_one`` per token on top of the
    draft's KV, instead of a tree whose every round re-evaluates its paths. Right where the
    draft's batched forwards cost nearly k times one token (a compute-bound CPU).
    min_path_prob: stop the chain where the next node's acceptance probability (along the
    whole path) is below this: it would cost more drafting and verification time than its
    expected acceptance saves (see ``RasdDecoder``).
    """

    def __init__(self, backend: Backend, config: RasdConfig, chain: bool | None = None, min_path_prob: float = 0.0):
        self.backend = backend
        self.config = config
        self.chain = bool(config.draft_chain if chain is None else chain)
        self.min_path_prob = min_path_prob
        self._n_root: int | None = None  # draft KV length through this step's root (set by sync)

    def sync(self, context: Sequence[int]) -> np.ndarray:
        """Make the draft's KV hold `context` (reusing the common prefix); (V,) probs after it."""
        probs = softmax(backend_sync(self.backend, list(context)))
        self._n_root = self.backend.n_past
        return probs

    def _eval_nodes(self, tree: TokenTree, nodes: Sequence[int]) -> dict[int, np.ndarray]:
        """Draft distributions after each of `nodes` (tree indices, != 0) in one forward pass.

        The root is already in the draft's KV, so the pass holds the union of the
        paths root->node without the root; nothing is committed (a chain left in the KV
        by ``grow`` is dropped first: these trees branch from the root)."""
        if self._n_root is not None:
            self.backend.truncate(self._n_root)
        need: set[int] = set()
        for v in nodes:
            while v > 0 and v not in need:
                need.add(v)
                v = tree.parents[v]
        order = sorted(need)  # parents come before children in a TokenTree
        pos = {v: i for i, v in enumerate(order)}
        toks = [tree.tokens[v] for v in order]
        parents = [pos[tree.parents[v]] if tree.parents[v] > 0 else -1 for v in order]
        rows = self.backend.eval_tree(toks, parents)  # (len(order), V) views: copy what we keep
        out = {v: softmax(rows[pos[v]]) for v in nodes}
        self.backend.commit_path([])
        return out

    def grow(
        self,
        root: int,
        root_probs: np.ndarray,
        accept: Callable[[float], float] | None = None,
        max_depth: int | None = None,
    ) -> tuple[TokenTree, dict[int, np.ndarray]]:
        """Dynamic draft tree below `root`; scores are cumulative draft probabilities.

        accept: draft probability of a node -> its calibrated acceptance probability given its
        parent's (the chain's stop rule; default: the draft probability itself).
        max_depth: the longest path (default config.max_depth; less near the end of an answer).
        No node is grown below an end-of-generation token.
        Returns the tree and {node: (V,) draft probs after it} for expanded nodes."""
        s = self.config
        depth = s.max_depth if max_depth is None else min(max_depth, s.max_depth)
        if depth <= 0:
            return TokenTree(root), {0: root_probs}
        if self.chain:
            return self._grow_chain(root, root_probs, accept or (lambda p: p), depth)
        branch, width = s.draft_branch, s.draft_width
        tree = TokenTree(root)
        dists: dict[int, np.ndarray] = {0: root_probs}
        self._add_children(tree, 0, root_probs, branch)
        for _ in range(s.draft_depth - 1):
            if tree.n_drafted >= s.draft_nodes:
                break
            frontier = [
                v for v in range(1, len(tree))
                if v not in dists and tree.depths[v] < depth and not self.backend.is_eog(tree.tokens[v])
            ]
            frontier.sort(key=lambda v: -tree.scores[v])
            pick = frontier[:width]
            if not pick:
                break
            for v, probs in self._eval_nodes(tree, pick).items():
                dists[v] = probs
                self._add_children(tree, v, probs, branch)
        if tree.n_drafted > s.draft_nodes:
            keep = [0, *tree.ranked()[: s.draft_nodes]]
            old = sorted(keep)
            tree = tree.select(keep)
            dists = {new: dists[o] for new, o in enumerate(old) if o in dists}
        return tree, dists

    def _grow_chain(
        self, root: int, root_probs: np.ndarray, accept: Callable[[float], float], max_depth: int
    ) -> tuple[TokenTree, dict[int, np.ndarray]]:
        """Greedy chain below `root` (already in the draft's KV): each new token is decoded on top
        of the last (cost: one single-token draft forward per node). The chain stays in the KV:
        the next ``sync`` keeps its accepted prefix.

        Stop rule: node d + 1 pays while a(path to it) >= min_path_prob, where a multiplies the
        calibrated acceptance of every node. The first node is always proposed (the budget
        decides whether to verify it), and the forward that would give node d + 1 is skipped
        when even the best acceptance any node can have could not keep the path above it."""
        tree = TokenTree(root)
        dists: dict[int, np.ndarray] = {0: root_probs}
        node, probs, a_path = 0, root_probs, 1.0
        best = accept(1.0)
        depth = min(self.config.draft_nodes, max_depth)
        for d in range(depth):
            tok = int(np.argmax(probs))
            p = float(probs[tok])
            if d and a_path * accept(p) < self.min_path_prob:
                break
            a_path *= accept(p)
            node = tree.add_node(node, tok, tree.scores[node] * p, DRAFT)
            if d + 1 == depth or a_path * best < self.min_path_prob or self.backend.is_eog(tok):
                break
            probs = softmax(self.backend.decode_one(tok))  # (V,) after the chain so far
            dists[node] = probs
        return tree, dists

    @staticmethod
    def _add_children(tree: TokenTree, node: int, probs: np.ndarray, branch: int) -> None:
        top = (
            np.argpartition(-probs, branch)[:branch] if branch < probs.shape[0] else np.arange(probs.shape[0])
        )
        for t in top[np.argsort(-probs[top])]:
            tree.add_node(node, int(t), tree.scores[node] * float(probs[t]), DRAFT)

    def score(self, rtree: TokenTree, known: dict[tuple[int, ...], np.ndarray]) -> list[float]:
        """Draft probability p(token | path) for every node of retrieval tree `rtree`.

        known: {token path below the root (tuple): draft probs after it} from the draft
        tree. A tree draft evaluates the parents it lacks together in ONE batched draft
        pass; a chain draft (batched forwards cost nearly a forward per node) does not, and
        the nodes below an unknown parent get 0, so pruning drops them: what remains are the
        retrieval tokens along the chain and the alternatives at each of its positions.
        Returns cond[v] (cond[0] = 1)."""
        n = len(rtree)
        paths: list[tuple[int, ...]] = [()] * n
        for v in range(1, n):
            paths[v] = paths[rtree.parents[v]] + (rtree.tokens[v],)
        missing = sorted({rtree.parents[v] for v in range(1, n) if paths[rtree.parents[v]] not in known})
        if missing and not self.chain:
            for u, probs in self._eval_nodes(rtree, missing).items():
                known[paths[u]] = probs
        cond = [1.0] * n
        for v in range(1, n):
            probs = known.get(paths[rtree.parents[v]])
            cond[v] = float(probs[rtree.tokens[v]]) if probs is not None else 0.0
        return cond
