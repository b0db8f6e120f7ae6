"""Plain-decoding speed of our engine against llama-cpp-python's own ``Llama`` class.

Both run greedy on the same model, prompt, thread count and context settings, in one
process, interleaved round by round, so machine noise hits both alike.

    python -m localrag bench plain [--model NAME|PATH] [--rounds 5] [--max-new-tokens 128] [--json]
"""

from __future__ import annotations

import statistics
import time

from llama_cpp import Llama

from localrag.backends.llamacpp import LlamaCppBackend, default_threads
from localrag.bench.common import median_ratio, output
from localrag.config import GenerationConfig, ModelConfig
from localrag.engine import Engine

QUESTION = "Write a long story about a lighthouse keeper who finds a message in a bottle."


def add_bench_cli(sub) -> None:
    p = sub.add_parser("plain", help="our plain decode loop vs llama-cpp-python's Llama (tokens/s ratio)")
    p.add_argument("--model", default=ModelConfig().model)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plain)


def _time_llama(llm, prompt_tokens: list[int], n: int) -> tuple[float, list[int]]:
    """Decode tokens/s of Llama.generate (greedy), excluding the prompt prefill."""
    out: list[int] = []
    t0 = None
    llm.reset()  # no prefix reuse: the same work as our side
    for tok in llm.generate(prompt_tokens, temp=0.0, reset=True):
        if t0 is None:  # first token comes right after the prefill
            t0 = time.perf_counter()
        out.append(tok)
        if len(out) == n + 1 or llm.token_eos() == tok:
            break
    return (len(out) - 1) / (time.perf_counter() - t0), out


def cmd_plain(args) -> int:
    threads = args.threads or default_threads()
    # the same kernels as llama-cpp-python's Llama defaults (f16 V cache, no flash attention), so
    # this compares the decode loops alone; the deterministic kernels' cost is bench speed's business
    cfg = ModelConfig(model=args.model, n_ctx=2048, n_threads=threads, flash_attn=False, deterministic=False)
    engine = Engine(LlamaCppBackend(cfg))
    ref = Llama(str(engine.backend.model_spec.path), n_ctx=2048, n_batch=cfg.n_batch, n_threads=threads,
                n_threads_batch=threads, flash_attn=False, n_gpu_layers=engine.backend.gpu_layers, verbose=False)
    prompt_text = engine.prompt.render([{"role": "user", "content": QUESTION}])
    prompt_tokens = engine.encode_prompt(prompt_text)
    gen_cfg = GenerationConfig(max_tokens=args.max_new_tokens, repetition=None)  # Llama has no repetition guard
    ours_tps, ref_tps, same = [], [], 0
    for _ in range(args.rounds):
        engine.backend.reset()
        # Both sides: forward passes per second after the prefill. Our n tokens took n-1 decodes
        # (the first comes from the prefill's logits), Llama's n+1 tokens after t0 took n.
        g = engine.complete(prompt_text, gen_cfg).run()
        ours_tps.append((g.stats.generated_tokens - 1) / g.stats.decode_seconds)
        tps, toks = _time_llama(ref, prompt_tokens, args.max_new_tokens)
        ref_tps.append(tps)
        same += toks[: len(g.tokens)] == g.tokens
    result = {
        "model": engine.model_name,
        "threads": threads,
        "rounds": args.rounds,
        "new_tokens": args.max_new_tokens,
        "ours_tokens_per_s": statistics.median(ours_tps),
        "llama_cpp_python_tokens_per_s": statistics.median(ref_tps),
        "ratio_ours_over_llama": median_ratio(ours_tps, ref_tps),
        "identical_greedy_rounds": same,
    }
    ref.close()
    engine.close()
    return output(result, args.json, print_plain)


def print_plain(result: dict) -> None:
    print(f"model {result['model']}, {result['threads']} threads, {result['rounds']} rounds x "
          f"{result['new_tokens']} tokens")
    print(f"  ours                 {result['ours_tokens_per_s']:.1f} tok/s")
    print(f"  llama_cpp.Llama      {result['llama_cpp_python_tokens_per_s']:.1f} tok/s")
    print(f"  ratio ours / Llama   {result['ratio_ours_over_llama']:.3f}   (identical greedy output in "
          f"{result['identical_greedy_rounds']}/{result['rounds']} rounds)")
