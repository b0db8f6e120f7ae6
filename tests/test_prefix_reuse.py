"""A follow-up or a Regenerate that finds the same chunks reads only its new tokens (the KV cache
keeps the previous turn's prompt and answer), and answers exactly as a fresh prefill would
(``Answerer.find``: the sources keep the previous prompt's order; the batch-invariant kernels make
the reused cache exact). Real llama.cpp (SmolLM2), a real index.

Run: .venv/bin/python -m pytest tests/test_prefix_reuse.py -q
"""

from __future__ import annotations

import pytest

from localrag.answer import Answerer, in_order
from localrag.config import GenerationConfig
from localrag.modes import AnswerRequest, get_mode
from localrag.rag import DocumentIndex, IndexConfig
from tests.sample_docs import write_sample_docs

FIRST = "Where does the Zephyr telescope observe the sky from?"
FOLLOWUP = "And on which days is the community garden watered?"  # ranks garden.txt first by itself
GEN = GenerationConfig(max_tokens=24)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reuse")
    idx = DocumentIndex(IndexConfig(index_dir=tmp / "index"))
    assert idx.ingest([write_sample_docs(tmp / "docs")]).added == 2
    yield idx
    idx.close()


def names(hits) -> list[str]:
    return [h.file.rsplit("/", 1)[-1] for h in hits]


def test_in_order_keeps_the_earlier_order_then_the_rest_by_relevance():
    class H:
        def __init__(self, chunk_id):
            self.chunk_id = chunk_id
    hits = [H(c) for c in "dbea"]
    assert [h.chunk_id for h in in_order(hits, ["a", "b", "c"])] == ["a", "b", "d", "e"]
    assert [h.chunk_id for h in in_order(hits, [])] == ["d", "b", "e", "a"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "speedup"])
def test_a_follow_up_reads_only_its_question_and_answers_as_a_fresh_prefill(smollm2_engine, index, mode):
    answerer = Answerer(smollm2_engine, index)
    answering = get_mode(mode)
    assert names(answerer.search(FOLLOWUP, 2).hits) == ["garden.txt", "zephyr.md"]  # by relevance alone
    smollm2_engine.backend.reset()
    first = answering.answer(answerer, AnswerRequest(FIRST, gen=GEN, options=answering.options({"k": 2})))
    history = [{"role": "user", "content": FIRST}, {"role": "assistant", "content": first.text}]
    asked = AnswerRequest(FOLLOWUP, history=history, gen=GEN, options=answering.options({"k": 2}))
    assert names(answerer.find(FOLLOWUP, history, 2).hits) == ["zephyr.md", "garden.txt"]  # the first turn's order
    prompt = smollm2_engine.chat_tokens(answerer.rag_messages(FOLLOWUP, answerer.find(FOLLOWUP, history, 2).hits,
                                                              history))
    follow = answering.answer(answerer, asked)
    reused = follow.stats.generation.reused_prompt_tokens
    first_prompt = first.stats.generation.prompt_tokens
    # the first turn's whole prompt and its answer came from the cache: only the new turn was read
    assert reused > first_prompt + first.stats.generation.generated_tokens - 3, (reused, first_prompt)
    assert len(prompt) - reused < 40
    smollm2_engine.backend.reset()  # the same follow-up from an empty cache
    fresh = answering.answer(answerer, asked)
    assert fresh.stats.generation.reused_prompt_tokens == 0 and fresh.text == follow.text
    again = answering.answer(answerer, asked)  # Regenerate: everything but the last prompt token reused
    assert again.stats.generation.reused_prompt_tokens == len(prompt) - 1 and again.text == follow.text


@pytest.mark.slow
def test_a_long_prompt_is_read_in_pieces_with_progress_and_the_same_logits(smollm2_engine, index):
    """Plain mode says how far a long prompt has got ("reading your documents: n of N tokens"),
    and reading it in pieces gives the logits of one prefill, bit for bit."""
    from localrag.generation import READ_STEP, Generation, PlainDecoder, backend_sync
    from localrag.results import AnswerProgress

    answerer = Answerer(smollm2_engine, index)
    history = [{"role": "user", "content": " ".join(["Tell me about the telescope and the garden."] * 40)},
               {"role": "assistant", "content": "The telescope observes the sky; the garden grows beans."}]
    smollm2_engine.backend.reset()
    items = list(get_mode("plain").stream(answerer, AnswerRequest(FIRST, history=history, gen=GEN,
                                                                  options=get_mode("plain").options({"k": 2}))))
    progress = [i for i in items if isinstance(i, AnswerProgress)]
    result = items[-1]
    total = result.stats.generation.prompt_tokens
    assert total > 3 * READ_STEP and [p.stage for p in progress] == ["reading"] * len(progress)
    assert [p.done for p in progress] == [*range(READ_STEP, total, READ_STEP), total] and progress[0].total == total
    assert progress[0].message == f"Reading your documents: {READ_STEP} of {total} tokens…"
    assert items.index(progress[-1]) < next(i for i, x in enumerate(items) if isinstance(x, str))
    be = smollm2_engine.backend
    prompt = list(be.tokens[:total])
    be.reset()
    whole = backend_sync(be, prompt).copy()
    be.reset()
    gen = Generation(be, prompt, PlainDecoder(), GEN)
    assert len(list(gen.read())) == -(-total // READ_STEP) and be.tokens == prompt
    assert (gen._logits == whole).all()
