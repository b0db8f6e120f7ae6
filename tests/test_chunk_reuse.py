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


class VocabOnly:
    """The part of a backend ``chunk_spans`` reads (tokens' bytes), over a model's vocabulary alone."""

    def __init__(self, path: str) -> None:
        import llama_cpp

        self.llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=False, special=True)

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        return self.llm.detokenize([token], special=special)


@pytest.mark.parametrize("model", ["qwen2.5-coder-1.5b-instruct", "smollm2-135m-instruct"])
def test_a_chunk_has_the_same_span_tokens_wherever_it_is_listed(model):
    """The key of a chunk's entry holds its span's tokens, so they must not depend on what follows
    the chunk: Qwen's pre-tokenizer joins the final "." with the "\\n\\n" before the next source, but
    not with the end of the system turn. A chunk warmed alone (``warm_chunks``) and the same chunk
    first, in the middle or last of a question's sources must have one key."""
    from localrag.backends.chunk_reuse import chunk_spans
    from localrag.models import resolve

    vocab = VocabOnly(str(resolve(model).path))
    a, b = "(lighthouse.md) It was built in 1871.", "(bakery.txt) It opens at six."
    layouts = {"alone": [a], "first": [a, b], "last": [b, a]}
    seen = {}
    for name, chunks in layouts.items():
        text = "<|im_start|>system\nAnswer.\n\nSources:\n" + "\n\n".join(
            f"[{i}] {c}" for i, c in enumerate(chunks, 1)) + "<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
        tokens = vocab.tokenize(text)
        spans = {s.chunk_id: tokens[s.start:s.end] for s in chunk_spans(vocab, tokens, [(c, c) for c in chunks])}
        seen[name] = spans[a]
    assert seen["alone"] == seen["first"] == seen["last"] and len(seen["alone"]) > 5


@pytest.mark.slow
def test_a_warmed_collection_answers_a_new_question_from_the_cache_alone(answerer, smollm2_engine, index, tmp_path):
    """``warm_chunks`` stores the entries a question's prompt will look up: the same keys and the
    same cells as misses computed at question time (the same logits), newest documents first; a
    second warm finds them all; and a warm leaves a conversation's cached prompt in place."""
    be = smollm2_engine.backend
    hits = index.live_hits()
    assert sorted(h.file.rsplit("/", 1)[-1] for h in hits) == sorted(DOCS)
    asked = read(answerer, Q2, reuse=False)  # an exact conversation in the KV cache
    kept = list(be.tokens)
    done = answerer.warm_chunks(hits)
    assert (done.total, done.ready, done.stored, done.stopped) == (len(DOCS), len(DOCS), len(DOCS), False)
    assert be.tokens == kept and not be.placed  # the conversation's cache survives: its follow-up reads no more
    again = read(answerer, Q2, reuse=False)
    assert again.stats.reused_prompt_tokens == len(asked.prompt_tokens) - 1
    assert answerer.warm_chunks(hits).stored == 0
    be.reset()
    warm = read(answerer, Q1)
    assert warm.reuse.stats.hits == K and warm.reuse.stats.misses == 0
    cold_answerer = Answerer(smollm2_engine, index, config=AnswerConfig(
        chunk_cache=ChunkCacheConfig(folder=tmp_path / "cold")))
    be.reset()
    cold = read(cold_answerer, Q1)
    assert cold.reuse.stats.misses == K and (cold._logits == warm._logits).all()


@pytest.mark.slow
def test_a_warm_gives_way_at_once_and_goes_on_later(answerer, smollm2_engine, index):
    """``stop()`` is asked between pieces of a chunk: a warm stopped inside a chunk stores nothing
    of it (no half entry), and the next warm does what is left."""
    hits = index.live_hits()
    store, asks = answerer.kv_store(), [0]

    def stop_inside_the_second_chunk():  # asked before each chunk, then before each of its pieces
        asks[0] += bool(store.entries())
        return asks[0] >= 2

    first = answerer.warm_chunks(hits, stop_inside_the_second_chunk)
    assert first.stopped and first.ready == first.stored == 1  # the first chunk, then a stop in the second
    assert len(answerer.kv_store().entries()) == 1
    rest = answerer.warm_chunks(hits)
    assert not rest.stopped and rest.ready == len(DOCS) and rest.stored == len(DOCS) - 1


def wait_for(check, what: str, seconds: float = 120.0):
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {seconds:.0f} s")


@pytest.mark.slow
def test_the_app_warms_a_collection_read_with_reuse_and_its_new_documents(smollm2_engine, tmp_path):
    """The page's "Reuse chunks" setting: after its first answer, the collection's other chunks are
    warmed in the background once the model is idle, and the Documents tab counts them; a document
    added later is warmed too."""
    from localrag.app.config import AppConfig
    from localrag.app.services import Services
    from localrag.ui.documents import DocsController
    from localrag.ui.handlers import ChatController
    from localrag.ui.settings import Settings

    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text + "\n")
    services = Services(AppConfig(data_dir=tmp_path / "data", index=IndexConfig(index_dir=tmp_path / "index"),
                                  answer=AnswerConfig(chunk_cache=ChunkCacheConfig(folder=tmp_path / "kv"))),
                        engine=smollm2_engine)
    smollm2_engine.backend.reset()
    panel = DocsController(services)
    try:
        assert services.index("default").ingest([docs]).added == len(DOCS)
        assert panel.cache_note("default") == ""  # never read with reuse: nothing warmed, nothing said
        final = list(ChatController(services).respond(None, Q1, Settings(k=1, max_tokens=8, prefill="reuse")))[-1]
        said = str(final.messages[-1])
        assert "from the chunk cache (approximate)" in said and "computed into it" in said, said
        wait_for(lambda: (r := services.chunk_readiness("default")) and r.ready == r.total == len(DOCS)
                 and not r.stopped, "the collection's chunks warmed after the reuse answer")
        assert panel.cache_note("default") == f"⚡ Ready for fast answers (reuse prefill): {len(DOCS)} of {len(DOCS)} chunks"
        assert len(services.answerer.kv_store().entries()) == len(DOCS)
        extra = tmp_path / "ferry.md"
        extra.write_text("The Kestrel ferry leaves the north pier at seven and at noon, and crosses to the "
                         "island in forty minutes; bicycles travel free, and dogs must be kept on a lead.\n")
        assert list(panel.ingest([str(extra)], "default"))[-1].summary.startswith("✅ Done: 1 added")
        wait_for(lambda: (r := services.chunk_readiness("default")) and r.ready == r.total == len(DOCS) + 1,
                 "the added document's chunk warmed")
        assert len(services.answerer.kv_store().entries()) == len(DOCS) + 1
    finally:
        services.close()


@pytest.mark.slow
def test_a_warm_stops_at_the_caps_room_and_never_evicts(smollm2_engine, index, tmp_path):
    """A warm fills the cache up to its cap and stops there (``full``): it never evicts entries that
    questions used for chunks nobody asked about."""
    probe = Answerer(smollm2_engine, index, config=AnswerConfig(chunk_cache=ChunkCacheConfig(folder=tmp_path / "a")))
    probe.warm_chunks(index.live_hits()[:1])
    one = probe.kv_store().size()
    answerer = Answerer(smollm2_engine, index, config=AnswerConfig(
        chunk_cache=ChunkCacheConfig(folder=tmp_path / "b", max_bytes=int(2.5 * one))))
    done = answerer.warm_chunks(index.live_hits())
    assert done.full and done.done and done.stored == 2 and done.ready == 2 < done.total
    assert answerer.kv_store().stats.evictions == 0 and len(answerer.kv_store().entries()) == 2
