"""Grounded's choice among its candidates (``grounded.pipeline.decide``), on hand-made drafts and a
real evidence aligner (no model): the answer model's own answer when the documents support it, a
draft only when it passes its own check and another candidate agrees, never a draft over the answer
model's decline, never a draft holding a word from no document, and a refusal that marks no draft as
chosen.

Run: .venv/bin/python -m pytest tests/grounded/test_decide.py -q
"""

from __future__ import annotations

import math
from dataclasses import replace

from localrag.config import GroundedConfig
from localrag.evidence import EvidenceAligner, EvidenceConfig
from localrag.grounded.extras import ANSWER_MODEL, GroundedDraft, GroundedExtras
from localrag.grounded.pipeline import Drafted, agree, decide
from localrag.rag.records import Hit
from localrag.results import AnswerResult, AnswerStats, Citation, Judgement

LIGHTHOUSE = Hit("light", "Ilse Marrow repainted the lamp room in 1932. The lamp itself was replaced in 1951 by an "
                 "electric lantern from Glasgow.", "lighthouse.md", None, 1, 2, (), 0.8, 3.0, 0.03)
HARBOUR = Hit("harbour", "The harbour wall was rebuilt after the storm of 1953. Boats now moor on its inner side.",
              "harbour.md", None, 1, 2, (), 0.6, 2.0, 0.02)
HITS = [LIGHTHOUSE, HARBOUR]
QUESTION = "When was the lamp replaced?"
CFG = GroundedConfig(min_score=-2.0)


def _draft(answer: str, subset: tuple[int, ...], score: float = -0.5, rationale: str = "") -> GroundedDraft:
    return GroundedDraft(answer=answer, rationale=rationale, citations=[Citation.from_hit(HITS[i]) for i in subset],
                         draft_logprob=score, reflection=-0.1, score=score, n_draft_tokens=1, subset=subset)


def _drafted(drafts: list[GroundedDraft]) -> Drafted:
    return Drafted(list(HITS), drafts, GroundedExtras(), "searched", AnswerStats(mode="grounded"), 0.0)


def _own(text: str, aligner: EvidenceAligner, check: str = "") -> tuple[GroundedDraft, AnswerResult]:
    evidence = aligner.align(text, HITS, question=QUESTION)
    result = AnswerResult(text=text, mode="plain", citations=[Citation.from_hit(LIGHTHOUSE)],
                          supported=evidence.supported, stats=AnswerStats(mode="plain"), evidence=evidence,
                          searched="searched")
    own = GroundedDraft(answer=text, rationale="", citations=list(result.citations), draft_logprob=-1.0,
                        reflection=math.nan, score=-0.2, n_draft_tokens=5, origin=ANSWER_MODEL,
                        check=check or ("" if evidence.supported else "not supported"))
    return own, result


def test_the_answer_models_supported_answer_is_chosen_over_higher_scoring_drafts():
    aligner = EvidenceAligner()
    own, own_result = _own("The lamp was replaced in 1951.", aligner)
    drafts = [_draft("1953", (1,), score=0.0), _draft("1951", (0,), score=-1.0)]
    result = decide(QUESTION, _drafted(drafts), own, own_result, aligner, CFG)
    assert result.supported and result.text == "The lamp was replaced in 1951."
    assert result.extras.chosen() == 0 and result.extras.drafts[0] is own
    assert "answer model" in result.extras.why_chosen


def test_a_draft_needs_its_own_check_and_another_candidate_that_agrees():
    aligner = EvidenceAligner()
    own, own_result = _own("Debian 12 (bookworm)", aligner)  # an answer its check does not support
    lone = decide(QUESTION, _drafted([_draft("in 1951", (0,)), _draft("1932", (0,), score=-1.5)]),
                  own, own_result, aligner, CFG)
    assert not lone.supported and lone.extras.chosen() is None  # nobody agrees with the best draft
    agreed = decide(QUESTION, _drafted([_draft("in 1951", (0,)), _draft("1951", (0,), score=-1.5)]),
                    own, own_result, aligner, CFG)
    assert agreed.supported and agreed.text == "in 1951" and agreed.extras.chosen() == 1
    assert [c.chunk_id for c in agreed.citations] == ["light"]


def test_the_judges_view_of_the_question_weighs_on_every_draft():
    """One refusal decision for every candidate: the answerability judge's p(answerable), read
    before the answer model wrote a word, enters each draft's evidence check as it enters the
    answer model's; a question it thinks unanswerable leaves two agreeing drafts unsupported."""
    aligner = EvidenceAligner(config=EvidenceConfig(weight_answerable=2.0, answerable_center=0.0))
    drafts = [_draft("in 1951", (0,)), _draft("1951", (0,), score=-1.5)]
    verdicts = {}
    for p in (None, 0.02):
        own, own_result = _own("Debian 12 (bookworm)", aligner)
        own_result = replace(own_result, stats=AnswerStats(mode="plain", judge=Judgement("probe", p)))
        verdicts[p] = decide(QUESTION, _drafted([_draft(d.answer, d.subset, d.score) for d in drafts]),
                             own, own_result, aligner, CFG)
    assert verdicts[None].supported and verdicts[None].evidence.answerable is None
    doubted = verdicts[0.02]
    assert not doubted.supported and doubted.extras.chosen() is None
    assert all(d.check for d in doubted.extras.drafts[1:])  # each draft's own check failed


def test_no_draft_overrules_the_answer_model_declining_over_every_chunk():
    """The answer model read all the chunks and found no answer: two drafts from subsets that agree
    and pass their checks are still not shown (on SQuAD v2 such drafts answered unanswerable
    questions: "What is the oldest work of Norman art?" got "Bayeux Tapestry", shown supported)."""
    aligner = EvidenceAligner()
    own, own_result = _own("not in the documents", aligner, check="the model found no answer in the passages it read")
    own.answer = ""  # the answer model only declined
    drafts = [_draft("in 1951", (0,)), _draft("1951", (0,), score=-1.5)]
    result = decide(QUESTION, _drafted(drafts), own, own_result, aligner, CFG)
    assert not result.supported and result.text == "" and result.extras.chosen() is None
    assert result.extras.unsupported_reason == "the model found no answer in the passages it read"
    assert len(result.extras.drafts) == 3  # every candidate still shown in the Drafts panel


def test_a_draft_with_a_word_from_no_document_is_never_chosen():
    """The 0.5B copied its prompt's worked example into drafts ("1889", "Gustave Eiffel"): a number,
    name or unit in no chunk of its subset and not in the question marks the draft, even when two
    drafts agree on it."""
    aligner = EvidenceAligner()
    drafts = [_draft("1889", (0,), score=-0.1), _draft("in 1889", (1,), score=-0.2),
              _draft("Gustave Eiffel", (0,), score=-0.3)]
    result = decide(QUESTION, _drafted(drafts), None, None, aligner, CFG)
    assert not result.supported and result.extras.chosen() is None and result.text == ""
    assert [d.check for d in result.extras.drafts] == ['"1889" is in no document'] * 2 + [
        '"Eiffel" is in no document']


def test_a_refused_answer_marks_no_draft_and_says_why():
    aligner = EvidenceAligner()
    own, own_result = _own("Debian 12 (bookworm)", aligner)  # says nothing the chunks answer with
    result = decide(QUESTION, _drafted([_draft("the storm", (1,))]), own, own_result, aligner, CFG)
    assert not result.supported and result.extras.chosen() is None
    title, body = result.extras.panel()
    assert "none chosen" in title and "✅" not in body and "answer model, all chunks" in body
    # stored and read back, the refusal still marks no draft
    again = GroundedExtras.from_dict(result.extras.to_dict())
    assert again.chosen() is None and again.drafts[0].origin == ANSWER_MODEL


def test_answers_agree_on_their_content_words():
    assert not agree("in 1951", "The lamp was replaced in 1951 by an electric lantern")  # one word of five
    assert agree("in 1951", "1951") and agree("Ilse Marrow", "Marrow, Ilse")
    assert not agree("1951", "1932") and not agree("", "1951")
