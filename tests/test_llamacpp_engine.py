"""Our llama.cpp engine on the real bundled SmolLM2: greedy determinism and parity with
llama-cpp-python's own Llama class, stop strings, UTF-8 streaming, seeded sampling,
tree evaluation vs one-by-one decoding."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from localrag.config import GenerationConfig, ModelConfig
from localrag.generation import Decoder, Generation, Sampler

pytestmark = pytest.mark.slow

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
]


def greedy(engine, text, n=24):
    return engine.complete(text, GenerationConfig(max_tokens=n)).run()


def test_greedy_is_deterministic(smollm2_engine):
    a = greedy(smollm2_engine, PROMPTS[0])
    smollm2_engine.backend.reset()
    b = greedy(smollm2_engine, PROMPTS[0])
    assert a.tokens == b.tokens and a.text == b.text
    assert a.stats.generated_tokens == 24 and a.stats.decode_tps > 0


def test_greedy_matches_llama_cpp_python(smollm2_engine):
    from llama_cpp import Llama

    be = smollm2_engine.backend
    ref = Llama(str(be.model_spec.path), n_ctx=4096, n_batch=512, n_threads=be.config.n_threads or None, verbose=False,
                flash_attn=False)
    try:
        from localrag.backends.llamacpp import LlamaCppBackend
        from localrag.engine import Engine

        # llama-cpp-python's defaults: an f16 V cache, no flash attention (so not deterministic)
        ours = Engine(LlamaCppBackend(ModelConfig(model="smollm2-135m-instruct", n_ctx=4096, flash_attn=False, deterministic=False)))
        for text in PROMPTS:
            prompt = ours.encode_prompt(text)
            mine = ours.complete(text, GenerationConfig(max_tokens=24)).run().tokens
            theirs = []
            for tok in ref.generate(prompt, temp=0.0, reset=True):
                if ref.token_eos() == tok or len(theirs) == 24:
                    break
                theirs.append(tok)
            assert mine and mine == theirs[: len(mine)], text
        ours.close()
    finally:
        ref.close()


def test_stop_strings_are_honoured(smollm2_engine):
    full = greedy(smollm2_engine, PROMPTS[2], n=40).text
    stop = full.strip().split()[3]
    cut = smollm2_engine.complete(PROMPTS[2], GenerationConfig(max_tokens=40, stop=(stop,))).run()
    assert cut.stats.stop_reason == "stop"
    assert stop not in cut.text
    assert full.startswith(cut.text)


class ForcedDecoder(Decoder):
    """Replays fixed tokens through the real streaming path (teacher forcing)."""

    def __init__(self, tokens: list[int]):
        self.tokens = tokens

    def steps(self, backend, context, logits, sampler):
        for t in self.tokens:
            yield [t]
            backend.decode_one(t)


def test_streamed_multibyte_text_reassembles_exactly(smollm2):
    text = "Café déjà vu — 東京の天気 🙂🚀 naïve"
    tokens = smollm2.tokenize(text)
    pieces = [smollm2.token_bytes(t) for t in tokens]
    assert any(_incomplete_utf8(p) for p in pieces), "want at least one token that splits a character"
    gen = Generation(smollm2, smollm2.tokenize("Say:"), ForcedDecoder(tokens), GenerationConfig(max_tokens=500))
    streamed = list(gen)
    assert "".join(streamed) == text
    assert all("\ufffd" not in s for s in streamed)


def test_real_generation_streams_clean_utf8(smollm2_engine):
    # a row of emoji the model goes on with, whatever the kernels' last bits: each emoji takes 3 tokens,
    # none of them a whole character (a chat prompt's reply changed with the build: AVX-512 wrote none)
    gen = smollm2_engine.complete("Emoji: 🙂🚀🙂🚀 🙂🚀🙂🚀 🙂", GenerationConfig(max_tokens=24, repetition=None))
    streamed = "".join(gen)
    pieces = [smollm2_engine.backend.token_bytes(t) for t in gen.tokens]
    assert any(_incomplete_utf8(p) for p in pieces), "want at least one token that splits a character"
    assert streamed.encode("utf-8") == b"".join(pieces)  # every byte the model wrote, as written: nothing replaced


def test_seeded_sampling_is_reproducible(smollm2_engine):
    cfg = GenerationConfig(max_tokens=24, temperature=0.9, top_p=0.95, top_k=50, seed=1234)
    a = smollm2_engine.complete(PROMPTS[2], cfg).run()
    b = smollm2_engine.complete(PROMPTS[2], cfg).run()
    c = smollm2_engine.complete(PROMPTS[2], cfg.with_(seed=99)).run()
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens


def test_tree_logits_match_one_by_one_decoding(smollm2):
    prompt = smollm2.tokenize("The quick brown fox", add_special=True)
    smollm2.reset()
    smollm2.prefill(prompt)
    # tree: two branches of two tokens each
    a, b = smollm2.tokenize(" jumps over"), smollm2.tokenize(" runs away")
    tokens, parents = [a[0], a[1], b[0], b[1]], [-1, 0, -1, 2]
    tree = np.array(smollm2.eval_tree(tokens, parents))
    smollm2.commit_path([2, 3])
    assert smollm2.tokens == prompt + b[:2]
    for path in (a[:2], b[:2]):
        smollm2.reset()
        smollm2.prefill(prompt)
        rows = [np.array(smollm2.decode_one(t)) for t in path]
        want = tree[[0, 1]] if path == a[:2] else tree[[2, 3]]
        for got, ref in zip(rows, want, strict=True):
            assert np.array_equal(got, ref)  # batch-invariant kernels: the same bits


def test_kv_after_commit_equals_fresh_prefill(smollm2):
    prompt = smollm2.tokenize("Lists are useful because", add_special=True)
    smollm2.reset()
    smollm2.prefill(prompt)
    x = smollm2.tokenize(" they keep order and")
    smollm2.eval_tree(x + x[:2], [-1] + list(range(len(x) - 1)) + [-1, len(x)])
    smollm2.commit_path(list(range(len(x))))
    after = np.array(smollm2.decode_one(x[0]))
    smollm2.reset()
    fresh = np.array(smollm2.prefill(prompt + x + [x[0]]))
    assert np.array_equal(after, fresh)


def test_generate_cli_json():
    out = subprocess.run(
        [sys.executable, "-m", "localrag", "generate", "--json", "--max-tokens", "16", "--model", "smollm2-135m-instruct", "The capital of France is"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["text"].strip() and obj["tokens_per_s"] > 0 and obj["model"] == "smollm2-135m-instruct"
    assert obj["tokens"] == 16


def test_sampler_distribution_matches_pick(smollm2):
    smollm2.reset()
    logits = np.array(smollm2.prefill(smollm2.tokenize("Hello", add_special=True)))
    s = Sampler(GenerationConfig(temperature=0.7, top_k=20, seed=0))
    ids, probs = s.distribution(logits)
    assert len(ids) == 20 and probs.sum() == pytest.approx(1.0)
    assert all(s.pick(logits) in set(ids.tolist()) for _ in range(50))


def _incomplete_utf8(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True
