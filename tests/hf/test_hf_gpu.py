"""The transformers backend on a CUDA or MPS device (skipped without one)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from localrag.backends.hf import HFBackend, pick_device, pick_dtype
from localrag.config import GenerationConfig, RasdConfig
from localrag.generation import Generation, PlainDecoder
from localrag.rasd.budget import CostModel
from localrag.rasd.loop import RasdDecoder
from tests.hf.conftest import gpu_only, tiny_model, tiny_tokenizer
from tests.hf.test_hf_tree import path_to, random_tree

pytestmark = [pytest.mark.gpu, gpu_only]


def _device_backend(dtype: torch.dtype) -> HFBackend:
    model = tiny_model(seed=31).to(device=pick_device(), dtype=dtype)
    return HFBackend.from_model(model, tiny_tokenizer(), name="tiny-gpu")


def test_gpu_defaults():
    dev = pick_device()
    assert dev.type in ("cuda", "mps")
    assert pick_dtype(dev) in (torch.bfloat16, torch.float16)


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 2e-3), (None, 6e-2)])
def test_gpu_tree_logits_and_compaction(dtype, atol):
    """Tree rows equal each path decoded alone, and commits keep the cache exact, on the device."""
    dtype = dtype or pick_dtype(pick_device())
    be, ref = _device_backend(dtype), _device_backend(dtype)
    rng = np.random.default_rng(5)
    context = [1] + [int(t) for t in rng.integers(3, 64, size=15)]
    be.prefill(context)
    for _ in range(10):
        tokens, parents = random_tree(rng, 12, be.n_vocab)
        rows = be.eval_tree(tokens, parents).copy()
        for i in range(len(tokens)):
            ref.reset()
            want = ref.prefill(context + [tokens[j] for j in path_to(parents, i)])
            np.testing.assert_allclose(rows[i], want, atol=atol, rtol=0)
        path = path_to(parents, int(rng.integers(0, len(tokens))))
        be.commit_path(path)
        context += [tokens[i] for i in path]
    ref.reset()
    np.testing.assert_allclose(be.decode_one(5), ref.prefill(context + [5]), atol=atol, rtol=0)


def test_gpu_rasd_greedy_equals_plain():
    """RASD (retrieval + a transformers draft, every tree verified) on the device in fp32: the same
    tokens as plain greedy decoding on the device. (In half precision a batched forward may round
    differently from a one-token one, so only near-ties could flip; the tree test above bounds that.)"""
    plain_be, target, draft = (_device_backend(torch.float32) for _ in range(3))  # the draft is the target's twin
    prompt = [1] + [int(t) for t in np.random.default_rng(3).integers(3, 64, size=20)]
    cfg = GenerationConfig(max_tokens=48)
    plain = Generation(plain_be, prompt, PlainDecoder(), cfg).run()
    doc = " ".join(f"w{t - 3}" for t in plain.tokens[5:30])  # part of the answer is in the "documents"
    always = RasdConfig(calibrate=False, use_budget=False)
    decoder = RasdDecoder(target, always, draft=draft, documents=[doc], cost=CostModel.linear())
    spec = Generation(target, prompt, decoder, cfg).run()
    assert spec.tokens == plain.tokens
    assert decoder.stats.spec_steps > 0 and decoder.stats.mean_accepted > 2.0
