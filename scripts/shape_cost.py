"""The verify-cost curve T(k) of the default pair's shapes, through the transformers backend, on a
machine that does not hold the pair's GGUFs (a GPU server, say).

Builds Qwen2.5-Coder 1.5B- and 0.5B-shaped models (the dimensions of the bundled GGUFs' headers)
with random weights, on the device and dtype the backend would pick, and times a two-branch tree
of k tokens over 256 and 1,100 tokens of context with ``CostModel.measure``, as Speedup does at
load. Random weights time the same forwards as the real ones, so this measures cost only, never
acceptance: how flat the curve is (the most a tree can cost) and a draft forward against a
target one (what a draft chain costs).

    PYTHONPATH=. .venv/bin/python scripts/shape_cost.py [--tiny] [--out FILE.json]

--tiny: two small layers per model (a smoke run on a CPU).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from localrag.backends.hf import HFBackend, pick_device, pick_dtype
from localrag.rasd.cost import CostModel

# qwen2.* keys of the two GGUF headers (block_count, embedding_length, feed_forward_length,
# attention.head_count, attention.head_count_kv); both vocabularies are 151,936 tokens
SHAPES = {
    "qwen2.5-coder-1.5b-instruct": dict(num_hidden_layers=28, hidden_size=1536, intermediate_size=8960,
                                        num_attention_heads=12, num_key_value_heads=2),
    "qwen2.5-coder-0.5b-instruct": dict(num_hidden_layers=24, hidden_size=896, intermediate_size=4864,
                                        num_attention_heads=14, num_key_value_heads=2),
}
TINY = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dev = pick_device()
    dtype = pick_dtype(dev)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type
    result: dict = {"device": name, "dtype": str(dtype).removeprefix("torch."), "curves": {}}
    print(f"{name}, {result['dtype']}")
    for model, shape in SHAPES.items():
        cfg = Qwen2Config(vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
                          tie_word_embeddings=True, **(TINY if args.tiny else shape))
        torch.manual_seed(0)
        with torch.device(dev):
            net = Qwen2ForCausalLM(cfg).to(dtype)
        backend = HFBackend.from_model(net, None, name=model)
        for context in (256, 1100):
            curve = CostModel.measure(backend, max_k=16 if args.tiny else 128, context=context,
                                      reps=2 if args.tiny else 7)
            result["curves"][f"{model}@{context}"] = curve.to_dict()
            t1 = curve(1)
            print(f"{model}, {context} tokens of context: " + ", ".join(
                f"T({k}) {curve(k) * 1e3:.1f} ms ({curve(k) / t1:.2f}x)" for k in curve.to_dict()["k"]))
        del backend, net
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
