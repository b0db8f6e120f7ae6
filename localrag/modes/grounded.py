"""Grounded mode (Speculative RAG): drafts from chunk subsets, scored by a verifier; the best draft,
checked against the chunks it was written from, with the chunks its evidence cites, or an honest
"your documents do not support an answer" (its default: refuse rather than warn)."""

from __future__ import annotations

from collections.abc import Iterator

from localrag.answer import Answerer, apply_policy
from localrag.engine import Engine
from localrag.grounded import drafter_problem
from localrag.modes.base import AnswerMode, AnswerRequest
from localrag.results import AnswerProgress, AnswerResult


class GroundedMode(AnswerMode):
    id = "grounded"
    label = "Grounded (Speculative RAG)"
    aliases = ("specrag",)
    summary = "drafts from chunk subsets scored by a verifier; refuses when nothing supports an answer"
    on_unsupported = "refuse"

    def available(self, engine: Engine | None) -> tuple[bool, str]:
        if engine is None:
            return False, "no model is loaded"
        why = drafter_problem(engine)
        return (False, why) if why else (True, "")

    def stream(self, answerer: Answerer, request: AnswerRequest) -> Iterator[str | AnswerProgress | AnswerResult]:
        """AnswerProgress while it searches, drafts (k of m done) and verifies; then the chosen
        answer's text (none when refused) and the AnswerResult."""
        index = answerer.index_for(request.collection)
        query = answerer.search_query(request.question, request.history)
        for item in answerer.grounded_pipeline.stream(request.question, index, gen=request.gen, query=query):
            if isinstance(item, AnswerProgress):
                yield item
            else:
                why = item.stats.grounded.unsupported_reason if item.stats.grounded is not None else ""
                result = apply_policy(item, self.policy(request), why)
                if result.text and not result.refused:
                    yield result.text
                yield result
