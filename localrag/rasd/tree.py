"""TokenTree: the candidate continuations one speculative step verifies.

A tree of tokens below the committed context. Node 0 is always the *root*: the
token that was already chosen by the target (the bonus token of the previous
step), not yet in the KV cache. Every other node is a drafted token. Each node
has a parent (parents come before children), a depth (root = 0), a score (the
estimated probability that the node is accepted, a cumulative product along
its path), a source bit set (DRAFT, RETRIEVAL or both) and an origin: where in
the retrieval datastore's corpus text the token was copied from (-1: nowhere),
so accepted tokens keep their copy provenance.

    tree = TokenTree(root_token)
    tree.add_path([5, 7, 9], scores=[0.8, 0.6, 0.3], source=RETRIEVAL)   # fuses by longest prefix
    small = tree.prune(8)                                                  # best 8 nodes, ancestor-closed
    tokens, parents = small.tokens, small.parents                          # -> Backend.eval_tree

Run the unit tests: ``pytest tests/rasd/test_tree.py``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

DRAFT = 1
RETRIEVAL = 2
BOTH = DRAFT | RETRIEVAL


class TokenTree:
    """Nodes in insertion order; node 0 is the root. See the module docstring."""

    def __init__(self, root_token: int):
        self.tokens: list[int] = [root_token]
        self.parents: list[int] = [-1]
        self.depths: list[int] = [0]
        self.scores: list[float] = [1.0]
        self.sources: list[int] = [0]
        self.counts: list[float] = [0.0]  # retrieval frequency (occurrences below this node)
        self.children: list[dict[int, int]] = [{}]  # token -> child node index
        self.origins: list[int] = [-1]  # corpus position the token was copied from (-1: none)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_drafted(self) -> int:
        return len(self.tokens) - 1

    def add_node(self, parent: int, token: int, score: float, source: int, count: float = 0.0,
                 origin: int = -1) -> int:
        """Child `token` under `parent` (merged into an existing child: max score, OR sources, the
        first known origin)."""
        existing = self.children[parent].get(token)
        if existing is not None:
            self.scores[existing] = max(self.scores[existing], score)
            self.sources[existing] |= source
            self.counts[existing] += count
            if self.origins[existing] < 0:
                self.origins[existing] = origin
            return existing
        idx = len(self.tokens)
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.scores.append(score)
        self.sources.append(source)
        self.counts.append(count)
        self.origins.append(origin)
        self.children.append({})
        self.children[parent][token] = idx
        return idx

    def add_path(
        self,
        tokens: Sequence[int],
        scores: Sequence[float] | None = None,
        source: int = RETRIEVAL,
        count: float = 1.0,
        start: int = 0,
        origin: int = -1,
    ) -> list[int]:
        """Longest-prefix fusion: walk from `start` while tokens match existing children,
        attach the remainder at the deepest match. Returns the node index of every token.
        origin: the corpus position of tokens[0] (the rest follow it), or -1."""
        out = []
        node = start
        children, counts = self.children, self.counts
        for j, tok in enumerate(tokens):
            nxt = children[node].get(tok)
            if nxt is not None and scores is None:  # fast path: walk the shared prefix
                counts[nxt] += count
                self.sources[nxt] |= source
                node = nxt
            else:
                s = scores[j] if scores is not None else self.scores[node]
                node = self.add_node(node, tok, s, source, count, origin + j if origin >= 0 else -1)
            out.append(node)
        return out

    def merge(self, other: TokenTree, start: int = 0) -> dict[int, int]:
        """Fuse every root-to-node path of `other` into self below node `start` (default the root;
        its token must be other's root token). Returns other's node index -> self's node index."""
        if other.tokens[0] != self.tokens[start]:
            raise ValueError("cannot fuse trees with different roots")
        mapping = {0: start}
        for i in range(1, len(other)):  # parents come first, so mapping[parent] exists
            mapping[i] = self.add_node(
                mapping[other.parents[i]], other.tokens[i], other.scores[i], other.sources[i], other.counts[i],
                other.origins[i],
            )
        return mapping

    def path_to(self, node: int) -> list[int]:
        """Root-to-node list of node indices (root included)."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def select(self, keep: Sequence[int]) -> TokenTree:
        """A new tree with the nodes `keep` (must be ancestor-closed and contain 0), in index order."""
        keep = sorted(set(keep))
        new_index = {old: new for new, old in enumerate(keep)}
        out = TokenTree(self.tokens[0])
        out.counts[0] = self.counts[0]
        for old in keep[1:]:
            p = new_index.get(self.parents[old])
            if p is None:
                raise ValueError(f"node {old} kept without its parent {self.parents[old]}")
            out.add_node(p, self.tokens[old], self.scores[old], self.sources[old], self.counts[old], self.origins[old])
        return out

    def prune(self, budget: int, min_score: float = 0.0) -> TokenTree:
        """Keep the root plus at most `budget` drafted nodes: the highest scores whose
        ancestors are all kept (scores are cumulative products so a child never beats
        its parent; ties go to the shallower node), dropping nodes below min_score."""
        order = self.ranked(min_score)
        return self.select([0, *order[:budget]])

    def ranked(self, min_score: float = 0.0) -> list[int]:
        """Drafted node indices in the greedy best-first order prune() uses (ancestor-closed prefixes)."""
        out: list[int] = []
        heap = [(-self.scores[c], self.depths[c], c) for c in self.children[0].values()]
        heapq.heapify(heap)
        while heap:
            neg, _, node = heapq.heappop(heap)
            if -neg < min_score:
                break
            out.append(node)
            for c in self.children[node].values():
                heapq.heappush(heap, (-self.scores[c], self.depths[c], c))
        return out

    # --- export for backends ---------------------------------------------------
    def leaves(self) -> list[int]:
        return [i for i in range(len(self)) if not self.children[i]]

    def ancestor_mask(self) -> np.ndarray:
        """(n, n) bool: mask[i, j] is True when j is i or an ancestor of i (the tree attention mask)."""
        n = len(self)
        mask = np.zeros((n, n), dtype=bool)
        for i in range(n):
            p = self.parents[i]
            if p >= 0:
                mask[i] = mask[p]
            mask[i, i] = True
        return mask

    def layout(self) -> dict:
        """Everything a backend needs: tokens, parents, depths, ancestor mask, leaves."""
        return {
            "tokens": list(self.tokens),
            "parents": list(self.parents),
            "depths": list(self.depths),
            "mask": self.ancestor_mask(),
            "leaves": self.leaves(),
        }

    def max_depth(self) -> int:
        return max(self.depths)

    def __repr__(self) -> str:
        return f"TokenTree(n={len(self)}, depth={self.max_depth()}, leaves={len(self.leaves())})"
