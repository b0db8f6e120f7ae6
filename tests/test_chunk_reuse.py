"""The approximate prefill (``prefill="reuse"``, ``localrag.backends.chunk_reuse``): retrieved
chunks' keys and values come from a cache on disk and only the head of each chunk and the rest of
the prompt are read. It reads fewer tokens (counted through ``llama_decode``), a hit gives the
prompt the same KV as a miss, an edited chunk or another model's or build's cache is never read,
Speedup stays Plain's answer under it, and with it off (the default) nothing changes. Real
llama.cpp (SmolLM2-135M), a real index.

Run: .venv/bin/python -m pytest tests/test_chunk_reuse.py -q
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

import numpy as np
import pytest

from localrag.answer import AnswerConfig, Answerer
from localrag.backends.chunk_reuse import kept_prefix
from localrag.config import ChunkCacheConfig, GenerationConfig
from localrag.modes import AnswerRequest, get_mode
from localrag.rag import DocumentIndex, IndexConfig

GEN = GenerationConfig(max_tokens=16)
K = 3
DOCS = {
    "lighthouse.md": "The Varna lighthouse stands on a granite spit north of the harbour. It was built in 1871 "
                     "by the engineer Ilse Brandt, who chose a white octagonal tower twenty-eight metres tall. "
                     "Its lamp turns once every twelve seconds and can be seen from thirty kilometres at sea. "
                     "The keeper's cottage beside it is now a small museum of ship models and old charts.",
    "bakery.txt": "The Moreau bakery on Canal Street opens at six every morning except Monday. Its rye loaf "
                  "is baked in a wood-fired oven that the founder, Paul Moreau, brought from Lyon in 1952. "
                  "On Fridays the bakery sells almond croissants, and the queue often reaches the bridge. "
                  "Leftover bread is given to the shelter on Quay Road at closing time.",
    "orchard.md": "The Hollow Lane orchard grows forty varieties of apple and six of pear. Harvest begins "
                  "in late August with the early Discovery apples and ends in November with the russets. "
                  "Visitors may pick their own fruit on Saturdays, paying by weight at the gate. "
                  "The cider press in the old barn runs every October and is open to school groups.",
}
Q1 = "Who built the Varna lighthouse and how tall is it?"
Q2 = "When does the Moreau bakery sell almond croissants?"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chunk-reuse")
    docs = tmp / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text + "\n")
    idx = DocumentIndex(IndexConfig(index_dir=tmp / "index"))
    assert idx.ingest([docs]).added == len(DOCS)
    yield idx
    idx.close()


@pytest.fixture
def answerer(smollm2_engine, index, tmp_path):
    smollm2_engine.backend.reset()
    return Answerer(smollm2_engine, index, config=AnswerConfig(chunk_cache=ChunkCacheConfig(folder=tmp_path / "kv")))


@contextmanager
def counting(backend):
    """The tokens that go through llama_decode while inside."""
    seen = [0]
    decode = backend._decode

    def counted(n_tokens):
        seen[0] += n_tokens
        decode(n_tokens)

    backend._decode = counted
    try:
        yield seen
    finally:
        del backend._decode


def prompt_of(answerer, question, hits=None):
    hits = answerer.find(question, (), K).hits if hits is None else hits
    return answerer.rag_messages(question, hits, ()), hits


def read(answerer, question, hits=None, reuse=True):
    """A Generation of ``question``'s prompt after its prompt is read (reuse: the approximate prefill)."""
    msgs, hits = prompt_of(answerer, question, hits)
    gen = answerer.generate(msgs, GEN, reuse=hits if reuse else ())
    for _ in gen.read():
        pass
    gen._logits = gen._logits.copy()  # (a view of llama.cpp's buffer until the next decode)
    return gen


def test_kept_prefix_keeps_no_placed_kv_for_an_exact_prefill_and_only_same_placements_for_reuse():
    assert kept_prefix([], [], 50) == 50
    assert kept_prefix([(10, 20), (30, 40)], [], 50) == 10  # exact: nothing from the first placed cell on
    assert kept_prefix([(10, 20)], [(10, 20), (30, 40)], 50) == 30  # built alike up to the new range
    assert kept_prefix([(10, 20)], [(10, 20)], 15) == 10  # a range kept in part is placed again whole
    assert kept_prefix([(10, 25)], [(10, 20)], 50) == 10  # placed otherwise
    assert kept_prefix([(10, 20)], [(10, 20)], 8) == 8


def test_prefill_is_an_option_of_plain_and_speedup_exact_by_default_and_checked(capsys):
    from localrag.__main__ import build_parser

    for mode in ("plain", "speedup"):
        assert get_mode(mode).options({}).prefill == "exact"
        assert get_mode(mode).options({"prefill": "reuse"}).prefill == "reuse"
        with pytest.raises(ValueError, match="prefill must be one of exact, reuse"):
            get_mode(mode).options({"prefill": "fast"})
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ask", "--help"])
    assert "approximate" in " ".join(capsys.readouterr().out.split())
    args = build_parser().parse_args(["ask", "q", "--prefill", "reuse"])
    assert args.opt_prefill == "reuse"


@pytest.mark.slow
def test_reuse_off_reads_every_token_as_before(answerer, smollm2_engine):
    """The default prefill is the exact one: every prompt token decoded, and the answer's tokens are
    a plain prefill and greedy loop's, written here without Generation."""
    be = smollm2_engine.backend
    msgs, _ = prompt_of(answerer, Q1)
    prompt = answerer.fit_prompt(msgs, GEN)
    with counting(be) as seen:
        gen = answerer.generate(msgs, GEN).run()
    assert gen.reuse is None and gen.stats.placed_prompt_tokens == 0
    assert seen[0] == len(prompt) + len(gen.tokens) - 1 + (gen.stats.stop_reason == "eog")
    be.reset()
    logits, tokens = be.prefill(prompt), []
    while len(tokens) < len(gen.tokens):
        tokens.append(int(np.argmax(logits)))
        logits = be.decode_one(tokens[-1])
    assert tokens == gen.tokens
    plain = get_mode("plain")
    assert plain.options({}).prefill == "exact"
    be.reset()
    assert plain.answer(answerer, AnswerRequest(Q1, gen=GEN, options=plain.options({"k": K}))).text == gen.text.strip()


@pytest.mark.slow
def test_reuse_reads_fewer_tokens_and_a_hit_gives_the_kv_of_a_miss(answerer, smollm2_engine):
    be = smollm2_engine.backend
    cold = read(answerer, Q1)
    assert cold.reuse.stats.misses == K and cold.reuse.stats.hits == 0
    placed = cold.stats.placed_prompt_tokens
    assert cold.stats.computed_prompt_tokens == sum(s.end - s.start for s in cold.reuse.usable(len(cold.prompt_tokens)))
    assert placed > K * 40 and be.placed and be.tokens == cold.prompt_tokens
    cold_logits = cold._logits
    be.reset()
    with counting(be) as seen:
        warm = read(answerer, Q1)
    assert warm.reuse.stats.hits == K and warm.reuse.stats.misses == 0 and warm.stats.computed_prompt_tokens == 0
    assert seen[0] == len(warm.prompt_tokens) - placed  # the chunks' cached cells are not decoded
    assert (warm._logits == cold_logits).all()  # the same KV, hit or miss
    be.reset()
    with counting(be) as seen:
        other = read(answerer, Q2)  # a new question over chunks other questions retrieved
    assert other.reuse.stats.hits == K and seen[0] == len(other.prompt_tokens) - other.stats.placed_prompt_tokens
    assert answerer.kv_store().stats.writes == K


@pytest.mark.slow
def test_one_chunk_placed_where_it_was_computed_gives_the_exact_prefills_logits(answerer, smollm2_engine):
    """The first chunk's KV is computed after the prompt's own prefix and placed where it stands: the
    same context, so the same bits as reading it (the save, load and placement lose nothing, and the
    cells stay in position order). The chunks after it are approximate: shifted, computed without
    the chunks before them."""
    be = smollm2_engine.backend
    one = answerer.find(Q1, (), K).hits[:1]
    exact = read(answerer, Q1, one, reuse=False)._logits
    for _ in range(2):  # a miss, then a hit
        be.reset()
        gen = read(answerer, Q1, one)
        assert gen.stats.placed_prompt_tokens > 40 and (gen._logits == exact).all()
    be.reset()
    assert not (read(answerer, Q1)._logits == read(answerer, Q1, reuse=False)._logits).all()


@pytest.mark.slow
def test_an_exact_prefill_after_a_reuse_one_keeps_none_of_the_placed_kv(answerer, smollm2_engine):
    be = smollm2_engine.backend
    fresh = read(answerer, Q1, reuse=False)._logits
    be.reset()
    approx = read(answerer, Q1)
    first_placed = be.placed[0][0]
    again = read(answerer, Q1, reuse=False)  # the same prompt, all but its last token in the cache
    assert again.stats.reused_prompt_tokens == first_placed and not be.placed
    assert (again._logits == fresh).all() and not (approx._logits == fresh).all()
    placed_again = read(answerer, Q1)  # reuse over an exact cache: placed again from the first chunk on
    assert placed_again.stats.reused_prompt_tokens == first_placed and (placed_again._logits == approx._logits).all()
    regenerated = read(answerer, Q1)  # reuse over a cache it built itself: all but the last token kept
    assert regenerated.stats.reused_prompt_tokens == len(regenerated.prompt_tokens) - 1
    assert (regenerated._logits == approx._logits).all()


@pytest.mark.slow
def test_an_edited_chunk_is_never_served_from_its_stale_cache(answerer, smollm2_engine):
    be = smollm2_engine.backend
    _, hits = prompt_of(answerer, Q1)
    read(answerer, Q1, hits)
    at = next(i for i, h in enumerate(hits) if "1871" in h.text)
    edited = list(hits)
    edited[at] = dataclasses.replace(hits[at], text=hits[at].text.replace("1871", "1903").replace("twelve", "nine"))
    assert edited[at].chunk_id == hits[at].chunk_id and edited[at].text != hits[at].text
    be.reset()
    gen = read(answerer, Q1, edited)
    assert gen.reuse.stats.misses == 1 and gen.reuse.stats.hits == K - 1
    answerer.kv_store().clear()
    be.reset()
    cold = read(answerer, Q1, edited)
    assert cold.reuse.stats.misses == K and (cold._logits == gen._logits).all()


@pytest.mark.slow
def test_a_cache_written_by_another_model_file_or_build_is_not_read(answerer, smollm2_engine, index, tmp_path,
                                                                     monkeypatch):
    be = smollm2_engine.backend
    read(answerer, Q1)
    config = answerer.config
    monkeypatch.setattr(type(be), "build_label", property(lambda self: "llama.cpp another kernel version"))
    be.reset()
    rebuilt = read(Answerer(smollm2_engine, index, config=config), Q1)
    assert rebuilt.reuse.stats.hits == 0 and rebuilt.reuse.stats.misses == K
    monkeypatch.undo()
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + bytes(4096))
    monkeypatch.setattr(be, "model_spec", dataclasses.replace(be.model_spec, path=other))
    be.reset()
    moved = read(Answerer(smollm2_engine, index, config=config), Q1)
    assert moved.reuse.stats.hits == 0 and moved.reuse.stats.misses == K
    monkeypatch.undo()
    be.reset()
    same = read(Answerer(smollm2_engine, index, config=config), Q1)
    assert same.reuse.stats.hits == K


@pytest.mark.slow
@pytest.mark.parametrize("question", [Q1, Q2])
def test_speedup_is_plains_answer_under_the_reuse_prefill(answerer, smollm2_engine, question):
    be = smollm2_engine.backend
    results = {}
    for mode in ("plain", "speedup", "plain"):  # the second plain answer reads from a warm cache
        answering = get_mode(mode)
        be.reset()
        res = answering.answer(answerer, AnswerRequest(question, gen=GEN,
                                                       options=answering.options({"k": K, "prefill": "reuse"})))
        assert res.stats.generation.placed_prompt_tokens > K * 40
        results.setdefault(mode, []).append(res.text)
    assert results["speedup"][0] == results["plain"][0] == results["plain"][1]
