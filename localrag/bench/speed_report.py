"""``bench speed``'s summary and printout: medians over prompts x rounds, ratios within a round.

Every ratio is taken between two runs of the same prompt and round (adjacent in time, so a slow
drift of the machine's load cancels); the reported figure is the median over prompts and rounds.
Tokens/s (``tokens_per_s``) is likewise the median over prompts x rounds of each run's own
tokens / decode seconds.
"""

from __future__ import annotations

import statistics

import numpy as np

from localrag.bench.common import fmt, table
from localrag.bench.speed_peer import is_peer_method
from localrag.bench.speed_runs import MethodRuns, SuiteRuns
from localrag.bench.speed_steps import print_breakdown, print_tuned


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def summarise(result: SuiteRuns, methods: list[str]) -> dict:
    """Per method: identical answers, the median speedup over plain and over each C++ peer, tokens/s,
    acceptance, the oracle and copy bounds and the time split (the ``--json`` summary)."""
    bound = result.noise["max_abs_logit_diff"]
    out: dict = {"noise_bound": result.noise}
    peers = [m for m in methods if is_peer_method(m) and m != "llama-bench"]
    for m in methods:
        sp, tps, acc, orc, est, look, sp_hf, copy, drafted = [], [], [], [], [], [], [], [], []
        vs: dict[str, list[float]] = {p: [] for p in peers if p != m}
        same = compared = ties = 0
        hw = dhw = None
        split = {"retrieve": 0.0, "draft": 0.0, "verify": 0.0, "plain": 0.0}
        n = 0
        for row in result.rows:
            if m not in row.methods:
                continue
            n += 1
            plain, x = row.plain, row.methods[m]
            tps.extend(x.tokens_per_s())
            for p in vs:
                if p in row.methods:
                    vs[p].extend(x.ratios(row.methods[p]))
            rounds = x.identical_rounds(is_plain=m == "plain")
            if m == "plain":
                sp.append(1.0), acc.append(1.0)
                if x.copy_bound is not None:
                    copy.append(x.copy_bound)
                if x.draft_bound is not None:
                    drafted.append(x.draft_bound)
                if rounds:  # a later round to compare with
                    compared += 1
                    same += all(rounds)
                continue
            if None not in rounds:  # llama-bench decodes no answer to compare
                compared += 1
                same += all(rounds)
            if m == "pld":  # against llama-cpp-python's own plain run of the same round
                sp.extend(x.ratios(MethodRuns([r.llama_plain for r in x.rounds])))
                continue
            sp.extend(x.ratios(plain))  # one ratio per round, against plain's same round
            st = x.first.stats
            if is_peer_method(m):
                acc.append(st.get("mean_accepted", 1.0))
                continue
            d = first_divergence(x.first.tokens, plain.first.tokens)
            if d is not None and d < len(plain.margins) and plain.margins[d] <= bound:
                ties += 1
            if m == "plain-cached":
                continue
            if "hf-plain" in row.methods:  # the transformers backend: also against transformers' own greedy loop
                sp_hf.extend(x.ratios(row.methods["hf-plain"]))
            acc.append(st.get("mean_accepted", 1.0))
            orc.append(st.get("oracle_speedup", 1.0))
            hw = st.get("hardware_limit_speedup", hw)
            dhw = st.get("draft_limit_speedup", dhw)
            est.append(st.get("speedup_vs_plain", 0.0))
            look.append(st.get("lookup_ms_mean", 0.0))
            for k in split:
                split[k] += st.get(f"time_{k}_s", 0.0)
        if not n:
            continue
        out[m] = {
            "n": n,
            # prompts answered token for token as plain's first round, in every round (plain: its
            # later rounds), out of `compared` (plain with one round has nothing to compare)
            "identical": same if compared else None,
            "compared": compared,
            # tokens/s over plain's in the same round (llama-bench: plain C++ over plain Python)
            "median_speedup": statistics.median(sp),
            "median_speedup_vs_hf_plain": statistics.median(sp_hf) if sp_hf else None,
            "tokens_per_s": statistics.median(tps),  # median over prompts x rounds
            # tokens/s over each C++ speculative peer's in the same round, median over prompts x rounds
            "vs_peer": {p: statistics.median(v) for p, v in vs.items() if v},
            "mean_accepted": float(np.mean(acc)) if acc else None,
            # diagnostic: first-round divergences where plain's top-2 margin was within the noise bound
            "diverged_at_near_tie": ties,
            "oracle_speedup_median": statistics.median(orc) if orc else None,
            "estimated_speedup_median": statistics.median(est) if est else None,
            "lookup_ms_mean": float(np.mean(look)) if look else None,
            "hardware_limit_speedup": hw,
            "draft_limit_speedup": dhw,  # the same with every chain token written by the draft model
            "time_split_s": split if orc else None,
            # plain only: the most any drafter copying text could gain here (speed.copy_bound), median
            "copy_bound_median": statistics.median(copy) if copy else None,
            # plain only: the same with a draft model guessing every uncopyable token besides, median
            "draft_bound_median": statistics.median(drafted) if drafted else None,
        }
    return out


def _method_cells(m: str, r: dict) -> list[str]:
    """One method's line of the table: its counts and medians, then the free-text time split."""
    ident = f"{r['identical']}/{r['compared']}" if r["identical"] is not None else "-"
    orc = fmt(r["oracle_speedup_median"], ".2f")
    if r.get("hardware_limit_speedup"):
        orc += f"/{r['hardware_limit_speedup']:.2f}"
    if r.get("draft_limit_speedup"):
        orc += f"/{r['draft_limit_speedup']:.2f}"
    split = " ".join(f"{k}={v:.2f}" for k, v in (r["time_split_s"] or {}).items())
    if r.get("median_speedup_vs_hf_plain") is not None:
        split = f"vs hf-plain {r['median_speedup_vs_hf_plain']:.2f}  " + split
    if r.get("lookup_ms_mean") is not None:
        split += f" lookup={r['lookup_ms_mean']:.2f}ms/step"
    if r["diverged_at_near_tie"]:
        split += f"  [near-tie divergences: {r['diverged_at_near_tie']}]"
    return [m, ident, f"{r['median_speedup']:.2f}", f"{r['tokens_per_s']:.1f}", fmt(r["mean_accepted"], ".2f"), orc,
            f" {split}"]


def print_report(report: dict) -> None:
    print(f"model {report['model']}  draft {report['draft']}  deterministic {report.get('deterministic')}  "
          f"split {report.get('split')}  T(k) ms {report['cost_curve_ms']}")
    for method, why in report.get("skipped", {}).items():
        print(f"{method}: skipped ({why})")
    for suite, d in report["suites"].items():
        s = d["summary"]
        nb = s["noise_bound"]
        counts = ", ".join(f"{'plain repeated' if m == 'plain' else m} {r['identical']}/{r['compared']}"
                           for m, r in s.items() if m != "noise_bound" and r["identical"] is not None)
        print(f"\n== {suite}  identical to plain: {counts}")
        width = max(15, *(len(m) + 1 for m in s if m != "noise_bound"))
        columns = [("method", width), ("ident", 6), ("speedup", 8), ("tok/s", 7), ("acc/step", 8), ("oracle/hw", 9),
                   (" time split s   [diagnostic: near-tie divergences, noise bound max |dlogit| "
                    f"{nb['max_abs_logit_diff']:.3f}]", 0)]
        print(table(columns, [_method_cells(m, r) for m, r in s.items() if m != "noise_bound"]))
        ours = {m: r for m, r in s.items() if m != "noise_bound" and not is_peer_method(m)}
        for m, r in ours.items():
            if r["vs_peer"]:
                ratios = ", ".join(f"{p} {v:.2f}x" for p, v in r["vs_peer"].items())
                print(f"  {m} tokens/s over {ratios}")
        peers = {m: r["tokens_per_s"] for m, r in s.items() if is_peer_method(m) and m != "llama-bench"}
        if peers:
            best = max(peers, key=peers.get)
            over = ", ".join(f"{m} {r['vs_peer'][best]:.2f}x" for m, r in ours.items() if best in r["vs_peer"])
            print(f"  best C++ peer: {best} ({peers[best]:.1f} tok/s); over it: {over or '-'}")
        if s.get("plain", {}).get("copy_bound_median") is not None:
            print(f"  copy bound: any drafter copying from the documents, prompt or answer: at most "
                  f"{s['plain']['copy_bound_median']:.2f}x plain here (median over prompts, at this T(k))")
        if s.get("plain", {}).get("draft_bound_median") is not None:
            print(f"  with the draft model guessing every other token at its measured forward: at most "
                  f"{s['plain']['draft_bound_median']:.2f}x plain")
        if "llama-bench" in s:
            print(f"  plain C++ (llama-bench) over plain Python: {s['llama-bench']['median_speedup']:.2f}x")
        if d.get("breakdown"):
            print_breakdown(d["breakdown"])
        if d.get("tuned"):
            print_tuned(d["tuned"])
