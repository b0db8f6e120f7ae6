"""Fakes for the UI handler tests: an engine, a document index and an answerer with the real result types.

The handlers only need the interfaces, so these tests run in well under a second
each, with no model loaded. The browser test (test_browser.py) uses the real stack.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localrag.answer import AnswerResult, Citation, Draft
from localrag.config import AppConfig
from localrag.rag.records import DocumentInfo, IngestEvent, IngestReport
from localrag.ui.services import Services


class FakeEngine:
    model_name = "fake-model"

    def close(self) -> None:
        pass


class FakeIndex:
    """Remembers ingested paths; files whose name contains 'corrupt' fail with a reason."""

    def __init__(self, collection: str) -> None:
        self.collection = collection
        self.docs: dict[str, int] = {}
        self.ingested: list[str] = []

    def ingest(self, paths, progress=None) -> IngestReport:
        emit = progress or (lambda e: None)
        paths = [str(p) for p in paths]
        report = IngestReport()
        emit(IngestEvent("start", total=len(paths)))
        for i, p in enumerate(paths, start=1):
            report.seen += 1
            self.ingested.append(p)
            emit(IngestEvent("file_start", index=i, total=len(paths), path=p))
            if "corrupt" in Path(p).name:
                report.failed.append((p, "not a PDF (bad header)"))
                emit(IngestEvent("file_done", index=i, total=len(paths), path=p, status="failed",
                                 reason="not a PDF (bad header)"))
                continue
            status = "skipped" if p in self.docs else "added"
            self.docs[p] = 3
            emit(IngestEvent("chunks", index=i, total=len(paths), path=p, chunks=3))
            if status == "added":
                report.added += 1
                report.chunks += 3
            else:
                report.skipped += 1
            emit(IngestEvent("file_done", index=i, total=len(paths), path=p, status=status, chunks=3))
        emit(IngestEvent("done", total=len(paths)))
        return report

    def list_documents(self) -> list[DocumentInfo]:
        return [DocumentInfo(p, n, "indexed") for p, n in sorted(self.docs.items())]

    def remove(self, path) -> int:
        return 1 if self.docs.pop(os.path.abspath(str(path)), None) is not None else 0

    def collections(self) -> list[str]:
        return ["default"]


def citation(file: str = "/data/uploads/default/zephyr.md") -> Citation:
    return Citation(file=file, page=None, line_start=3, line_end=4, snippet="Its primary mirror is 4.2 metres…",
                    text="Its primary mirror is 4.2 metres wide and was polished by Marta Ilves.",
                    chunk_id="v1:0", label="zephyr.md lines 3-4")


class FakeAnswerer:
    """Streams a fixed answer in pieces, then an AnswerResult shaped like the real one for each mode."""

    pieces = ["Marta ", "Ilves ", "polished ", "it."]
    fail: Exception | None = None
    on_piece = None  # callback(i) after each piece (tests use it to press Stop)

    def __init__(self, engine, index, verifier=None, rasd_draft=None, **kwargs) -> None:
        self.engine, self.index, self.verifier, self.rasd_draft = engine, index, verifier, rasd_draft
        self.kwargs = kwargs
        self.calls: list[tuple] = []

    def stream(self, question, history, mode, gen, k=5, collection=None):
        FakeAnswerer.last_call = (question, history, mode, gen, k, collection)
        if FakeAnswerer.fail is not None:
            raise FakeAnswerer.fail
        for i, p in enumerate(self.pieces):
            yield p
            if FakeAnswerer.on_piece:
                FakeAnswerer.on_piece(i)
        stats = {"total_s": 0.5, "generation": {"decode_tps": 42.0, "tokens_per_step": 1.0, "generated_tokens": 4,
                                                "extra": {}}}
        drafts = []
        if mode == "rasd":
            stats["generation"]["tokens_per_step"] = 2.5
            stats["generation"]["extra"] = {"speedup_vs_plain": 1.8, "accepted_per_step": [1, 3, 4, 2]}
        if mode == "specrag":
            drafts = [Draft("Marta Ilves", "The text says Marta Ilves polished it.", [citation()], -3.2, -4.1, -0.2, -1.1),
                      Draft("Quillfield", "The town is Quillfield.", [citation()], -2.9, -6.0, -2.3, -3.4)]
        yield AnswerResult(text="".join(self.pieces), mode=mode, citations=[citation()], supported=True,
                           drafts=drafts, stats=stats, searched='searched "q" in collection "default"')


@pytest.fixture
def fake_answerer():
    FakeAnswerer.fail = None
    FakeAnswerer.on_piece = None
    yield FakeAnswerer
    FakeAnswerer.fail = None
    FakeAnswerer.on_piece = None


@pytest.fixture
def make_services(tmp_path, fake_answerer):
    """Build Services over tmp data/index dirs with fakes; call again for a 'restart' on the same dirs."""
    indexes: dict[str, FakeIndex] = {}
    made: list[Services] = []

    def index_factory(name: str) -> FakeIndex:
        if name not in indexes:
            indexes[name] = FakeIndex(name)
            if name == "default":  # one document already indexed; other collections start empty
                indexes[name].docs["/data/uploads/default/zephyr.md"] = 3
        return indexes[name]

    def make(**kw) -> Services:
        cfg = AppConfig(data_dir=tmp_path / "data", index_dir=tmp_path / "index")
        kw.setdefault("engine", FakeEngine())
        s = Services(cfg, index_factory=index_factory, answerer_factory=fake_answerer, **kw)
        made.append(s)
        return s

    make.indexes = indexes
    yield make
    for s in made:
        s.history.close()
