"""Speedup mode (RASD): Plain's prompt and Plain's answer, decoded faster.

Continuations found in the retrieved chunks and the conversation (and, with a draft model of
the same vocabulary, the draft's guesses) form a token tree the target verifies in one forward
pass; decoding is lossless (``localrag.rasd``). Tokens accepted from a retrieved chunk were
copied from a known place in it: they reach the evidence check as copy provenance
(``copied_spans``), which the alignment confirms but never changes, so the same text gets the
same evidence as in Plain mode. Its option ``draft`` picks the draft model (default: the registry's
draft for the loaded target, e.g. Qwen2.5-Coder-0.5B for the 1.5B)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from localrag.answer import Answerer, Found
from localrag.backends.base import Backend
from localrag.generation import Decoder, Generation
from localrag.modes.base import AnswerRequest, WarmUpStopped, option
from localrag.modes.plain import PlainMode, PlainOptions
from localrag.rasd import CopiedToken, RasdDecoder, measure_costs, unmeasured
from localrag.rasd.cost import MeasureStopped
from localrag.results import AnswerProgress, ChunkLike, CopiedSpan

AUTO, NONE = "auto", "none"
LOAD_ERRORS = (OSError, RuntimeError, ValueError)  # ModelError is a ValueError: a draft that fails says why


@dataclass(frozen=True)
class SpeedupOptions(PlainOptions):
    draft: str = option(AUTO, "the draft model (same vocabulary as the answer model): auto = the registry's "
                              "draft for the loaded model, none = speculate from retrieval alone, or a name/path")


class SpeedupMode(PlainMode):
    id = "speedup"
    label = "Speedup (RASD)"
    aliases = ("rasd",)
    summary = "Plain's answer, faster: retrieval + draft-model token trees verified losslessly"
    options_type = SpeedupOptions

    def available(self, answerer: Answerer | None) -> tuple[bool, str]:
        if answerer is not None and answerer.remote:
            return False, ("Speedup runs in this process only: on a serving engine, speculation is the "
                           "server's own (vLLM's and llama-server's speculative decoding)")
        return super().available(answerer)

    def draft_name(self, answerer: Answerer, request: AnswerRequest) -> str | None:
        """The draft model this request asks for (None: retrieval only)."""
        name = self.options_of(request).draft
        if name == AUTO:
            return answerer.models.default_draft()
        return None if name == NONE else name

    def _draft(self, answerer: Answerer, request: AnswerRequest) -> tuple[str | None, Backend | None, str]:
        """(name, backend, why not) of the draft model this request asks for; (None, None, why) when
        it cannot work with the target, so the mode speculates from retrieval alone."""
        name = self.draft_name(answerer, request)
        if name is None:
            return None, None, ""
        try:
            return name, answerer.models.draft(name), ""
        except LOAD_ERRORS as exc:
            return None, None, f"draft model {name} is unusable: {exc}. Speculating from retrieval only."

    def _to_measure(self, answerer: Answerer, name: str | None, draft: Backend | None) -> list[Backend]:
        """The models whose step costs the first decoder of this (target, draft) times (none once
        they are on disk for this machine): the wait before a first Speedup answer."""
        if answerer.has_runtime((self.id, name)):
            return []
        return unmeasured(answerer.engine.backend, answerer.config.rasd, draft)

    def warm_up(self, answerer: Answerer, stop: Callable[[], bool] = lambda: False) -> str:
        """The default draft model loaded and, the first time on this machine, the models' forward
        passes timed (their cost curves: about a minute for the default pair on 2 CPU cores), so
        that no one's first Speedup answer waits for it; an answer that comes meanwhile stops it."""
        if not self.available(answerer)[0]:
            return ""
        name, draft, why = self._draft(answerer, AnswerRequest("", options=self.options()))
        t0 = time.perf_counter()
        try:
            timed = [] if answerer.has_runtime((self.id, name)) else measure_costs(
                answerer.engine.backend, answerer.config.rasd, draft, stop)
        except MeasureStopped as exc:
            raise WarmUpStopped(str(exc)) from exc
        if timed:
            return (f"{self.label}: timed the forward passes of {' and '.join(b.name for b in timed)} once in "
                    f"{time.perf_counter() - t0:.1f} s")
        return f"{self.label}: {why}" if why else ""

    def getting_ready(self, answerer: Answerer, request: AnswerRequest) -> Iterator[AnswerProgress]:
        name, draft, _ = self._draft(answerer, request)
        if self._to_measure(answerer, name, draft):
            yield AnswerProgress("measuring")

    def decoder(self, answerer: Answerer, request: AnswerRequest, found: Found) -> tuple[Decoder, list[str]]:
        """The Speedup decoder of (target, draft): what it learns (acceptance calibration, the draft
        bandit, the probe schedule) outlives one answer. A draft that cannot work with the target is
        explained, and the mode speculates from retrieval alone. The first decoder on a machine
        times the models' forwards (their cost curves, kept on disk): the answer's notes say so."""
        name, draft, why = self._draft(answerer, request)
        notes = [why] if why else []
        timed = self._to_measure(answerer, name, draft)
        t0 = time.perf_counter()
        decoder = answerer.runtime((self.id, name),
                                   lambda: RasdDecoder(answerer.engine.backend, answerer.config.rasd, draft=draft))
        if timed:
            notes.append(f"Speedup timed this machine's forward passes of {' and '.join(b.name for b in timed)} "
                         f"once, before this answer ({time.perf_counter() - t0:.1f} s of its set-up; kept on disk, "
                         "so later answers start at once)")
        # the datastore: the retrieved chunks (documents 0 .. k-1, so a copy's document is its chunk),
        # the conversation and the question (the prompt's own tokens are added by the decoder's prefill)
        decoder.set_documents([h.text for h in found.hits] + [m["content"] for m in request.history]
                              + [request.question])
        return decoder, notes

    def copied(self, generation: Generation, text: str, found: Found) -> list[CopiedSpan]:
        decoder = generation.decoder
        if not isinstance(decoder, RasdDecoder) or not decoder.copies:
            return []
        return copied_spans(generation.backend, generation.tokens, generation.text, decoder.copies, found.hits)


def char_offsets(backend: Backend, tokens: Sequence[int]) -> tuple[str, list[int]]:
    """(text, offsets): the tokens' text and the character offset where each token starts, plus
    the end (a character split across tokens counts where it is completed)."""
    data, ends = b"", [0]
    for t in tokens:
        data += backend.token_bytes(t)
        ends.append(len(data))
    return (data.decode("utf-8", errors="replace"),
            [len(data[:b].decode("utf-8", errors="ignore")) for b in ends])


def _runs(copies: Sequence[CopiedToken], n_tokens: int) -> list[tuple[int, int, int, int]]:
    """Consecutive answer tokens copied from consecutive tokens of one document, merged:
    (document, first answer token, first document token, length)."""
    runs: list[list[int]] = []
    for c in sorted(copies, key=lambda c: c.token):
        if c.token >= n_tokens:  # after the answer's end (an end-of-generation token, a stop string)
            break
        last = runs[-1] if runs else None
        if last and last[0] == c.doc and last[1] + last[3] == c.token and last[2] + last[3] == c.offset:
            last[3] += 1
        else:
            runs.append([c.doc, c.token, c.offset, 1])
    return [tuple(r) for r in runs]


def copied_spans(backend: Backend, answer_tokens: Sequence[int], written: str, copies: Sequence[CopiedToken],
                 chunks: Sequence[ChunkLike]) -> list[CopiedSpan]:
    """The decoder's copied tokens as character spans: of the answer (``written.strip()``, the text
    the evidence is computed on) and of the chunk's text. A chunk whose tokens do not spell its text
    back exactly gives none (its offsets could not be trusted)."""
    _, answer_at = char_offsets(backend, answer_tokens)
    lead = len(written) - len(written.lstrip())
    text = written.strip()
    chunk_offsets: dict[int, list[int] | None] = {}
    out = []
    for doc, tok, offset, length in _runs(copies, len(answer_tokens)):
        if doc >= len(chunks):  # copied from the conversation or the question, not a chunk
            continue
        if doc not in chunk_offsets:
            spelled, at = char_offsets(backend, backend.tokenize(chunks[doc].text, add_special=False,
                                                                 parse_special=False))
            chunk_offsets[doc] = at if spelled == chunks[doc].text else None
        at = chunk_offsets[doc]
        if at is None or offset + length >= len(at):
            continue
        a, b = answer_at[tok] - lead, answer_at[tok + length] - lead
        c, d = at[offset], at[offset + length]
        piece = chunks[doc].text[c:d]
        if a < 0 or b > len(text) or text[a:b] != piece:
            continue
        cut = len(piece) - len(piece.lstrip())  # the same characters on both sides: trim them alike
        keep = len(piece.rstrip()) - cut
        if any(ch.isalnum() for ch in piece):  # a copied full stop or space says nothing
            out.append(CopiedSpan(a + cut, a + cut + keep, chunks[doc].chunk_id, c + cut, c + cut + keep))
    return out
