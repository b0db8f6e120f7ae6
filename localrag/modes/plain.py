"""Plain mode: standard RAG. The top-k chunks go into one prompt; one token per forward pass. The
finished answer is checked against the chunks (``Answerer.check``): computed citations, and a
warning (or, if asked, a refusal) when the documents do not support it."""

from __future__ import annotations

import time
from collections.abc import Iterator

from localrag.answer import Answerer, Retrieval, checked_result, rag_messages
from localrag.generation import Decoder, Generation
from localrag.modes.base import AnswerMode, AnswerRequest
from localrag.results import AnswerResult, AnswerStats, CopiedSpan


class PlainMode(AnswerMode):
    id = "plain"
    label = "Plain"
    summary = "standard RAG: the top-k chunks in one prompt, plain decoding"

    def decoder(self, answerer: Answerer, request: AnswerRequest, got: Retrieval) -> Decoder | None:
        """The decoder for this answer (None: plain decoding)."""
        return None

    def copied(self, generation: Generation, text: str, got: Retrieval) -> list[CopiedSpan]:
        """The spans of ``text`` the decoder copied from the retrieved chunks (none in plain decoding)."""
        return []

    def stream(self, answerer: Answerer, request: AnswerRequest) -> Iterator[str | AnswerResult]:
        t0 = time.perf_counter()
        got = answerer.retrieve(answerer.search_query(request.question, request.history), request.k, request.collection)
        msgs = rag_messages(request.question, got.hits, request.history, answerer.instructions)
        msgs = answerer.fit_messages(msgs, request.gen)
        t1 = time.perf_counter()
        decoder = self.decoder(answerer, request, got)
        setup_s = time.perf_counter() - t1
        generation = answerer.engine.chat(msgs, request.gen, decoder=decoder)
        pieces = iter(generation)
        for piece in pieces:
            yield piece
            if request.cancelled:  # Stop: keep what was written, its sources and its stats
                pieces.close()
                generation.stats.stop_reason = "cancelled"
                break
        text = generation.text.strip()
        evidence = answerer.check(text, request.question, got.hits, self.copied(generation, text, got))
        stats = AnswerStats(mode=self.id, total_s=time.perf_counter() - t0, retrieval=got.stats,
                            generation=generation.stats, setup_s=setup_s)
        yield checked_result(text, self.id, evidence, got.hits, stats, got.searched, self.policy(request))
