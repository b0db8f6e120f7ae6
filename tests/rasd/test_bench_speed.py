"""bench speed: divergence bookkeeping (unit) and one tiny real run from a prompts file (slow)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from localrag.bench.speed import verify_noise
from localrag.bench.speed_report import first_divergence, summarise
from localrag.bench.speed_runs import MethodRuns, Run, SpeedRow, SuiteRuns


def testfirst_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def _plain(tokens, later_rounds, margins=(5.0, 0.1, 5.0, 5.0)):
    """Plain's runs of one prompt: a first round, then rounds that did or did not repeat it."""
    first = Run(decode_s=1.0, tokens=list(tokens))
    later = [Run(decode_s=1.0, tokens=list(tokens), identical=same) for same in later_rounds]
    return MethodRuns([first, *later], margins=list(margins))


def _method(tokens, rounds, decode_s=0.5):
    return MethodRuns([Run(decode_s=decode_s, tokens=list(tokens), stats={"mean_accepted": 2.0}, identical=same)
                       for same in rounds])


def _summary(rows, methods):
    return summarise(SuiteRuns([SpeedRow(i, 10, m) for i, m in enumerate(rows)],
                               {"max_margin_diff": 0.2, "max_abs_logit_diff": 0.5}), methods)


def test_summarise_counts_identical_outputs_in_every_round():
    """The headline is a plain count: a prompt counts as identical only if every round of the
    method reproduced plain's first-round tokens; near-ties are a separate diagnostic."""
    ok = [1, 2, 3, 4]
    rows = [
        {"plain": _plain(ok, [True, True]), "rasd": _method(ok, [True, True, True]),
         "plain-cached": _method(ok, [True, True, True])},
        {"plain": _plain(ok, [True, True]), "rasd": _method([1, 9, 3, 4], [False, False, False]),  # near-tie
         "plain-cached": _method(ok, [True, True, True])},
        {"plain": _plain(ok, [True, False]), "rasd": _method(ok, [True, False, True]),  # one round differed
         "plain-cached": _method([9, 2, 3, 4], [False, False, False])},
    ]
    s = _summary(rows, ["plain", "plain-cached", "rasd"])
    assert (s["rasd"]["identical"], s["rasd"]["compared"]) == (1, 3)
    assert s["rasd"]["median_speedup"] == 2.0 and s["rasd"]["diverged_at_near_tie"] == 1
    assert (s["plain"]["identical"], s["plain"]["compared"]) == (2, 3)  # its later rounds
    assert (s["plain-cached"]["identical"], s["plain-cached"]["compared"]) == (2, 3)
    one_round = _summary([{"plain": _plain(ok, [])}], ["plain"])
    assert one_round["plain"]["identical"] is None  # nothing to compare with


def test_round_ratios_use_each_rounds_own_token_count():
    """A decoder's state carries over between rounds, so a near-tie can flip and change an answer's
    length in a later round: each round's tokens/s uses that round's count, not the first round's."""
    plain = _plain([1] * 19, [True], margins=[5.0] * 19)
    rasd = MethodRuns([Run(decode_s=0.5, tokens=[1] * 11, identical=False),
                       Run(decode_s=1.0, tokens=[1] * 19, identical=True)])
    s = _summary([{"plain": plain, "rasd": rasd}], ["plain", "rasd"])
    # round 1: 11 tokens in 0.5 s vs 19 in 1 s; round 2: 19 tokens in the same time as plain
    assert s["rasd"]["median_speedup"] == (22 / 19 + 1.0) / 2


def test_peers_count_their_own_tokens_and_llama_bench_is_not_compared():
    """A C++ peer's tokens/s comes from its own count (``n``, no token ids of ours); every method is
    also set against each speculative peer of the same round; llama-bench writes no answer to compare."""
    plain = _plain([1] * 20, [], margins=[5.0] * 20)
    lookup = MethodRuns([Run(decode_s=0.5, n=20, identical=True, stats={"mean_accepted": 1.5})])
    bench = MethodRuns([Run(decode_s=0.8, n=20)])
    rasd = MethodRuns([Run(decode_s=0.4, tokens=[1] * 20, identical=True)])
    s = _summary([{"plain": plain, "llama-lookup": lookup, "llama-bench": bench, "rasd": rasd}],
                 ["plain", "rasd", "llama-lookup", "llama-bench"])
    assert s["llama-lookup"]["median_speedup"] == 2.0 and s["llama-lookup"]["tokens_per_s"] == 40.0
    assert s["rasd"]["vs_peer"] == {"llama-lookup": 1.25}  # 50 tok/s over 40; llama-bench is no peer to beat
    assert s["llama-bench"]["identical"] is None and s["llama-bench"]["median_speedup"] == 1.25
    assert (s["llama-lookup"]["identical"], s["llama-lookup"]["compared"]) == (1, 1)


def test_verify_noise_counts_identical_contexts_only():
    """Rows before the first divergence are compared; the divergence itself and what follows are not."""
    single = [np.array([0.0, 0.0, 0.0]), np.array([3.0, 1.0, 0.0]), np.array([2.0, 1.9, 0.0]),
              np.array([0.0, 5.0, 0.0])]
    plain = {"tokens": [0, 0, 0, 1], "top2": [(0, 1), (0, 1), (0, 1), (1, 0)], "logits": single}
    spec_rows = [single[1] + np.array([0.0, 0.25, 0.0]),  # picked token 1: margin 2.0 -> 1.75
                 single[2] + np.array([0.0, 0.2, 0.0]),  # picked token 2 (the flip: 1 instead of 0)
                 single[3] + 9.0]
    got = verify_noise(plain, spec_rows, [0, 0, 1, 1])
    assert got == {"max_abs_logit_diff": 0.25, "max_margin_diff": 0.25}
    same = verify_noise(plain, spec_rows[:1] + [single[2], single[3] + 9.0], [0, 0, 0, 1])
    assert same["max_abs_logit_diff"] == 9.0 and same["max_margin_diff"] == 0.25


@pytest.mark.slow
def test_bench_speed_runs_on_a_prompts_file(tmp_path):
    f = tmp_path / "p.jsonl"
    doc = "Rollo agreed to swear fealty to King Charles III of West Francia in exchange for land."
    f.write_text(json.dumps({"prompt": f"Repeat this sentence word for word: {doc}", "docs": [doc]}) + "\n")
    cmd = [
        sys.executable,
        "-m",
        "localrag",
        "bench",
        "speed",
        "--model",
        "smollm2-135m-instruct",
        "--prompts",
        str(f),
        "--n",
        "1",
        "--max-new-tokens",
        "12",
        "--methods",
        "plain,plain-cached,retrieval,rasd",
        "--threads",
        "1",
        "--out",
        str(tmp_path / "speed.json"),
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    rep = json.loads(out.stdout)
    assert json.loads((tmp_path / "speed.json").read_text()) == rep  # --out: the report, written after each suite
    summ = rep["suites"][str(f)]["summary"]
    assert {"plain", "plain-cached", "retrieval", "rasd"} <= set(summ)
    assert summ["rasd"]["n"] == 1 and summ["noise_bound"]["max_abs_logit_diff"] == 0.0
    for m in ("plain-cached", "retrieval", "rasd"):
        assert summ[m]["identical"] == summ[m]["compared"] == 1, m
    # the answer copies the document: the copy bound sees room to gain (a linear T(k) would not). (A bare
    # "Repeat: <doc>" was copied on the AVX2 build, answered "I'm glad to hear..." on the AVX-512 one.)
    assert summ["plain"]["copy_bound_median"] > 1.0
    assert summ["plain"]["draft_bound_median"] is None  # SmolLM2 has no draft model: no bound with one
