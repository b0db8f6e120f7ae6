"""bench qa's bookkeeping on deterministic fakes: which answer each method reports (the ablations and
the oracle ceiling are picked from the same drafts), and the metrics over them.

Run: .venv/bin/python -m pytest tests/grounded/test_bench_qa.py -q
"""

from __future__ import annotations

from dataclasses import dataclass, field

from localrag.bench.common import score_answer
from localrag.bench.data import QARecord
from localrag.bench.qa import Pick, QuestionRun, calibrate, parse_methods, run_question, summarize
from localrag.config import GenerationConfig, GroundedConfig
from localrag.evidence import EvidenceAligner
from localrag.grounded.extras import GroundedDraft, GroundedExtras
from localrag.results import AnswerStats, Citation


def _draft(answer: str, score: float, draft_logprob: float, dropped: str = "") -> GroundedDraft:
    return GroundedDraft(answer=answer, rationale="", citations=[], draft_logprob=draft_logprob,
                         reflection=-0.5, score=score, n_draft_tokens=1, dropped=dropped)


@dataclass
class _Reply:
    text: str
    supported: bool = True


@dataclass
class _Result:
    extras: GroundedExtras
    supported: bool
    text: str = ""
    stats: AnswerStats = field(default_factory=AnswerStats)
    evidence: None = None  # no evidence check (the pipeline was given no aligner)


class FakeAnswerer:
    def __init__(self, text: str, supported: bool = True):
        self.text, self.supported = text, supported

    def index_for(self, collection):
        return None


def fake_ask(answerer: FakeAnswerer, request) -> _Reply:
    return _Reply(answerer.text, answerer.supported)


class FakePipeline:
    """Drafts sorted by combined score, as GroundedPipeline returns them."""

    def __init__(self, drafts: list[GroundedDraft], supported: bool = True):
        self.drafts, self.supported = drafts, supported
        self.gens: list[GenerationConfig] = []

    def answer(self, question, index, gen, config):
        self.gens.append(gen)
        best = max((d for d in self.drafts if not d.dropped and "not in" not in d.answer), key=lambda d: d.score)
        return _Result(GroundedExtras(drafts=self.drafts), self.supported, best.answer)


def fake_grounded(answerer, pipeline: FakePipeline, request) -> _Result:
    """Grounded's answer from the fake pipeline (the mode itself needs a real answerer)."""
    return pipeline.answer(request.question, None, request.gen, None)


DRAFTS = [_draft("the Pacific", -1.0, -0.5, dropped="its answer did not end within 32 tokens"),  # never picked
          _draft("the Pacific Ocean coast", -6.0, -9.0),  # best combined score
          _draft("Pacific", -7.0, -8.0),  # best F1, worst draft score
          _draft("not in the documents", -5.0, -1.0),  # a refusal is never picked as an answer
          _draft("Los Angeles", -8.0, -2.0)]  # best draft score


def test_each_method_reports_its_own_pick_from_the_same_drafts():
    rec = QARecord("Which coastline does Southern California touch?", ("doc",), ("Pacific",))
    pipeline, gen = FakePipeline(DRAFTS), GenerationConfig(max_tokens=32)
    row = run_question(FakeAnswerer("Answer: The Pacific."), FakeAnswerer("I don't know"), pipeline,
                       rec, gen, GroundedConfig(min_score=-10.0), k=5, ask=fake_ask,
                       grounded_ask=fake_grounded)  # every draft passes
    assert pipeline.gens == [gen, gen]  # grounded and nocluster answer within the same limits as RAG
    picked = {m: p.answer for m, p in row.picks.items()}
    assert picked["rag"] == picked["rag-checked"] == "The Pacific"
    assert picked["grounded"] == "the Pacific Ocean coast"
    assert picked["unchecked"] == picked["reranked"] == picked["grounded"]  # no aligner: no check to differ by
    assert picked["drafter"] == "Los Angeles"
    assert picked["oracle"] == "Pacific"
    assert [d["answer"] for d in row.drafts] == [d.answer for d in DRAFTS]


def test_unsupported_and_unanswerable_rows_abstain():
    unanswerable = QARecord("What is the capital of Mars?", ("doc",), ())
    row = run_question(FakeAnswerer("not in the documents"), FakeAnswerer("Olympus"),
                       FakePipeline(DRAFTS, supported=False), unanswerable, None, GroundedConfig(), k=5,
                       ask=fake_ask, grounded_ask=fake_grounded)
    picked = {m: p.answer for m, p in row.picks.items()}
    assert picked["rag"] is None and picked["grounded"] is None and picked["oracle"] is None
    assert picked["norag"] == "Olympus"


def test_rag_checked_counts_an_answer_the_evidence_does_not_support_as_refused():
    """rag is the text Plain wrote; rag-checked is what the page shows as an answer: Plain warns on
    an unsupported one, so it counts as a refusal, as Grounded's unsupported answers do."""
    rec = QARecord("Which Python 3 version is the default in Debian 12?", ("doc",), ())
    row = run_question(FakeAnswerer("Debian 12 (bookworm)", supported=False), FakeAnswerer("3.11"),
                       FakePipeline(DRAFTS), rec, None, GroundedConfig(), k=5, ask=fake_ask,
                       grounded_ask=fake_grounded, methods=("rag",))
    assert row.picks["rag"].answer == "Debian 12 (bookworm)" and row.picks["rag-checked"].answer is None
    assert row.picks["rag-checked"].seconds == row.picks["rag"].seconds  # the same answer, not a second one
    assert set(row.picks) == {"rag", "rag-checked"}


def test_summary_scores_answerable_and_unanswerable_separately():
    recs = [QARecord("q1", ("d",), ("Pacific",)), QARecord("q2", ("d",), ())]
    methods = ("norag", "rag", "grounded", "drafter", "nocluster", "oracle")
    rows = [QuestionRun({m: Pick("Pacific Ocean", 1.0) for m in methods}),
            QuestionRun({m: Pick("Olympus" if m == "norag" else None, 3.0) for m in methods})]
    res = summarize(rows, recs)
    f1 = score_answer("Pacific Ocean", ("Pacific",))["f1"]
    assert abs(f1 - 2 / 3) < 1e-9  # precision 1/2, recall 1
    assert res["rag"]["f1"] == round(100 * f1, 2) and res["rag"]["contained"] == 100.0
    assert res["rag"]["unanswerable_correct"] == 100.0 and res["norag"]["unanswerable_correct"] == 0.0
    assert res["oracle"]["latency_mean_s"] == 2.0


def test_calibrated_threshold_trades_abstention_against_f1():
    recs = [QARecord("q1", ("d",), ("Pacific",)), QARecord("q2", ("d",), ())]
    rows = [QuestionRun({}, best=("Pacific", -5.0)), QuestionRun({}, best=("Mars", -9.0))]
    cal = calibrate(rows, recs)
    # a threshold between the two scores keeps the right answer and turns away the unanswerable one
    assert cal["best_threshold"] == -5.0 and cal["utility"] == 1.0


def test_reranked_takes_the_next_draft_whose_evidence_holds():
    """The best draft failed the final check (the app abstains); unchecked keeps it; reranked takes
    the next draft above the verifier's threshold whose own chunks support it."""
    chunk = Citation(file="/d/coast.txt", page=None, line_start=1, line_end=1, snippet="", chunk_id="c1",
                     text="Southern California touches the Pacific Ocean along its whole western coast.",
                     label="coast.txt line 1")
    drafts = [GroundedDraft("Los Angeles", "The city of Los Angeles sits on the Atlantic.", [chunk], -2.0,
                            -0.5, -6.0, 1),
              GroundedDraft("the Pacific Ocean", "Southern California touches the Pacific Ocean.", [chunk], -2.0,
                            -0.5, -7.0, 1)]
    rec = QARecord("Which ocean does Southern California touch?", ("doc",), ("Pacific",))
    row = run_question(FakeAnswerer("x"), FakeAnswerer("x"), FakePipeline(drafts, supported=False), rec, None,
                       GroundedConfig(min_score=-8.5), k=5, ask=fake_ask, aligner=EvidenceAligner(),
                       methods=("grounded",), grounded_ask=fake_grounded)
    assert row.picks["grounded"].answer is None and row.picks["unchecked"].answer == "Los Angeles"
    assert row.picks["reranked"].answer == "the Pacific Ocean"
    assert "rag" not in row.picks and "nocluster" not in row.picks  # only the methods asked for ran


def test_methods_take_grounded_and_its_old_name():
    assert parse_methods("rag, grounded") == ("rag", "grounded")
    assert parse_methods("specrag") == ("grounded",)  # the old name is accepted, and reported as grounded
    assert parse_methods("rag,bogus") is None and parse_methods(" , ") is None
