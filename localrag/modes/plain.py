"""Plain mode: standard RAG. The top-k chunks go into one prompt; one token per forward pass."""

from __future__ import annotations

import time
from collections.abc import Iterator

from localrag.answer import Answerer, Retrieval, rag_messages
from localrag.generation import Decoder
from localrag.modes.base import AnswerMode, AnswerRequest
from localrag.results import AnswerResult, AnswerStats, Citation


class PlainMode(AnswerMode):
    id = "plain"
    label = "Plain"
    summary = "standard RAG: the top-k chunks in one prompt, plain decoding"

    def decoder(self, answerer: Answerer, request: AnswerRequest, got: Retrieval) -> Decoder | None:
        """The decoder for this answer (None: plain decoding)."""
        return None

    def stream(self, answerer: Answerer, request: AnswerRequest) -> Iterator[str | AnswerResult]:
        t0 = time.perf_counter()
        got = answerer.retrieve(request.question, request.k, request.collection)
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
        stats = AnswerStats(mode=self.id, total_s=time.perf_counter() - t0, retrieval=got.stats,
                            generation=generation.stats, setup_s=setup_s)
        yield AnswerResult(text=generation.text.strip(), mode=self.id,
                           citations=[Citation.from_hit(h) for h in got.hits], supported=bool(got.hits),
                           stats=stats, searched=got.searched)
