"""The RASD engine (localrag.rasd) running unchanged on the transformers backend.

Fast: tiny random Llama targets/drafts. Slow: the real SmolLM2 fp32 target
(the bundled GGUF in transformers), alone and with the same GGUF in llama.cpp
as a 4-bit draft (cross-backend).
"""

from __future__ import annotations

import numpy as np
import pytest

from localrag.backends import hf_compat
from localrag.config import GenerationConfig, RasdConfig
from localrag.engine import Engine
from localrag.generation import Decoder, Generation, PlainDecoder
from localrag.rasd.budget import CostModel
from localrag.rasd.draft import load_draft
from localrag.rasd.loop import RasdDecoder
from tests.chat_prompts import QUESTIONS, answer, doc_chunks, rag_prompt, selected, through_prompt_cache
from tests.hf.conftest import tiny_backend

ALWAYS = RasdConfig(calibrate=False, use_budget=False)  # verify every proposed tree: exercises the backend most
DOC = (
    "The Zephyr 300 router ships with firmware 4.2. To reset it, hold the recessed button for ten seconds "
    "until the status light blinks amber, then wait two minutes for the reboot to finish. The admin page "
    "is at 192.168.8.1 and the default password is printed on the label under the device."
)


def tiny_prompt() -> list[int]:
    rng = np.random.default_rng(3)
    return [int(t) for t in rng.integers(3, 64, size=20)]


def test_tiny_rasd_greedy_equals_plain():
    plain_be, rasd_be = tiny_backend(seed=11), tiny_backend(seed=11)
    cfg = GenerationConfig(max_tokens=60)
    prompt = tiny_prompt()
    plain = Generation(plain_be, prompt, PlainDecoder(), cfg).run()
    doc = " ".join(f"w{t - 3}" for t in plain.tokens[5:40])  # the continuation is in the "documents"
    decoder = RasdDecoder(rasd_be, ALWAYS, documents=[doc], cost=CostModel.linear())
    spec = Generation(rasd_be, prompt, decoder, cfg).run()
    assert spec.tokens == plain.tokens
    assert spec.stats.decoder.spec_steps > 0
    assert spec.stats.decoder.mean_accepted > 1.5  # retrieval paths were accepted and compacted


def test_tiny_rasd_with_transformers_draft_equals_plain():
    target, draft = tiny_backend(seed=12), tiny_backend(seed=12)  # draft = the target's twin: all accepted
    cfg = GenerationConfig(max_tokens=40)
    prompt = tiny_prompt()
    plain = Generation(tiny_backend(seed=12), prompt, PlainDecoder(), cfg).run()
    decoder = RasdDecoder(target, ALWAYS, draft=draft, cost=CostModel.linear())
    spec = Generation(target, prompt, decoder, cfg).run()
    assert spec.tokens == plain.tokens
    assert decoder.stats.draft_steps > 0 and decoder.stats.mean_accepted > 2.0


def test_tiny_rasd_sampling_runs_and_stays_in_sync():
    target, draft = tiny_backend(seed=13), tiny_backend(seed=14)
    cfg = GenerationConfig(max_tokens=40, temperature=0.8, seed=1)
    decoder = RasdDecoder(target, ALWAYS, draft=draft, cost=CostModel.linear())
    prompt = tiny_prompt()
    gen = Generation(target, prompt, decoder, cfg).run()
    assert gen.stats.stop_reason in ("eog", "length") and decoder.stats.spec_steps > 0
    full = prompt + gen.tokens
    n = min(len(full), target.n_past)
    assert target.tokens[:n] == full[:n]  # the committed context is exactly what was emitted
    assert hf_compat.cache_length(target._cache) == target.n_past  # no stale tree left in the KV cache


# --- the real SmolLM2 fp32 target ----------------------------------------------------
def _chat(engine: Engine, question: str, decoder: Decoder | None = None, max_tokens: int = 32) -> Generation:
    messages = [{"role": "user", "content": f"{DOC}\n\nQuestion: {question}"}]
    return engine.chat(messages, GenerationConfig(max_tokens=max_tokens), decoder).run()


@pytest.mark.slow
def test_real_plain_matches_transformers_generate(hf_smollm2):
    import torch

    engine = Engine(hf_smollm2)
    ids = engine.encode_prompt(engine.prompt.render([{"role": "user", "content": "Name three colors."}]))
    ours = Generation(hf_smollm2, ids, PlainDecoder(), GenerationConfig(max_tokens=16)).run()
    with torch.inference_mode():
        ref = hf_smollm2.model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)
    theirs = ref[0, len(ids) :].tolist()
    assert ours.tokens == theirs[: len(ours.tokens)] and ours.tokens


@pytest.mark.slow
def test_real_tree_logits_match_sequential(hf_smollm2):
    be = hf_smollm2
    be.reset()
    ctx = be.tokenize("The capital of France is", add_special=True)
    be.prefill(ctx)
    a, b, c = be.tokenize(" Paris. It"), be.tokenize(" a city"), be.tokenize(" Lyon")
    tokens = a + b + c
    # chain a; chain b beside it; c as a second child of a's first token
    parents = [-1] + list(range(len(a) - 1)) + [-1] + list(range(len(a), len(a) + len(b) - 1)) + [0]
    rows = be.eval_tree(tokens, parents).copy()
    for i in range(len(tokens)):
        path, v = [], i
        while v >= 0:
            path.append(tokens[v])
            v = parents[v]
        be.truncate(len(ctx))
        ref = be.prefill(path[::-1])
        np.testing.assert_allclose(rows[i], ref, atol=2e-3, rtol=0)
        assert int(np.argmax(rows[i])) == int(np.argmax(ref))
    be.reset()


@pytest.mark.slow
def test_real_rasd_retrieval_only_equals_plain(hf_smollm2):
    engine = Engine(hf_smollm2)
    q = "How do I reset the router? Quote the documents."
    plain = _chat(engine, q)
    decoder = RasdDecoder(hf_smollm2, ALWAYS, documents=[DOC], cost=CostModel.linear())
    spec = _chat(engine, q, decoder)
    assert spec.text == plain.text
    assert decoder.stats.spec_steps > 0


@pytest.mark.slow
def test_real_length_chat_prompt_fp32_plain_cached_and_speedup_identical(hf_smollm2):
    """fp32 on the CPU: a RAG chat prompt of five ~200-token chunks gives the same tokens from a
    fresh context, through the prompt cache, and with Speedup (every step a tree)."""
    engine = Engine(hf_smollm2)
    chunks = selected(doc_chunks(engine), 1)
    ids = rag_prompt(engine, QUESTIONS[0], chunks)
    assert len(ids) >= 900
    plain = answer(engine, ids, PlainDecoder(), max_tokens=64).tokens
    assert len(plain) >= 8
    assert through_prompt_cache(engine, ids, max_tokens=64).tokens == plain
    decoder = RasdDecoder(hf_smollm2, ALWAYS, documents=[c.text for c in chunks], cost=CostModel.linear())
    assert answer(engine, ids, decoder, max_tokens=64).tokens == plain
    assert decoder.stats.spec_steps > 0


@pytest.mark.slow
def test_real_cross_backend_gguf_draft_equals_plain(hf_smollm2):
    """Target: SmolLM2 fp32 in transformers. Draft: the Q4_1 GGUF in llama.cpp. Same vocabulary."""
    from localrag.backends.llamacpp import LlamaCppBackend

    draft = load_draft(hf_smollm2, "smollm2-135m-instruct")  # vocabulary checked token by token
    assert isinstance(draft, LlamaCppBackend)
    try:
        engine = Engine(hf_smollm2)
        q = "What is the admin page address?"
        plain = _chat(engine, q)
        decoder = RasdDecoder(hf_smollm2, ALWAYS, draft=draft, documents=[DOC], cost=CostModel.linear())
        spec = _chat(engine, q, decoder)
        assert spec.text == plain.text
        assert decoder.stats.draft_steps > 0 and decoder.stats.mean_accepted > 1.5
    finally:
        draft.close()


@pytest.mark.slow
def test_real_gguf_conversion_cache_reloads_identically(hf_smollm2, monkeypatch):
    """The dequantized GGUF is saved once as an HF folder; a reload reads that folder (the GGUF is
    not converted again) and gives the same model."""
    import os

    from localrag.backends import hf_compat
    from localrag.backends.hf import HFBackend, gguf_cache_folder

    if os.environ.get("LOCALRAG_HF_GGUF_CACHE", "1") == "0":
        pytest.skip("GGUF conversion cache disabled")
    cached = gguf_cache_folder(hf_smollm2.model_spec.path)
    assert (cached / "config.json").exists()
    loads, load_model = [], hf_compat.load_model

    def counted(folder, gguf_file, *args):
        loads.append((folder, gguf_file))
        return load_model(folder, gguf_file, *args)

    monkeypatch.setattr(hf_compat, "load_model", counted)
    again = HFBackend(hf_smollm2.config)
    assert loads == [(cached, None)] and again.vocab_pieces() == hf_smollm2.vocab_pieces()
    ids = hf_smollm2.tokenize("Hello there", add_special=True)
    hf_smollm2.reset()
    np.testing.assert_array_equal(again.prefill(ids), hf_smollm2.prefill(ids))
    hf_smollm2.reset()


@pytest.mark.slow
def test_generate_cli_runs_rasd_on_the_transformers_backend(hf_smollm2, tmp_path):
    """`generate --backend hf --device cpu --mode rasd --draft ... --docs` end to end, in a subprocess:
    the same text as plain decoding in transformers, with RASD stats naming the draft.

    CI once saw draft_steps 0 here: on a busy machine the measured cost curve was steep
    (T(4) = 2 T(1)), and the budget rightly ran plain steps."""
    import json
    import subprocess
    import sys

    doc = tmp_path / "router.txt"
    doc.write_text(DOC, encoding="utf-8")
    prompt = "The admin page of the Zephyr 300 router is at"
    plain = Engine(hf_smollm2).complete(prompt, GenerationConfig(max_tokens=12)).run()
    out = subprocess.run(
        [sys.executable, "-m", "localrag", "generate", "--backend", "hf", "--device", "cpu", "--mode", "rasd",
         "--model", "smollm2-135m-instruct", "--draft", "smollm2-135m-instruct", "--docs", str(doc), "--max-tokens", "12", "--json", prompt],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["text"] == plain.text
    decoder = result["stats"]["decoder"]
    # the draft was loaded and timed (its chain limit is None without one); whether its steps pay
    # is the budget's call on this machine's measured cost curve, so draft_steps is not asserted
    # here (test_real_cross_backend_gguf_draft_equals_plain forces them with use_budget=False)
    assert decoder["kind"] == "rasd" and decoder["steps"] >= 1
    assert decoder["draft_limit_speedup"] is not None and decoder["cost_curve_ms"]["k"][0] == 1


def test_draft_chain_is_incremental_cost_aware_and_kept_for_the_next_sync():
    """The chain draft: greedy tokens (as the draft would decode them), stopped where the path's
    acceptance falls below the break-even threshold; its KV stays, so the next sync prefills only
    what the target did not accept."""
    from localrag.rasd.draft import DraftModel, softmax

    be = tiny_backend(seed=1)
    ctx = tiny_prompt()
    config = RasdConfig(draft_depth=2, draft_nodes=8)  # a chain's length is draft_nodes (draft_depth: tree rounds)
    full = DraftModel(be, config, chain=True)
    root_probs = full.sync(ctx)
    tree, dists = full.grow(ctx[-1], root_probs)
    chain = tree.tokens[1:]
    assert tree.parents == list(range(-1, len(tree) - 1)) and len(chain) == 8
    assert be.tokens == ctx + chain[:-1]  # every node but the last was decoded on the draft's KV
    be.truncate(len(ctx))
    want, probs = [], root_probs
    for _ in range(len(chain)):  # the same tokens one plain forward at a time
        want.append(int(np.argmax(probs)))
        probs = softmax(be.prefill([want[-1]]))
    assert chain == want
    # the target accepted 3 chain tokens and chose its own next one: one token is prefilled
    be.truncate(len(ctx))
    full.sync(ctx)
    full.grow(ctx[-1], root_probs)
    bonus = (chain[3] + 1) % be.n_vocab
    calls = []
    prefill = be.prefill
    be.prefill = lambda toks: calls.append(list(toks)) or prefill(toks)
    full.sync(ctx + chain[:3] + [bonus])
    be.prefill = prefill
    assert calls == [[bonus]] and be.tokens == ctx + chain[:3] + [bonus]
    # the stop rule: node 4's path probability is below `between`
    be.truncate(len(ctx))
    between = (tree.scores[3] + tree.scores[4]) / 2
    short, _ = DraftModel(be, config, chain=True, min_path_prob=between).grow(ctx[-1], root_probs)
    assert len(short) == 4 and short.tokens == tree.tokens[:4]
    # with calibrated acceptance instead of raw draft probability: every node accepted at 0.99
    be.truncate(len(ctx))
    long, _ = DraftModel(be, config, chain=True, min_path_prob=between).grow(ctx[-1], root_probs, lambda p: 0.99)
    assert long.tokens == tree.tokens
    # nothing is drafted past an end-of-generation token, nor past the answer's remaining length
    be.truncate(len(ctx))
    be.is_eog = lambda t: t == chain[2]
    ended, _ = full.grow(ctx[-1], root_probs)
    del be.is_eog
    assert ended.tokens[1:] == chain[:3]
    be.truncate(len(ctx))
    assert full.grow(ctx[-1], root_probs, max_depth=2)[0].tokens[1:] == chain[:2]
