"""The answerability judge (``localrag.judge``): hidden states read from llama.cpp's own prefill, probe
files keyed by the model file and the instructions, and the answers the judge refuses before a word
is written, in Plain and Speedup alike. Real llama.cpp (SmolLM2), a real index; the probes are
written here (their weights are not what is tested: which probe is used, and what its verdict does).

Run: .venv/bin/python -m pytest tests/test_judge.py -q
"""

from __future__ import annotations

import numpy as np
import pytest

from localrag.answer import RAG_INSTRUCTIONS, Answerer
from localrag.backends.llamacpp import LlamaCppBackend
from localrag.config import GenerationConfig, ModelConfig
from localrag.engine import Engine
from localrag.judge import EVIDENCE_ONLY, Probe, file_sha256, find_probe, probe_layers, prompt_key
from localrag.models import resolve
from localrag.modes import AnswerRequest, get_mode
from localrag.rag import DocumentIndex, IndexConfig
from localrag.results import AnswerResult
from tests.sample_docs import write_sample_docs

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
LAYER = 12
QUESTION = "Where does the Zephyr telescope observe the sky from?"


def _probe(refuse_below: float, sha: str | None = None, instructions: str = RAG_INSTRUCTIONS,
           weights: tuple[float, ...] = (0.0,) * 576) -> Probe:
    path = resolve(MODEL).path
    n = 576  # SmolLM2-135M's width
    return Probe(sha or file_sha256(path), path.stat().st_size, prompt_key(instructions), LAYER,
                 (0.0,) * n, (1.0,) * n, weights, 0.0, refuse_below)  # no weights: p(answerable) = 0.5 always


@pytest.fixture(scope="module")
def tapped():
    be = LlamaCppBackend(ModelConfig(model=MODEL, n_ctx=2048, hidden_layers=(LAYER, -1)))
    yield be
    be.close()


def test_the_tap_keeps_the_last_prompt_tokens_state_and_changes_no_logit(tapped, smollm2):
    prompt = tapped.tokenize("The Zephyr telescope observes the sky from a high desert plateau in Chile.",
                             add_special=True)
    tapped.reset()
    whole = tapped.prefill(prompt).copy()
    states = tapped.hidden_states()
    assert sorted(states) == [-1, LAYER] and states[LAYER].shape == (576,) and np.isfinite(states[LAYER]).all()

    # the last token's state, whatever the batching: read in two pieces, the same bits (a tap that
    # kept another row than the last, or the first piece's, would differ)
    tapped.reset()
    tapped.prefill(prompt[:-3])
    tapped.prefill(prompt[-3:])
    split = tapped.hidden_states()
    assert np.array_equal(split[LAYER], states[LAYER]) and np.array_equal(split[-1], states[-1])
    tapped.reset()
    tapped.prefill(prompt[:-1])
    assert not np.array_equal(tapped.hidden_states()[LAYER], states[LAYER])  # another token's state

    smollm2.reset()
    assert np.array_equal(smollm2.prefill(prompt), whole)  # the untapped backend's logits, bit for bit
    assert smollm2.hidden_states() == {}


def test_the_judge_prompt_read_aside_has_the_state_of_a_whole_read_and_leaves_the_context(tapped):
    """``hidden_states_after``: the judge's prompt read after the cells it shares with the prompt
    just read, in a scratch sequence. Its last token's state is that of reading it whole, and the
    committed context, its cells and the next token's logits are as they were."""
    shared = tapped.tokenize("Answer from the sources.\n[1] The Zephyr telescope observes the sky from a "
                             "high desert plateau in Chile.", add_special=True)
    rest = tapped.tokenize("\n[2] The Vireo probe was launched in 2031.\nQuestion: where is Zephyr?")
    judged = tapped.tokenize("\nQuestion: where does the Zephyr telescope observe from?")
    tapped.reset()
    tapped.prefill(shared + judged)
    whole = tapped.hidden_states()
    tapped.reset()
    nxt = int(np.argmax(tapped.prefill(shared + rest)))
    read_whole = tapped.hidden_states()
    aside = tapped.hidden_states_after(len(shared), judged)
    assert sorted(aside) == [-1, LAYER]
    assert np.array_equal(aside[LAYER], whole[LAYER]) and np.array_equal(aside[-1], whole[-1])
    assert not np.array_equal(read_whole[LAYER], whole[LAYER])  # the answer prompt's own state differs
    assert tapped.tokens == shared + rest and tapped.seq_pos_max(1) == -1  # nothing left in the scratch
    after = tapped.decode_one(nxt).copy()
    tapped.reset()
    tapped.prefill(shared + rest)
    assert np.array_equal(tapped.decode_one(nxt), after)


def test_a_probe_is_found_only_for_its_own_model_file_and_instructions(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALRAG_PROBES_DIR", str(tmp_path))
    path = resolve(MODEL).path
    sha = file_sha256(path)
    assert probe_layers(path) == ()
    _probe(0.2, sha="0" * 64).save()  # another model's file (of the same size)
    assert find_probe(sha, RAG_INSTRUCTIONS) is None and probe_layers(path) == ()
    _probe(0.2, instructions="Answer in French.").save()
    assert find_probe(sha, RAG_INSTRUCTIONS) is None and probe_layers(path) == (LAYER,)
    saved = _probe(0.2).save()
    probe = find_probe(sha, RAG_INSTRUCTIONS)
    assert probe is not None and probe.layer == LAYER and probe.refuse_below == 0.2
    assert probe.p_answerable(np.ones(576)) == pytest.approx(0.5)
    # a file renamed onto another model's key is not trusted: the key inside must match
    other = tmp_path / saved.name.replace(sha[:16], "f" * 16)
    saved.rename(other)
    assert find_probe("f" * 64, RAG_INSTRUCTIONS) is None


def _answer(mode: str, engine: Engine, index: DocumentIndex) -> AnswerResult:
    answering = get_mode(mode)
    request = AnswerRequest(QUESTION, gen=GenerationConfig(max_tokens=12), options=answering.options({"k": 2}))
    *_, result = answering.stream(Answerer(engine, index), request)
    return result


@pytest.mark.parametrize("mode", ["plain", "speedup"])
def test_a_judged_unanswerable_prompt_is_refused_before_a_word_is_written(mode, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALRAG_PROBES_DIR", str(tmp_path / "probes"))
    monkeypatch.setenv("LOCALRAG_CACHE_DIR", str(tmp_path / "cache"))
    index = DocumentIndex(IndexConfig(index_dir=tmp_path / "index"))
    index.ingest([write_sample_docs(tmp_path / "docs")])
    try:
        engine = Engine.load(ModelConfig(model=MODEL, n_ctx=2048))  # no probe: nothing tapped
        without = _answer(mode, engine, index)
        assert without.stats.judge.judge.startswith(EVIDENCE_ONLY) and "no answerability probe" in without.stats.judge.judge
        assert without.stats.judge.p_answerable is None and without.stats.generation.generated_tokens > 0
        assert without.evidence.answerable is None  # no judge: its term stands at its centre
        engine.backend.close()

        _probe(refuse_below=0.9).save()  # p(answerable) is 0.5: below, so refused
        engine = Engine.load(ModelConfig(model=MODEL, n_ctx=2048))  # the probe's layer is tapped
        refused = _answer(mode, engine, index)
        assert refused.stats.judge.judge == f"answerability probe (layer {LAYER})"
        assert refused.stats.judge.p_answerable == pytest.approx(0.5) and refused.stats.judge.refused_early
        assert refused.stats.generation.generated_tokens == 0 and refused.stats.generation.stop_reason == "judged"
        # refused once the top chunk was read: the other chunks never were
        assert len(engine.backend.tokens) < refused.stats.generation.prompt_tokens, refused.stats.generation
        assert refused.refused and not refused.supported and refused.text == "" and not refused.citations
        assert "read no answer" in refused.refusal and "p(answerable) 0.50" in refused.refusal
        # a follow-up is not judged (the probe was fitted on first questions): the evidence check decides
        answering = get_mode(mode)
        history = [{"role": "user", "content": "What is the Zephyr telescope?"},
                   {"role": "assistant", "content": "A telescope."}]
        follow = AnswerRequest(QUESTION, history=history, gen=GenerationConfig(max_tokens=12),
                               options=answering.options({"k": 2}))
        *_, followed = answering.stream(Answerer(engine, index), follow)
        assert followed.stats.judge.judge == f"{EVIDENCE_ONLY} (a follow-up: the probe judges a conversation's first question)"
        assert not followed.stats.judge.refused_early and followed.stats.generation.generated_tokens > 0
        engine.backend.close()

        # the judge reads the judge's prompt (the top chunk alone), not the answer's: a probe with
        # weights gives the p of a whole read of that prompt
        weights = tuple(np.random.default_rng(0).normal(scale=0.005, size=576))
        _probe(refuse_below=0.0, weights=weights).save()
        engine = Engine.load(ModelConfig(model=MODEL, n_ctx=2048))
        judged = _answer(mode, engine, index)
        answerer = Answerer(engine, index)
        hits = answerer.find(QUESTION, [], 2).hits
        gen = GenerationConfig(max_tokens=12)
        p = {}
        for name, tokens in (("judge", answerer.judge_prompt(QUESTION, hits, gen)),
                             ("answer", answerer.fit_prompt(answerer.rag_messages(QUESTION, hits, []), gen))):
            engine.backend.reset()
            engine.backend.prefill(tokens)
            p[name] = _probe(0.0, weights=weights).p_answerable(engine.backend.hidden_states()[LAYER])
        # the same up to the summation order of a longer KV cache's attention, far from the answer's
        off = abs(judged.stats.judge.p_answerable - p["judge"])
        assert off < abs(p["answer"] - p["judge"]) / 20 and abs(p["judge"] - 0.5) > 0.01, (off, p)
        assert judged.text == without.text
        engine.backend.close()

        _probe(refuse_below=0.1).save()  # the same probe file, now above its threshold: answered
        engine = Engine.load(ModelConfig(model=MODEL, n_ctx=2048))
        answered = _answer(mode, engine, index)
        assert not answered.stats.judge.refused_early and answered.stats.judge.p_answerable == pytest.approx(0.5)
        assert answered.evidence.answerable == answered.stats.judge.p_answerable  # the check weighs the judge's view
        assert answered.text == without.text  # the tap changes no token
        engine.backend.close()
    finally:
        index.close()
