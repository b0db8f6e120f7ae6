"""``bench repetition``: how often the repetition guard stops normal answers, and looping ones.

    python -m localrag bench repetition --suite chat,code,rag,summary --n 16 [--max-new-tokens 256] [--json]
    python -m localrag bench repetition --suite chat,code --sweep       # other guard settings, same outputs

Each prompt of ``bench speed``'s suites is answered by Plain decoding *without* the guard (greedy, to
the token limit or end of generation; outputs cached under ``~/.cache/localrag/repetition/``), then the
guard is replayed over the emitted tokens (``localrag.repetition.replay``, the same class
``Generation`` runs). Reported per suite: how many outputs it would have stopped, by pattern, the
tokens it would have saved, how many outputs repeat a sentence (sentences as the evidence aligner
splits them, any length) before and after the cut, and every stop with the text around the cut, so
a reader can judge whether each one was a loop (normal answers, lists and code, should not be cut).
The guard's own cost per token is timed in the replay.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass

from localrag.bench.common import output, repeated_sentence
from localrag.bench.data import SUITES, load_suite
from localrag.config import GenerationConfig, ModelConfig, RepetitionConfig, default_cache_dir
from localrag.engine import Engine
from localrag.repetition import replay

SWEEP = (RepetitionConfig(), RepetitionConfig(min_words=2), RepetitionConfig(min_words=4),
         RepetitionConfig(min_span=8), RepetitionConfig(min_span=24), RepetitionConfig(max_period=128))


@dataclass(frozen=True)
class Output:
    """One prompt's plain output, decoded without the guard."""

    suite: str
    prompt: str  # its first 200 characters
    tokens: list[int]
    text: str
    stop_reason: str


def generate(engine: Engine, suite: str, n: int, max_new: int) -> list[Output]:
    """Plain outputs without the guard, cached per (model, suite, prompt, limit)."""
    out = []
    root = default_cache_dir() / "repetition"
    root.mkdir(parents=True, exist_ok=True)
    for p in load_suite(suite, n):
        msgs = p.conversation
        key = hashlib.sha1(json.dumps([engine.model_name, suite, msgs if p.chat else p.prompt,
                                       max_new]).encode()).hexdigest()
        f = root / f"{key}.json"
        if f.is_file():
            out.append(Output(**json.loads(f.read_text(encoding="utf-8"))))
            continue
        cfg = GenerationConfig(max_tokens=max_new, repetition=None)
        gen = engine.chat(msgs, cfg) if p.chat else engine.complete(p.prompt, cfg)
        gen.run()
        row = Output(suite, p.prompt[:200], list(gen.tokens), gen.text, gen.stats.stop_reason)
        f.write_text(json.dumps(asdict(row)), encoding="utf-8")
        out.append(row)
    return out


def judge(engine: Engine, rows: list[Output], config: RepetitionConfig) -> dict:
    """The guard replayed over every output."""
    stops, saved, pushes, seconds, repeating = [], 0, 0, 0.0, 0
    for row in rows:
        t0 = time.perf_counter()
        guard = replay(row.tokens, engine.backend.token_bytes, config)
        seconds += time.perf_counter() - t0
        pushes += len(guard.tokens)
        kept = row.text
        if guard.fired:
            text, kept = guard.text, guard.text[:guard.cut]
            saved += len(row.tokens) - len(guard.tokens)
            stops.append({"pattern": guard.pattern, "prompt": row.prompt[:80],
                          "kept_tail": kept[-160:], "repeat": text[guard.cut:guard.cut + 120]})
        repeating += repeated_sentence(kept) is not None
    return {"outputs": len(rows), "fired": len(stops),
            "by_pattern": {p: sum(s["pattern"] == p for s in stops) for p in ("sentence", "span")},
            "tokens_saved": saved,
            "repeat_a_sentence_without_guard": sum(repeated_sentence(r.text) is not None for r in rows),
            "repeat_a_sentence_with_guard": repeating,
            "guard_us_per_token": round(1e6 * seconds / max(pushes, 1), 1),
            "stops": stops}


def run_repetition(suites: list[str], n: int, max_new: int, model: str | None, sweep: bool) -> dict:
    engine = Engine.load(ModelConfig(model=model) if model else ModelConfig())
    configs = SWEEP if sweep else (RepetitionConfig(),)
    result = {"model": engine.model_name, "n": n, "max_new_tokens": max_new, "suites": {}}
    for suite in suites:
        rows = generate(engine, suite, n, max_new)
        result["suites"][suite] = {"stopped_by": {r: sum(x.stop_reason == r for x in rows) for r in ("eog", "length")},
                                   "configs": [{"config": asdict(c), **judge(engine, rows, c)} for c in configs]}
    return result


def add_bench_cli(bench_subparsers) -> None:
    p = bench_subparsers.add_parser("repetition", help="the repetition guard on normal outputs: how often it stops them")
    p.add_argument("--suite", default="chat,code,rag,summary", help=f"comma list of {', '.join(SUITES)}")
    p.add_argument("--n", type=int, default=16, help="prompts per suite")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--model", default=None)
    p.add_argument("--sweep", action="store_true", help="also replay other guard settings on the same outputs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_repetition)


def cmd_repetition(args) -> int:
    suites = [s.strip() for s in args.suite.split(",") if s.strip()]
    bad = [s for s in suites if s not in SUITES]
    if bad:
        print(f"error: unknown suite(s) {', '.join(bad)}; choose from {', '.join(SUITES)}", file=sys.stderr)
        return 2
    return output(run_repetition(suites, args.n, args.max_new_tokens, args.model, args.sweep), args.json,
                  print_repetition)


def print_repetition(result: dict) -> None:
    print(f"{result['model']}, {result['n']} prompts per suite, up to {result['max_new_tokens']} new tokens, "
          "Plain decoding without the guard, the guard replayed")
    for suite, r in result["suites"].items():
        print(f"\n{suite} (ended by EOG {r['stopped_by']['eog']}, by the limit {r['stopped_by']['length']})")
        for c in r["configs"]:
            cfg = RepetitionConfig(**c["config"])
            label = "default" if cfg == RepetitionConfig() else ", ".join(
                f"{k}={v}" for k, v in asdict(cfg).items() if v != asdict(RepetitionConfig())[k])
            print(f"  {label:16} stopped {c['fired']}/{c['outputs']} ({c['by_pattern']['sentence']} sentence, "
                  f"{c['by_pattern']['span']} span), {c['tokens_saved']} tokens saved; repeating a sentence: "
                  f"{c['repeat_a_sentence_without_guard']} without, {c['repeat_a_sentence_with_guard']} with; "
                  f"{c['guard_us_per_token']} µs/token")
            if cfg == RepetitionConfig():
                for s in c["stops"]:
                    print(f"    [{s['pattern']}] …{s['kept_tail'][-100:]!r} ⟂ {s['repeat'][:80]!r}")
