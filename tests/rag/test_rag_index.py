"""The index on real Chroma + real MiniLM: hybrid search, manifest (skip / replace / move /
remove), BM25 kept in sync, named collections, settings changes that force re-embedding.

Run: .venv/bin/python -m pytest tests/rag/test_rag_index.py -q
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from rag_docgen import assert_consistent, make_pdf, prose, write

NOTES = """# Garden notes

## Tomatoes

Tomatoes need full sun and deep watering twice a week.
Stake the plants early so the stems do not snap.

## Compost

Turn the compost heap every fortnight; keep it as damp as a wrung-out sponge.
"""


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    write(root / "garden.md", NOTES)
    write(root / "sub" / "ships.txt", "The harbor master logs every ship.\n\nTides are posted at dawn.\n")
    write(root / "tool.py", "def zebrafish_counter(tank):\n    return len(tank)\n")
    make_pdf(
        root / "manual.pdf",
        ["Chapter one covers the boiler.", "Chapter two: the pressure valve opens at 3 bar."],
    )
    return root


def test_ingest_and_hybrid_search_with_citations(make_index, corpus):
    idx = make_index()
    events = []
    report = idx.ingest([corpus], progress=events.append)
    assert (report.seen, report.added, report.failed) == (4, 4, [])
    assert report.chunks >= 4 and report.seconds > 0
    assert [e.kind for e in events][0] == "start" and events[-1].kind == "done"
    assert sum(e.kind == "file_done" for e in events) == 4

    hit = idx.search("when does the pressure valve open?", k=3)[0]
    assert hit.file.endswith("manual.pdf") and hit.page == 2
    assert hit.citation() == "manual.pdf p.2"
    assert hit.dense_score is not None and hit.fused_score > 0

    hit = idx.search("how often should I water tomatoes", k=3)[0]
    assert hit.file.endswith("garden.md") and hit.heading_path == ("Garden notes", "Tomatoes")
    assert hit.citation().startswith("garden.md line")

    # A rare identifier: BM25 finds it and reports a lexical score.
    hit = idx.search("zebrafish_counter", k=3)[0]
    assert hit.file.endswith("tool.py") and hit.bm25_score and hit.bm25_score > 0
    assert hit.citation() == "tool.py lines 1-2"
    assert_consistent(idx)

    # The stored vectors of hits read back in order (Speculative RAG clusters them without re-embedding).
    hits = idx.search("chapter", k=3)
    stored = idx.vectors([h.chunk_id for h in hits])
    assert stored.shape == (len(hits), idx.embedder.dimension)
    assert np.allclose(stored, idx.embedder.embed([h.text for h in hits]), atol=1e-5)
    with pytest.raises(KeyError):
        idx.vectors(["no-such-chunk"])


def test_unchanged_skipped_edited_replaced_moved_removed(make_index, corpus):
    idx = make_index()
    idx.ingest([corpus])
    again = idx.ingest([corpus])
    assert (again.skipped, again.added, again.replaced, again.chunks) == (4, 0, 0, 0)

    garden = corpus / "garden.md"
    garden.write_text(NOTES.replace("twice a week", "every evening in July"))
    rep = idx.ingest([corpus])
    assert (rep.replaced, rep.skipped) == (1, 3)
    hits = idx.search("tomatoes watering", k=10)
    texts = " ".join(h.text for h in hits if h.file == str(garden))
    assert "every evening in July" in texts and "twice a week" not in texts
    assert_consistent(idx)

    moved = corpus / "archive" / "ships-moved.txt"
    moved.parent.mkdir()
    shutil.move(corpus / "sub" / "ships.txt", moved)
    rep = idx.ingest([corpus])
    assert (rep.moved, rep.added, rep.chunks) == (1, 0, 0)  # recognised: no re-embedding
    hit = idx.search("harbor master ship log", k=1)[0]
    assert hit.file == str(moved)
    assert [d.path for d in idx.list_documents()].count(str(moved)) == 1
    assert_consistent(idx)

    assert idx.remove(moved) == 1
    assert all(h.file != str(moved) for h in idx.search("harbor master ship log", k=10))
    assert all(d.path != str(moved) for d in idx.list_documents())
    # BM25 was resynchronised: the removed file's unique word no longer matches lexically.
    assert all("harbor" not in h.text for h in idx.search("harbor", k=10))
    assert idx.remove(corpus / "nothing-here") == 0
    assert_consistent(idx)


def test_copy_of_a_file_is_indexed_twice_without_reembedding(make_index, corpus, embedder):
    idx = make_index()
    idx.ingest([corpus])
    copy = corpus / "garden-copy.md"
    shutil.copy(corpus / "garden.md", copy)
    encoded = embedder.stats.texts  # vectors for identical chunks come from Chroma, not the model
    rep = idx.ingest([copy])
    assert rep.added == 1 and embedder.stats.texts == encoded
    assert {d.path for d in idx.list_documents()} >= {str(copy), str(corpus / "garden.md")}
    assert_consistent(idx)


def test_named_collections_are_isolated(make_index, tmp_path):
    a = make_index(collection="alpha")
    b = make_index(collection="beta")
    a.ingest([write(tmp_path / "a.txt", "Alpaca wool is warm and soft.\n")])
    b.ingest([write(tmp_path / "b.txt", "Basalt columns form when lava cools.\n")])
    assert [h.file for h in a.search("lava basalt", k=5)] == [str(tmp_path / "a.txt")]
    assert [h.file for h in b.search("lava basalt", k=5)] == [str(tmp_path / "b.txt")]
    assert set(a.collections()) == {"alpha", "beta"}


def test_chunk_setting_change_rechunks_everything(make_index, tmp_path):
    doc = write(tmp_path / "long.txt", prose(3000, seed=5))
    idx = make_index(chunk_tokens=200)
    n200 = idx.ingest([doc]).chunks
    idx2 = make_index(chunk_tokens=100, overlap_tokens=16)
    assert {d.status for d in idx2.list_documents()} == {"stale"}
    other = write(tmp_path / "other.txt", "an unrelated small note\n")
    rep = idx2.ingest([other])  # the next ingest, whatever it names, re-chunks the stale file too
    assert (rep.added, rep.replaced) == (1, 1)
    assert idx2.manifest.get("default", str(doc)).n_chunks > n200
    assert {d.status for d in idx2.list_documents()} == {"indexed"}
    assert_consistent(idx2)


@pytest.mark.slow  # loads a second embedding model
def test_embedding_model_change_reembeds_into_new_space(make_index, tmp_path, model_path):
    doc = write(tmp_path / "n.md", NOTES)
    old = make_index()
    old.ingest([doc])
    other_model = tmp_path / "minilm-copy"
    shutil.copytree(model_path, other_model)  # a different model folder = a different fingerprint
    new = make_index(embedding_model=str(other_model))
    assert new.space != old.space
    assert [d.status for d in new.list_documents()] == ["stale"]
    with pytest.raises(RuntimeError, match="re-embed"):
        new.search("tomatoes")
    rep = new.ingest([doc])
    assert rep.replaced == 1
    names = new.store.space_names()
    assert new.space in names and old.space not in names  # old vectors dropped, never mixed
    assert new.search("tomatoes sun", k=1)[0].file == str(doc)
    assert_consistent(new)


def test_bm25_follows_changes_made_by_another_index(make_index, tmp_path):
    """Two processes (UI and CLI) share one index folder: each one's BM25 catches up."""
    a, b = make_index(), make_index()
    a.ingest([write(tmp_path / "one.txt", "Quetzalcoatlus was a giant pterosaur.\n")])
    assert b.search("quetzalcoatlus", k=1)[0].bm25_score
    b.ingest([write(tmp_path / "two.txt", "Xenophyophores are giant single cells.\n")])
    hit = a.search("xenophyophores", k=1)[0]
    assert hit.file == str(tmp_path / "two.txt") and hit.bm25_score


def test_index_location_from_environment(monkeypatch, tmp_path):
    from localrag.rag.config import IndexConfig

    monkeypatch.setenv("LOCALRAG_INDEX_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("LOCALRAG_CHROMA_HOST", "chroma.internal")
    cfg = IndexConfig.from_env()
    assert cfg.index_dir == tmp_path / "elsewhere" and cfg.chroma_host == "chroma.internal"
    assert IndexConfig.from_env(index_dir=str(tmp_path / "x")).index_dir == tmp_path / "x"
    with pytest.raises(ValueError):
        IndexConfig(collection="_bad name")


def test_rrf_ties_go_to_the_ranking_listed_first():
    """A chunk found only by BM25 and one found only by the dense ranking, at the same rank, score
    the same: the tie goes to the first ranking (the index lists BM25 first), not to the ids."""
    from localrag.rag.retrieve import rrf_fuse

    fused = rrf_fuse([["zz-lexical"], ["aa-dense"]], [1.0, 1.0], k=60)
    assert [d for d, _ in fused] == ["zz-lexical", "aa-dense"] and fused[0][1] == fused[1][1]
    both = rrf_fuse([["b", "x"], ["x", "a"]], [1.0, 1.0], k=60)
    assert both[0][0] == "x"  # found by both rankings beats any single-ranking tie
