"""Grounded mode (Speculative RAG): drafts from chunk subsets, scored by a verifier; the best
supported draft with its sources, or an honest "the documents don't answer this"."""

from __future__ import annotations

from collections.abc import Iterator

from localrag.answer import Answerer
from localrag.engine import Engine
from localrag.grounded import drafter_problem
from localrag.modes.base import AnswerMode, AnswerRequest
from localrag.results import AnswerResult


class GroundedMode(AnswerMode):
    id = "grounded"
    label = "Grounded (Speculative RAG)"
    aliases = ("specrag",)
    summary = "drafts from chunk subsets scored by a verifier; refuses when nothing supports an answer"

    def available(self, engine: Engine | None) -> tuple[bool, str]:
        if engine is None:
            return False, "no model is loaded"
        why = drafter_problem(engine)
        return (False, why) if why else (True, "")

    def stream(self, answerer: Answerer, request: AnswerRequest) -> Iterator[str | AnswerResult]:
        index = answerer.index_for(request.collection)
        result = answerer.grounded_pipeline.answer(request.question, index, gen=request.gen)
        yield result.text
        yield result
