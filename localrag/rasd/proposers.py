"""The proposers: one class per drafting strategy, each behind ``propose`` and ``observe``.

The loop (``loop.RasdDecoder``) calls them, never the reverse. Each step it looks the context up
in the token datastore (``RetrievalProposer.lookup``), then asks one proposer for the candidate
tree below the root: ``RetrievalProposer`` (the datastore's continuations alone) or
``DraftProposer`` (a draft model's tree with those continuations fused in), and with a draft chain
``GraftProposer`` extends it (the datastore's continuations below the chain's end). After the
target verified a tree, ``observe`` tells every proposer which of its nodes were accepted.

    lookup = retrieval.lookup(ctx, root, depth)
    proposal = retrieval.propose(ctx, lookup, depth)
    ...verify...
    retrieval.observe(tree, path, first)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from localrag.backends.base import Backend
from localrag.config import RasdConfig
from localrag.generation import common_prefix
from localrag.rasd.cost import Calibrator, CostModel
from localrag.rasd.datastore import Datastore
from localrag.rasd.draft import DraftModel
from localrag.rasd.phases import Proposal, draft_cond, fuse, graft, prune_retrieval
from localrag.rasd.tree import DRAFT, TokenTree

DRAFT_MAX_K = 8  # the draft's cost curve is probed up to chains of this length
READ_MIN_TOKENS = 32  # a draft's reading of fewer prompt tokens does not re-measure its cost per token


@dataclass(frozen=True)
class CopiedToken:
    """Token ``token`` of the answer (0: its first) was accepted from a retrieval node copying token
    ``offset`` of datastore document ``doc`` (an index into the documents given)."""

    token: int
    doc: int
    offset: int


class Proposer(Protocol):
    """One drafting strategy (in the style of transformers' candidate generators)."""

    def propose(self, ctx: list[int], base: Proposal, depth: int) -> Proposal:
        """The candidate tree below ``base``'s root (ctx ends with it), no path deeper than
        `depth`. `base`: what the proposers before this one found (a lookup, a draft chain)."""
        ...

    def observe(self, tree: TokenTree, path: list[int], first: int) -> None:
        """The target verified `tree` and accepted the nodes `path` (root first); the accepted
        tokens are the answer's from index `first` on."""
        ...


class RetrievalProposer:
    """The token datastore's continuations of the context's longest matching suffix (REST-style),
    scored by frequency; records which accepted tokens were copied from which document."""

    def __init__(self, datastore: Datastore, config: RasdConfig):
        self.datastore = datastore
        self.config = config
        self.copies: list[CopiedToken] = []  # this answer's accepted tokens copied from the documents

    def lookup(self, ctx: list[int], root: int, depth: int) -> Proposal:
        """The retrieval trie (unpruned) of the context's longest matching suffix, in ``trie``,
        with the match length (an empty trie where nothing matches). Run every step: a lookup
        costs about 0.15 ms (docs/design.md), and the match length it finds is what tells the
        budget whether the model is copying right now."""
        empty = Proposal(TokenTree(root), [1.0], draft_scored=False, trie=TokenTree(root))
        if not self.config.use_retrieval:
            return empty
        self.datastore.set_context(ctx)
        match = self.datastore.longest_match(ctx)
        if match is None:
            return empty
        trie, mlen = self.datastore.trie(match, root, depth, self.config.max_occurrences)
        return Proposal(TokenTree(root), [1.0], draft_scored=False, match_len=mlen, trie=trie)

    def propose(self, ctx: list[int], base: Proposal, depth: int) -> Proposal:
        """`base`'s trie pruned to its best nodes by frequency."""
        return Proposal(*prune_retrieval(base.trie, self.config), draft_scored=False, match_len=base.match_len)

    def observe(self, tree: TokenTree, path: list[int], first: int) -> None:
        """The accepted nodes copied from the documents (their origin in the corpus): provenance."""
        for j, node in enumerate(path[1:]):
            if tree.origins[node] >= 0:
                doc, offset = self.datastore.locate(tree.origins[node])
                self.copies.append(CopiedToken(first + j, doc, offset))


class DraftProposer:
    """A draft model's tree (or chain) below the root, with the lookup's retrieval trie scored by
    the draft, pruned and fused in by longest-prefix matching."""

    def __init__(self, draft: Backend, config: RasdConfig, cost: CostModel, calibrator: Calibrator):
        self.config = config
        self.calibrator = calibrator
        self.t1 = 0.0  # the draft's one-token forward, seconds (measured with its cost curve)
        self.read_s = 0.0  # seconds per prompt token the draft reads: T_draft(8) / 8, then as realised
        self.model = self._model(draft, cost)

    def _model(self, draft: Backend, cost: CostModel) -> DraftModel:
        """The draft's tree policy from its own cost curve and the target's (`cost`).

        Chain or tree: a chain when the draft's cost curve is steep (CostModel.steep: batching
        buys little, so a tree's extra nodes are paid almost in full). A chain node pays for itself
        when its expected acceptance a(v) saves more target time than it costs:
        a(v) * T_target(1) >= T_draft(1) + dT_target/dk, so the chain stops below that probability.
        """
        cfg = self.config
        if not cfg.calibrate:
            return DraftModel(draft, cfg, chain=bool(cfg.draft_chain))
        dcost = CostModel.load_or_measure(draft, DRAFT_MAX_K)
        self.t1 = dcost(1)
        self.read_s = dcost(DRAFT_MAX_K) / DRAFT_MAX_K
        chain = dcost.steep() if cfg.draft_chain is None else cfg.draft_chain
        slope = (cost(9) - cost(1)) / 8  # target verify cost per extra node
        min_p = (dcost(1) + slope) / cost(1) if cfg.use_budget else 0.0
        return DraftModel(draft, cfg, chain=chain, min_path_prob=min(min_p, 0.9))

    def sync(self, ctx: list[int]) -> None:
        """Read what the draft lacks of `ctx`, keeping its cost per token as realised (a reading
        of a few tokens is mostly a forward's fixed cost, and is not kept)."""
        lag, t0 = self.lag(ctx), time.perf_counter()
        self.model.sync(ctx)
        if lag >= READ_MIN_TOKENS:
            self.read_s = (time.perf_counter() - t0) / lag

    def lag(self, ctx: list[int]) -> int:
        """Tokens a ``sync`` to `ctx` would prefill (the draft's cache keeps the common prefix)."""
        return len(ctx) - common_prefix(self.model.backend.tokens, ctx)

    def propose(self, ctx: list[int], base: Proposal, depth: int) -> Proposal:
        """Draft tree (timed: draft_s, of which sync_s the draft's catching up with `ctx`), `base`'s
        retrieval trie scored by the draft and pruned, both fused; `tip` is a chain's last node."""
        dm, cal, root = self.model, self.calibrator, base.tree.tokens[0]
        t1 = time.perf_counter()
        root_probs = dm.sync(ctx)  # draft KV follows the accepted tokens (only new ones prefilled)
        sync_s = time.perf_counter() - t1
        dtree, dists = dm.grow(root, root_probs, lambda p: cal.p(cal.key(f"d{DRAFT}", p)), depth)
        tip = len(dtree) - 1 if dm.chain else 0  # the chain's last node
        known = {tuple(dtree.tokens[u] for u in dtree.path_to(v)[1:]): probs for v, probs in dists.items()}
        rtree, rcond = prune_retrieval(base.trie, self.config, dm, known)
        tree, cond = fuse(dtree, draft_cond(dtree), rtree, rcond)
        return Proposal(tree, cond, draft_scored=True, match_len=base.match_len,
                        draft_s=time.perf_counter() - t1, sync_s=sync_s, tip=tip)

    def observe(self, tree: TokenTree, path: list[int], first: int) -> None:
        """Nothing to keep: the next ``sync`` keeps the accepted prefix of a chain in the draft's KV."""


class GraftProposer:
    """Below a draft chain's last node, the datastore's continuations of context + chain.

    Where the model copies (document QA), the chain's end matches the source text and its
    continuation is free to propose: no draft forward, and on a flat verify-cost curve almost
    free to verify. Scored by frequency; the budget keeps what pays."""

    def __init__(self, datastore: Datastore, config: RasdConfig):
        self.datastore = datastore
        self.config = config

    def propose(self, ctx: list[int], base: Proposal, depth: int) -> Proposal:
        """`base` with the continuations grafted below its chain's end, in place (``graft_from``:
        the first grafted node, 0 if none; ``graft_match_len``: their suffix match length)."""
        tree, cond, tip = base.tree, base.cond, base.tip
        chain = [tree.tokens[v] for v in tree.path_to(tip)[1:]]
        depth -= len(chain)
        match = self.datastore.longest_match(ctx + chain) if depth > 0 else None
        if match is None:
            return base
        start = len(tree)
        sub, base.graft_match_len = self.datastore.trie(match, tree.tokens[tip], depth, self.config.max_occurrences)
        sub, sub_cond = prune_retrieval(sub, self.config)
        graft(tree, cond, tip, sub, sub_cond)
        base.graft_from = start if len(tree) > start else 0
        return base

    def observe(self, tree: TokenTree, path: list[int], first: int) -> None:
        """Nothing to keep: grafted nodes carry their corpus origin, which ``RetrievalProposer``
        records."""
