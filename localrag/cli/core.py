"""Core subcommands: ``models``, ``generate``, ``chat``, ``cache``.

    python -m localrag models
    python -m localrag generate "The capital of France is" --max-tokens 32 --json
    python -m localrag generate --backend hf --device cpu --decoder rasd --draft smollm2-135m-instruct "..."
    python -m localrag chat --model gemma3-270m
    python -m localrag cache [--clear]      # the approximate prefill's chunk KV cache on disk
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from localrag.backends.kv_store import KVStore
from localrag.config import DEFAULT_MODEL, ChunkCacheConfig, GenerationConfig, ModelConfig, RasdConfig
from localrag.engine import Engine
from localrag.generation import Decoder
from localrag.models import CHUNKED, GOOD_FOR, ModelError, ModelInfo, NotAssembled, drafts_for, list_models
from localrag.rasd import RasdDecoder, load_draft


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help="registry name, .gguf path or HF model folder")
    p.add_argument("--gpu-layers", type=int, default=-1, help="layers to offload (-1 = all when the build has a GPU)")
    p.add_argument("--ctx", type=int, default=4096, help="context length")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--backend", choices=("llamacpp", "hf"), default="llamacpp",
                   help="hf: load the model in transformers (an HF folder, or a GGUF dequantized)")
    p.add_argument("--device", default=None, help="hf: cuda, mps or cpu (default: the first available)")
    p.add_argument("--dtype", default=None, help="hf: float32, bf16 or fp16 (default: from the device)")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def model_config(args) -> ModelConfig:
    return ModelConfig(model=args.model, n_gpu_layers=args.gpu_layers, n_ctx=args.ctx, n_threads=args.threads,
                       backend=args.backend, device=args.device, dtype=args.dtype)


def generation_config(args) -> GenerationConfig:
    return GenerationConfig(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        stop=tuple(args.stop),
    )


def add_cli(sub) -> None:
    p = sub.add_parser("models", help="list available models")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("generate", help="complete a prompt")
    p.add_argument("prompt")
    add_model_args(p)
    add_sampling_args(p)
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    p.add_argument("--decoder", "--mode", dest="decoder", choices=("plain", "rasd"), default="plain",
                   type=lambda v: "rasd" if v == "speedup" else v,
                   help="rasd: retrieval-augmented speculative decoding, Speedup mode's decoder")
    p.add_argument("--draft", default=None, help="rasd: draft model (registry name or .gguf; same vocabulary as --model)")
    p.add_argument("--docs", nargs="+", default=[], metavar="FILE", help="rasd: text files added to the token datastore")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("chat", help="interactive terminal chat")
    add_model_args(p)
    add_sampling_args(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("cache", help="the chunk KV cache of the approximate prefill (prefill=reuse): size, entries")
    p.add_argument("--clear", action="store_true", help="delete every entry")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cache)


def cmd_cache(args) -> int:
    cfg = ChunkCacheConfig()
    store = KVStore(cfg.path, cfg.max_bytes)
    entries = store.entries()
    hits, misses = store.lookups()
    size = sum(s for _, s, _ in entries)
    out = {"folder": str(cfg.path), "entries": len(entries), "bytes": size, "max_bytes": cfg.max_bytes,
           "bytes_per_entry": round(size / len(entries)) if entries else None, "hits": hits, "misses": misses,
           "hit_rate": round(hits / (hits + misses), 3) if hits + misses else None}
    if args.clear:
        out["cleared"] = store.clear()
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    per = f" ({out['bytes_per_entry'] / 2**20:.1f} MiB a chunk)" if entries else ""
    print(f"chunk KV cache: {out['folder']}\n  {out['entries']} entries{per}, {size / 2**20:.1f} MiB "
          f"of {out['max_bytes'] / 2**20:.0f} MiB")
    rate = f"{out['hit_rate']:.0%} of {hits + misses} lookups found their chunk" if hits + misses else "no lookups yet"
    print(f"  hit rate since last cleared: {rate}")
    if args.clear:
        print(f"  cleared {out['cleared']} entries and the lookup counts")
    return 0


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def cmd_models(args) -> int:
    rows = list_models()
    if args.json:
        print(json.dumps([_info_dict(r) for r in rows], indent=2))
        return 0
    print(f"{'name':28} {'size':>9} {'arch':10} {'vocab':>7} {'ctx':>7} {'template':8} role")
    for r in rows:
        if isinstance(r, NotAssembled):  # known size and role, no header to read yet
            size = f"{r.record.size / 2**20:.0f} MiB"
            print(f"{r.record.name:28} {size:>9} {'-':10} {'-':>7} {'-':>7} {'-':8} {_role(r.record.name)}")
            print(f"  good for: {r.record.good_for}")
            print(f"  {r}")
            continue
        if isinstance(r, ModelError):
            print(f"  unavailable: {r}")
            continue
        size = f"{r.size_bytes / 2**20:.0f} MiB"
        template = "yes" if r.has_chat_template else "no"
        print(f"{r.name:28} {size:>9} {r.architecture:10} {r.vocab_size:>7} {r.context_length:>7} {template:8} {_role(r.name)}")
        if r.name in GOOD_FOR:
            print(f"  good for: {GOOD_FOR[r.name]}")
        print(f"  {r.path}")
    return 0


def _role(name: str) -> str:
    """What a registry model is for: a target names its drafts, a draft its target."""
    default = " (default)" if name == DEFAULT_MODEL else ""
    record = CHUNKED.get(name)
    if record is None:
        return "answer" + default if default else "-"
    if record.draft_for:
        return f"draft for {record.draft_for}{default}"
    drafts = drafts_for(name)
    return "target" + default + (f", draft: {', '.join(drafts)}" if drafts else "")


def _info_dict(r: ModelInfo | ModelError) -> dict:
    if isinstance(r, NotAssembled):
        return {"error": str(r), "name": r.record.name, "size_bytes": r.record.size, "assembled": False,
                **_registry_dict(r.record.name)}
    if isinstance(r, ModelError):
        return {"error": str(r)}
    return {
        "name": r.name,
        "path": str(r.path),
        "size_bytes": r.size_bytes,
        "architecture": r.architecture,
        "vocab_size": r.vocab_size,
        "context_length": r.context_length,
        "chat_template": r.has_chat_template,
        **_registry_dict(r.name),
        **({"good_for": GOOD_FOR[r.name]} if r.name in GOOD_FOR else {}),
    }


def _registry_dict(name: str) -> dict:
    """Role and pairing of a chunked registry model (nothing for the others)."""
    record = CHUNKED.get(name)
    if record is None:
        return {}
    return {"role": record.role, "draft_for": record.draft_for, "drafts": drafts_for(name), "good_for": record.good_for}


def cmd_generate(args) -> int:
    try:
        engine = Engine.load(model_config(args))
    except ModelError as exc:
        return _fail(str(exc))
    cfg = generation_config(args)
    decoder = None
    if args.decoder == "rasd":
        try:
            decoder = _rasd_decoder(engine, args)
        except (ModelError, OSError) as exc:
            return _fail(str(exc))
    elif args.draft or args.docs:
        return _fail("--draft and --docs need --decoder rasd")
    if args.chat:
        gen = engine.chat([{"role": "user", "content": args.prompt}], cfg, decoder=decoder)
    else:
        gen = engine.complete(args.prompt, cfg, decoder=decoder)
    if args.json:
        gen.run()
        print(json.dumps(_result_dict(engine, gen), ensure_ascii=False))
        return 0
    for piece in gen:
        print(piece, end="", flush=True)
    print()
    s = gen.stats
    print(f"[{s.generated_tokens} tokens, {s.decode_tps:.1f} tok/s, prefill {s.prefill_tps:.0f} tok/s]", file=sys.stderr)
    return 0


def _rasd_decoder(engine: Engine, args) -> Decoder:
    """The Speedup decoder for ``generate --decoder rasd`` (docs read as UTF-8 text)."""
    docs = [Path(f).read_text(encoding="utf-8", errors="replace") for f in args.docs]
    draft = load_draft(engine.backend, args.draft) if args.draft else None
    return RasdDecoder(engine.backend, RasdConfig(), draft=draft, documents=docs)


def _result_dict(engine, gen) -> dict:
    s = gen.stats
    return {
        "text": gen.text,
        "tokens": s.generated_tokens,
        "tokens_per_s": s.decode_tps,
        "model": engine.model_name,
        "stats": s.to_dict(),
    }


def cmd_chat(args) -> int:
    try:
        engine = Engine.load(model_config(args))
    except ModelError as exc:
        return _fail(str(exc))
    cfg = generation_config(args)
    messages: list[dict[str, str]] = []
    print(f"localrag chat with {engine.model_name}. Empty line or Ctrl-D quits; /reset starts over.")
    while True:
        try:
            line = input("you> ").strip()
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if not line:
            return 0
        if line == "/reset":
            messages = []
            continue
        messages.append({"role": "user", "content": line})
        print("bot> ", end="", flush=True)
        gen = engine.chat(messages, cfg)
        for piece in gen:
            print(piece, end="", flush=True)
        print(f"\n[{gen.stats.decode_tps:.1f} tok/s]")
        messages.append({"role": "assistant", "content": gen.text})
