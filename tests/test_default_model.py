"""The default model, as a user meets it: Qwen2.5-Coder-1.5B-Instruct with its 0.5B draft model.

- Over a mixed folder (PDF, DOCX, HTML, Markdown, code) with one fact planted in each file, it
  answers each fact with that file cited, and an answer to a question the folder cannot answer is
  flagged (not supported, so the page warns or refuses).
- The pair: the registry's draft is accepted for the target (one vocabulary); Speedup with it
  writes Plain's answer token for token; Grounded drafts with the 0.5B and verifies with the 1.5B.

These load the 1.1 GB model: slow, and sized to fit CI (a handful of short answers).

Run: .venv/bin/python -m pytest tests/test_default_model.py -q
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from localrag.answer import RAG_INSTRUCTIONS, Answerer
from localrag.config import DEFAULT_MODEL, GenerationConfig, ModelConfig
from localrag.engine import Engine
from localrag.evidence import foreign_words
from localrag.grounded.extras import GroundedExtras
from localrag.judge import EVIDENCE_ONLY, Probe, prompt_key
from localrag.models import drafts_for, resolve
from localrag.modes import AnswerRequest, get_mode
from localrag.rag.config import IndexConfig
from localrag.rag.index import DocumentIndex
from localrag.rasd import load_draft
from localrag.results import RasdStats
from tests.rag.rag_docgen import make_docx, make_pdf, prose, write

pytestmark = pytest.mark.slow

DRAFT = "qwen2.5-coder-0.5b-instruct"
GEN = GenerationConfig(max_tokens=48)

# (file, the fact planted in it, a question only it answers, what a right answer contains)
FACTS = [
    ("lab-report.pdf", "The calibration constant of the Vireo spectrometer is 7.35.",
     "What is the calibration constant of the Vireo spectrometer?", "7.35"),
    ("handbook.docx", "New employees receive their access badge from Ingrid Halvorsen at the front desk.",
     "Who gives new employees their access badge?", "Halvorsen"),
    ("garden.html", "The Orchard Street community garden opens its gates at 6:30 every morning.",
     "At what time does the Orchard Street community garden open?", "6:30"),
    ("trip.md", "The ferry to Lind Island leaves from pier 14 on weekdays.",
     "From which pier does the ferry to Lind Island leave?", "14"),
    ("uploader.py", "MAX_RETRIES = 9  # how many times the uploader retries before it gives up",
     "How many times does the uploader retry before it gives up?", "9"),
]
UNANSWERABLE = ["What dose of ibuprofen is recommended for adults?", "Which team won the 1998 football world cup?"]
# near misses: on a planted fact's topic, its answer absent from the folder (the calibration constant is
# there, the serial number is not; the opening time is there, the closing time is not)
NEAR_MISSES = ["What is the serial number of the Vireo spectrometer?",
               "At what time does the Orchard Street community garden close in the evening?",
               "How much does a ticket for the ferry to Lind Island cost?",
               "On which floor is Ingrid Halvorsen's office?"]


def _folder(root: Path) -> Path:
    filler = prose(120, seed=7)
    (fact_pdf, fact_docx, fact_html, fact_md, fact_py) = (f[1] for f in FACTS)
    make_pdf(root / "lab-report.pdf", [f"Lab report, spring session.\n{filler[:400]}", f"Results\n{fact_pdf}\n{filler[400:800]}"])
    make_docx(root / "handbook.docx", [("Your first day", [filler[:300], fact_docx]), ("Leave", [filler[300:700]])])
    write(root / "garden.html", f"<html><head><title>Garden</title></head><body><h1>Opening hours</h1>"
                                f"<p>{fact_html}</p><h2>Plots</h2><p>{filler[:500]}</p></body></html>")
    write(root / "trip.md", f"# Island trip\n\n{filler[:400]}\n\n## Getting there\n\n{fact_md}\n")
    write(root / "uploader.py", f'"""Upload files to the archive."""\n\n{fact_py}\nTIMEOUT_S = 30\n\n\n'
                                "def upload(path):\n    for attempt in range(MAX_RETRIES):\n        pass\n")
    return root


@pytest.fixture(scope="module")
def qwen() -> Engine:
    engine = Engine.load(ModelConfig(model=DEFAULT_MODEL, n_ctx=4096))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def folder_index(tmp_path_factory) -> DocumentIndex:
    tmp = tmp_path_factory.mktemp("planted")
    index = DocumentIndex(IndexConfig(index_dir=tmp / "index"))
    report = index.ingest([_folder(tmp / "docs")])
    assert report.failed == [] and report.added == len(FACTS)
    yield index
    index.close()


def test_the_default_model_answers_planted_facts_from_the_right_file(qwen, folder_index):
    answerer = Answerer(qwen, folder_index)
    plain = get_mode("plain")
    for name, _, question, right in FACTS:
        result = plain.answer(answerer, AnswerRequest(question, gen=GEN))
        assert re.search(rf"(?<![\d.]){re.escape(right)}(?![\d])", result.text), (question, result.text)
        assert result.supported, (question, result.text, [s.reason for s in result.evidence.sentences])
        assert result.citations and Path(result.citations[0].file).name == name, (question, result.citations)


def test_answers_the_folder_cannot_support_are_flagged(qwen, folder_index):
    answerer = Answerer(qwen, folder_index)
    for question in UNANSWERABLE:
        result = get_mode("plain").answer(answerer, AnswerRequest(question, gen=GEN))
        assert not result.supported, (question, result.text)


def test_the_pair_speedup_writes_plains_answer_with_the_draft_model(qwen, folder_index):
    assert drafts_for(DEFAULT_MODEL) == [DRAFT]
    draft = load_draft(qwen.backend, DRAFT)  # the vocabularies agree token by token, or this raises
    draft.close()
    answerer = Answerer(qwen, folder_index)
    for _, _, question, _ in FACTS[:2]:
        # both from an empty cache: with the judge's probe on, what the engine read before can
        # change an answer's bits on the Intel Xeon VM (plain after plain: "7.35", then the whole
        # sentence), which is not Speedup's doing and not what this test is about
        qwen.backend.reset()
        plain = get_mode("plain").answer(answerer, AnswerRequest(question, gen=GEN))
        qwen.backend.reset()
        fast = get_mode("speedup").answer(answerer, AnswerRequest(question, gen=GEN))
        # the registry's draft was used (the only note a first answer may carry: its cost curves timed once)
        assert fast.text == plain.text and all("timed this machine's forward passes" in n for n in fast.notes)
        stats = fast.stats.generation.decoder
        assert isinstance(stats, RasdStats) and stats.steps <= plain.stats.generation.steps
    [key] = [k for k in answerer._runtimes if k[0] == "speedup"]
    assert key == ("speedup", DRAFT)


def test_grounded_drafts_with_the_small_model_and_verifies_with_the_large_one(qwen, folder_index):
    answerer = Answerer(qwen, folder_index)
    _, _, question, right = FACTS[0]
    opts = get_mode("grounded").options({"n": 4, "drafts": 2})
    result = get_mode("grounded").answer(answerer, AnswerRequest(question, gen=GEN, options=opts))
    [pipeline] = [r for k, r in answerer._runtimes.items() if k[0] == "grounded"]
    assert pipeline.drafter.model_name == DRAFT and pipeline.verifier is qwen
    extras = result.extras
    # One draft per subset (one chunk of each of 2 clusters) of the chunks past the relevance gate: with
    # two or fewer (the planted fact's chunk may be alone) there is one subset, so one draft.
    assert isinstance(extras, GroundedExtras) and extras.scoring == "drafter + reflection" and 1 <= len(extras.drafts) <= 2
    assert len(extras.drafts) == 2 or result.stats.search.n_relevant <= 2
    drafts = [d for d in extras.drafts if d.origin == "drafter"]
    assert all(d.reflection < 0 for d in drafts)  # the 1.5B's log p("Yes") of each draft
    assert extras.drafts[0].origin == "answer model"  # its own answer over all the chunks is a candidate
    assert right in result.text and result.supported, (result.text, extras.unsupported_reason)


MODES_ASKED = ("plain", "speedup", "grounded")


@pytest.mark.parametrize("mode", MODES_ASKED)
def test_every_mode_answers_a_planted_fact_and_flags_near_misses(qwen, folder_index, mode):
    """The planted fact is answered, cited from its file and supported. Of the near misses (the topic
    in the folder, the answer not), at least 3 of 4 are refused or warned (not supported), and none
    is shown as supported with a number, name or unit that no retrieved chunk and not the question
    holds. (A wrong answer the folder does hold, "7.35" for the serial number, can still pass the
    lexical check: telling it apart needs a judge of the question, not of the words.) No Grounded
    candidate holds such a word (the drafter once copied its prompt's worked example, "1889"), and
    a refused Grounded answer marks no candidate as chosen."""
    answerer = Answerer(qwen, folder_index)
    name, _, question, right = FACTS[3]
    result = get_mode(mode).answer(answerer, AnswerRequest(question, gen=GEN))
    assert re.search(rf"(?<![\d.]){re.escape(right)}(?![\d])", result.text), (mode, result.text)
    assert result.supported and Path(result.citations[0].file).name == name, (mode, result.text)
    judge = result.stats.judge
    assert judge is not None and (judge.judge.startswith("answerability probe") or judge.judge.startswith(EVIDENCE_ONLY))
    assert not judge.refused_early, judge
    flagged = []
    for near in NEAR_MISSES:
        r = get_mode(mode).answer(answerer, AnswerRequest(near, gen=GEN))
        chunks = [c.text for c in (*r.citations, *r.also_searched)]
        if isinstance(r.extras, GroundedExtras):
            chunks += [c.text for d in r.extras.drafts for c in d.citations]
            assert all(foreign_words(d.answer, chunks, near) == [] or d.check for d in r.extras.drafts), near
            if r.refused:
                assert r.extras.chosen() is None, near  # a refused answer marks no candidate
        if r.supported:
            assert foreign_words(r.text, chunks, near) == [], (mode, near, r.text)
        flagged.append(not r.supported and (r.refused or r.on_unsupported == "warn"))
    assert sum(flagged) >= 3, (mode, list(zip(NEAR_MISSES, flagged, strict=True)))


def test_a_probe_fitted_on_another_model_file_is_not_used_and_the_answer_names_its_judge(
        qwen, folder_index, tmp_path, monkeypatch):
    """The judge's probe is keyed by the model file's sha256: one fitted on other bytes (here the same
    size, another hash) is never read, and the answer says the evidence check alone judged it."""
    monkeypatch.setenv("LOCALRAG_PROBES_DIR", str(tmp_path))
    path = resolve(DEFAULT_MODEL).path
    width = int(qwen.backend.meta("qwen2.embedding_length"))
    Probe("0" * 64, path.stat().st_size, prompt_key(RAG_INSTRUCTIONS), 18, (0.0,) * width, (1.0,) * width,
          (0.0,) * width, 0.0, 1.0).save()  # would refuse everything, were it used
    name, _, question, right = FACTS[3]
    result = get_mode("plain").answer(Answerer(qwen, folder_index), AnswerRequest(question, gen=GEN))
    assert result.stats.judge.judge == f"{EVIDENCE_ONLY} (no answerability probe for this model file and prompt)"
    assert result.stats.judge.p_answerable is None and right in result.text and result.supported
