"""``bench speed --breakdown`` and ``--tune``: where each step loses against its bound, per suite.

Our decoders keep every step of the first round (``RasdDecoder.record_steps``, one
``results.StepRecord`` each): the tree's size and depth, the drafted tokens accepted, the forward's
time and the Python time since the previous forward, the datastore lookup's match and, found once
the answer is known, what that lookup held: the longest continuation the answer then wrote
(``held``, what verifying it would have accepted). Beside it each step gets the copy bound's run
(``copy_run``: how many tokens from its first on are ``speed.copyable``, the most any copying drafter
could have taken there). A *missed* step emitted one token while the datastore held a longer match
that would have been accepted.

For llama.cpp's C++ peers the breakdown is what they print: tokens drafted and accepted, hence their
acceptance rate, tokens per forward and time per forward (their decode time over their forwards).

``--tune`` measures what the budget's prior (``cost.MATCH_CLASS_TRUST``) stands for: per match class,
how often the lookup's most frequent first token was the answer's next one (over steps whose lookup
had a single first token, and over all). It runs on the tune split only (``data.speed_split``).
"""

from __future__ import annotations

import statistics

from localrag.bench.common import fmt, table
from localrag.bench.speed_runs import SuiteRuns
from localrag.rasd.cost import MATCH_CLASS_START, match_class


def copy_runs(flags: list[bool]) -> list[int]:
    """Per answer index i: how many tokens from i on are copyable in a row (``speed.copyable``'s flags)."""
    out = [0] * (len(flags) + 1)
    for i in range(len(flags) - 1, -1, -1):
        out[i] = out[i + 1] + 1 if flags[i] else 0
    return out[:-1]


def step_rows(step_log: list[dict], flags: list[bool]) -> list[dict]:
    """A run's step records (``StepRecord`` dicts), each with ``copy_run`` at its first token."""
    runs = copy_runs(flags)
    return [{**s, "copy_run": runs[s["start"]] if s["start"] < len(runs) else 0} for s in step_log]


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def ours(steps: list[dict], prompts: int) -> dict:
    """Counts, sums and medians over the step records of every prompt of a suite (one method)."""
    tree = [s for s in steps if s["size"]]
    plain = [s for s in steps if not s["size"]]
    one = [s for s in steps if s["accepted"] == 0]
    tokens = sum(s["accepted"] + 1 for s in steps)
    drafted, accepted = sum(s["size"] for s in steps), sum(s["accepted"] for s in steps)
    verify, between = sum(s["verify_s"] for s in steps), sum(s["between_s"] for s in steps)
    missed = [s for s in one if s["held"] >= 1]
    return {
        "prompts": prompts, "steps": len(steps), "tree_steps": len(tree), "plain_steps": len(plain),
        "probe_steps": sum(bool(s["forced"]) for s in steps), "draft_steps": sum(bool(s["draft"]) for s in steps),
        "tokens": tokens,
        "tree_size_median": _median([s["size"] for s in tree]),
        "tree_depth_median": _median([s["depth"] for s in tree]),
        "drafted": drafted, "accepted": accepted,
        "accept_rate": accepted / drafted if drafted else None,
        "tokens_per_forward": tokens / len(steps) if steps else None,
        "verify_ms_median": _ms(_median([s["verify_s"] for s in tree])),
        "plain_ms_median": _ms(_median([s["verify_s"] for s in plain])),
        "between_ms_median": _ms(_median([s["between_s"] for s in steps])),
        "between_share": between / (verify + between) if verify + between > 0 else None,
        "ms_per_forward": (verify + between) * 1e3 / len(steps) if steps else None,
        # one token emitted while the datastore held a continuation the answer then wrote
        "missed_steps": len(missed), "missed_tokens": sum(s["held"] for s in missed),
        # every step: the held continuation's tokens past what the step accepted
        "held_not_taken": sum(max(0, s["held"] - s["accepted"]) for s in steps),
        # one token emitted where the copy bound's pairs allowed a longer step
        "copy_missed_steps": sum(s["copy_run"] >= 1 for s in one),
    }


def _ms(s: float | None) -> float | None:
    return s * 1e3 if s is not None else None


def peer(runs: list[dict], decode_s: float) -> dict:
    """A C++ peer's own counts (``speed_peer``'s run stats with ``n_tokens``), summed over prompts."""
    tokens = sum(r["n_tokens"] for r in runs)
    drafted, accepted = sum(r.get("n_drafted", 0) for r in runs), sum(r.get("n_accept", 0) for r in runs)
    forwards = max(tokens - accepted, 1)  # every forward emits its accepted tokens and one more
    return {"prompts": len(runs), "tokens": tokens, "n_draft": max((r.get("n_draft", 0) for r in runs), default=0),
            "drafted": drafted, "accepted": accepted, "accept_rate": accepted / drafted if drafted else None,
            "tokens_per_forward": tokens / forwards, "ms_per_forward": decode_s * 1e3 / forwards}


def summarise_breakdown(result: SuiteRuns, methods: list[str]) -> dict:
    """Per method of ours with recorded steps (first round), and per C++ speculative peer (first round)."""
    out = {}
    for m in methods:
        rows = [row.methods[m] for row in result.rows if m in row.methods]
        if rows and all(r.steps is not None for r in rows):
            out[m] = ours([s for r in rows for s in r.steps], len(rows))
        elif rows and all("n_drafted" in r.first.stats for r in rows):
            out[m] = peer([{**r.first.stats, "n_tokens": r.first.n_tokens} for r in rows],
                          sum(r.first.decode_s for r in rows))
    return out


def class_label(c: int) -> str:
    lo = MATCH_CLASS_START[c]
    hi = MATCH_CLASS_START[c + 1] - 1 if c + 1 < len(MATCH_CLASS_START) else None
    return str(lo) if hi == lo else f"{lo}-{hi}" if hi is not None else f"{lo}+"


def match_class_acceptance(steps: list[dict]) -> dict:
    """Per match class (1 token up): how often the lookup's most frequent first token was the
    answer's next one, over steps whose lookup had a single first token (what
    ``MATCH_CLASS_TRUST`` is a prior for) and over every step with a match."""
    out = {}
    for c in range(1, len(MATCH_CLASS_START)):
        at = [s for s in steps if s["top_ok"] is not None and match_class(s["match_len"]) == c]
        unique = [s for s in at if s["unique"]]
        out[class_label(c)] = {
            "unique_trials": len(unique),
            "unique_accepted": sum(s["top_ok"] for s in unique) / len(unique) if unique else None,
            "trials": len(at), "accepted": sum(s["top_ok"] for s in at) / len(at) if at else None,
        }
    return out


def tune_steps(result: SuiteRuns) -> list[dict]:
    """The steps to tune on: the retrieval decoder's where it ran, else rasd's (one lookup per step)."""
    for m in ("retrieval", "rasd"):
        runs = [row.methods[m] for row in result.rows if m in row.methods and row.methods[m].steps is not None]
        if runs:
            return [s for r in runs for s in r.steps]
    return []


def print_breakdown(breakdown: dict) -> None:
    cols = [("method", 16), ("steps", 6), ("tree", 5), ("plain", 6), ("size", 5), ("depth", 6), ("drafted", 8),
            ("accepted", 9), ("rate", 5), ("tok/fwd", 8), ("ms/fwd", 7), ("verify ms", 10), ("plain ms", 9),
            ("between ms", 11), ("py%", 4), ("missed", 14), (" copy-missed", 0)]
    rows = []
    for m, b in breakdown.items():
        mine = "steps" in b
        rows.append([m, str(b["steps"]) if mine else "-", str(b["tree_steps"]) if mine else "-",
                     str(b["plain_steps"]) if mine else "-", fmt(b.get("tree_size_median"), ".1f"),
                     fmt(b.get("tree_depth_median"), ".1f"), str(b["drafted"]), str(b["accepted"]),
                     fmt(b["accept_rate"], ".2f"), fmt(b["tokens_per_forward"], ".2f"), fmt(b["ms_per_forward"], ".1f"),
                     fmt(b.get("verify_ms_median"), ".1f"), fmt(b.get("plain_ms_median"), ".1f"),
                     fmt(b.get("between_ms_median"), ".2f"), fmt(100 * b["between_share"], ".0f")
                     if b.get("between_share") is not None else "-",
                     f"{b['missed_steps']} ({b['missed_tokens']} tok)" if mine else "-",
                     f" {b['copy_missed_steps']}" if mine else " -"])
    print("  per step, first round, summed over prompts (ms: medians over steps; between: Python time between "
          "forwards; missed: one-token steps where the datastore held what the answer wrote next)")
    print(table(cols, rows))


def print_tuned(tuned: dict) -> None:
    print("  tuned on this split: the lookup's top first token accepted, per match class "
          "(single continuation / all): " + ", ".join(
              f"{c} {fmt(t['unique_accepted'], '.2f')} ({t['unique_trials']}) / {fmt(t['accepted'], '.2f')} ({t['trials']})"
              for c, t in tuned.items()))
