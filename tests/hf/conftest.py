"""Fixtures for the transformers backend: tiny random Llama models (fast) and the real SmolLM2 (slow).

Tiny models are built from a config with a fixed seed; nothing is downloaded
(the root conftest sets HF_HUB_OFFLINE=1). The real target is the bundled
SmolLM2 GGUF dequantized to fp32 in transformers, loaded once per session.
"""

from __future__ import annotations

import os

# Idle OpenMP threads sleep instead of spinning: on a small shared CPU a spinning torch
# thread pool runs 10x slower whenever other processes compete (must precede `import torch`).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

from localrag.config import ModelConfig  # noqa: E402

TINY = dict(
    vocab_size=64,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=64,
    max_position_embeddings=512,
    bos_token_id=1,
    eos_token_id=2,
)


def tiny_tokenizer(words: list[str] | None = None):
    """A word-level fast tokenizer over TINY's 64 ids: <unk>, <s>, </s>, then words."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = words or [f"w{i}" for i in range(TINY["vocab_size"] - 3)]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def tiny_model(seed: int = 0, attn: str = "sdpa", dtype: torch.dtype = torch.float32, **overrides):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(**{**TINY, **overrides})
    config._attn_implementation = attn
    return LlamaForCausalLM(config).to(dtype).eval()


def tiny_backend(seed: int = 0, attn: str = "sdpa", tokenizer=None, **overrides):
    from localrag.backends.hf import HFBackend

    return HFBackend.from_model(tiny_model(seed, attn, **overrides), tokenizer or tiny_tokenizer(), name=f"tiny{seed}")


@pytest.fixture(scope="session")
def hf_smollm2():
    """The bundled SmolLM2 GGUF loaded in transformers: fp32 on CPU (the issue's real target)."""
    from localrag.backends.hf import HFBackend

    be = HFBackend(ModelConfig(model="smollm2-135m-instruct", backend="hf", device="cpu", n_ctx=4096))
    yield be
    be.close()


def has_gpu() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return torch.cuda.is_available() or bool(mps and mps.is_available())


gpu_only = pytest.mark.skipif(not has_gpu(), reason="gpu: needs a CUDA or MPS device")
