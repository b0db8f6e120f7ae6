"""The RASD decode loop: propose -> prune -> fuse -> budget -> verify -> accept -> commit.

``make_rasd_decoder`` returns a ``generation.Decoder`` (plus the stats dict it
fills per answer) for ``Engine.complete/chat(decoder=..., decoder_stats=...)``:

    decoder, stats = make_rasd_decoder(engine.backend, SpecConfig(), draft=None, documents=[text])
    gen = engine.complete(prompt, GenerationConfig(max_tokens=128), decoder=decoder, decoder_stats=stats)
    print(gen.run().text, gen.stats.extra["mean_accepted"])

Every step verifies one token tree in ONE target forward (``eval_tree``) whose
root is the token chosen at the previous step (not yet in the KV cache), then
commits root + accepted path; the bonus token becomes the next root. When the
measured cost curve says speculation will not pay, the step is a plain
``decode_one`` instead; a speculative step is probed again after
``probe_every`` plain steps, and twice as long after each probe, until a step
the budget chose itself pays. Only the Backend protocol is used (llama.cpp and
transformers alike).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np

from localrag.backends.base import Backend
from localrag.config import SpecConfig
from localrag.generation import Decoder, Sampler
from localrag.spec.budget import Calibrator, CostModel, DraftBandit, plan
from localrag.spec.draft import DraftModel
from localrag.spec.rasd import (
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
from localrag.spec.retrieval import Datastore
from localrag.spec.tree import DRAFT, RETRIEVAL, TokenTree
from localrag.spec.verify import accept

SOURCES = ("draft", "retrieval", "both")


class RasdDecoder:
    """Callable Decoder with its drafters, calibration and per-answer stats (see module doc)."""

    def __init__(
        self,
        target: Backend,
        spec: SpecConfig,
        draft: Backend | None = None,
        documents: Sequence[str] = (),
        cost: CostModel | None = None,
        calibrator: Calibrator | None = None,
    ):
        self.target = target
        self.spec = spec
        leaves = getattr(target, "max_leaves", spec.max_nodes + 1)
        batch = getattr(target, "n_batch", spec.max_nodes + 1)
        self.max_nodes = max(1, min(spec.max_nodes, leaves, batch - 1))
        if cost is None:
            cost = (
                CostModel.load_or_measure(target, self.max_nodes + 1)
                if spec.calibrate
                else CostModel.linear()
            )
        self.cost = cost
        self._draft_t1 = 0.0  # the draft's one-token forward, seconds (measured with its cost curve)
        self.draft = self._draft_model(draft) if draft is not None else None
        self.calibrator = calibrator if calibrator is not None else Calibrator()
        self.datastore = Datastore(target.n_vocab, spec.max_match, spec.min_match)
        self.set_documents(documents)
        self.stats: dict = {}
        self._prefill_s = 0.0  # this decoder's share of the prompt prefill (see prefill), in the stats
        self._pays: tuple = (None, [])  # _may_pay's cache: (stamp, pays per match-length class)
        self._limit = 1 << 30  # tokens the answer can still take (Generation's set_limit)
        # diagnostics (bench, tests): when a list, the logits row each emitted token after the first
        # was chosen from is appended, so batched-vs-single numerics can be compared with plain's
        self.record_logits: list[np.ndarray] | None = None
        # run the draft model or not, by the realised tokens/s of steps with and without it; kept
        # across answers like the calibrator, so one unlucky step at the start of an answer cannot
        # switch off a draft that earlier answers showed pays
        self._draft_arm = DraftBandit(1.0 / self.cost(1), self.spec.probe_every)
        # plain steps since the last speculative step, and the run that forces a probe (doubles after
        # each probe, see the loop). Kept across answers too: in a chat where nothing is worth
        # copying, every new answer would otherwise pay its first lost probes again.
        self._plain_run = 0
        self._probe_wait = self.spec.probe_every

    def _draft_model(self, draft: Backend) -> DraftModel:
        """The draft's tree policy from its own cost curve and the target's.

        Chain or tree: a chain when the draft's 4-token forward costs over 1.6x one token (batching
        buys little, so a tree's extra nodes are paid almost in full). A chain node pays for itself
        when its expected acceptance a(v) saves more target time than it costs:
        a(v) * T_target(1) >= T_draft(1) + dT_target/dk, so the chain stops below that probability.
        """
        spec = self.spec
        if not spec.calibrate:
            return DraftModel(draft, spec, chain=bool(spec.draft_chain))
        dcost = CostModel.load_or_measure(draft, 8)
        self._draft_t1 = dcost(1)
        chain = dcost(4) > 1.6 * dcost(1) if spec.draft_chain is None else spec.draft_chain
        slope = (self.cost(9) - self.cost(1)) / 8  # target verify cost per extra node
        min_p = (dcost(1) + slope) / self.cost(1) if spec.use_budget else 0.0
        return DraftModel(draft, spec, chain=chain, min_path_prob=min(min_p, 0.9))

    def set_documents(self, documents: Sequence[str]) -> None:
        """Replace the corpus part of the datastore (e.g. the chunks retrieved for this question)."""
        self.datastore.set_documents(
            [self.target.tokenize(d, add_special=False, parse_special=False) for d in documents]
        )

    # --- phases -------------------------------------------------------------------
    def _depth(self) -> int:
        """Longest path worth drafting now: the root's step emits path + 1 bonus token, so no more
        than the answer's remaining tokens less one."""
        return max(0, min(self.spec.max_depth, self._limit - 1))

    def _may_pay(self, match_len: int) -> bool:
        """Could any retrieval tree for a match this long beat plain? (skip building it if not).

        Upper bound: a chain whose every node has the best calibrated acceptance of any bucket.
        Cached per match-length class until the calibrator learns something or 32 steps pass
        (the cost curve drifts slowly), so a run of plain steps costs no lookups at all."""
        if not self.spec.use_budget:
            return True
        cal = self.calibrator
        stamp = (cal.n_updates, cal.n_gains, self.stats.get("steps", 0) // 32)
        if self._pays[0] != stamp:
            realism = cal.realism_of("r")
            pays = []
            for length in range(5):  # match lengths 0..3 and >= 4 (the calibrator's classes)
                p = max(cal.p(cal.key(f"r{RETRIEVAL}", c, length)) for c in cal.MIDS)
                chain = [p**d for d in range(1, self.spec.max_depth + 1)]
                pays.append(plan(chain, self.cost, 0.0, self.spec.min_gain / realism)[0] > 0)
            self._pays = (stamp, pays)
        pays = self._pays[1]
        return pays[min(match_len, 4)] if match_len else any(pays[1:])

    def _plan(self, prop: Proposal, force: bool) -> tuple[list[tuple], list[int], float]:
        """Calibration keys, the nodes to verify ([] = a plain step) and the expected gain.

        Bets must clear min_gain after the correction for how this scorer's estimates have
        fared lately (realism); paths are capped at what the answer can still take."""
        keys = keys_for(prop, self.calibrator)
        acc = estimate(prop, keys, self.calibrator)
        need = self.spec.min_gain / self.calibrator.realism_of(prop.scorer)
        depth = self._depth()
        spec = self.spec if depth == self.spec.max_depth else replace(self.spec, max_depth=depth)
        keep, gain = choose(prop, acc, spec, self.cost, 0.0, force, self.max_nodes, need)
        return keys, keep, gain

    def _retrieval_alone(self, rtree: TokenTree, match_len: int) -> tuple[Proposal, tuple] | None:
        """The retrieval-only proposal and its plan (``_plan``), if it promises more tokens/s than
        the draft's steps realise.

        Then this step skips the draft model: a long verbatim match is free to propose, while the
        draft pays a forward per drafted token. The retrieval side is the budget's expected gain
        corrected by how such estimates have fared lately (realism); the draft side is measured."""
        if len(rtree) <= 1 or not self.spec.use_budget:
            return None
        prop = Proposal(*prune_retrieval(rtree, self.spec), draft_scored=False, match_len=match_len)
        plan = self._plan(prop, False)
        _, keep, gain = plan
        rate = gain * self.calibrator.realism_of("r") / self.cost(1)
        return (prop, plan) if keep and rate >= self._draft_arm.rate["draft"] else None

    def set_limit(self, n_tokens: int) -> None:
        """The answer can take at most `n_tokens` more tokens (its last emitted token, the next
        step's root, is already counted)."""
        self._limit = n_tokens

    def propose(
        self, ctx: list[int], root: int, use_draft: bool, force: bool = False
    ) -> tuple[Proposal, tuple | None]:
        """Retrieval trie (timed), draft tree (timed), RASD prune + fuse. Returns the proposal and
        its plan when one was already made for it (retrieval alone beat the draft), else None."""
        s, st = self.spec, self.stats
        t0 = time.perf_counter()
        rtree, mlen = TokenTree(root), 0
        if s.use_retrieval and (use_draft or force or self._may_pay(0)):
            self.datastore.set_context(ctx)
            match = self.datastore.longest_match(ctx)
            if match is not None and (use_draft or force or self._may_pay(match.length)):
                rtree, mlen = self.datastore.trie(match, root, self._depth(), s.max_occurrences)
        probe = use_draft and self._draft_arm.probe_due()
        alone = self._retrieval_alone(rtree, mlen) if use_draft and not probe else None
        t1 = time.perf_counter()
        dt = t1 - t0
        st["time_retrieve_s"] += dt
        st["lookup_ms_max"] = max(st["lookup_ms_max"], dt * 1e3)
        if alone is not None:
            return alone
        if not use_draft:
            return Proposal(*prune_retrieval(rtree, s), draft_scored=False, match_len=mlen), None
        dm, cal = self.draft, self.calibrator
        root_probs = dm.sync(ctx)  # draft KV follows the accepted tokens (only new ones prefilled)
        catchup = 0.0
        if probe:
            # the draft was off for a while: this sync also prefilled every token accepted since.
            # That is the price of switching it back on, paid once, not a cost of drafting (a
            # synced draft prefills about one token per step), so the probe is judged without it.
            catchup = max(0.0, time.perf_counter() - t1 - self._draft_t1)
        dtree, dists = dm.grow(root, root_probs, lambda p: cal.p(cal.key(f"d{DRAFT}", p)), self._depth())
        tip = len(dtree) - 1 if dm.chain else 0  # the chain's last node
        known = {}
        for v, probs in dists.items():
            known[tuple(dtree.tokens[u] for u in dtree.path_to(v)[1:])] = probs
        rtree, rcond = prune_retrieval(rtree, s, dm, known)
        tree, cond = fuse(dtree, draft_cond(dtree), rtree, rcond)
        t2 = time.perf_counter()
        draft_s = t2 - t1
        graft_from, graft_len = len(tree), 0
        if s.use_retrieval and tip > 0:
            graft_len = self._graft_continuations(tree, cond, ctx, tip)
            st["time_retrieve_s"] += time.perf_counter() - t2
        st["time_draft_s"] += draft_s
        st["draft_steps"] += 1
        return Proposal(tree, cond, draft_scored=True, match_len=mlen, draft_s=draft_s, catchup_s=catchup,
                        graft_from=graft_from if len(tree) > graft_from else 0, graft_match_len=graft_len), None

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
        sub, mlen = self.datastore.trie(match, tree.tokens[tip], depth, self.spec.max_occurrences)
        sub, sub_cond = prune_retrieval(sub, self.spec)
        graft(tree, cond, tip, sub, sub_cond)
        return mlen

    def verify(self, vt: TokenTree, sampler: Sampler) -> tuple[list[int], int]:
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
            st["drafted_by_source"][name] = st["drafted_by_source"].get(name, 0) + 1
            if i in on_path:
                st["accepted_by_source"][name] = st["accepted_by_source"].get(name, 0) + 1
            if vt.parents[i] in on_path:
                self.calibrator.update(keys[old[i]], i in on_path)

    # --- the loop -----------------------------------------------------------------
    def prefill(self, context: list[int]) -> None:
        """Prompt work, run by Generation in its prefill phase (timed there): the draft's prompt
        prefill and the suffix index over the prompt (O(n); 4-7 ms profiled on chat prompts)."""
        t0 = time.perf_counter()
        if self.spec.use_retrieval:
            self.datastore.set_context(context)
        if self.draft is not None:
            self.draft.sync(context)
        self._prefill_s = time.perf_counter() - t0

    def __call__(
        self, backend: Backend, context: list[int], logits: np.ndarray, sampler: Sampler
    ) -> Iterator[list[int]]:
        if backend is not self.target:
            raise ValueError("this RASD decoder was built for another backend")
        st = self._reset_stats()
        st["time_prefill_s"], self._prefill_s = self._prefill_s, 0.0
        tok = sampler.pick(logits)
        yield [tok]
        busy = 0.0
        try:
            while True:
                t_start = time.perf_counter()
                ctx = backend.tokens + [tok]
                # run the draft model when its steps have paid better than steps without it (or to re-probe)
                use_draft = self.draft is not None and (
                    not self.spec.use_budget
                    or self._draft_arm.use_draft()
                )
                force = self._plain_run >= self._probe_wait
                prop, planned = self.propose(ctx, tok, use_draft, force)
                # a plan made with force=False that verifies nodes is what force=True would make
                keys, keep, gain = planned or self._plan(prop, force)
                if not keep:  # speculation does not pay now: one plain step
                    tv = time.perf_counter()
                    row = backend.decode_one(tok)
                    nxt = sampler.pick(row)
                    tv = time.perf_counter() - tv
                    if self.record_logits is not None:
                        self.record_logits.append(np.array(row, dtype=np.float32))
                    st["time_plain_s"] += tv
                    self.cost.observe(1, tv)
                    st["plain_steps"] += 1
                    self._plain_run += 1
                    out, depth, size = [nxt], 0, 0
                else:
                    vt = prop.tree.select(keep)
                    tv = time.perf_counter()
                    path, nxt = self.verify(vt, sampler)
                    tv = time.perf_counter() - tv
                    st["time_verify_s"] += tv
                    self.cost.observe(len(vt), tv)
                    self._learn(vt, sorted(keep), keys, path)
                    st["spec_steps"] += 1
                    st["probe_steps"] += int(force)
                    self._plain_run = 0
                    out = [vt.tokens[i] for i in path[1:]] + [nxt]
                    # a forced probe doubles the wait before the next one, won or lost: it is one
                    # trial for the calibrator, which then decides whether steps pay on their own. A
                    # step the budget chose itself that beat plain (more tokens than plain steps
                    # would have made in its verify time) resets the wait.
                    base = self.spec.probe_every
                    if force:
                        self._probe_wait = min(self._probe_wait * 2, 8 * base)
                    elif len(out) * self.cost(1) >= tv:
                        self._probe_wait = base
                    depth, size = vt.max_depth(), vt.n_drafted
                    st["tree_sizes"].append(size)
                    st["expected_gain_sum"] += gain if gain == gain else 0.0
                dt = time.perf_counter() - t_start
                busy += dt
                dt_steady = dt - prop.catchup_s  # what this step costs with the draft kept in sync
                if size and gain == gain and gain > 0:
                    # realised gain over plain (tokens in this step's time at T(1) each) against the
                    # expected gain with the drafting time the step paid (the plan took it as sunk)
                    t_tree = self.cost(size + 1)
                    expected = gain * t_tree / (t_tree + prop.draft_s - prop.catchup_s)
                    self.calibrator.observe_gain(len(out) * self.cost(1) / dt_steady, expected, prop.scorer)
                if self.draft is not None:
                    self._draft_arm.record(prop.draft_scored, len(out) / dt_steady)
                st["steps"] += 1
                st["tokens"] += len(out)
                st["accepted_per_step"].append(len(out))
                st["oracle_tokens"] += depth + 1
                st["oracle_cost_s"] += self.cost(size + 1)
                tok = nxt
                yield out
        finally:
            self._finish_stats(busy)

    # --- stats --------------------------------------------------------------------
    def _reset_stats(self) -> dict:
        st = self.stats
        st.clear()
        st.update(
            mode="rasd",
            steps=0,
            spec_steps=0,
            plain_steps=0,
            probe_steps=0,
            draft_steps=0,
            tokens=0,
            drafted_by_source={},
            accepted_by_source={},
            tree_sizes=[],
            accepted_per_step=[],  # tokens emitted by each target forward (the UI plots it)
            time_retrieve_s=0.0,
            time_draft_s=0.0,
            time_verify_s=0.0,
            time_plain_s=0.0,
            lookup_ms_max=0.0,
            oracle_tokens=0,
            oracle_cost_s=0.0,
            expected_gain_sum=0.0,
        )
        return st

    def _finish_stats(self, busy: float) -> None:
        st = self.stats
        t1 = self.cost(1)  # as corrected online during this answer
        sizes = st.pop("tree_sizes")
        steps = max(st["steps"], 1)
        st["mean_accepted"] = st["tokens"] / steps  # tokens per target forward, bonus included
        st["tree_size_mean"] = float(np.mean(sizes)) if sizes else 0.0
        st["tree_size_max"] = int(max(sizes)) if sizes else 0
        st["acceptance_by_source"] = {
            k: st["accepted_by_source"].get(k, 0) / n for k, n in st["drafted_by_source"].items() if n
        }
        st["lookup_ms_mean"] = st["time_retrieve_s"] * 1e3 / steps
        st["t1_ms"] = t1 * 1e3
        st["decode_busy_s"] = busy
        # estimated speedup: plain would need T(1) per token; we spent `busy`
        st["speedup_vs_plain"] = st["tokens"] * t1 / busy if busy > 0 else 0.0
        # oracle: every drafted path accepted to its full depth, at the measured verify costs
        ot, oc = st.pop("oracle_tokens"), st.pop("oracle_cost_s")
        st["oracle_speedup"] = ot * t1 / oc if oc > 0 else 1.0
        # hardware limit: a chain of k tokens, every one accepted, at the best k on the cost curve
        st["hardware_limit_speedup"] = max(
            (min(k, self.spec.max_depth) + 1) * t1 / self.cost(k + 1) for k in range(1, self.max_nodes + 1)
        )
        if self.draft is not None:  # the same when the draft model writes the chain: + k draft forwards
            d1 = self._draft_t1  # as measured at load
            st["draft_limit_speedup"] = max(
                (k + 1) * t1 / (self.cost(k + 1) + k * d1) for k in range(1, self.spec.max_depth + 1)
            )
        st["expected_gain_mean"] = st.pop("expected_gain_sum") / max(st["spec_steps"], 1)
        st["cost_curve_ms"] = self.cost.to_dict()


def make_rasd_decoder(
    target: Backend,
    spec: SpecConfig | None = None,
    draft: Backend | None = None,
    documents: Sequence[str] = (),
    cost: CostModel | None = None,
    calibrator: Calibrator | None = None,
) -> tuple[Decoder, dict]:
    """A RASD decoder for `target` and the stats dict it fills per answer.

    draft: a backend from ``load_draft`` (same vocabulary) or None (retrieval only).
    documents: texts added to the retrieval datastore (the prompt is always in it).
    cost: a measured CostModel to share (default: measured at load / read from cache).
    calibrator: acceptance statistics to share across answers with the same target and draft,
        so a new answer starts from what earlier ones learned (default: a fresh prior).
    """
    dec = RasdDecoder(target, spec or SpecConfig(), draft, documents, cost, calibrator)
    return dec, dec.stats
