"""``bench ttft``: how soon the first words come, for a question read from an empty cache and for
the turns that reuse its prompt.

    python -m localrag bench ttft [--model NAME] [--mode plain|speedup] [--n 5] [--k 5]
                                  [--max-tokens 32] [--json]

Plain mode (or Speedup) through the answer layer (``Answerer.find``, ``rag_messages``,
``generate``) on ``bench qa``'s SQuAD collection (report split, seed 0). Per question, in this
order:

    question    a k-chunk question, the KV cache emptied first: the whole prompt is read
    follow-up   "Why is that?" after it (its search carries the question's key terms, so it
                finds the same chunks, and ``Answerer.find`` keeps their order): only the new
                turn is read, the rest comes from the cache
    regenerate  the follow-up asked again: all of its prompt but the last token from the cache

Speedup is ``--mode speedup`` (the registry's draft for the model). Either mode first answers
one question untimed: a mode's first answer may set it up (Speedup times the models' forwards once
per machine), and its draft bandit then knows whether the draft pays here.

Per kind: median time to first token (the request to the first piece of text, as the page shows
it), prompt tokens read and reused, prefill tokens/s (tokens read / prefill seconds) and decode
tokens/s. One process, one model: the three kinds of one question run back to back.

``--prefill`` compares the exact prefill with the approximate one (``prefill="reuse"``: the chunks'
KV from a cache), each from an empty KV cache, interleaved (which goes first alternates by
question). Per question:

    cold    reuse with none of its chunks cached (a cache folder of its own, cleared before each
            such turn: reuse computes and stores them, what a chunk costs the first time it is read)
    warmed  reuse after the app's background warm (``Answerer.warm_chunks``) stored every chunk of
            the collection, before the first question (timed: ``warm``, with the disk per chunk)

``--head N`` sets how many tokens at the head of each chunk the reuse prefill reads at their place
(``ChunkCacheConfig.head``; a point of the recompute curve, with ``bench grounding --head`` for its
quality).

It prints each arm's median time to first token, the tokens it decoded for the prompt (a miss's
computed tokens included), the chunk-cache hits, and the ratio of the medians (reuse / exact).
Answers may differ (the reuse prefill is approximate): ``same answers`` counts the questions
whose reuse answer equals the exact one.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from localrag.answer import PREFILLS, AnswerConfig, Answerer
from localrag.bench.common import QA_INSTRUCTIONS, fmt, output, table
from localrag.bench.data import load_records, qa_collection
from localrag.config import ChunkCacheConfig, GenerationConfig, ModelConfig
from localrag.engine import Engine
from localrag.modes import AnswerRequest, get_mode

FOLLOWUP = "Why is that?"
KINDS = ("question", "follow-up", "regenerate")


@dataclass(frozen=True)
class FirstWords:
    kind: str
    ttft_s: float
    read_tokens: int  # prompt tokens decoded (none from the KV cache or placed from the chunk cache; misses count)
    reused_tokens: int  # prompt tokens taken from the KV cache
    prefill_tps: float
    decode_tps: float
    same_chunks: bool  # the turn's chunks are the question's (follow-up, regenerate)


def first_words(answerer: Answerer, request: AnswerRequest, kind: str, same_chunks: bool,
                mode: str = "plain") -> tuple[FirstWords, str]:
    """One answer, timed to its first piece; (its figures, its text)."""
    t0 = time.perf_counter()
    ttft = None
    result = None
    for item in get_mode(mode).stream(answerer, request):
        if isinstance(item, str) and ttft is None and item.strip():
            ttft = time.perf_counter() - t0
        elif not isinstance(item, str):
            result = item
    g = result.stats.generation
    read = g.prompt_tokens - g.reused_prompt_tokens - g.placed_prompt_tokens + g.computed_prompt_tokens
    return FirstWords(kind, ttft if ttft is not None else float("nan"), read, g.reused_prompt_tokens,
                      read / g.prefill_seconds if g.prefill_seconds else 0.0, g.decode_tps, same_chunks), result.text


def run_ttft(model: str | None, n: int, k: int, max_tokens: int, progress=None, mode: str = "plain") -> dict:
    records = load_records("squad", None, "report", n, 0)
    collection = qa_collection("grounding-squad-report", [r.qa for r in records])
    engine = Engine.load(ModelConfig(model=model) if model else ModelConfig())
    answerer = Answerer(engine, collection.index, config=AnswerConfig(instructions=QA_INSTRUCTIONS))
    gen = GenerationConfig(max_tokens=max_tokens)
    opts = get_mode(mode).options({"k": k})
    rows: list[FirstWords] = []
    # untimed, in every mode: a mode's first answer may set it up (Speedup times the forwards once)
    first_words(answerer, AnswerRequest(records[0].qa.question, gen=gen, options=opts), "warm-up", True, mode)
    for i, rec in enumerate(records):
        engine.backend.reset()
        q = rec.qa.question
        first, text = first_words(answerer, AnswerRequest(q, gen=gen, options=opts), "question", True, mode)
        history = [{"role": "user", "content": q}, {"role": "assistant", "content": text}]
        follow = AnswerRequest(FOLLOWUP, history=history, gen=gen, options=opts)
        same = [h.chunk_id for h in answerer.find(FOLLOWUP, history, k).hits] == \
            [h.chunk_id for h in answerer.find(q, [], k).hits]
        got = [first, first_words(answerer, follow, "follow-up", same, mode)[0],
               first_words(answerer, follow, "regenerate", same, mode)[0]]
        rows += got
        if progress:
            progress(i + 1, len(records), got)
    return {"model": engine.model_name, "mode": mode, "n": len(records), "k": k, "max_tokens": max_tokens,
            "threads": engine.backend.n_threads, "kinds": {kind: summarize([r for r in rows if r.kind == kind])
                                                           for kind in KINDS},
            "rows": [asdict(r) for r in rows]}


def run_prefill(model: str | None, n: int, k: int, max_tokens: int, progress=None, mode: str = "plain",
                cache_dir: Path | None = None, head: int = ChunkCacheConfig.head) -> dict:
    """The exact and the reuse prefill, interleaved, on cold and warmed chunks (the module docstring);
    ``head``: the reuse prefill's tokens read at their place at the head of each chunk."""
    records = load_records("squad", None, "report", n, 0)
    collection = qa_collection("grounding-squad-report", [r.qa for r in records])
    engine = Engine.load(ModelConfig(model=model) if model else ModelConfig())
    with tempfile.TemporaryDirectory(prefix="chunk-kv-", dir=cache_dir) as warm_dir, \
            tempfile.TemporaryDirectory(prefix="chunk-kv-cold-", dir=cache_dir) as cold_dir:
        answerers = {kind: Answerer(engine, collection.index, config=AnswerConfig(
            instructions=QA_INSTRUCTIONS, chunk_cache=ChunkCacheConfig(folder=Path(folder), head=head)))
            for kind, folder in (("cold", cold_dir), ("warmed", warm_dir))}
        gen = GenerationConfig(max_tokens=max_tokens)
        opts = {p: get_mode(mode).options({"k": k, "prefill": p}) for p in PREFILLS}

        def turn(question: str, prefill: str, kind: str) -> tuple[dict, str]:
            engine.backend.reset()
            store = answerers[kind].kv_store()
            if kind == "cold" and prefill == "reuse":
                store.clear()
            before = store.stats.hits
            row, text = first_words(answerers[kind], AnswerRequest(question, gen=gen, options=opts[prefill]), kind,
                                    True, mode)
            return {**asdict(row), "prefill": prefill, "hits": store.stats.hits - before}, text

        for p in PREFILLS:  # untimed: a mode's first answer may set it up
            turn(records[0].qa.question, p, "cold")
        hits = collection.index.live_hits()
        engine.backend.reset()
        t0 = time.perf_counter()
        warmed = answerers["warmed"].warm_chunks(hits)
        sizes = sorted(s for _, s, _ in answerers["warmed"].kv_store().entries())
        warm = {"chunks": warmed.total, "stored": warmed.stored, "seconds": round(time.perf_counter() - t0, 1),
                "bytes": sum(sizes), "median_entry_bytes": sizes[len(sizes) // 2] if sizes else None}
        rows: list[dict] = []
        for i, rec in enumerate(records):
            got = []
            for kind in ("cold", "warmed"):
                texts = {}
                for p in PREFILLS if i % 2 == 0 else PREFILLS[::-1]:
                    row, texts[p] = turn(rec.qa.question, p, kind)
                    got.append(row)
                for row in got[-2:]:
                    row["same_answer"] = texts["exact"] == texts["reuse"]
            rows += got
            if progress:
                progress(i + 1, len(records), got)
        arms = {}
        for kind in ("cold", "warmed"):
            med = {p: summarize([FirstWords(**{f: r[f] for f in FirstWords.__dataclass_fields__})
                                 for r in rows if r["kind"] == kind and r["prefill"] == p]) for p in PREFILLS}
            ratio = (med["reuse"]["ttft_s"] / med["exact"]["ttft_s"]
                     if med["exact"]["ttft_s"] and med["reuse"]["ttft_s"] else None)
            arms[kind] = {"exact": med["exact"], "reuse": med["reuse"],
                          "ttft_ratio": round(ratio, 3) if ratio else None,
                          "same_answers": sum(r["same_answer"] for r in rows if r["kind"] == kind) // 2,
                          "hits": sum(r["hits"] for r in rows if r["kind"] == kind and r["prefill"] == "reuse")}
    return {"model": engine.model_name, "mode": mode, "n": len(records), "k": k, "max_tokens": max_tokens,
            "threads": engine.backend.n_threads, "head": head, "warm": warm, "arms": arms, "rows": rows}


def summarize(rows: list[FirstWords]) -> dict:
    def med(values):
        values = [v for v in values if v == v]  # (no NaN: an answer with no text has no first word)
        return round(statistics.median(values), 3) if values else None

    return {"ttft_s": med(r.ttft_s for r in rows), "read_tokens": med(r.read_tokens for r in rows),
            "reused_tokens": med(r.reused_tokens for r in rows), "prefill_tps": med(r.prefill_tps for r in rows),
            "decode_tps": med(r.decode_tps for r in rows), "same_chunks": sum(r.same_chunks for r in rows),
            "turns": len(rows)}


def add_bench_cli(sub) -> None:
    p = sub.add_parser("ttft", help="time to first token: a question from an empty cache, a follow-up and a "
                                    "Regenerate reusing its prompt")
    p.add_argument("--model", default=None)
    p.add_argument("--n", type=int, default=5, help="questions")
    p.add_argument("--k", type=int, default=5, help="chunks per prompt")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--mode", choices=("plain", "speedup"), default="plain",
                   help="speedup: RASD with the registry's draft for the model (its prompt read counts)")
    p.add_argument("--prefill", action="store_true",
                   help="compare the exact prefill with the approximate one (reuse: chunks' KV from a cache), "
                        "interleaved, on cold chunks and on chunks seen before")
    p.add_argument("--head", type=int, default=ChunkCacheConfig.head,
                   help="--prefill: tokens at the head of each chunk read at their place (default: the app's)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_ttft)


def cmd_ttft(args) -> int:
    def progress(i, total, rows):
        print(f"[{i}/{total}] " + " | ".join(f"{r.kind}: {r.ttft_s:.2f} s ({r.read_tokens} read)" for r in rows),
              file=sys.stderr)

    if args.prefill:
        def progress_prefill(i, total, rows):
            print(f"[{i}/{total}] " + " | ".join(f"{r['kind']} {r['prefill']}: {r['ttft_s']:.2f} s "
                                                 f"({r['read_tokens']} read, {r['hits']} hits)" for r in rows),
                  file=sys.stderr)

        result = run_prefill(args.model, args.n, args.k, args.max_tokens, progress_prefill, args.mode,
                             head=args.head)
        return output({k: v for k, v in result.items() if k != "rows"}, args.json, print_prefill)
    result = run_ttft(args.model, args.n, args.k, args.max_tokens, progress, args.mode)
    return output({k: v for k, v in result.items() if k != "rows"}, args.json, print_ttft)


def print_prefill(result: dict) -> None:
    print(f"{result['model']}, {result['mode']}, {result['n']} SQuAD questions, k={result['k']}, "
          f"{result['threads']} threads; exact vs reuse (approximate) prefill, interleaved")
    columns = [("chunks", 6), ("prefill", 7), ("first tok s", 11), ("read", 5), ("hits", 4), ("decode t/s", 10)]
    rows = []
    for kind, arm in result["arms"].items():
        for p in PREFILLS:
            v = arm[p]
            rows.append([kind, p, fmt(v["ttft_s"], ".2f"), v["read_tokens"], arm["hits"] if p == "reuse" else "-",
                         fmt(v["decode_tps"], ".1f")])
    print(table(columns, rows))
    for kind, arm in result["arms"].items():
        print(f"{kind}: first token reuse / exact (ratio of medians) {fmt(arm['ttft_ratio'], '.2f')}x; "
              f"same answers {arm['same_answers']}/{result['n']}")
    w = result["warm"]
    print(f"warm: {w['stored']} of {w['chunks']} chunks stored in {w['seconds']} s; {w['bytes'] / 2**20:.1f} MiB "
          f"(median {(w['median_entry_bytes'] or 0) / 2**20:.2f} MiB a chunk)")


def print_ttft(result: dict) -> None:
    print(f"{result['model']}, {result['mode']}, {result['n']} SQuAD questions, k={result['k']}, "
          f"{result['threads']} threads")
    columns = [("turn", 10), ("first tok s", 11), ("read", 5), ("reused", 6), ("prefill t/s", 11),
               ("decode t/s", 10), ("same chunks", 11)]
    print(table(columns, [[kind, fmt(v["ttft_s"], ".2f"), v["read_tokens"], v["reused_tokens"],
                           fmt(v["prefill_tps"], ".1f"), fmt(v["decode_tps"], ".1f"),
                           f"{v['same_chunks']}/{v['turns']}"] for kind, v in result["kinds"].items()]))
