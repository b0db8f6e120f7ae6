"""The RASD decode loop: propose -> plan -> verify -> accept -> commit.

``RasdDecoder`` is a ``generation.Decoder``; hand it to ``Engine.complete/chat``:

    decoder = RasdDecoder(engine.backend, RasdConfig(), draft=None, documents=[text])
    gen = engine.complete(prompt, GenerationConfig(max_tokens=128), decoder=decoder).run()
    print(gen.text, gen.stats.decoder.mean_accepted)

Every step verifies one token tree in ONE target forward (``eval_tree``) whose root is the
token chosen at the previous step (not yet in the KV cache), then commits root + accepted
path; the bonus token becomes the next root. The candidates come from the proposers
(``proposers.py``: the token datastore, the draft model, the graft of continuations); which of
them to verify, if any, from the budget (``budget.Budget``: the measured cost curve, the
calibrated acceptance, the probe schedule). An accepted token that a retrieval node copied from
the datastore's documents is recorded (``RasdDecoder.copies``: which document, which token), so
the answer knows where its copied text came from. When speculation will not pay, the step is a
plain ``decode_one`` instead, until a probe is due. Only the Backend protocol is used (llama.cpp
and transformers alike). The design and the cost model: docs/design.md ("Speedup: RASD").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import numpy as np

from localrag.backends.base import Backend
from localrag.config import RasdConfig
from localrag.generation import Decoder, Sampler
from localrag.rasd.accept import accept
from localrag.rasd.budget import Budget
from localrag.rasd.cost import Calibrator, CostModel, draft_chain_limit
from localrag.rasd.datastore import Datastore
from localrag.rasd.phases import Plan, Proposal, Step, source_name
from localrag.rasd.proposers import (
    DRAFT_MAX_K,
    CopiedToken,
    DraftProposer,
    GraftProposer,
    Proposer,
    RetrievalProposer,
)
from localrag.rasd.tree import TokenTree
from localrag.results import RasdStats, StepRecord

__all__ = ["CopiedToken", "RasdDecoder", "measure_costs", "unmeasured"]

# an answer's length in tokens before this decoder has written any (a short document answer with
# a sentence of context); then an EMA of its answers' lengths. Weighs the draft's prompt reading.
TYPICAL_ANSWER_TOKENS = 64


def _max_nodes(target: Backend, config: RasdConfig) -> int:
    return max(1, min(config.max_nodes, target.max_leaves, target.n_batch - 1))


def unmeasured(target: Backend, config: RasdConfig, draft: Backend | None = None) -> list[Backend]:
    """The models a new RasdDecoder would time first (their cost curves are not on disk for this
    machine yet): seconds of forwards each, once; the curve is kept for every later decoder."""
    if not config.calibrate:
        return []
    need = [] if CostModel.stored(target, _max_nodes(target, config) + 1) else [target]
    return need + ([draft] if draft is not None and not CostModel.stored(draft, DRAFT_MAX_K) else [])


def measure_costs(target: Backend, config: RasdConfig, draft: Backend | None = None,
                  stop: Callable[[], bool] | None = None) -> list[Backend]:
    """Time now the models ``unmeasured`` names (their curves kept on disk for every later
    decoder); ``stop`` ends it midway (MeasureStopped, nothing kept). Returns the models timed."""
    timed = unmeasured(target, config, draft)
    for backend in timed:
        CostModel.load_or_measure(backend, _max_nodes(target, config) + 1 if backend is target else DRAFT_MAX_K,
                                  stop=stop)
    return timed


class RasdDecoder(Decoder):
    """The Speedup-mode decoder: its proposers, its budget and per-answer stats (module doc).

    What it learns (acceptance calibration, the cost curve's load, the draft bandit, the probe
    schedule: the budget) outlives one answer: keep one decoder per (target, draft) pair."""

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
        calibrator = calibrator if calibrator is not None else Calibrator()
        self.calibrator = calibrator
        self.draft = DraftProposer(draft, config, cost, calibrator) if draft is not None else None
        limit = draft_chain_limit(cost, self.draft.t1, config.max_depth) if self.draft and self.draft.t1 else float("inf")
        self.budget = Budget(config, cost, calibrator, self.max_nodes, draft_limit=limit)
        self.datastore = Datastore(target.n_vocab, config.max_match, config.min_match)
        self.retrieval = RetrievalProposer(self.datastore, config)
        self.graft = GraftProposer(self.datastore, config)
        self.set_documents(documents)
        self.stats = RasdStats()
        self._answer: list[int] = []  # this answer's emitted tokens
        self._prefill_s = 0.0  # this decoder's share of the prompt prefill (see prefill)
        self._typical_answer = TYPICAL_ANSWER_TOKENS  # EMA of this decoder's answer lengths, tokens
        self._limit = 1 << 30  # tokens the answer can still take (Generation's set_limit)
        # the draft model takes part in this answer: it read the prompt (see prefill)
        self._draft_on = draft is not None
        # per-answer accumulators behind the summary stats (see _finish_stats)
        self._oracle_tokens, self._oracle_cost_s, self._gain_sum, self._busy_s = 0, 0.0, 0.0, 0.0
        self._plain_forward_s: list[float] = []  # this answer's plain steps: their forward, timed
        self._tree_forward_s: list[tuple[int, float]] = []  # its tree steps: (tree size, verify time)
        # diagnostics (bench --breakdown, tests): when True, every step is kept in ``stats.step_log``
        self.record_steps = False
        self._steps: list[tuple[StepRecord, TokenTree | None]] = []  # this answer's, with its lookup's trie
        self._lookup: Proposal | None = None  # this step's datastore lookup
        self._forward_end = 0.0  # perf_counter() when the last forward ended
        # diagnostics (bench, tests): when a list, the logits row each emitted token after the first
        # was chosen from is appended, so batched-vs-single numerics can be compared with plain's
        self.record_logits: list[np.ndarray] | None = None

    @property
    def copies(self) -> list[CopiedToken]:
        """This answer's accepted tokens copied from the documents."""
        return self.retrieval.copies

    @property
    def _probe_wait(self) -> int:
        return self.budget.probes.wait

    def set_documents(self, documents: Sequence[str]) -> None:
        """Replace the corpus part of the datastore (e.g. the chunks retrieved for this question)."""
        self.datastore.set_documents(
            [self.target.tokenize(d, add_special=False, parse_special=False) for d in documents]
        )

    # --- Decoder protocol -----------------------------------------------------------
    def prefill(self, context: list[int], read: int) -> None:
        """Prompt work, run by Generation in its prefill phase (timed there): the suffix index over
        the prompt (O(n); 4-7 ms profiled on chat prompts) and the draft's prompt prefill.

        The draft reads the prompt only for an answer that will run it: one where its steps have
        paid lately (the bandit, ``Budget.use_draft``), or where a probe of it is due and the
        draft has no more to read than the target just read (`read`): a new question's, not a
        follow-up's or a Regenerate's, which the target answers from its cache. And only if its
        steps can win its reading back within an answer of typical length
        (``Budget.draft_repays_reading``: on a CPU the 0.5B needs seconds for a 5-chunk prompt).
        Otherwise it sits the answer out, and the first words come as soon as Plain's; a probe is
        never paid in the middle of an answer."""
        t0 = time.perf_counter()
        if self.config.use_retrieval:
            self.datastore.set_context(context)
        draft, budget = self.draft, self.budget
        self._draft_on = draft is not None and budget.use_draft()
        if self._draft_on and self.config.use_budget:
            lag = draft.lag(context)
            tokens = min(self._limit, round(self._typical_answer))
            self._draft_on = (not budget.draft_probe_due() or lag <= read) and budget.draft_repays_reading(
                lag, draft.read_s, tokens)
        if self._draft_on:
            draft.sync(context)
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
                force = self.budget.probe_due()  # a probe: verify even if the estimates say no
                prop, plan_ = self._propose(backend.tokens + [tok], tok)
                plan_ = plan_ or self.budget.plan(prop, force, self._depth())
                if plan_.keep:  # verify: ONE target forward over the chosen nodes, root first
                    vt = prop.tree.select(plan_.keep)
                    t0 = time.perf_counter()
                    rows = backend.eval_tree(vt.tokens, vt.parents)  # (n, V) views, valid until the next decode
                    # accept, losslessly (accept.py): greedy follows the child whose token is the
                    # target's argmax (no child is: that argmax is the bonus token); sampling accepts
                    # child c with p_res(c) = p'(c) / (1 - mass of its rejected siblings) and samples
                    # the bonus from the residual, so every token is distributed as plain decoding's
                    path, bonus = accept(vt, rows, sampler)
                    emitted = [vt.tokens[i] for i in path[1:]] + [bonus]
                    self._record_rows(rows, path, emitted, sampler)
                    backend.commit_path(path)  # commit: root + accepted path stay in the KV
                    step = Step(emitted, time.perf_counter() - t0, tree=vt, forced=plan_.probe, started=t0)
                    self._observe_tree(vt, sorted(plan_.keep), plan_.keys, path)
                else:  # speculation does not pay now: one plain forward
                    step = self._plain_step(tok, sampler)
                    self.budget.defer(prop, plan_, len(self._answer))  # learnt from once written
                self._after_step(step, prop, plan_, time.perf_counter() - t_start)
                tok = step.tokens[-1]  # the bonus token: the next step's root
                self._answer.extend(step.tokens)
                self.budget.learn_unverified(self._answer)
                yield step.tokens
        finally:
            self.budget.learn_unverified(self._answer, final=True)
            self._finish_stats()

    # --- propose: ask the proposers --------------------------------------------------
    def _propose(self, ctx: list[int], root: int) -> tuple[Proposal, Plan | None]:
        """The candidate tree below `root`: the datastore's lookup, then retrieval alone or the
        draft tree fused with it (and continuations grafted below a draft chain). Returns it with
        its plan when one was already made (retrieval alone beat the draft), else None."""
        t0 = time.perf_counter()
        st, depth = self.stats, self._depth()
        use_draft = self._draft_on and self.budget.use_draft()
        found = self.retrieval.lookup(ctx, root, depth)
        self._lookup = found
        probe = use_draft and self.budget.draft_probe_due()
        alone = self._retrieval_alone(ctx, found) if use_draft and not probe else None
        dt = time.perf_counter() - t0
        st.time_retrieve_s += dt
        st.lookup_ms_max = max(st.lookup_ms_max, dt * 1e3)
        if alone is not None:
            return alone
        if not use_draft:
            return self.retrieval.propose(ctx, found, depth), None
        prop = self.draft.propose(ctx, found, depth)
        if probe:
            # the draft was off for a while: its sync also prefilled every token accepted since.
            # That is the price of switching it back on, paid once, not a cost of drafting (a
            # synced draft prefills about one token per step), so the probe is judged without it.
            prop.catchup_s = max(0.0, prop.sync_s - self.draft.t1)
        st.time_draft_s += prop.draft_s
        st.draft_steps += 1
        if self.config.use_retrieval and prop.tip > 0:
            t2 = time.perf_counter()
            prop = self.graft.propose(ctx, prop, depth)
            st.time_retrieve_s += time.perf_counter() - t2
        return prop, None

    def _retrieval_alone(self, ctx: list[int], found: Proposal) -> tuple[Proposal, Plan] | None:
        """The retrieval-only proposal and its plan, if the budget says it beats the draft."""
        if len(found.trie) <= 1 or not self.config.use_budget:
            return None
        prop = self.retrieval.propose(ctx, found, self._depth())
        plan_ = self.budget.beats_draft(prop, self._depth())
        return (prop, plan_) if plan_ is not None else None

    def _depth(self) -> int:
        """Longest path worth drafting now: the root's step emits path + 1 bonus token, so no more
        than the answer's remaining tokens less one."""
        return max(0, min(self.config.max_depth, self._limit - 1))

    # --- after verifying -------------------------------------------------------------------
    def _record_rows(self, rows: np.ndarray, path: list[int], emitted: list[int], sampler: Sampler) -> None:
        """Row path[j] chose token j of this step's output: noted on the sampler (the answer's
        confidence), and kept where the diagnostics ask for the logits."""
        for i, token in zip(path, emitted, strict=True):
            sampler.note(rows[i], token)
        if self.record_logits is not None:
            self.record_logits.extend(np.array(rows[i], dtype=np.float32) for i in path)

    def _observe_tree(self, vt: TokenTree, old: list[int], keys: list[tuple], path: list[int]) -> None:
        """A verified tree: its calibration trials (the budget), its provenance (the proposers) and
        the per-source counts."""
        self.budget.learn(vt, old, keys, path)
        proposers: tuple[Proposer | None, ...] = (self.retrieval, self.draft, self.graft)
        for proposer in proposers:
            if proposer is not None:
                proposer.observe(vt, path, len(self._answer))
        st, on_path = self.stats, set(path)
        for i in range(1, len(vt)):
            name = source_name(vt.sources[i])
            st.drafted_by_source[name] = st.drafted_by_source.get(name, 0) + 1
            if i in on_path:
                st.accepted_by_source[name] = st.accepted_by_source.get(name, 0) + 1

    def _plain_step(self, root: int, sampler: Sampler) -> Step:
        t0 = time.perf_counter()
        row = self.target.decode_one(root)
        nxt = sampler.pick(row)
        seconds = time.perf_counter() - t0
        if self.record_logits is not None:
            self.record_logits.append(np.array(row, dtype=np.float32))
        return Step([nxt], seconds, started=t0)

    def _after_step(self, step: Step, prop: Proposal, plan_: Plan, seconds: float) -> None:
        """Everything learned from one step. `seconds` is the whole step, proposing included."""
        if self.record_steps:  # as planned, before this step's outcome moves them
            self._record_step(step, prop, self.config.min_gain / self.budget.calibrator.realism_of(prop.scorer))
        self.budget.observe(step, prop, plan_, seconds, self.draft is not None)
        st, vt = self.stats, step.tree
        size = vt.n_drafted if vt is not None else 0
        if vt is None:
            st.plain_steps += 1
            st.time_plain_s += step.seconds
            self._plain_forward_s.append(step.seconds)
        else:
            self._tree_forward_s.append((len(vt), step.seconds))
            st.spec_steps += 1
            st.probe_steps += int(step.forced)
            st.time_verify_s += step.seconds
            st.tree_sizes.append(size)
            self._gain_sum += plan_.gain or 0.0
        self._busy_s += seconds
        self._forward_end = step.started + step.seconds
        st.steps += 1
        st.tokens += len(step.tokens)
        st.accepted_per_step.append(len(step.tokens))
        self._oracle_tokens += (vt.max_depth() if vt is not None else 0) + 1
        self._oracle_cost_s += self.cost(size + 1)

    # --- stats ------------------------------------------------------------------------------
    def _start_answer(self) -> None:
        """Fresh per-answer stats (a new object: results of earlier answers keep theirs)."""
        self.stats = RasdStats(time_prefill_s=self._prefill_s, draft_idle=self.draft is not None and not self._draft_on)
        self.retrieval.copies, self._answer = [], []
        self.budget.start_answer()
        self._prefill_s = 0.0
        self._oracle_tokens, self._oracle_cost_s, self._gain_sum, self._busy_s = 0, 0.0, 0.0, 0.0
        self._plain_forward_s, self._tree_forward_s = [], []
        self._steps, self._forward_end = [], time.perf_counter()

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
        self._typical_answer += 0.3 * (len(self._answer) - self._typical_answer)
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
            st.draft_limit_speedup = draft_chain_limit(self.cost, self.draft.t1, depth)  # Td(1) as measured at load
        st.expected_gain_mean = self._gain_sum / max(st.spec_steps, 1)
        st.cost_curve_ms = self.cost.to_dict()
        st.step_log = [_held(rec, trie, self._answer) for rec, trie in self._steps]
        self._steps = []

    def _record_step(self, step: Step, prop: Proposal, need: float) -> None:
        """One step as a StepRecord, with the lookup's trie to judge once the answer is known."""
        vt, found = step.tree, self._lookup
        trie = found.trie if found is not None and found.trie is not None and len(found.trie) > 1 else None
        rec = StepRecord(start=len(self._answer), size=vt.n_drafted if vt is not None else 0,
                         depth=vt.max_depth() if vt is not None else 0, accepted=len(step.tokens) - 1,
                         verify_s=step.seconds, between_s=max(0.0, step.started - self._forward_end),
                         match_len=found.match_len if found is not None else 0, held=0, top_ok=None,
                         unique=False, forced=step.forced, draft=prop.draft_scored, need=need,
                         t1_ms=self.cost(1) * 1e3)
        self._steps.append((rec, trie))


def _held(rec: StepRecord, trie: TokenTree | None, answer: list[int]) -> StepRecord:
    """`rec` with what its lookup held, now that the answer is known: the longest trie path that the
    answer wrote from the step's first token on (greedy, what verifying it would have accepted), and
    whether the trie's most frequent first token was the answer's next one."""
    if trie is None:
        return rec
    node, held = 0, 0
    while rec.start + held < len(answer):
        node = trie.children[node].get(answer[rec.start + held], -1)
        if node < 0:
            break
        held += 1
    first = trie.children[0]
    top = max(first.values(), key=lambda v: trie.counts[v])
    ok = rec.start < len(answer) and trie.tokens[top] == answer[rec.start]
    return replace(rec, held=held, top_ok=ok, unique=len(first) == 1)
