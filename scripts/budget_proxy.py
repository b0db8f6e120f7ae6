"""Speedup's budget variants compared without a clock (issue 54, tuning on ``--split tune`` only).

Greedy decoding is deterministic here, so a variant's steps are too: per suite, one decoder (the
default pair, as ``bench speed``'s ``rasd``) answers each prompt in turn, learning as it goes, and
its time is estimated from the stored cost curve as T(1) for the first token plus T(nodes + 1)
per step, against plain's T(1) per token. The budget reads no clock either: the rasd modules'
``perf_counter`` is a virtual clock that each forward advances by its price on the stored cost
curves (the target's, the draft's), so what the budget learns of step times (the curve's load,
realism, the draft bandit, the draft's reading rate) is the same every run and on every machine
with the same curves, and a variant's result is repeatable. Variants:

    --copy-runs          RasdConfig.copy_runs (bench speed's rasd-runs)
    --skip-answer-end    a rejection where the answer ended (the target's token is end-of-generation)
                         is no calibration trial: an experiment, patched in here, not in the library
    --trust T1,T2,...    the calibrator's prior trust per match class from class 1 on
                         (``cost.MATCH_CLASS_TRUST``; class 0, the draft's, stays 1.0)
    --forget F           each trial first scales its bucket's and its class's counts by F (< 1: old
                         trials fade, a bucket's memory is about 1 / (1 - F) trials)

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python scripts/budget_proxy.py --suites docqa,docqa-hotpot,summary \
        --split tune [--copy-runs] [--skip-answer-end] [--trust 0.5,0.5,0.65,0.75,0.85,0.9] [--forget 0.9]
"""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

from localrag.bench.data import SPEED_SPLITS, load_suite
from localrag.bench.speed import _encode, run_generation
from localrag.config import ModelConfig, RasdConfig
from localrag.engine import Engine
from localrag.rasd import RasdDecoder, load_draft
from localrag.rasd import cost as rasd_cost
from localrag.rasd import loop as rasd_loop
from localrag.rasd import proposers as rasd_proposers
from localrag.rasd.budget import Budget, CostModel
from localrag.rasd.proposers import DRAFT_MAX_K

DRAFT = "qwen2.5-coder-0.5b-instruct"


def skip_answer_end(is_eog) -> None:
    """Patch the budget: a node rejected where the answer ended teaches its bucket nothing."""
    emitted: list[int] = []
    accept = rasd_loop.accept

    def accept_and_note(vt, rows, sampler):
        path, bonus = accept(vt, rows, sampler)
        emitted[:] = [vt.tokens[i] for i in path[1:]] + [bonus]  # the target's token at each depth
        return path, bonus

    def learn(self, vt, old, keys, path):
        on_path = set(path)
        for i in range(1, len(vt)):
            if vt.parents[i] in on_path and (i in on_path or not is_eog(emitted[vt.depths[i] - 1])):
                self.calibrator.update(keys[old[i]], i in on_path)

    learn_unverified = Budget.learn_unverified

    def learn_unverified_before_the_end(self, answer, final=False):
        # the budget's own, short of an end-of-generation token: no node is tried at that position
        learn_unverified(self, answer[:-1] if answer and is_eog(answer[-1]) else answer, final)

    rasd_loop.accept = accept_and_note
    Budget.learn, Budget.learn_unverified = learn, learn_unverified_before_the_end


class VirtualClock:
    """perf_counter for the rasd modules: time passes only in forwards, at the cost curve's price."""

    def __init__(self):
        self.now = 0.0
        rasd_loop.time = rasd_proposers.time = SimpleNamespace(perf_counter=lambda: self.now)

    def charge(self, backend, cost: CostModel) -> None:
        """Each forward of `backend` over k tokens advances the clock by cost(k) (a prefill in
        pieces of the curve's longest k)."""
        eval_tree, decode_one, prefill = backend.eval_tree, backend.decode_one, backend.prefill
        top = int(cost.ks[-1])

        def priced(n: int) -> None:
            while n > 0:
                self.now += cost(min(n, top))
                n -= top

        def eval_tree_(tokens, parents):
            priced(len(tokens))
            return eval_tree(tokens, parents)

        def decode_one_(token):
            priced(1)
            return decode_one(token)

        def prefill_(tokens):
            priced(len(tokens))
            return prefill(tokens)

        backend.eval_tree, backend.decode_one, backend.prefill = eval_tree_, decode_one_, prefill_


def set_trust(trust: str) -> None:
    rasd_cost.MATCH_CLASS_TRUST = (1.0, *(float(t) for t in trust.split(",")))
    assert len(rasd_cost.MATCH_CLASS_TRUST) == len(rasd_cost.MATCH_CLASS_START), "one trust per match class"


def forget(f: float) -> None:
    def update(self, key, accepted):
        for counts in (self.hits.setdefault(key, [0.0, 0.0]), self.pooled.setdefault((key[0], key[2]), [0.0, 0.0])):
            counts[0] *= f
            counts[1] *= f
            counts[0 if accepted else 1] += 1.0
        self.n_updates += 1

    rasd_cost.Calibrator.update = update


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--suites", default="docqa,docqa-hotpot,summary")
    p.add_argument("--split", choices=SPEED_SPLITS, default="tune")
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--copy-runs", action="store_true")
    p.add_argument("--skip-answer-end", action="store_true")
    p.add_argument("--trust", default=None)
    p.add_argument("--forget", type=float, default=None)
    args = p.parse_args()
    if args.trust:
        set_trust(args.trust)
    if args.forget is not None:
        forget(args.forget)
    engine = Engine.load(ModelConfig())
    backend = engine.backend
    if args.skip_answer_end:
        skip_answer_end(backend.is_eog)
    draft = load_draft(backend, DRAFT)
    config = RasdConfig(copy_runs=args.copy_runs)
    cost = CostModel.load_or_measure(backend, min(config.max_nodes, backend.max_leaves) + 1)
    clock = VirtualClock()
    clock.charge(backend, cost)
    clock.charge(draft, CostModel.load_or_measure(draft, DRAFT_MAX_K))
    for suite in args.suites.split(","):
        decoder = RasdDecoder(backend, config, draft, cost=cost)
        tokens = forwards = 0
        t_spec = t_plain = 0.0
        for prompt in load_suite(suite, args.n, args.split):
            _, ids, gen = _encode(engine, prompt, 96)
            decoder.set_documents(list(prompt.docs))
            decoder.record_steps = True
            run = run_generation(engine, ids, gen, decoder)
            steps = run.stats.get("step_log") or []
            tokens += len(run.tokens)
            forwards += len(steps) + 1
            t_spec += cost(1) + sum(cost(s["size"] + 1) for s in steps)
            t_plain += len(run.tokens) * cost(1)
        print(json.dumps({"suite": suite, "split": args.split, "copy_runs": args.copy_runs,
                          "skip_answer_end": args.skip_answer_end,
                          "trust": args.trust, "forget": args.forget, "tokens": tokens, "forwards": forwards,
                          "tokens_per_forward": round(tokens / forwards, 3),
                          "estimated_speedup": round(t_plain / t_spec, 3)}), flush=True)


if __name__ == "__main__":
    main()
