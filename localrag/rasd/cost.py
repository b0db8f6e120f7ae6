"""What the budget is made of: measured verify cost T(k), calibrated acceptance, probe back-off.

Speculation pays only when the expected accepted tokens per second beat plain
decoding. Both sides are measured on this machine, never assumed:

* ``CostModel``: T(k) = seconds for one target forward over k tokens on top of a
  few hundred tokens of context, timed at load for k in 1..max_nodes and cached
  on disk per (model file, backend, device, threads) under LOCALRAG_CACHE_DIR
  (default ~/.cache/localrag). Linear interpolation between measured points;
  corrected online from every timed step (``observe``), since the machine's load
  when the curve was cached need not be its load now.
* ``Calibrator``: P(node accepted | parent accepted), learned online per
  (source, confidence bucket) with a Beta prior, from every verified node whose
  parent was accepted, and planned with a one-standard-deviation lower bound. A
  node's acceptance estimate a(v) is the product along its path, so
  E[tokens per step] = 1 + sum_v a(v).
* ``plan``: over best-first prefixes of the candidate nodes, maximise
  (1 + sum a) / (T(k + 1) + overhead); if the best is below plain's 1 / T(1)
  (times ``min_gain``), take a plain step instead.
* ``Backoff``: the one probe schedule (a wait that doubles after a probe, back to base on a win).

``budget.Budget`` holds one of each for a decoder.

    cost = CostModel.load_or_measure(target, max_k=64)
    k, gain = plan(ranked_estimates, cost, overhead_s)
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from localrag.backends.base import Backend
from localrag.config import default_cache_dir

PROBE_KS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


class MeasureStopped(RuntimeError):
    """A timing stopped midway (``CostModel.measure``'s ``stop``): nothing measured is kept."""


def probe_sizes(max_k: int) -> list[int]:
    """The tree sizes a cost curve up to ``max_k`` is measured at."""
    return [k for k in PROBE_KS if k <= max_k] or [1]


def device_key(backend: Backend) -> str:
    """What T(k) depends on: the model file, backend kind, offload, kernels and their build,
    threads, machine."""
    fid = backend.name
    if backend.model_spec is not None:
        path = Path(backend.model_spec.path)
        with contextlib.suppress(OSError):
            st = path.stat()
            fid = f"{path.resolve()}:{st.st_size}:{int(st.st_mtime)}"
    parts = [
        type(backend).__name__,
        fid,
        f"gpu={backend.device_label}",
        f"build={backend.build_label}",
        f"deterministic={backend.deterministic}",
        f"threads={backend.config.n_threads or os.cpu_count()}",
        f"host={platform.node()}:{platform.machine()}:{os.cpu_count()}",
    ]
    return "|".join(parts)


class CostModel:
    """T(k) in seconds for a forward pass over k new tokens (k = root + drafted nodes)."""

    def __init__(self, ks: Sequence[int], seconds: Sequence[float]):
        self.ks = np.asarray(ks, dtype=np.float64)  # (m,) measured sizes, ascending
        self.sec = np.asarray(seconds, dtype=np.float64)  # (m,) the curve's shape, at load factor 1
        self.load = 1.0  # the whole curve scales by this (moved by plain steps in O(1))
        self._table: list[float] = []  # shape at k for k < ks[-1] + 2, precomputed
        self._refresh()

    def __call__(self, k: int) -> float:
        if k < len(self._table):
            return self._table[k] * self.load
        return self._interp(k) * self.load

    def _interp(self, k: int) -> float:
        if k <= self.ks[-1]:
            return float(np.interp(k, self.ks, self.sec))
        slope = (self.sec[-1] - self.sec[-2]) / max(self.ks[-1] - self.ks[-2], 1.0)
        return float(self.sec[-1] + slope * (k - self.ks[-1]))

    def observe(self, k: int, seconds: float, rate: float = 0.1) -> None:
        """Online correction from a measured forward over k tokens.

        The cached curve may come from a busier (or quieter) moment than now. In log
        space, the measured/predicted ratio moves: for k = 1 (a plain step) the
        whole curve, by `rate` (a load change scales every k alike, and plain steps
        are all that is observed while speculation does not pay; one multiply, as it
        runs after every plain step); for k > 1 the two probe points bracketing k, by
        `rate` times their interpolation weight (the shape). Outliers (a GC pause, a
        page fault) are clipped to a factor 4 so one of them cannot wreck the curve.
        """
        if seconds <= 0 or k < 1:
            return
        ratio = min(max(seconds / self(k), 0.25), 4.0)
        if k == 1:
            self.load *= ratio**rate
            return
        ks = self.ks
        j = int(np.searchsorted(ks, k))  # ks[j-1] < k <= ks[j]
        if j == 0 or j >= len(ks):  # outside the probed sizes: the nearest end point
            self.sec[min(j, len(ks) - 1)] *= ratio**rate
        else:
            w = (k - ks[j - 1]) / (ks[j] - ks[j - 1])
            self.sec[j - 1] *= ratio ** (rate * (1.0 - w))
            self.sec[j] *= ratio ** (rate * w)
        self.sec = np.maximum.accumulate(self.sec)
        self._refresh()

    def _refresh(self) -> None:
        self._table = np.interp(np.arange(int(self.ks[-1]) + 2), self.ks, self.sec).tolist()

    def steep(self) -> bool:
        """A 4-token forward costs over 1.6x a 1-token one: batching buys little (a small CPU), so
        a tree's side branches are paid almost in full, and a chain is what can pay."""
        return self(4) > 1.6 * self(1)

    def to_dict(self) -> dict:
        return {"k": self.ks.astype(int).tolist(), "ms": [round(float(s) * self.load * 1e3, 3) for s in self.sec]}

    @classmethod
    def linear(cls, base_s: float = 0.01, per_token_s: float = 0.003) -> CostModel:
        """An unmeasured guess (unit tests, calibrate=False)."""
        ks = [1, 64]
        return cls(ks, [base_s + per_token_s * (k - 1) for k in ks])

    @classmethod
    def measure(cls, backend: Backend, max_k: int, context: int = 256, reps: int = 3,
                stop: Callable[[], bool] | None = None) -> CostModel:
        """Time chains of k tokens on top of `context` tokens; restores an empty cache after.
        ``stop``: asked before each timed forward; when it says so, MeasureStopped (nothing kept).

        The backend's committed context is cleared (call this at load, before prompts)."""
        backend.reset()
        rng = np.random.default_rng(0)
        ctx = rng.integers(100, min(backend.n_vocab, 20000), size=context).tolist()
        backend.prefill(ctx)
        ks = probe_sizes(max_k)
        toks = rng.integers(100, min(backend.n_vocab, 20000), size=max(ks)).tolist()
        times: dict[int, list[float]] = {k: [] for k in ks}
        for rep in range(reps + 1):  # round-robin over k, so load spikes hit every size alike
            for k in ks:
                if stop is not None and stop():
                    backend.reset()
                    raise MeasureStopped(f"timing {backend.name} stopped")
                t0 = time.perf_counter()
                if k == 1:
                    backend.decode_one(toks[0])
                    backend.truncate(context)
                else:
                    # a two-branch tree: what speculation really runs (several KV sequences)
                    parents = [-1] + [i - 1 for i in range(1, k)]
                    if k >= 4:
                        parents[k // 2] = 0
                    backend.eval_tree(toks[:k], parents)
                    backend.commit_path([])
                if rep:  # the first round warms up
                    times[k].append(time.perf_counter() - t0)
        out = [float(np.median(times[k])) for k in ks]
        backend.reset()
        # a curve that is not monotone is noise: make it non-decreasing
        out = np.maximum.accumulate(np.asarray(out)).tolist()
        return cls(ks, out)

    @staticmethod
    def _path(key: str) -> Path:
        return default_cache_dir() / "cost" / f"{hashlib.sha1(key.encode()).hexdigest()[:16]}.json"

    @classmethod
    def stored(cls, backend: Backend, max_k: int) -> CostModel | None:
        """The curve measured earlier for this model on this machine (on disk), or None."""
        key = device_key(backend)
        path = cls._path(key)
        try:
            d = json.loads(path.read_text())
            # measure() probes the sizes of PROBE_KS up to max_k: a curve reaching the largest is enough
            if d.get("key") == key and max(d["k"]) >= max(probe_sizes(max_k)):
                return cls(d["k"], [m / 1e3 for m in d["ms"]])
        except (ValueError, KeyError, OSError):
            pass
        return None

    @classmethod
    def load_or_measure(cls, backend: Backend, max_k: int, refresh: bool = False,
                        stop: Callable[[], bool] | None = None) -> CostModel:
        """The stored curve, else one measured now (seconds) and stored for the next time."""
        model = None if refresh else cls.stored(backend, max_k)
        if model is not None:
            return model
        path = cls._path(device_key(backend))
        model = cls.measure(backend, max_k, stop=stop)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"key": device_key(backend), **model.to_dict()}))
            tmp.replace(path)
        except OSError:
            pass  # a read-only home is fine: measure again next time
        return model


# Match-length classes of the calibrator's buckets: 0..3 tokens each their own, then 4-7, 8-15 and
# 16+. Measured on the bundled models' document QA (the top retrieval chain against plain's output):
# the first node is accepted 33% of the time after a 1-token match, 57% after 2, 72-87% after 4-7
# and 89% after 8 or more, where on average 7 tokens in a row are.
MATCH_CLASS_START = (0, 1, 2, 3, 4, 8, 16)  # the shortest match length of each class
# What a bucket's raw confidence is worth, per match class, before any data: about the first-node
# acceptance of a unique continuation measured there (document QA and chat, both bundled models).
# Class 0 is a draft model's (no match): its probabilities are taken as they are.
MATCH_CLASS_TRUST = (1.0, 0.3, 0.5, 0.65, 0.75, 0.85, 0.9)


def match_class(match_len: int) -> int:
    """The class of a match length (0 and below: class 0, no match)."""
    return max(0, bisect.bisect_right(MATCH_CLASS_START, match_len) - 1)


class Calibrator:
    """P(child accepted | parent accepted) per (source, bucket), Beta posterior means, pooled per
    source and match class.

    A bucket is (source, confidence bucket, match class). Its prior is centred on the pooled
    posterior of its source in its match class (every bucket of the same scorer, origin and
    match class, itself starting from the bucket's raw confidence: draft probability or
    retrieval frequency, scaled by ``MATCH_CLASS_TRUST``), with weight ``prior_weight``.
    So a bucket seen for the first time starts from what its source has shown so far at such
    matches (a model that paraphrases rather than quotes makes every retrieval bucket start
    low), and its own data replaces that within a few steps. Pooled per match class because
    the class is what predicts acceptance most (33% after a 1-token match, 89% after 8 or
    more): pooled over the source alone, the many short matches of a chat would make a long
    match in the next document question start as low as they ended. Nothing here depends on
    the hardware.

    ``realism``: per scorer ("r": retrieval frequencies, "d": draft probabilities), EMA of
    realised / expected gain of speculative steps. The estimates are per node and per bucket;
    where they run optimistic for this model pair (correlated rejections, a model that drifts
    off the source text), speculation must promise proportionally more before it is tried
    (min_gain / realism). Per scorer because the two err apart: a near-copy draft runs
    pessimistic while retrieval runs optimistic. (Per scorer and match class was measured
    worse: each class pays its own losing bets before it backs off.) Shared with the buckets,
    so a new answer starts from what earlier answers showed.
    """

    EDGES = (0.02, 0.1, 0.25, 0.5, 0.75, 0.9)  # buckets of the raw confidence (draft p or frequency ratio)
    MIDS = (0.01, 0.06, 0.175, 0.375, 0.625, 0.825, 0.95)

    def __init__(self, prior_weight: float = 2.0):
        self.weight = prior_weight
        self.trust = MATCH_CLASS_TRUST  # per match class: what a raw confidence is worth, before data
        self.hits: dict[tuple, list[float]] = {}  # bucket -> [accepted, rejected]
        self.pooled: dict[tuple, list[float]] = {}  # (source, match class) -> [accepted, rejected] over its buckets
        self.n_updates = 0
        self.realism: dict[str, float] = {}  # scorer -> EMA of realised / expected gain
        self.n_gains = 0

    def realism_of(self, scorer: str) -> float:
        return self.realism.get(scorer, 1.0)

    def observe_gain(self, realised: float, expected: float, scorer: str) -> None:
        """One speculative step's realised and expected speedup over a plain step."""
        r = 0.8 * self.realism_of(scorer) + 0.2 * realised / expected
        self.realism[scorer] = min(max(r, 0.25), 1.5)
        self.n_gains += 1

    def key(self, source: str, confidence: float, match_len: int = 0) -> tuple:
        """A node's bucket. match_len: the context suffix its prediction rests on (for a retrieval
        node at depth d below a match of m tokens: m + d - 1, see ``phases.keys_for``)."""
        b = bisect.bisect_right(self.EDGES, confidence)
        return (source, b, match_class(match_len))

    def mean(self, key: tuple, run: int = 0) -> float:
        """Posterior mean of the bucket; with `run`, after that many more accepted trials of it."""
        raw = self.MIDS[key[1]] * self.trust[key[2]]
        pa, pr = self.pooled.get((key[0], key[2]), (0.0, 0.0))
        prior = (pa + self.weight * raw) / (pa + pr + self.weight)  # the source's posterior in this class
        a, r = self.hits.get(key, (0.0, 0.0))
        return (a + run + self.weight * prior) / (a + run + r + self.weight)

    def p(self, key: tuple, run: int = 0) -> float:
        """What the budget plans with: the posterior mean less one posterior standard deviation.

        The plan picks the buckets that look best, so an estimate from a few lucky trials would
        win bets it should not (the winner's curse); the deduction shrinks as data accumulate
        (Beta variance m(1 - m) / (n + 1), n = trials + prior weight).

        `run`: the node's parent and the `run` nodes above it in the same bucket are taken as
        accepted (what a(v) conditions on), and the bucket's trials are exchangeable, so its
        posterior has `run` more successes: P(v | path accepted) = (a + run + w m0) / (n + run).
        Without it, a chain of one bucket is estimated as independent draws, (mean - sd)^d."""
        m = self.mean(key, run)
        a, r = self.hits.get(key, (0.0, 0.0))
        return max(0.0, m - (m * (1.0 - m) / (a + r + run + self.weight + 1.0)) ** 0.5)

    def update(self, key: tuple, accepted: bool) -> None:
        i = 0 if accepted else 1
        self.hits.setdefault(key, [0.0, 0.0])[i] += 1.0
        self.pooled.setdefault((key[0], key[2]), [0.0, 0.0])[i] += 1.0
        self.n_updates += 1


def plan(
    estimates: Sequence[float], cost: CostModel, overhead_s: float = 0.0, min_gain: float = 1.0
) -> tuple[int, float]:
    """Best number of drafted nodes k (0 = plain step) and its expected speedup over plain.

    estimates: a(v) for the candidate nodes in best-first, ancestor-closed order.
    Expected tokens for the first k nodes: 1 + sum(a[:k]) (the bonus token is free);
    their cost: T(k + 1) (root + k nodes in one forward) + overhead_s (drafting).
    """
    t1 = cost(1)
    best_k, best_rate = 0, 1.0 / t1
    tokens = 1.0
    for k, a in enumerate(estimates, start=1):
        tokens += a
        rate = tokens / (cost(k + 1) + overhead_s)
        if rate > best_rate:
            best_k, best_rate = k, rate
    gain = best_rate * t1
    if best_k and gain < min_gain:
        return 0, 1.0
    return best_k, gain


# The caps of the two schedules that use Backoff differ, on purpose, and are kept as they were
# measured (one cap for both would change which steps probe): a lost tree probe costs one extra
# node, T(2) - T(1), so trees are re-probed at least every 8 x probe_every plain steps
# (``Budget.probes``); a lost draft probe costs a whole draft forward per drafted token plus the
# catch-up prefill, so the draft backs off much further (``DraftBandit``).
TREE_PROBE_CAP = 8  # x probe_every
DRAFT_PROBE_CAP = 1024  # steps


class Backoff:
    """The probe schedule: a probe is due after `wait` steps without one; ``back_off`` (after a
    probe that did not show speculation pays) doubles the wait, up to `cap`; ``reset`` (a step
    that paid) makes it `base` again."""

    def __init__(self, base: int, cap: int):
        self.base, self.cap, self.wait = base, cap, base

    def back_off(self) -> None:
        self.wait = min(self.wait * 2, self.cap)

    def reset(self) -> None:
        self.wait = self.base


def draft_chain_limit(cost: CostModel, draft_t1: float, depth: int) -> float:
    """The most a draft model's chain can give over plain decoding at these costs: k drafted
    tokens, every one accepted, emit k + 1 tokens for k draft forwards and one verify over k + 1,
    so the limit is max over k <= depth of (k + 1) T(1) / (T(k + 1) + k Td(1)). Below 1, no draft
    step can pay on this machine, however good the draft's guesses."""
    t1 = cost(1)
    return max((k + 1) * t1 / (cost(k + 1) + k * draft_t1) for k in range(1, max(depth, 1) + 1))


class DraftBandit:
    """Run the draft model this step or not: a two-armed bandit on realised tokens/s.

    Each arm's rate is an EMA of the tokens/s of its steps (drafting time included). Before its
    first step the draft arm stands at `draft_rate`, the most its steps could realise by the cost
    curves (``draft_chain_limit``; inf when unmeasured); a draft that cannot beat plain even so
    starts behind, with its probes at the longest wait. Once the draft arm falls behind, a probe
    runs it again after ``wait`` steps without it (doubling after each lost probe, up to 1024).
    A probe's rate REPLACES the draft arm's estimate instead of blending into it: that estimate
    is exactly what the probe doubts, and blended at 0.2 a single bad first step would outweigh
    several winning probes.
    """

    def __init__(self, plain_rate: float, probe_every: int, draft_rate: float = float("inf")):
        self.rate = {"draft": draft_rate, "nodraft": plain_rate}
        self.backoff = Backoff(probe_every, DRAFT_PROBE_CAP)
        if draft_rate < plain_rate:
            self.backoff.wait = DRAFT_PROBE_CAP
        self.tried = False  # a draft step has realised a rate
        self.skipped = 0  # steps without the draft since it last ran

    @property
    def wait(self) -> int:
        return self.backoff.wait

    def probe_due(self) -> bool:
        """The draft is behind, and has waited long enough to be tried again."""
        return self.rate["draft"] < self.rate["nodraft"] and self.skipped >= self.wait

    def use_draft(self) -> bool:
        return self.rate["draft"] >= self.rate["nodraft"] or self.skipped >= self.wait

    def record(self, used_draft: bool, rate: float) -> None:
        probe = used_draft and self.skipped >= self.wait
        arm = "draft" if used_draft else "nodraft"
        first = used_draft and not self.tried  # the prior gives way to the first realised rate
        self.tried = self.tried or used_draft
        old = self.rate[arm]
        self.rate[arm] = rate if (probe or first) else 0.8 * old + 0.2 * rate
        if probe:
            if self.rate["draft"] >= self.rate["nodraft"]:
                self.backoff.reset()
            else:
                self.backoff.back_off()
        self.skipped = 0 if used_draft else self.skipped + 1
