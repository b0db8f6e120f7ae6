"""Fakes for the UI handler tests: an engine, a document index and answer modes with the real result types.

The handlers only need the interfaces, so these tests run in well under a second
each, with no model loaded. The fake modes' answers go through the real evidence check
(the aligner's lexical signals, no embedder) and the real policy. The browser test
(test_browser.py) uses the real stack.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from localrag.answer import checked_result
from localrag.app.config import AppConfig
from localrag.app.services import Services
from localrag.evidence import EvidenceAligner
from localrag.grounded.extras import GroundedDraft, GroundedExtras
from localrag.modes import AnswerMode, GroundedMode, PlainMode, SpeedupMode
from localrag.rag.config import IndexConfig
from localrag.rag.records import DocumentInfo, Hit, IngestEvent, IngestReport
from localrag.results import AnswerProgress, AnswerStats, Citation, GenerationStats, RasdStats, SearchStats

# A three-page report (the UI tests' PDF): the glacier's retreat is on page 2.
GLACIER = ("The glacier survey of the second season measured the northern tongue every week from May to "
           "September. The ice retreated by forty-one metres over the season, the fastest retreat the survey "
           "has recorded since it began, and the meltwater lake at its foot doubled in area.")
REPORT_PAGES = [
    ["Harbor notes", "The tide tables of the northern harbor are kept by the harbor master, who posts them "
     "at the gate every Monday morning before the boats go out, and again on Thursday."],
    ["Glacier survey", GLACIER, "The survey team camped at the lake for three weeks in August."],
    ["Appendix", "The lantern inventory lists forty lanterns, of which thirty-two were in working order "
     "at the end of the season and eight were sent to the workshop in town for repair."],
]


def make_pdf(path: Path, pages: list[list[str]]) -> Path:
    """A PDF with a text layer, one list of paragraphs per page, wrapped by fpdf2 itself (multi_cell)
    as a real document's lines are."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for paragraphs in pages:
        pdf.add_page()
        for text in paragraphs:
            pdf.multi_cell(0, 6, text, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(3)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


class FakeBackend:
    """Just enough of a llama.cpp backend for the modes' availability checks (BatchBackend)."""

    n_batch = 512
    add_bos = True
    deterministic = True

    def decode_batch(self, tokens, positions, seq_ids, outputs):
        raise NotImplementedError

    def seq_cp(self, src, dst, p0=-1, p1=-1):
        raise NotImplementedError

    def seq_rm(self, seq, p0, p1=-1):
        raise NotImplementedError

    def reset(self):
        pass

    def tokenize(self, text, add_special=False, parse_special=True):
        return []

    def token_bytes(self, token):
        return b""

    def is_eog(self, token):
        return False


class FakeEngine:
    model_name = "fake-model"

    def __init__(self, backend=None) -> None:
        self.backend = backend if backend is not None else FakeBackend()

    def close(self) -> None:
        pass


class FakeEmbedder:
    def embed(self, texts):
        return np.zeros((len(texts), 4), dtype=np.float32)


class FakeIndex:
    """Remembers ingested paths; files whose name contains 'corrupt' fail with a reason. ``cancel``
    is looked at before each file, as the real index looks at it before each batch; ``on_file(i)``
    runs as file i starts (tests press Stop there)."""

    def __init__(self, collection: str) -> None:
        self.collection = collection
        self.embedder = FakeEmbedder()
        self.docs: dict[str, int] = {}
        self.failures: dict[str, str] = {}
        self.ingested: list[str] = []
        self.on_file = None

    def ingest(self, paths, progress=None, cancel=None) -> IngestReport:
        emit = progress or (lambda e: None)
        paths = [str(p) for p in paths]
        report = IngestReport()
        emit(IngestEvent("start", total=len(paths)))
        for i, p in enumerate(paths, start=1):
            if self.on_file is not None:
                self.on_file(i)
            if cancel is not None and cancel.is_set():
                report.stopped, report.not_done = True, paths[i - 1:]
                break
            report.seen += 1
            self.ingested.append(p)
            emit(IngestEvent("file_start", index=i, total=len(paths), path=p))
            if "corrupt" in Path(p).name:
                report.failed.append((p, "not a PDF (bad header)"))
                self.failures[p] = "not a PDF (bad header)"
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
        emit(IngestEvent("done", total=len(paths), status="stopped" if report.stopped else ""))
        return report

    def list_documents(self) -> list[DocumentInfo]:
        return sorted([DocumentInfo(p, n, "indexed") for p, n in self.docs.items()]
                      + [DocumentInfo(p, 0, "failed", reason=r) for p, r in self.failures.items()], key=lambda d: d.path)

    def watched_folders(self) -> list:
        return []  # watching is tested on the real index (test_docs_watch.py)

    def remove(self, path) -> int:
        return 1 if self.docs.pop(os.path.abspath(str(path)), None) is not None else 0

    def collections(self) -> list[str]:
        return ["default"]

    def close(self) -> None:
        pass


ZEPHYR_HIT = Hit("v1:0", "Its primary mirror is 4.2 metres wide and was polished by Marta Ilves.",
                 "/data/uploads/default/zephyr.md", None, 3, 4, (), 0.6, 3.0, 0.03)
GARDEN_HIT = Hit("v2:0", "The community garden grows tomatoes, beans and sunflowers.",
                 "/data/uploads/default/garden.txt", None, 1, 2, (), 0.1, 0.5, 0.02)


def citation(file: str = "/data/uploads/default/zephyr.md") -> Citation:
    return Citation.from_hit(ZEPHYR_HIT)


class FakeAnswering:
    """What the fake modes answer: a fixed text in pieces, then an AnswerResult shaped like the real
    one for each mode (the real result and stats types)."""

    pieces = ["Marta ", "Ilves ", "polished ", "it."]
    notes: list[str] = []  # what the mode says it could not use
    fail: Exception | None = None
    on_piece = None  # callback(i) after each piece (tests use it to press Stop)
    last_request = None
    last_answerer = None
    searched = 'searched "q" in collection "default"'

    @classmethod
    def reset(cls) -> None:
        cls.pieces = ["Marta ", "Ilves ", "polished ", "it."]
        cls.searched = 'searched "q" in collection "default"'
        cls.notes = []
        cls.fail = cls.on_piece = cls.last_request = cls.last_answerer = None


def _stats(mode: str) -> AnswerStats:
    n = len("".join(FakeAnswering.pieces).split())
    gen = GenerationStats(generated_tokens=n, steps=n, decode_seconds=n / 42.0)
    stats = AnswerStats(mode=mode, total_s=0.5, search=SearchStats(query="q", collection="default", k=5),
                        generation=gen)
    if mode == "speedup":
        gen.steps = 2
        gen.decoder = RasdStats(steps=4, tokens=10, mean_accepted=2.5, speedup_vs_plain=1.8,
                                accepted_per_step=[1, 3, 4, 2])
    if mode == "grounded":
        stats.generation = None
    return stats


def _fake_stream(self: AnswerMode, answerer, request):
    FakeAnswering.last_request, FakeAnswering.last_answerer = request, answerer
    if FakeAnswering.fail is not None:
        raise FakeAnswering.fail
    if self.id == "grounded":  # like the real Grounded mode: its progress before its text
        yield from GROUNDED_PROGRESS
    written = []
    for i, p in enumerate(FakeAnswering.pieces):
        yield p
        written.append(p)
        if FakeAnswering.on_piece:
            FakeAnswering.on_piece(i)
        if request.cancelled:  # like the real modes: stop writing, still end with the result
            break
    extras = None
    if self.id == "grounded":
        drafts = [GroundedDraft("Marta Ilves", "The text says Marta Ilves polished it.", [citation()],
                                -3.2, -0.2, -1.1),
                  GroundedDraft("Quillfield", "The town is Quillfield.", [citation()], -2.9, -2.3, -3.4)]
        extras = GroundedExtras(drafts=drafts, n_drafts=2, draft_s=0.2, verify_s=0.1)
    text = "".join(written).strip()
    retrieved = [ZEPHYR_HIT, GARDEN_HIT]
    evidence = EvidenceAligner().align(text, retrieved, question=request.question)
    yield checked_result(text, self.id, evidence, retrieved, _stats(self.id), FakeAnswering.searched,
                         self.policy(request), extras, notes=FakeAnswering.notes)


GROUNDED_PROGRESS = (AnswerProgress("searching"), AnswerProgress("drafting", 0, 2), AnswerProgress("drafting", 1, 2),
                     AnswerProgress("drafting", 2, 2), AnswerProgress("verifying"))


class FakePlain(PlainMode):
    stream = _fake_stream


class FakeSpeedup(SpeedupMode):
    stream = _fake_stream


class FakeGrounded(GroundedMode):
    stream = _fake_stream


FAKE_MODES = {m.id: m for m in (FakePlain(), FakeSpeedup(), FakeGrounded())}


@pytest.fixture
def fake_answering():
    FakeAnswering.reset()
    yield FakeAnswering
    FakeAnswering.reset()


@pytest.fixture
def make_services(tmp_path, fake_answering):
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
        cfg = AppConfig(data_dir=tmp_path / "data", index=IndexConfig(index_dir=tmp_path / "index"))
        kw.setdefault("engine", FakeEngine())
        kw.setdefault("modes", FAKE_MODES)
        s = Services(cfg, index_factory=index_factory, **kw)
        made.append(s)
        return s

    make.indexes = indexes
    yield make
    for s in made:
        s.history.close()
