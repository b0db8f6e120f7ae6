"""What the deterministic kernels cost: prefill and decode speed with and without them.

    python -m localrag bench kernels [--model NAME|PATH] [--rounds 5] [--prompt-tokens 1000] [--json]

Two llama.cpp contexts of the same model in one process, one with ``deterministic=True``
(bf16 V cache, flash attention, no repacked weights) and one with llama.cpp's defaults, each
round prefilling the same prompt and decoding the same greedy tokens, interleaved, so machine
noise hits both alike; the figures are medians of per-round ratios.

ggml reads ``GGML_CPU_TILED_MM`` (the tiled K-quant GEMM, which deterministic mode switches off)
once per process, so it is the same for both contexts here: run the command twice, once as is
(tiled GEMM off, as the app runs) and once with ``GGML_CPU_TILED_MM=1`` in the environment, to
see that switch's share (it matters only for K-quant weights, e.g. Gemma's Q4_K_M, in batches of
8 or more rows: prefill and tree verification).
"""

from __future__ import annotations

import os
import statistics
import time

from localrag.backends.llamacpp import LlamaCppBackend
from localrag.bench.common import alternate, median_ratio, output
from localrag.config import ModelConfig
from localrag.generation import backend_sync

TEXT = ("The Zephyr 300 router ships with firmware 4.2. To reset it, hold the button for ten seconds; "
        "the status light blinks amber while the settings return to their factory values. ")


def add_bench_cli(sub) -> None:
    p = sub.add_parser("kernels", help="prefill and decode speed with and without the deterministic kernels")
    p.add_argument("--model", default=ModelConfig().model)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--prompt-tokens", type=int, default=1000)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_kernels)


def _round(be: LlamaCppBackend, prompt: list[int], n_new: int) -> tuple[float, float, list[int]]:
    """(prefill tokens/s, decode tokens/s, greedy tokens) from an empty cache."""
    be.reset()
    t0 = time.perf_counter()
    logits = backend_sync(be, prompt)
    prefill = len(prompt) / (time.perf_counter() - t0)
    out: list[int] = []
    t0 = time.perf_counter()
    for _ in range(n_new):
        out.append(int(logits.argmax()))
        logits = be.decode_one(out[-1])
    return prefill, n_new / (time.perf_counter() - t0), out


def cmd_kernels(args) -> int:
    base = ModelConfig(model=args.model, n_threads=args.threads, n_ctx=4096)
    arms = {"deterministic": LlamaCppBackend(base), "default": LlamaCppBackend(
        ModelConfig(model=args.model, n_threads=args.threads, n_ctx=4096, deterministic=False))}
    prompt = arms["default"].tokenize(TEXT * (args.prompt_tokens // 30 + 1), add_special=True)[: args.prompt_tokens]
    runs: dict[str, list[tuple[float, float, list[int]]]] = {name: [] for name in arms}
    for r in range(args.rounds):
        for name in alternate(arms, r):
            runs[name].append(_round(arms[name], prompt, args.new_tokens))
    det, dflt = runs["deterministic"], runs["default"]
    result = {
        "model": arms["default"].name,
        "GGML_CPU_TILED_MM": os.environ.get("GGML_CPU_TILED_MM", "(unset: tiled GEMM on)"),
        "rounds": args.rounds, "prompt_tokens": len(prompt), "new_tokens": args.new_tokens,
        "prefill_tps": {"deterministic": statistics.median(x[0] for x in det),
                        "default": statistics.median(x[0] for x in dflt)},
        "decode_tps": {"deterministic": statistics.median(x[1] for x in det),
                       "default": statistics.median(x[1] for x in dflt)},
        "prefill_ratio": median_ratio([x[0] for x in det], [x[0] for x in dflt]),
        "decode_ratio": median_ratio([x[1] for x in det], [x[1] for x in dflt]),
        "same_tokens_rounds": sum(a[2] == b[2] for a, b in zip(det, dflt, strict=True)),
    }
    for be in arms.values():
        be.close()
    return output(result, args.json, print_kernels)


def print_kernels(result: dict) -> None:
    print(f"{result['model']}: {result['prompt_tokens']}-token prompt, {result['new_tokens']} new tokens, "
          f"{result['rounds']} rounds, GGML_CPU_TILED_MM={result['GGML_CPU_TILED_MM']}")
    for what in ("prefill", "decode"):
        tps = result[f"{what}_tps"]
        print(f"  {what:8} deterministic {tps['deterministic']:8.1f} tok/s   default {tps['default']:8.1f} tok/s   "
              f"ratio {result[f'{what}_ratio']:.3f}")
    print(f"  greedy tokens identical in {result['same_tokens_rounds']}/{result['rounds']} rounds")
