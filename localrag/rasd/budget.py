"""The budget: one object per decoder that decides what speculation may spend and learns from it.

``Budget`` owns the measured cost curve (``CostModel``), the acceptance calibrator (``Calibrator``,
with its match-class trust), the probe schedule (``Backoff``) and the draft bandit. The loop asks
it two things each step (is a probe due, which nodes to verify) and tells it one (what the step
did: ``observe``). The maths is in ``cost.py`` and ``phases.py``; the design in docs/design.md
("The cost model and the budget").

    budget = Budget(config, CostModel.load_or_measure(target, 65), Calibrator(), max_nodes=64)
    plan = budget.plan(proposal, force=budget.probe_due(), depth=12)
"""

from __future__ import annotations

from dataclasses import replace

from localrag.config import RasdConfig
from localrag.rasd.cost import (
    TREE_PROBE_CAP,
    Backoff,
    Calibrator,
    CostModel,
    DraftBandit,
    draft_chain_limit,
    match_class,
    plan,
)
from localrag.rasd.phases import Plan, Proposal, Step, choose, estimate, keys_for
from localrag.rasd.tree import TokenTree

# the primitives, importable from here as before
__all__ = ["Backoff", "Budget", "Calibrator", "CostModel", "DraftBandit", "draft_chain_limit", "match_class", "plan"]


class Budget:
    """Cost curve, calibrator, probe schedule and draft bandit of one decoder (module doc).

    What it learns outlives one answer (``start_answer`` clears only the per-answer part)."""

    def __init__(self, config: RasdConfig, cost: CostModel, calibrator: Calibrator, max_nodes: int,
                 draft_limit: float = float("inf")):
        """draft_limit: the most the draft model's steps can give over plain (``draft_chain_limit``;
        inf: unmeasured, or no draft)."""
        self.config = config
        self.cost = cost
        self.calibrator = calibrator
        self.max_nodes = max_nodes
        # plain steps since the last speculative step, and the run that forces a probe (see
        # ``_schedule_probe``). Kept across answers: in a chat where nothing is worth copying,
        # every new answer would otherwise pay its first lost probes again.
        self.probes = Backoff(config.probe_every, TREE_PROBE_CAP * config.probe_every)
        self.plain_run = 0
        # run the draft model or not, by the realised tokens/s of steps with and without it; kept
        # across answers like the calibrator, so one unlucky step at the start of an answer cannot
        # switch off a draft that earlier answers showed pays
        self.draft_limit = draft_limit
        self.draft_arm = DraftBandit(1.0 / cost(1), config.probe_every, draft_limit / cost(1))
        # proposals plain steps did not verify, to learn from later: (tree, bucket keys, index of the
        # answer token its depth-1 nodes predict)
        self._unverified: list[tuple[TokenTree, list[tuple], int]] = []

    @property
    def trust(self) -> tuple[float, ...]:
        """What a bucket's raw confidence is worth per match class, before data (the calibrator's
        prior, ``cost.MATCH_CLASS_TRUST``)."""
        return self.calibrator.trust

    def start_answer(self) -> None:
        self._unverified = []

    # --- asked before a step -------------------------------------------------------------
    def probe_due(self) -> bool:
        """A probe: verify this step even if the estimates say no."""
        return self.plain_run >= self.probes.wait

    def use_draft(self) -> bool:
        """Run the draft model this step: when its steps have paid better than steps without it
        (the bandit), or to re-probe it."""
        return not self.config.use_budget or self.draft_arm.use_draft()

    def draft_probe_due(self) -> bool:
        return self.draft_arm.probe_due()

    def draft_repays_reading(self, lag: int, read_s: float, tokens: int) -> bool:
        """Read `lag` prompt tokens into the draft model (`read_s` seconds each) for an answer of
        about `tokens` tokens only if its steps can win that time back within the answer:
        lag * read_s <= tokens * (1 / rate_nodraft - 1 / rate_draft). rate_draft is the draft
        arm's realised rate, or, before its first step and for a probe (which doubts that rate),
        the most the cost curves allow. On a CPU the draft's reading of a 5-chunk prompt takes
        seconds, more than a short answer's draft steps can save: the answer then starts as soon
        as Plain's."""
        if not self.config.use_budget:
            return True
        arm = self.draft_arm
        draft = self.draft_limit / self.cost(1) if arm.probe_due() else arm.rate["draft"]
        saved_per_token = max(0.0, 1.0 / arm.rate["nodraft"] - 1.0 / draft)
        return lag * read_s <= tokens * saved_per_token

    def plan(self, prop: Proposal, force: bool, depth: int) -> Plan:
        """Calibration keys, the nodes to verify and the expected gain.

        Bets must clear min_gain after the correction for how this scorer's estimates have
        fared lately (realism); paths are capped at `depth` (what the answer can still take).

        A due probe (`force`) verifies the estimates' own best bet without that correction, so
        realism, which only bets can move, cannot lock speculation out for good; where no bet
        clears min_gain even so, a draft tree's single best node is verified (a calibration trial;
        retrieval nodes need none: unverified proposals are learned from, ``learn_unverified``)."""
        cfg, cal = self.config, self.calibrator
        keys = keys_for(prop, cal)
        acc = estimate(prop, keys, cal, cfg.copy_runs)
        need = cfg.min_gain / cal.realism_of(prop.scorer)
        capped = cfg if depth == cfg.max_depth else replace(cfg, max_depth=depth)
        keep, gain = choose(prop, acc, capped, self.cost, 0.0, False, self.max_nodes, need)
        if keep or not force:
            return Plan(keys, keep, gain, bet=bool(keep))
        if need > cfg.min_gain:  # realism held the bet back: the probe makes it without that correction
            keep, gain = choose(prop, acc, capped, self.cost, 0.0, False, self.max_nodes, cfg.min_gain)
        if keep or not prop.draft_scored:
            return Plan(keys, keep, gain, bet=bool(keep), probe=bool(keep))
        keep, gain = choose(prop, acc, capped, self.cost, 0.0, True, self.max_nodes, cfg.min_gain)
        return Plan(keys, keep, gain, probe=True)

    def beats_draft(self, prop: Proposal, depth: int) -> Plan | None:
        """The plan of a retrieval-only proposal, if it promises more tokens/s than the draft's
        steps realise (then the step skips the draft model: a long verbatim match is free to
        propose, while the draft pays a forward per drafted token). The retrieval side is the
        expected gain corrected by how such estimates have fared lately (realism); the draft side
        is measured."""
        plan_ = self.plan(prop, False, depth)
        # a plan made with force=False that verifies nodes is what force=True would make
        rate = (plan_.gain or 0.0) * self.calibrator.realism_of(prop.scorer) / self.cost(1)
        return plan_ if plan_.keep and rate >= self.draft_arm.rate["draft"] else None

    # --- told after a step ---------------------------------------------------------------
    def learn(self, vt: TokenTree, old: list[int], keys: list[tuple], path: list[int]) -> None:
        """Every verified node whose parent was accepted is one Bernoulli trial of its bucket.
        old: the proposal index of every node of `vt` (keys are by proposal index)."""
        on_path = set(path)
        for i in range(1, len(vt)):
            if vt.parents[i] in on_path:
                self.calibrator.update(keys[old[i]], i in on_path)

    def defer(self, prop: Proposal, plan_: Plan, start: int) -> None:
        """A proposal a plain step did not verify: learn from it once the answer holds the tokens
        from index `start` on, which its depth-1 nodes predict."""
        if len(prop.tree) > 1:
            self._unverified.append((prop.tree, plan_.keys, start))

    def learn_unverified(self, answer: list[int], final: bool = False) -> None:
        """Calibrate on proposals a plain step did not verify, once the answer holds the tokens
        they predicted (at the answer's end: those it holds). Greedy, a node would have been
        accepted iff it equals the model's token there; sampling, the token the model sampled
        equals a retrieval node's with the probability that verification accepts it (p_target).
        So every lookup teaches the budget, speculated on or not, and a model that stops copying
        (or starts) is seen without betting on it."""
        pending = []
        for tree, keys, start in self._unverified:
            if not final and len(answer) < start + tree.max_depth():
                pending.append((tree, keys, start))
                continue
            matched = [True] + [False] * (len(tree) - 1)
            for v in range(1, len(tree)):  # parents come before children
                at = start + tree.depths[v] - 1  # the answer token node v predicts
                if matched[tree.parents[v]] and at < len(answer):
                    matched[v] = tree.tokens[v] == answer[at]
                    self.calibrator.update(keys[v], matched[v])
        self._unverified = pending

    def observe(self, step: Step, prop: Proposal, plan_: Plan, seconds: float, with_draft: bool) -> None:
        """The cost curve's load, the probe schedule, realism and the draft bandit, from one step.
        `seconds` is the whole step, proposing included; with_draft: the decoder has a draft model."""
        vt = step.tree
        size = vt.n_drafted if vt is not None else 0
        self.cost.observe(len(vt) if vt is not None else 1, step.seconds)
        if vt is None:
            self.plain_run += 1
        else:
            self._schedule_probe(step)
        steady = seconds - prop.catchup_s  # what this step costs with the draft kept in sync
        if size and plan_.bet and plan_.gain is not None:
            # realised gain over plain (tokens in this step's time at T(1) each) against the
            # expected gain with the drafting time the step paid (the plan took it as sunk)
            t_tree = self.cost(size + 1)
            expected = plan_.gain * t_tree / (t_tree + prop.draft_s - prop.catchup_s)
            self.calibrator.observe_gain(len(step.tokens) * self.cost(1) / steady, expected, prop.scorer)
        if with_draft:
            self.draft_arm.record(prop.draft_scored, len(step.tokens) / steady)

    def _schedule_probe(self, step: Step) -> None:
        """A forced probe doubles the wait before the next one, won or lost: it is one trial for
        the calibrator, which then decides whether steps pay on their own. A step the budget chose
        itself that beat plain (more tokens than plain steps would have made in its verify time)
        resets the wait."""
        self.plain_run = 0
        if step.forced:
            self.probes.back_off()
        elif len(step.tokens) * self.cost(1) >= step.seconds:
            self.probes.reset()
