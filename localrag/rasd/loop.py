"""The RASD decode loop: propose -> prune -> fuse -> plan -> verify -> accept -> commit.

``RasdDecoder`` is a ``generation.Decoder``; hand it to ``Engine.complete/chat``:

    decoder = RasdDecoder(engine.backend, RasdConfig(), draft=None, documents=[text])
    gen = engine.complete(prompt, GenerationConfig(max_tokens=128), decoder=decoder).run()
    print(gen.text, gen.stats.decoder.mean_accepted)

Every step verifies one token tree in ONE target forward (``eval_tree``) whose root is the
token chosen at the previous step (not yet in the KV cache), then commits root + accepted
path; the bonus token becomes the next root. An accepted token that a retrieval node copied from
the datastore's documents is recorded (``RasdDecoder.copies``: which document, which token), so
the answer knows where its copied text came from. When the measured cost curve says speculation
will not pay, the step is a plain ``decode_one`` instead; a speculative step is probed again
after ``probe_every`` plain steps, and twice as long after each probe, until a step the
budget chose itself pays. Only the Backend protocol is used (llama.cpp and transformers
alike). The design and the cost model are described in docs/design.md ("Speedup: RASD").
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from localrag.backends.base import Backend
from localrag.config import RasdConfig
from localrag.generation import Decoder, Sampler
from localrag.rasd.accept import accept
from localrag.rasd.budget import MATCH_CLASS_START, Calibrator, CostModel, DraftBandit, match_class, plan
from localrag.rasd.draft import DraftModel
from localrag.rasd.phases import (
    Proposal,
    choose,
    draft_cond,
    estimate,
    fuse,
    graft,
    keys_for,
    prune_retrieval,
    source_name,
)
from localrag.rasd.retrieval import Datastore
from localrag.rasd.tree import DRAFT, RETRIEVAL, TokenTree
from localrag.results import RasdStats

# While no retrieval tree could pay (``_may_pay``), every this many steps the lookup runs anyway,
# unverified, so the calibrator keeps learning from what the model then writes (``_learn_unverified``)
SHADOW_EVERY = 4


@dataclass(frozen=True)
class CopiedToken:
    """Token ``token`` of the answer (0: its first) was accepted from a retrieval node copying token
    ``offset`` of datastore document ``doc`` (an index into the documents given)."""

    token: int
    doc: int
    offset: int


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


DRAFT_MAX_K = 8  # the draft's cost curve is probed up to chains of this length


def _max_nodes(target: Backend, config: RasdConfig) -> int:
    return max(1, min(config.max_nodes, target.max_leaves, target.n_batch - 1))


def unmeasured(target: Backend, config: RasdConfig, draft: Backend | None = None) -> list[Backend]:
    """The models a new RasdDecoder would time first (their cost curves are not on disk for this
    machine yet): seconds of forwards each, once; the curve is kept for every later decoder."""
    if not config.calibrate:
        return []
    need = [] if CostModel.stored(target, _max_nodes(target, config) + 1) else [target]
    return need + ([draft] if draft is not None and not CostModel.stored(draft, DRAFT_MAX_K) else [])


class RasdDecoder(Decoder):
    """The Speedup-mode decoder: its drafters, calibration and per-answer stats (module doc).

    What it learns (acceptance calibration, the cost curve's load, the draft bandit, the probe
    schedule) outlives one answer: keep one decoder per (target, draft) pair."""

    def __init__(
        self,
        target: Backend,
        config: RasdConfig | None = None,
        draft: Backend | None = None,
        documents: Sequence[str] = (),
        cost: CostModel | None = None,
        calibrator: Calibrator | None = None,
    ):
        """draft: a backend from ``load_draft`` (same vocabulary) or None (retrieval only).
        documents: texts added to the retrieval datastore (the prompt is always in it).
        cost: a measured CostModel to share (default: measured at load / read from cache).
        calibrator: acceptance statistics to share (default: a fresh prior)."""
        config = config or RasdConfig()
        self.target = target
        self.config = config
        self.max_nodes = _max_nodes(target, config)
        if cost is None:
            cost = CostModel.load_or_measure(target, self.max_nodes + 1) if config.calibrate else CostModel.linear()
        self.cost = cost
        self._draft_t1 = 0.0  # the draft's one-token forward, seconds (measured with its cost curve)
        self.draft = self._draft_model(draft) if draft is not None else None
        self.calibrator = calibrator if calibrator is not None else Calibrator()
        self.datastore = Datastore(target.n_vocab, config.max_match, config.min_match)
        self.set_documents(documents)
        self.stats = RasdStats()
        self.copies: list[CopiedToken] = []  # this answer's accepted tokens copied from the documents
        self._answer: list[int] = []  # this answer's emitted tokens
        # proposals plain steps did not verify, to learn from later: (tree, bucket keys, index of the
        # answer token its depth-1 nodes predict)
        self._unverified: list[tuple[TokenTree, list[tuple], int]] = []
        self._prefill_s = 0.0  # this decoder's share of the prompt prefill (see prefill)
        self._pays: tuple = (None, [])  # _may_pay's cache: (stamp, pays per match-length class)
        self._limit = 1 << 30  # tokens the answer can still take (Generation's set_limit)
        # per-answer accumulators behind the summary stats (see _finish_stats)
        self._oracle_tokens, self._oracle_cost_s, self._gain_sum, self._busy_s = 0, 0.0, 0.0, 0.0
        self._plain_forward_s: list[float] = []  # this answer's plain steps: their forward, timed
        self._tree_forward_s: list[tuple[int, float]] = []  # its tree steps: (tree size, verify time)
        # diagnostics (bench, tests): when a list, the logits row each emitted token after the first
        # was chosen from is appended, so batched-vs-single numerics can be compared with plain's
        self.record_logits: list[np.ndarray] | None = None
        # run the draft model or not, by the realised tokens/s of steps with and without it; kept
        # across answers like the calibrator, so one unlucky step at the start of an answer cannot
        # switch off a draft that earlier answers showed pays
        self._draft_arm = DraftBandit(1.0 / self.cost(1), config.probe_every)
        # plain steps since the last speculative step, and the run that forces a probe (doubles after
        # each probe, see _schedule_probe). Kept across answers too: in a chat where nothing is worth
        # copying, every new answer would otherwise pay its first lost probes again.
        self._plain_run = 0
        self._probe_wait = config.probe_every

    def _draft_model(self, draft: Backend) -> DraftModel:
        """The draft's tree policy from its own cost curve and the target's.

        Chain or tree: a chain when the draft's cost curve is steep (CostModel.steep: batching
        buys little, so a tree's extra nodes are paid almost in full). A chain node pays for itself
        when its expected acceptance a(v) saves more target time than it costs:
        a(v) * T_target(1) >= T_draft(1) + dT_target/dk, so the chain stops below that probability.
        """
        cfg = self.config
        if not cfg.calibrate:
            return DraftModel(draft, cfg, chain=bool(cfg.draft_chain))
        dcost = CostModel.load_or_measure(draft, DRAFT_MAX_K)
        self._draft_t1 = dcost(1)
        chain = dcost.steep() if cfg.draft_chain is None else cfg.draft_chain
        slope = (self.cost(9) - self.cost(1)) / 8  # target verify cost per extra node
        min_p = (dcost(1) + slope) / self.cost(1) if cfg.use_budget else 0.0
        return DraftModel(draft, cfg, chain=chain, min_path_prob=min(min_p, 0.9))

    def set_documents(self, documents: Sequence[str]) -> None:
        """Replace the corpus part of the datastore (e.g. the chunks retrieved for this question)."""
        self.datastore.set_documents(
            [self.target.tokenize(d, add_special=False, parse_special=False) for d in documents]
        )

    # --- Decoder protocol -----------------------------------------------------------
    def prefill(self, context: list[int]) -> None:
        """Prompt work, run by Generation in its prefill phase (timed there): the draft's prompt
        prefill and the suffix index over the prompt (O(n); 4-7 ms profiled on chat prompts)."""
        t0 = time.perf_counter()
        if self.config.use_retrieval:
            self.datastore.set_context(context)
        if self.draft is not None:
            self.draft.sync(context)
        self._prefill_s = time.perf_counter() - t0

    def set_limit(self, n_tokens: int) -> None:
        """The answer can take at most `n_tokens` more tokens (its last emitted token, the next
        step's root, is already counted)."""
        self._limit = n_tokens

    def steps(self, backend: Backend, context: list[int], logits: np.ndarray,
              sampler: Sampler) -> Iterator[list[int]]:
        if backend is not self.target:
            raise ValueError("this RASD decoder was built for another backend")
        self._start_answer()
        tok = sampler.pick(logits)
        self._answer = [tok]
        yield [tok]
        try:
            while True:
                t_start = time.perf_counter()
                force = self._plain_run >= self._probe_wait  # a probe: verify even if the budget says no
                prop, planned = self.propose(backend.tokens + [tok], tok, self._use_draft(), force)
                plan_ = planned or self._plan(prop, force)
                if plan_.keep:
                    # ONE target forward over the tree; acceptance is lossless (accept.py): greedy
                    # follows the target's argmax child, sampling accepts child c with probability
                    # p_res(c) and emits the residual's sample where every child was rejected
                    step = self._tree_step(prop, plan_, sampler)
                else:  # speculation does not pay now: one plain forward
                    step = self._plain_step(tok, sampler)
                    if len(prop.tree) > 1:  # learn from the proposal once the model has written on
                        self._unverified.append((prop.tree, plan_.keys, len(self._answer)))
                self._after_step(step, prop, plan_, time.perf_counter() - t_start)
                tok = step.tokens[-1]  # the bonus token: the next step's root
                self._answer.extend(step.tokens)
                self._learn_unverified()
                yield step.tokens
        finally:
            self._learn_unverified(final=True)
            self._finish_stats()

    # --- propose: retrieval trie, draft tree, prune, fuse ---------------------------
    def _use_draft(self) -> bool:
        """Run the draft model this step: when its steps have paid better than steps without it
        (the bandit), or to re-probe it."""
        return self.draft is not None and (not self.config.use_budget or self._draft_arm.use_draft())

    def propose(self, ctx: list[int], root: int, use_draft: bool,
                force: bool = False) -> tuple[Proposal, Plan | None]:
        """The candidate tree below `root`: retrieval trie, draft tree, RASD prune + fuse. Returns it
        with its plan when one was already made (retrieval alone beat the draft), else None."""
        t0 = time.perf_counter()
        shadow = self.config.use_budget and self.stats.steps % SHADOW_EVERY == 0
        rtree, mlen = self._retrieve(ctx, root, use_draft or force or shadow)
        probe = use_draft and self._draft_arm.probe_due()
        alone = self._retrieval_alone(rtree, mlen) if use_draft and not probe else None
        dt = time.perf_counter() - t0
        self.stats.time_retrieve_s += dt
        self.stats.lookup_ms_max = max(self.stats.lookup_ms_max, dt * 1e3)
        if alone is not None:
            return alone
        if not use_draft:
            return Proposal(*prune_retrieval(rtree, self.config), draft_scored=False, match_len=mlen), None
        return self._draft_and_fuse(ctx, root, rtree, mlen, probe), None

    def _retrieve(self, ctx: list[int], root: int, always: bool) -> tuple[TokenTree, int]:
        """The retrieval trie of the context's longest matching suffix, and the match length.
        Skipped (an empty tree) when no tree for such a match could pay, unless `always`."""
        cfg = self.config
        if not cfg.use_retrieval or not (always or self._may_pay(0)):
            return TokenTree(root), 0
        self.datastore.set_context(ctx)
        match = self.datastore.longest_match(ctx)
        if match is None or not (always or self._may_pay(match.length)):
            return TokenTree(root), 0
        return self.datastore.trie(match, root, self._depth(), cfg.max_occurrences)

    def _draft_and_fuse(self, ctx: list[int], root: int, rtree: TokenTree, mlen: int, probe: bool) -> Proposal:
        """Draft tree (timed), retrieval nodes scored by the draft and pruned, both fused by
        longest-prefix matching; retrieval continuations grafted below a draft chain's end."""
        cfg, dm, cal, st = self.config, self.draft, self.calibrator, self.stats
        t1 = time.perf_counter()
        root_probs = dm.sync(ctx)  # draft KV follows the accepted tokens (only new ones prefilled)
        catchup = 0.0
        if probe:
            # the draft was off for a while: this sync also prefilled every token accepted since.
            # That is the price of switching it back on, paid once, not a cost of drafting (a
            # synced draft prefills about one token per step), so the probe is judged without it.
            catchup = max(0.0, time.perf_counter() - t1 - self._draft_t1)
        dtree, dists = dm.grow(root, root_probs, lambda p: cal.p(cal.key(f"d{DRAFT}", p)), self._depth())
        tip = len(dtree) - 1 if dm.chain else 0  # the chain's last node
        known = {tuple(dtree.tokens[u] for u in dtree.path_to(v)[1:]): probs for v, probs in dists.items()}
        rtree, rcond = prune_retrieval(rtree, cfg, dm, known)
        tree, cond = fuse(dtree, draft_cond(dtree), rtree, rcond)
        t2 = time.perf_counter()
        graft_from, graft_len = len(tree), 0
        if cfg.use_retrieval and tip > 0:
            graft_len = self._graft_continuations(tree, cond, ctx, tip)
            st.time_retrieve_s += time.perf_counter() - t2
        st.time_draft_s += t2 - t1
        st.draft_steps += 1
        return Proposal(tree, cond, draft_scored=True, match_len=mlen, draft_s=t2 - t1, catchup_s=catchup,
                        graft_from=graft_from if len(tree) > graft_from else 0, graft_match_len=graft_len)

    def _graft_continuations(self, tree: TokenTree, cond: list[float], ctx: list[int], tip: int) -> int:
        """Below a draft chain's last node, the datastore's continuations of context + chain.

        Where the model copies (document QA), the chain's end matches the source text and its
        continuation is free to propose: no draft forward, and on a flat verify-cost curve almost
        free to verify. Scored by frequency; the budget keeps what pays. Returns the match length."""
        chain = [tree.tokens[v] for v in tree.path_to(tip)[1:]]
        depth = self._depth() - len(chain)
        match = self.datastore.longest_match(ctx + chain) if depth > 0 else None
        if match is None:
            return 0
        sub, mlen = self.datastore.trie(match, tree.tokens[tip], depth, self.config.max_occurrences)
        sub, sub_cond = prune_retrieval(sub, self.config)
        graft(tree, cond, tip, sub, sub_cond)
        return mlen

    # --- plan: what the budget verifies -------------------------------------------------
    def _depth(self) -> int:
        """Longest path worth drafting now: the root's step emits path + 1 bonus token, so no more
        than the answer's remaining tokens less one."""
        return max(0, min(self.config.max_depth, self._limit - 1))

    def _may_pay(self, match_len: int) -> bool:
        """Could any retrieval tree for a match this long beat plain? (skip building it if not).

        Upper bound: a chain whose node d has the best calibrated acceptance of any bucket of its
        match class (a match of match_len + d - 1 tokens, see ``phases.keys_for``).
        Cached per match-length class until the calibrator learns 64 more trials or 32 steps pass
        (the cost curve drifts slowly), so a run of plain steps costs a lookup only every
        ``SHADOW_EVERY`` steps (to learn from, ``_learn_unverified``)."""
        if not self.config.use_budget:
            return True
        cal = self.calibrator
        stamp = (cal.n_updates // 64, cal.n_gains, self.stats.steps // 32)
        if self._pays[0] != stamp:
            best = [max(cal.p(cal.key(f"r{RETRIEVAL}", c, length)) for c in cal.MIDS) for length in MATCH_CLASS_START]
            need, pays = self.config.min_gain / cal.realism_of("r"), []
            for length in MATCH_CLASS_START:  # one per match class, at its shortest length
                chain, a = [], 1.0
                for d in range(1, self.config.max_depth + 1):  # node d continues a (length + d - 1) match
                    a *= best[match_class(length + d - 1)]
                    chain.append(a)
                pays.append(plan(chain, self.cost, 0.0, need)[0] > 0)
            self._pays = (stamp, pays)
        pays = self._pays[1]
        return pays[match_class(match_len)] if match_len else any(pays[1:])

    def _plan(self, prop: Proposal, force: bool) -> Plan:
        """Calibration keys, the nodes to verify and the expected gain.

        Bets must clear min_gain after the correction for how this scorer's estimates have
        fared lately (realism); paths are capped at what the answer can still take.

        A due probe (`force`) verifies the estimates' own best bet without that correction, so
        realism, which only bets can move, cannot lock speculation out for good; where no bet
        clears min_gain even so, a draft tree's single best node is verified (a calibration trial;
        retrieval nodes need none: unverified proposals are learned from, ``_learn_unverified``)."""
        cfg = self.config
        keys = keys_for(prop, self.calibrator)
        acc = estimate(prop, keys, self.calibrator)
        need = cfg.min_gain / self.calibrator.realism_of(prop.scorer)
        depth = self._depth()
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

    def _retrieval_alone(self, rtree: TokenTree, match_len: int) -> tuple[Proposal, Plan] | None:
        """The retrieval-only proposal and its plan, if it promises more tokens/s than the draft's
        steps realise.

        Then this step skips the draft model: a long verbatim match is free to propose, while the
        draft pays a forward per drafted token. The retrieval side is the budget's expected gain
        corrected by how such estimates have fared lately (realism); the draft side is measured."""
        if len(rtree) <= 1 or not self.config.use_budget:
            return None
        prop = Proposal(*prune_retrieval(rtree, self.config), draft_scored=False, match_len=match_len)
        plan_ = self._plan(prop, False)
        # a plan made with force=False that verifies nodes is what force=True would make
        rate = (plan_.gain or 0.0) * self.calibrator.realism_of(prop.scorer) / self.cost(1)
        return (prop, plan_) if plan_.keep and rate >= self._draft_arm.rate["draft"] else None

    # --- verify, accept, commit ------------------------------------------------------------
    def _tree_step(self, prop: Proposal, plan_: Plan, sampler: Sampler) -> Step:
        vt = prop.tree.select(plan_.keep)
        t0 = time.perf_counter()
        path, bonus = self.verify_tree(vt, sampler)
        seconds = time.perf_counter() - t0
        self._learn(vt, sorted(plan_.keep), plan_.keys, path)
        self._record_copies(vt, path)
        return Step([vt.tokens[i] for i in path[1:]] + [bonus], seconds, tree=vt, forced=plan_.probe)

    def _record_copies(self, vt: TokenTree, path: list[int]) -> None:
        """The accepted nodes copied from the documents (their origin in the corpus): provenance."""
        origins = vt.origins
        for j, node in enumerate(path[1:]):
            if origins[node] >= 0:
                doc, offset = self.datastore.locate(origins[node])
                self.copies.append(CopiedToken(len(self._answer) + j, doc, offset))

    def _plain_step(self, root: int, sampler: Sampler) -> Step:
        t0 = time.perf_counter()
        row = self.target.decode_one(root)
        nxt = sampler.pick(row)
        seconds = time.perf_counter() - t0
        if self.record_logits is not None:
            self.record_logits.append(np.array(row, dtype=np.float32))
        return Step([nxt], seconds)

    def verify_tree(self, vt: TokenTree, sampler: Sampler) -> tuple[list[int], int]:
        """ONE target forward over the tree, lossless acceptance, KV commit of root + path."""
        rows = self.target.eval_tree(vt.tokens, vt.parents)  # (n, V) views, valid until the next decode
        path, bonus = accept(vt, rows, sampler)
        if self.record_logits is not None:  # row path[j] chose token j+1 of this step's output
            self.record_logits.extend(np.array(rows[i], dtype=np.float32) for i in path)
        self.target.commit_path(path)
        return path, bonus

    def _learn(self, vt: TokenTree, old: list[int], keys: list[tuple], path: list[int]) -> None:
        """Every verified node whose parent was accepted is one Bernoulli trial of its bucket."""
        on_path = set(path)
        st = self.stats
        for i in range(1, len(vt)):
            name = source_name(vt.sources[i])
            st.drafted_by_source[name] = st.drafted_by_source.get(name, 0) + 1
            if i in on_path:
                st.accepted_by_source[name] = st.accepted_by_source.get(name, 0) + 1
            if vt.parents[i] in on_path:
                self.calibrator.update(keys[old[i]], i in on_path)

    def _learn_unverified(self, final: bool = False) -> None:
        """Calibrate on proposals a plain step did not verify, once the answer holds the tokens
        they predicted (at the answer's end: those it holds). Greedy, a node would have been
        accepted iff it equals the model's token there; sampling, the token the model sampled
        equals a retrieval node's with the probability that verification accepts it (p_target).
        So every lookup teaches the budget, speculated on or not, and a model that stops copying
        (or starts) is seen without betting on it."""
        answer, pending = self._answer, []
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

    # --- after a step: cost, probe schedule, realism, draft bandit, stats ------------------
    def _after_step(self, step: Step, prop: Proposal, plan_: Plan, seconds: float) -> None:
        """Everything learned from one step. `seconds` is the whole step, proposing included."""
        st, vt = self.stats, step.tree
        size = vt.n_drafted if vt is not None else 0
        self.cost.observe(len(vt) if vt is not None else 1, step.seconds)
        if vt is None:
            st.plain_steps += 1
            st.time_plain_s += step.seconds
            self._plain_forward_s.append(step.seconds)
            self._plain_run += 1
        else:
            self._tree_forward_s.append((len(vt), step.seconds))
            st.spec_steps += 1
            st.probe_steps += int(step.forced)
            st.time_verify_s += step.seconds
            st.tree_sizes.append(size)
            self._gain_sum += plan_.gain or 0.0
            self._schedule_probe(step)
        self._busy_s += seconds
        steady = seconds - prop.catchup_s  # what this step costs with the draft kept in sync
        if size and plan_.bet and plan_.gain is not None:
            # realised gain over plain (tokens in this step's time at T(1) each) against the
            # expected gain with the drafting time the step paid (the plan took it as sunk)
            t_tree = self.cost(size + 1)
            expected = plan_.gain * t_tree / (t_tree + prop.draft_s - prop.catchup_s)
            self.calibrator.observe_gain(len(step.tokens) * self.cost(1) / steady, expected, prop.scorer)
        if self.draft is not None:
            self._draft_arm.record(prop.draft_scored, len(step.tokens) / steady)
        st.steps += 1
        st.tokens += len(step.tokens)
        st.accepted_per_step.append(len(step.tokens))
        self._oracle_tokens += (vt.max_depth() if vt is not None else 0) + 1
        self._oracle_cost_s += self.cost(size + 1)

    def _schedule_probe(self, step: Step) -> None:
        """A forced probe doubles the wait before the next one, won or lost: it is one trial for
        the calibrator, which then decides whether steps pay on their own. A step the budget chose
        itself that beat plain (more tokens than plain steps would have made in its verify time)
        resets the wait."""
        base = self.config.probe_every
        self._plain_run = 0
        if step.forced:
            self._probe_wait = min(self._probe_wait * 2, 8 * base)
        elif len(step.tokens) * self.cost(1) >= step.seconds:
            self._probe_wait = base

    # --- stats ------------------------------------------------------------------------------
    def _start_answer(self) -> None:
        """Fresh per-answer stats (a new object: results of earlier answers keep theirs)."""
        self.stats = RasdStats(time_prefill_s=self._prefill_s)
        self.copies, self._answer, self._unverified = [], [], []
        self._prefill_s = 0.0
        self._oracle_tokens, self._oracle_cost_s, self._gain_sum, self._busy_s = 0, 0.0, 0.0, 0.0
        self._plain_forward_s, self._tree_forward_s = [], []

    def _plain_token_s(self) -> tuple[float, str]:
        """What one token costs Plain mode now, from this answer's own timed forwards, and how it
        was found. Plain steps measure it directly (their median); an answer of tree steps only
        measures it through the cost curve's shape: each verify time scaled by T(1)/T(k), median.
        (The cost curve's absolute level was timed at load and may be stale: never used alone.)"""
        if len(self._plain_forward_s) >= 3:
            return float(np.median(self._plain_forward_s)), "plain steps"
        if self._tree_forward_s:
            t1 = self.cost(1)
            return float(np.median([s * t1 / self.cost(k) for k, s in self._tree_forward_s])), "cost curve"
        return self.cost(1), "cost curve"

    def _finish_stats(self) -> None:
        st = self.stats
        t1 = self.cost(1)  # as corrected online during this answer
        steps = max(st.steps, 1)
        st.mean_accepted = st.tokens / steps  # tokens per target forward, bonus included
        st.acceptance_by_source = {k: st.accepted_by_source.get(k, 0) / n for k, n in st.drafted_by_source.items() if n}
        st.lookup_ms_mean = st.time_retrieve_s * 1e3 / steps
        plain_s, st.speedup_method = self._plain_token_s()
        st.t1_ms = plain_s * 1e3
        st.decode_busy_s = self._busy_s
        # estimated speedup: Plain would spend one plain forward per token; this answer's steps
        # (proposing, drafting and verifying included) took the busy time
        st.speedup_vs_plain = st.tokens * plain_s / self._busy_s if self._busy_s > 0 else 0.0
        # oracle: every drafted path accepted to its full depth, at the measured verify costs
        st.oracle_speedup = self._oracle_tokens * t1 / self._oracle_cost_s if self._oracle_cost_s > 0 else 1.0
        # hardware limit: a chain of k tokens, every one accepted, at the best k on the cost curve
        depth = self.config.max_depth
        st.hardware_limit_speedup = max(
            (min(k, depth) + 1) * t1 / self.cost(k + 1) for k in range(1, self.max_nodes + 1)
        )
        if self.draft is not None:  # the same when the draft model writes the chain: + k draft forwards
            d1 = self._draft_t1  # as measured at load
            st.draft_limit_speedup = max((k + 1) * t1 / (self.cost(k + 1) + k * d1) for k in range(1, depth + 1))
        st.expected_gain_mean = self._gain_sum / max(st.spec_steps, 1)
        st.cost_curve_ms = self.cost.to_dict()
