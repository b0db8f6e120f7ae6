"""What the deterministic kernels cost: prefill and decode speed with and without them.

    python -m localrag bench kernels [--model NAME|PATH] [--rounds 5] [--prompt-tokens 1000] [--json]

Four llama.cpp contexts of the same model in one process: ``deterministic`` (the app's: bf16 V
cache, flash attention, repacked weights through our batch-invariant GEMM where they pay), the same
with ``repack=True`` (``deterministic_repacked``: repacked wherever the patch keeps the bits, a
Q4_K file included on a build without the patch's row kernel) and with ``repack=False``
(``deterministic_unpacked``: the app's kernels before that patch), and llama.cpp's defaults; each
round prefills the same prompt and decodes the same greedy tokens, interleaved, so machine noise
hits all alike; the figures are medians of per-round ratios.

``GGML_CPU_REPACK_INVARIANT`` (our patch's switch, on in every localrag process) is read once per
process as well, so the default context's repacked weights take the same 4-row GEMM here:
upstream's 1-row GEMV for one-token batches only with the variable set to 0, which also takes the
deterministic arm's repacked weights away (it is then the unpacked one).

ggml reads ``GGML_CPU_TILED_MM`` (the tiled K-quant GEMM, which deterministic mode switches off)
once per process, so it is the same for all three contexts here: run the command twice, once as is
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
    def config(**kw) -> ModelConfig:
        return ModelConfig(model=args.model, n_threads=args.threads, n_ctx=4096, **kw)

    # the app's kernels; with repacked weights wherever the patch keeps the bits; without them (as
    # before our llama.cpp patch); llama.cpp's defaults
    arms = {"deterministic": LlamaCppBackend(config()),
            "deterministic_repacked": LlamaCppBackend(config(repack=True)),
            "deterministic_unpacked": LlamaCppBackend(config(repack=False)),
            "default": LlamaCppBackend(config(deterministic=False))}
    prompt = arms["default"].tokenize(TEXT * (args.prompt_tokens // 30 + 1), add_special=True)[: args.prompt_tokens]
    runs: dict[str, list[tuple[float, float, list[int]]]] = {name: [] for name in arms}
    for r in range(args.rounds):
        for name in alternate(arms, r):
            runs[name].append(_round(arms[name], prompt, args.new_tokens))
    det = runs["deterministic"]

    def over(other: str) -> dict:
        """The deterministic arm's tokens/s over another arm's (medians of per-round ratios), and
        the rounds whose greedy tokens were the same."""
        return {"prefill_ratio": median_ratio([x[0] for x in det], [x[0] for x in runs[other]]),
                "decode_ratio": median_ratio([x[1] for x in det], [x[1] for x in runs[other]]),
                "same_tokens_rounds": sum(a[2] == b[2] for a, b in zip(det, runs[other], strict=True))}

    result = {
        "model": arms["default"].name,
        "GGML_CPU_TILED_MM": os.environ.get("GGML_CPU_TILED_MM", "(unset: tiled GEMM on)"),
        "GGML_CPU_REPACK_INVARIANT": os.environ.get("GGML_CPU_REPACK_INVARIANT", "(unset: upstream repack)"),
        "repacked": {name: be.repacked for name, be in arms.items()},
        "rounds": args.rounds, "prompt_tokens": len(prompt), "new_tokens": args.new_tokens,
        "prefill_tps": {name: statistics.median(x[0] for x in runs[name]) for name in runs},
        "decode_tps": {name: statistics.median(x[1] for x in runs[name]) for name in runs},
        **over("default"),
        "over_repacked": over("deterministic_repacked"),
        "over_unpacked": over("deterministic_unpacked"),
    }
    for be in arms.values():
        be.close()
    return output(result, args.json, print_kernels)


def print_kernels(result: dict) -> None:
    print(f"{result['model']}: {result['prompt_tokens']}-token prompt, {result['new_tokens']} new tokens, "
          f"{result['rounds']} rounds, GGML_CPU_TILED_MM={result['GGML_CPU_TILED_MM']}, "
          f"GGML_CPU_REPACK_INVARIANT={result['GGML_CPU_REPACK_INVARIANT']}")
    repacked, unpacked = result["over_repacked"], result["over_unpacked"]
    for what in ("prefill", "decode"):
        tps = result[f"{what}_tps"]
        print(f"  {what:8} " + "   ".join(f"{name} {v:7.1f}" for name, v in tps.items()) + " tok/s")
        print(f"  {'':8} deterministic over default {result[f'{what}_ratio']:.3f}, "
              f"over repacked {repacked[f'{what}_ratio']:.3f}, over unpacked {unpacked[f'{what}_ratio']:.3f}")
    print(f"  greedy tokens identical to default in {result['same_tokens_rounds']}/{result['rounds']} rounds, "
          f"to repacked in {repacked['same_tokens_rounds']}, to unpacked in {unpacked['same_tokens_rounds']}")
