"""``bench speed --backend hf``: the target in transformers, plus transformers' own decoding methods.

Used by localrag.bench.speed:

    load_target(args) -> Engine     the --model loaded through transformers (a GGUF is dequantized)
    extra_methods(args) -> {name: fn(engine, ids, cfg, docs) -> Run}

Extra methods, each on the same model object as our own methods, interleaved per prompt:
  hf-plain     model.generate(do_sample=False): transformers' own greedy loop (the issue's baseline)
  hf-pld       model.generate(prompt_lookup_num_tokens=N): transformers' prompt-lookup decoding
  hf-assisted  model.generate(assistant_model=draft): transformers' assisted generation, with the
               --draft model loaded in transformers (same file; a GGUF draft is dequantized, so
               when it is the target's own file the assistant *is* the target model object)

Timing matches our methods: decode time only, the prompt's prefill is not counted (see
timed_generate for how, per method).

    python -m localrag bench speed --backend hf --suite docqa --draft smollm2-135m-instruct \\
        --methods plain,hf-plain,hf-pld,hf-assisted,retrieval,rasd
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch

from localrag.backends import hf_compat
from localrag.backends.hf import HFBackend
from localrag.bench.speed_runs import Run
from localrag.config import GenerationConfig, ModelConfig
from localrag.engine import Engine
from localrag.models import resolve

PLD_TOKENS = 10  # transformers' documented typical value for prompt_lookup_num_tokens

Method = Callable[[Engine, list[int], GenerationConfig, list[str]], Run]


def load_target(args) -> Engine:
    """--model in transformers; device/dtype from args.device/args.dtype or LOCALRAG_HF_DEVICE/_DTYPE."""
    config = ModelConfig(
        model=args.model,
        backend="hf",
        n_ctx=args.ctx,
        n_threads=args.threads,
        device=args.device or os.environ.get("LOCALRAG_HF_DEVICE"),
        dtype=args.dtype or os.environ.get("LOCALRAG_HF_DTYPE"),
    )
    return Engine(HFBackend(config))


def extra_methods(args) -> dict[str, Method]:
    methods: dict[str, Method] = {"hf-plain": hf_plain, "hf-pld": hf_pld}
    if args.draft:
        methods["hf-assisted"] = AssistedMethod(args)
    return methods


# --- one timed generate() ---------------------------------------------------------------
def timed_generate(engine: Engine, ids: list[int], cfg: GenerationConfig, **generate_kwargs) -> Run:
    """Greedy model.generate; decode time excludes the prompt's prefill; tokens up to the first EOG.

    Plain generate continues from a cache prefilled with ids[:-1] outside the clock.
    Prompt lookup and assisted generation give wrong tokens when started from a
    prefilled cache in transformers 5.23 (checked in tests/hf/test_hf_bench.py), so
    for them the prefill is timed separately (generate with max_new_tokens=1, same
    arguments) and subtracted.
    """
    be: HFBackend = engine.backend
    be.reset()  # our own cache is not used here: free it
    eog = sorted(t for t in be._eog if t < be.n_vocab)
    kwargs = {"eos_token_id": eog, "pad_token_id": eog[0] if eog else None, **generate_kwargs}
    input_ids = torch.tensor([ids], device=be.device)
    prefill_s = 0.0
    if generate_kwargs:  # speculative generate: subtract a timed one-token run (= its prefill)
        t0 = time.perf_counter()
        hf_compat.generate(be.model, input_ids, None, max_new_tokens=1, **kwargs)
        prefill_s = time.perf_counter() - t0
        cache = None
    else:
        cache = hf_compat.new_cache(be.model)
        hf_compat.forward(be.model, input_ids[:, :-1], cache, last_only=True)
    t0 = time.perf_counter()
    out = hf_compat.generate(be.model, input_ids, cache, max_new_tokens=cfg.max_tokens, **kwargs)
    decode_s = max(time.perf_counter() - t0 - prefill_s, 1e-9)
    tokens = []
    for t in out[0, len(ids) :].tolist():
        if be.is_eog(t):
            break
        tokens.append(t)
    return Run(decode_s=decode_s, tokens=tokens, stats={"prefill_s_subtracted": prefill_s})


def hf_plain(engine: Engine, ids: list[int], cfg: GenerationConfig, docs: list[str]) -> Run:
    return timed_generate(engine, ids, cfg)


def hf_pld(engine: Engine, ids: list[int], cfg: GenerationConfig, docs: list[str]) -> Run:
    return timed_generate(engine, ids, cfg, prompt_lookup_num_tokens=PLD_TOKENS)


class AssistedMethod:
    """Transformers' assisted generation with --draft as the assistant (loaded lazily, once)."""

    def __init__(self, args):
        self.args = args
        self.assistant = None

    def _load(self, engine: Engine):
        target: HFBackend = engine.backend
        spec = resolve(self.args.draft)
        if target.model_spec is not None and spec.path.resolve() == target.model_spec.path.resolve():
            return target.model  # the same file dequantized: identical weights, no second copy
        cfg = ModelConfig(model=self.args.draft, backend="hf", device=str(target.device), dtype=_dtype_name(target.dtype))
        return HFBackend(cfg, spec).model

    def __call__(self, engine: Engine, ids: list[int], cfg: GenerationConfig, docs: list[str]) -> Run:
        if self.assistant is None:
            self.assistant = self._load(engine)
        return timed_generate(engine, ids, cfg, assistant_model=self.assistant)


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
