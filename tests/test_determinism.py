"""Same answer every time (llama.cpp on the CPU, ``ModelConfig.deterministic``), on real-length
chat prompts: the chat template, five retrieved chunks of about 200 tokens, answers up to 256
tokens. Greedy Plain repeated, Plain through the prompt cache, Plain from a fresh context and
Speedup (retrieval only; with a draft of the same vocabulary) give identical token ids, also
after a multi-turn conversation whose earlier turns ran tree steps. The sources are this
project's own documentation, cut into chunks (the test needs no download)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from localrag.backends.llamacpp import LlamaCppBackend
from localrag.config import ModelConfig, RasdConfig
from localrag.engine import Engine
from localrag.generation import PlainDecoder
from localrag.llamacpp_build import cmake_flags
from localrag.rasd.budget import CostModel
from localrag.rasd.loop import RasdDecoder
from tests.chat_prompts import QUESTIONS, answer, doc_chunks, rag_prompt, selected, through_prompt_cache

pytestmark = pytest.mark.slow

ALWAYS = RasdConfig(calibrate=False, use_budget=False)  # a tree every step: the most tree steps
CHEAP = CostModel.linear()


@pytest.fixture(scope="module")
def second_smollm2():
    """Another context of the bundled model (another cache size): a fresh reference, and a draft
    model of the same vocabulary."""
    engine = Engine(LlamaCppBackend(ModelConfig(model="smollm2-135m-instruct", n_ctx=6144)))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def gemma_engine():
    engine = Engine(LlamaCppBackend(ModelConfig(model="gemma3-270m", n_ctx=4096)))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def sources(smollm2_engine):
    chunks = doc_chunks(smollm2_engine)
    assert len(chunks) >= 10
    return chunks


def test_plain_repeated_cached_and_speedup_give_identical_tokens(smollm2_engine, second_smollm2, sources):
    engine = smollm2_engine
    chunks = selected(sources, 0)
    ids = rag_prompt(engine, QUESTIONS[0], chunks)
    assert 900 <= len(ids) <= 2000  # five chunks of ~200 tokens, the template and the question
    first = answer(engine, ids, PlainDecoder())
    plain, confidence = first.tokens, first.stats.mean_logprob
    assert len(plain) >= 8 and confidence < 0.0
    assert answer(engine, ids, PlainDecoder()).tokens == plain
    assert answer(second_smollm2, ids, PlainDecoder()).tokens == plain  # another context
    assert through_prompt_cache(engine, ids).tokens == plain
    docs = [c.text for c in chunks]
    for decoder in (
        RasdDecoder(engine.backend, ALWAYS, documents=docs, cost=CHEAP),  # retrieval only, every step a tree
        RasdDecoder(engine.backend, RasdConfig(calibrate=False), documents=docs, cost=CHEAP),  # with the budget
        RasdDecoder(engine.backend, ALWAYS, draft=second_smollm2.backend, documents=docs, cost=CHEAP),  # + a draft
    ):
        gen = answer(engine, ids, decoder)
        assert gen.tokens == plain
        # the same bits behind every token: the answer's confidence (its evidence's input) is the same
        assert gen.stats.mean_logprob == confidence
    assert gen.stats.decoder.spec_steps > 0


def test_multi_turn_speedup_with_tree_steps_equals_fresh_plain(smollm2_engine, second_smollm2, sources):
    """Three turns through the prompt cache, every step of every turn a tree (so rejected nodes
    get pinned, and dropped or compacted between turns); each turn's answer equals Plain's from a
    fresh context of another llama.cpp context of the same model."""
    engine, be = smollm2_engine, smollm2_engine.backend
    chunks = selected(sources, 2)
    decoder = RasdDecoder(be, ALWAYS, documents=[c.text for c in chunks], cost=CHEAP)
    history: list[dict] = []
    be.reset()
    pinned, reused = 0, []
    for question in (QUESTIONS[0], "Say more about the cost curve.", "Which file holds that code?"):
        ids = rag_prompt(engine, question, chunks, history)
        spec = answer(engine, ids, decoder, fresh=False, max_tokens=96)
        reused.append(spec.stats.reused_prompt_tokens)
        pinned = max(pinned, be.n_pinned)
        assert spec.tokens == answer(second_smollm2, ids, PlainDecoder(), max_tokens=96).tokens, question
        history += [{"role": "user", "content": question}, {"role": "assistant", "content": spec.text}]
    assert reused[1] > 900 and reused[2] > reused[1]  # later turns reused the earlier turns' KV
    assert pinned > 0  # rejected tree nodes below accepted ones were pinned at some point


def test_gemma_speedup_and_cache_equal_plain(gemma_engine, sources):
    """Gemma-3: K-quant weights (the tiled and repacked GEMMs) and sliding-window attention layers."""
    engine = gemma_engine
    # the first chunk selection and question whose answer is long enough to hold tree steps: the
    # base model often answers "I'm not sure." (13 tokens), and which prompts it does so on moves
    # with the build's rounding (AVX2 or AVX-512 kernels)
    for k in range(3, 11):
        chunks = selected(sources, k)
        ids = rag_prompt(engine, QUESTIONS[k % 2], chunks)
        plain = answer(engine, ids, PlainDecoder(), max_tokens=128).tokens
        if len(plain) >= 16:
            break
    assert len(plain) >= 16
    assert through_prompt_cache(engine, ids, max_tokens=128).tokens == plain
    decoder = RasdDecoder(engine.backend, ALWAYS, documents=[c.text for c in chunks], cost=CHEAP)
    assert answer(engine, ids, decoder, max_tokens=128).tokens == plain


def test_logits_do_not_depend_on_batching(smollm2, gemma_engine):
    """The kernels: a chain of k tokens verified in one batch gives, row for row, the bits of k
    one-token steps; a prompt prefilled in two pieces, the bits of one prefill."""
    for be in (smollm2, gemma_engine.backend):
        prompt = be.tokenize("The Zephyr 300 router ships with firmware 4.2. To reset it, hold the button " * 60,
                             add_special=True)
        assert len(prompt) > 512  # over one n_batch chunk, and the 512-cell split-KV threshold
        be.reset()
        logits = np.array(be.prefill(prompt))
        steps, rows = [], []
        for _ in range(12):
            steps.append(int(np.argmax(logits)))
            logits = np.array(be.decode_one(steps[-1]))
            rows.append(logits)
        be.reset()
        be.prefill(prompt[:-5])
        assert np.array_equal(np.array(be.prefill(prompt[-5:])), _first_logits(be, prompt))
        # 5 and 6 tokens: a group of 4, then 1 or 2 rows multiplied alone (the patched build's row
        # kernel, as in a one-token step); 7: a group of 4, then a padded one; 12: three groups
        for k in (5, 6, 7):
            chain = np.array(be.eval_tree(steps[:k], list(range(-1, k - 1))))
            assert all(np.array_equal(chain[j], rows[j]) for j in range(k)), k
            be.commit_path([])
        chain = np.array(be.eval_tree(steps, list(range(-1, len(steps) - 1))))
        assert all(np.array_equal(chain[j], rows[j]) for j in range(len(steps)))
        be.commit_path(list(range(len(steps))))


REPACK_LOG = """
from localrag.backends.llamacpp import LlamaCppBackend
from localrag.config import ModelConfig
LlamaCppBackend(ModelConfig(model="gemma3-270m", n_ctx=512, deterministic={}, repack={}), verbose=True).close()
"""


def test_the_deterministic_kernels_keep_repacked_weights_where_they_pay(gemma_engine):
    """setup.sh builds llama.cpp with our patch (scripts/patches/), so the deterministic backend
    can keep repacked weights (every row as through the same 4-row GEMM; the batching tests above
    run on them) and its build label, which keys the stored cost curves, says whether it did, with
    the version of the patch's kernels. Gemma's file is Q4_K_M: it keeps them where the patch's
    Q4_K row kernel is built (AVX-512), and not elsewhere, where every one-token step would pay
    the whole 4-row GEMM. llama.cpp's own log names the repacked buffer, and ``repack=False`` goes
    without one."""
    row_kernel = "-DGGML_AVX512=ON" in cmake_flags()
    be = gemma_engine.backend
    assert be.deterministic and be.repacked == row_kernel and f"repacked={row_kernel}" in be.build_label
    # the kernels' version: 3 where the AVX-512 Q4_K kernel is built (the flags setup recorded)
    assert f"invariant={3 if row_kernel else 1}" in be.build_label
    assert os.environ["GGML_CPU_REPACK_INVARIANT"] == "1"
    # the log's line is there when llama.cpp repacks (repack=True: wherever the patch keeps the bits)
    for deterministic, repack, repacks in ((True, None, row_kernel), (True, True, True), (True, False, False),
                                           (False, None, True)):
        out = subprocess.run([sys.executable, "-c", REPACK_LOG.format(deterministic, repack)], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert ("CPU_REPACK model buffer size" in out.stderr) == repacks, (deterministic, repack)


def _first_logits(be: LlamaCppBackend, prompt: list[int]) -> np.ndarray:
    """Logits after `prompt` from one fresh prefill; leaves `be` holding `prompt` (fresh)."""
    be.reset()
    return np.array(be.prefill(prompt))


def test_thread_count_does_not_change_logits(smollm2, gemma_engine):
    """Gemma's Q4_K weights are repacked on AVX-512 builds (the patched 4-row GEMM), whose columns
    are cut among threads; SmolLM2's Q4_1 ones are not."""
    for be in (smollm2, gemma_engine.backend):
        one = LlamaCppBackend(ModelConfig(model=be.name, n_ctx=2048, n_threads=1))
        try:
            prompt = be.tokenize("Lists are useful because they keep order. " * 40, add_special=True)
            be.reset()
            a = np.array(be.prefill(prompt))
            b = np.array(one.prefill(prompt))
            assert np.array_equal(a, b)
            assert np.array_equal(np.array(be.decode_one(int(a.argmax()))), np.array(one.decode_one(int(b.argmax()))))
        finally:
            one.close()


def test_pinned_cells_and_compaction_keep_the_bits(smollm2, gemma_engine):
    """A rejected tree node below the accepted path stays pinned (no hole for a later token to
    fill out of order); truncation drops the pins or compacts the cache; every later logit is
    the bits a fresh prefill of the same tokens gives. Gemma adds sliding-window layers."""
    for be in (smollm2, gemma_engine.backend):
        prompt = be.tokenize("Lists are useful because they keep order and allow duplicates. " * 50,
                             add_special=True)
        be.reset()
        logits = be.prefill(prompt)
        greedy = []
        for _ in range(6):
            greedy.append(int(np.argmax(logits)))
            logits = be.decode_one(greedy[-1])
        wrong = (greedy[1] + 1) % be.n_vocab
        be.truncate(len(prompt))
        # root, a wrong child, the right child and its child: the wrong child sits below the path's end
        be.eval_tree([greedy[0], wrong, greedy[1], greedy[2]], [-1, 0, 0, 2])
        be.commit_path([0, 2, 3])
        assert be.n_pinned == 1 and be.tokens == prompt + greedy[:3]
        for tok in greedy[3:]:
            got = np.array(be.decode_one(tok))
        ctx = list(be.tokens)
        assert np.array_equal(got, _first_logits(be, ctx))
        be.reset()
        be.prefill(prompt)
        be.eval_tree([greedy[0], wrong, greedy[1], greedy[2]], [-1, 0, 0, 2])
        be.commit_path([0, 2, 3])
        be.truncate(len(prompt) + 2)  # keeps a token placed after the pinned cell: compaction
        assert be.n_pinned == 0 and be.tokens == prompt + greedy[:2]
        got = np.array(be.decode_one(greedy[2]))
        assert np.array_equal(got, _first_logits(be, prompt + greedy[:3]))
        be.reset()
        be.prefill(prompt)
        be.eval_tree([greedy[0], wrong, greedy[1], greedy[2]], [-1, 0, 0, 2])
        be.commit_path([0, 2, 3])
        be.truncate(len(prompt) - 3)  # keeps nothing after the pinned cell: the pin is dropped
        assert be.n_pinned == 0
        got = np.array(be.decode_one(prompt[-3]))
        assert np.array_equal(got, _first_logits(be, prompt[:-2]))
