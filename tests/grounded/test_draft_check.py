"""Grounded's final check of its chosen draft (``grounded.pipeline.check_draft``), with the real
evidence aligner: the draft's text is its answer and then its rationale, and a rationale quoted
from a chunk must not vouch for an answer that no chunk holds. And the drafts as the CLI prints them.

Run: .venv/bin/python -m pytest tests/grounded/test_draft_check.py -q
"""

from __future__ import annotations

import pytest

from localrag.cli.ask import print_details
from localrag.evidence import EvidenceAligner
from localrag.grounded.extras import GroundedDraft, GroundedExtras
from localrag.grounded.pipeline import check_draft
from localrag.rag.config import IndexConfig
from localrag.rag.embed import make_embedder
from localrag.results import AnswerResult, AnswerStats, Citation

MANUAL = ("The Aurora KX-200 holds 1.7 litres of water. The kettle switches itself off when the water boils. "
          "The warranty lasts two years from the date of purchase.")
CHUNK = Citation(file="kettle.md", page=None, line_start=1, line_end=3, snippet=MANUAL[:40], text=MANUAL,
                 chunk_id="kettle:0", label="kettle.md lines 1-3")


def _draft(answer: str, rationale: str) -> GroundedDraft:
    return GroundedDraft(answer=answer, rationale=rationale, citations=[CHUNK], draft_logprob=-1.0,
                         reflection=0.0, score=-1.0)


@pytest.fixture(scope="module")
def aligner():
    """The aligner as the app builds it: the bundled MiniLM, the default answer model's constants."""
    return EvidenceAligner(make_embedder(IndexConfig().model_path))


def test_an_answer_found_nowhere_is_unsupported_beside_a_quoted_rationale(aligner):
    """The case met through llama-server with the 1.5B: asked the kettle's wattage, which the manual
    does not give, the draft answered a made-up figure after quoting a true sentence about litres."""
    draft = _draft("1200 watts", "The Aurora KX-200 holds 1.7 litres of water.")
    evidence, why = check_draft(aligner, draft, [CHUNK], "How many watts does the Aurora kettle use?")
    answer, rationale = evidence.sentences
    assert (answer.text, answer.supported) == ("1200 watts", False)
    assert rationale.supported  # the quote is found: alone it would have carried the answer
    assert why == "its answer is found nowhere in them, only its rationale is"


@pytest.mark.parametrize("question,answer,rationale", [
    ("How long is the warranty?", "two years", "The warranty lasts two years from the date of purchase."),
    # a bare yes or no: its rationale is its evidence
    ("Does the kettle switch itself off?", "Yes", "The kettle switches itself off when the water boils."),
])
def test_an_answer_the_chunk_holds_or_a_yes_no_with_its_quote_is_supported(aligner, question, answer, rationale):
    evidence, why = check_draft(aligner, _draft(answer, rationale), [CHUNK], question)
    assert why == "" and evidence.supported and evidence.cited == ("kettle:0",)


def test_an_answer_nothing_supports_says_why_in_the_evidences_words(aligner):
    evidence, why = check_draft(aligner, _draft("Saturn", "Rings circle the planet."), [CHUNK], "Which planet?")
    assert not evidence.supported and why == "nothing in the answer was found in them"


def test_the_cli_prints_the_drafts_as_text_not_as_the_pages_escaped_html(capsys):
    """The drafts panel is the page's Markdown, with what a model wrote HTML-escaped; the terminal
    gets the text back."""
    draft = _draft("two years", "The manual's warranty lasts two years & <more>.")
    extras = GroundedExtras(drafts=[draft], n_drafts=1)
    result = AnswerResult(text=draft.text, mode="grounded", citations=[CHUNK], supported=True,
                          stats=AnswerStats(mode="grounded"), searched="searched", extras=extras)
    print_details(result)
    err = capsys.readouterr().err
    assert "The manual's warranty lasts two years & <more>." in err and "&#x27;" not in err and "&lt;" not in err
