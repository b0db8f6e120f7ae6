"""Plain mode: standard RAG. The top-k chunks go into one prompt; one token per forward pass. The
finished answer is checked against the chunks (``Answerer.check``): computed citations, and a
warning (or, if asked, a refusal) when the documents do not support it. Without documents
(``AnswerRequest.documents`` False) it is chat on the conversation as given, and nothing is checked."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from localrag.answer import PREFILLS, Answerer, Found, checked_result, judged_refusal
from localrag.generation import Decoder, Generation
from localrag.modes.base import AnswerMode, AnswerRequest, ModeOptions, option
from localrag.results import AnswerProgress, AnswerResult, AnswerStats, CopiedSpan, SearchStats

MAX_K = 50
READ_QUIETLY = 256  # prompt tokens read without a word of progress (a short one is read in a blink)


@dataclass(frozen=True)
class PlainOptions(ModeOptions):
    k: int = option(5, "chunks stuffed into the prompt", int)
    prefill: str = option("exact", "how the prompt's chunks are read: exact, or reuse (approximate: their keys "
                                   "and values from a cache on disk, only the head of each chunk read again; "
                                   "a faster first word; about 4 in 10 answers differ, 4 to 7 F1 points worse "
                                   "on SQuAD and HotpotQA)", choices=PREFILLS)

    def validate(self) -> None:
        super().validate()
        if not 1 <= self.k <= MAX_K:
            raise ValueError(f"k must be between 1 and {MAX_K}, not {self.k}")


@dataclass
class Prepared:
    """What an answer is written from: the conversation, the chunks (and how they were found), the
    decoder (made in ``setup_s``) and what choosing it left to say."""

    messages: list[dict]
    found: Found
    decoder: Decoder | None
    notes: list[str]
    setup_s: float


class PlainMode(AnswerMode):
    id = "plain"
    label = "Plain"
    summary = "standard RAG: the top-k chunks in one prompt, plain decoding"
    options_type = PlainOptions

    def decoder(self, answerer: Answerer, request: AnswerRequest, found: Found) -> tuple[Decoder | None, list[str]]:
        """The decoder for this answer (None: plain decoding) and notes on what it could not use."""
        return None, []

    def copied(self, generation: Generation, text: str, found: Found) -> list[CopiedSpan]:
        """The spans of ``text`` the decoder copied from the retrieved chunks (none in plain decoding)."""
        return []

    def getting_ready(self, answerer: Answerer, request: AnswerRequest) -> Iterator[AnswerProgress]:
        """Progress to show before ``prepare`` when preparing takes a while (nothing to say here)."""
        return iter(())

    def prepare(self, answerer: Answerer, request: AnswerRequest) -> Prepared:
        if not request.documents:  # chat on the client's own conversation, as given
            msgs = [*request.history, {"role": "user", "content": request.question}]
            found = Found([], "no collection: answered from the conversation", SearchStats(note="no collection"))
        else:
            opts = self.options_of(request)
            found = answerer.find(request.question, request.history, opts.k, request.collection)
            msgs = answerer.rag_messages(request.question, found.hits, request.history)
        t0 = time.perf_counter()
        decoder, notes = self.decoder(answerer, request, found)
        return Prepared(msgs, found, decoder, notes, time.perf_counter() - t0)

    def stream(self, answerer: Answerer, request: AnswerRequest) -> Iterator[str | AnswerProgress | AnswerResult]:
        t0 = time.perf_counter()
        yield from self.getting_ready(answerer, request)
        ready = self.prepare(answerer, request)
        # without documents the client's conversation is kept whole (PromptTooLong if it cannot fit)
        reuse = request.documents and self.options_of(request).prefill == "reuse"
        if reuse and not answerer.can_reuse:
            ready.notes.append("the approximate prefill (prefill=reuse) is not available with this model or "
                               "engine: the prompt was read exactly")
        generation = answerer.generate(ready.messages, request.gen, ready.decoder, fit=request.documents,
                                       cancel=request.cancel, reuse=ready.found.hits if reuse else ())
        reading = "reading" if request.documents else "reading the conversation"
        judging = answerer.judging(request.question, ready.found.hits, request.history, request.gen,
                                   getattr(generation, "prompt_tokens", ())) if request.documents else None
        judgement = None
        pieces = generation.read()
        for done, total in pieces:  # the prompt, in pieces: a long one says how far it got
            if total > READ_QUIETLY:
                yield AnswerProgress(reading, done, total)
            if request.cancelled:
                generation.stats.stop_reason = "cancelled"
                break
            if judging is not None and judgement is None and judging.due():
                judgement = judging()  # before the other chunks are read: a refusal need not wait for them
                if judgement.refused_early:
                    break
        else:
            if judging is not None and judgement is None:
                judgement = judging()
        pieces.close()
        if judgement is not None and judgement.refused_early:  # the documents hold no answer: none is written
            generation.stats.stop_reason = "judged"
            stats = AnswerStats(mode=self.id, search=ready.found.stats, generation=generation.stats,
                                setup_s=ready.setup_s, judge=judgement, total_s=time.perf_counter() - t0)
            yield judged_refusal(self.id, judgement, ready.found.hits, stats, ready.found.searched, ready.notes)
            return
        if generation.stats.stop_reason != "cancelled":
            pieces = iter(generation)
            for piece in pieces:
                yield piece
                if request.cancelled:  # Stop: keep what was written, its sources and its stats
                    pieces.close()
                    generation.stats.stop_reason = "cancelled"
                    break
        text = generation.text.strip()
        stats = AnswerStats(mode=self.id, search=ready.found.stats, generation=generation.stats,
                            setup_s=ready.setup_s, judge=judgement)
        if not request.documents:
            stats.total_s = time.perf_counter() - t0
            yield AnswerResult(text=text, mode=self.id, citations=[], supported=False, stats=stats,
                               searched=ready.found.searched, notes=ready.notes)
            return
        evidence = answerer.check(text, request.question, ready.found.hits, self.copied(generation, text, ready.found),
                                  confidence=generation.stats.mean_logprob,
                                  answerable=judgement.p_answerable if judgement is not None else None)
        stats.total_s = time.perf_counter() - t0
        yield checked_result(text, self.id, evidence, ready.found.hits, stats, ready.found.searched,
                             self.policy(request), notes=ready.notes)
