"""RASD phases: propose (retrieval, draft) -> prune -> fuse -> estimate -> budget.

One function per phase; the proposers (``proposers.py``) build a candidate tree with the first
three and the budget (``budget.Budget``) plans it with the last two; the loop (``loop.py``) then
verifies the result in one target forward pass.

* ``prune_retrieval``: score every retrieval node with the draft model
  (cumulative product of draft probabilities along its path; nodes the draft
  tree did not reach are scored in one batched draft pass) and keep the best
  ``retrieval_top`` above ``retrieval_min_score``. With no draft model the
  scores are retrieval frequencies and the same top-N rule applies.
* ``fuse``: longest-prefix fusion of the pruned retrieval tree into the draft tree.
* ``graft``: the retrieval continuations of context + draft chain, below the chain's
  last node (no draft forward proposes them; the budget verifies what pays).
* ``estimate``: calibrated acceptance a(v) per node (cost.Calibrator) and the
  bucket key each node is calibrated under.
* ``choose``: the ancestor-closed best-first prefix the cost curve pays for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from localrag.config import RasdConfig
from localrag.rasd.cost import Calibrator, CostModel, plan
from localrag.rasd.draft import DraftModel
from localrag.rasd.tree import DRAFT, RETRIEVAL, TokenTree


@dataclass
class Proposal:
    """A candidate tree with what the budget and the stats need."""

    tree: TokenTree
    cond: list[float]  # (n,) raw conditional confidence of each node given its parent (root: 1)
    draft_scored: bool  # cond came from draft probabilities (else retrieval frequency)
    match_len: int = 0  # retrieval suffix match length (0: none)
    draft_s: float = 0.0  # seconds the draft model spent on this proposal
    sync_s: float = 0.0  # of which: the draft reading the tokens accepted since its last proposal
    catchup_s: float = 0.0  # of sync_s: the tokens accepted while the draft was off (a probe's, see loop)
    graft_from: int = 0  # nodes from here on are retrieval continuations grafted below a draft chain
    graft_match_len: int = 0  # their suffix match length
    tip: int = 0  # a draft chain's last node (0: no chain), where continuations are grafted
    trie: TokenTree | None = None  # a lookup's retrieval trie, unpruned (for a proposer to score)

    @property
    def scorer(self) -> str:
        """Whose confidences `cond` holds: "d" draft probabilities, "r" retrieval frequencies."""
        return "d" if self.draft_scored else "r"


@dataclass
class Plan:
    """What the budget decided for one proposal."""

    keys: list[tuple]  # calibration bucket of every proposal node
    keep: list[int]  # proposal nodes to verify, root first; [] = a plain step
    gain: float | None  # expected tokens/s over plain; None when the budget is off
    bet: bool = False  # the estimates chose it (its outcome moves realism); a calibration trial does not
    probe: bool = False  # verified because a probe was due, not because the budget said it pays


@dataclass
class Step:
    """One target forward and what it emitted."""

    tokens: list[int]  # accepted path + the bonus token (a plain step: the one next token)
    seconds: float  # the forward pass (verification or plain decode), timed
    tree: TokenTree | None = None  # the verified tree (None: a plain step)
    forced: bool = False  # verified because a probe was due (Plan.probe), not because the bet cleared realism
    started: float = 0.0  # perf_counter() when its forward began


def prune_retrieval(
    rtree: TokenTree,
    config: RasdConfig,
    draft: DraftModel | None = None,
    known: dict[tuple[int, ...], np.ndarray] | None = None,
) -> tuple[TokenTree, list[float]]:
    """Score and prune a retrieval trie. Returns (pruned tree, cond per pruned node)."""
    n = len(rtree)
    if n <= 1:
        return rtree, [1.0]
    if draft is not None:
        cond = draft.score(rtree, known if known is not None else {})  # p_draft(token | path)
    else:  # frequency: count(v) / count(parent)
        cond = [1.0] + [rtree.counts[v] / max(rtree.counts[rtree.parents[v]], 1e-9) for v in range(1, n)]
    for v in range(1, n):  # cumulative score along the path (parents come first)
        rtree.scores[v] = rtree.scores[rtree.parents[v]] * cond[v] if rtree.parents[v] > 0 else cond[v]
    # a node the draft gave probability 0 (or did not score) is never worth verifying; its
    # descendants score 0 as well, so the order stays ancestor-closed
    ranked = [v for v in rtree.ranked(config.retrieval_min_score) if rtree.scores[v] > 0.0]
    keep = [0, *ranked[: config.retrieval_top]]
    old = sorted(keep)
    return rtree.select(keep), [cond[o] for o in old]


def fuse(
    dtree: TokenTree, dcond: list[float], rtree: TokenTree, rcond: list[float]
) -> tuple[TokenTree, list[float]]:
    """Longest-prefix fusion of rtree into dtree; a node in both keeps the higher confidence."""
    cond = list(dcond)
    mapping = dtree.merge(rtree)
    cond.extend([0.0] * (len(dtree) - len(cond)))
    for r, d in mapping.items():
        cond[d] = max(cond[d], rcond[r])
    return dtree, cond


def graft(tree: TokenTree, cond: list[float], tip: int, sub: TokenTree, sub_cond: list[float]) -> None:
    """Fuse `sub` (rooted at `tip`'s token) below node `tip`, in place; cond grows with the new
    nodes (a node that merges into an existing child keeps that child's confidence)."""
    sub.scores = [tree.scores[tip] * x for x in sub.scores]  # cumulative from the root, like tree's
    for v, u in tree.merge(sub, start=tip).items():
        if u == len(cond):  # a new node (merge appends them in sub's order)
            cond.append(sub_cond[v])


def draft_cond(tree: TokenTree) -> list[float]:
    """Draft tree: p(token | parent) = score(v) / score(parent) (scores are cumulative)."""
    return [1.0] + [tree.scores[v] / max(tree.scores[tree.parents[v]], 1e-30) for v in range(1, len(tree))]


def keys_for(prop: Proposal, cal: Calibrator) -> list[tuple]:
    """Calibration bucket of every node: (scorer, sources, confidence bucket, match length)."""
    t = prop.tree
    grafted = prop.graft_from or len(t)
    if prop.draft_scored:
        keys = [cal.key(f"d{t.sources[v]}", prop.cond[v]) for v in range(grafted)]
    else:
        # given its parent was accepted, a node at depth d below an m-token match continues an
        # (m + d - 1)-token match: deeper nodes of a long copy are accepted more often, not less
        keys = [cal.key(f"r{t.sources[v]}", prop.cond[v], prop.match_len + t.depths[v] - 1) for v in range(grafted)]
    # grafted continuations are scored by frequency, like a retrieval-only tree's nodes
    top = min((t.depths[v] for v in range(grafted, len(t))), default=0)  # depth of the graft's first nodes
    keys += [cal.key(f"r{RETRIEVAL}", prop.cond[v], prop.graft_match_len + t.depths[v] - top)
             for v in range(grafted, len(t))]
    return keys


def estimate(prop: Proposal, keys: list[tuple], cal: Calibrator, copy_runs: bool = False) -> list[float]:
    """a(v) = P(v accepted) = product over the path of P(child accepted | parent accepted).

    Siblings are exclusive (the target picks one token after their parent), so where the
    calibrated conditionals of a parent's children sum past 1 they are scaled to sum to 1:
    five retrieval continuations at 0.25 each are not 1.25 expected tokens.

    copy_runs: a retrieval node below ancestors of its own bucket (a long copy, match class 8+,
    keeps one bucket all the way down) is conditioned on their acceptance (``Calibrator.p``'s
    `run`), so a long document match is verified as a long chain from an answer's first step
    instead of after its bucket has filled."""
    t = prop.tree
    run = [0] * len(t)  # same-bucket retrieval ancestors, parent included, above each node
    if copy_runs:
        for v in range(2, len(t)):
            p = t.parents[v]
            if p > 0 and keys[p] == keys[v] and keys[v][0].startswith("r"):
                run[v] = run[p] + 1
    cond = [1.0] + [cal.p(keys[v], run[v]) for v in range(1, len(t))]
    total = [0.0] * len(t)  # (n,) sum of the children's conditionals, per parent
    for v in range(1, len(t)):
        total[t.parents[v]] += cond[v]
    a = [1.0] * len(t)
    for v in range(1, len(t)):  # parents come before children
        p = t.parents[v]
        a[v] = a[p] * cond[v] / max(1.0, total[p])
    return a


def choose(
    prop: Proposal,
    acc: list[float],
    config: RasdConfig,
    cost: CostModel,
    overhead_s: float,
    force: bool,
    max_nodes: int,
    min_gain: float | None = None,
) -> tuple[list[int], float | None]:
    """Nodes to verify (original indices, root first) and the expected gain over plain.

    Best-first by a(v) (ancestor-closed); the size maximises expected tokens per
    second on the cost curve. [] means a plain step pays better than `min_gain` times
    plain (default config.min_gain), unless `force`. The gain is None when the budget is
    off (``use_budget=False``: the whole pruned tree is verified, no estimate made)."""
    t = prop.tree
    saved = t.scores
    t.scores = acc
    order = [v for v in t.ranked() if t.depths[v] <= config.max_depth][:max_nodes]
    t.scores = saved
    if not order:
        return [], 1.0
    if not config.use_budget:
        return [0, *order], None
    need = config.min_gain if min_gain is None else min_gain
    k, gain = plan([acc[v] for v in order], cost, overhead_s, need)
    if k == 0 and force:
        # probe: only the best node. A probe exists to learn whether acceptance has risen (one
        # Bernoulli trial of its bucket), and the smallest tree is the cheapest to lose:
        # T(2) - T(1) instead of T(k + 1) - T(1).
        k = 1
        gain = (1.0 + acc[order[0]]) * cost(1) / (cost(2) + overhead_s)
    return ([0, *order[:k]] if k else []), gain


def source_name(bits: int) -> str:
    return {DRAFT: "draft", RETRIEVAL: "retrieval", DRAFT | RETRIEVAL: "both"}.get(bits, "none")
