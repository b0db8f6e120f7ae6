"""Speedup mode (RASD): Plain's prompt and Plain's answer, decoded faster.

Continuations found in the retrieved chunks and the conversation (and, with a draft model of
the same vocabulary, the draft's guesses) form a token tree the target verifies in one forward
pass; decoding is lossless (``localrag.rasd``). Tokens accepted from a retrieved chunk were
copied from a known place in it: they reach the evidence check as copy provenance
(``copied_spans``), which the alignment confirms but never changes, so the same text gets the
same evidence as in Plain mode."""

from __future__ import annotations

from collections.abc import Sequence

from localrag.answer import Answerer, Retrieval
from localrag.backends.base import Backend
from localrag.generation import Decoder, Generation
from localrag.modes.base import AnswerRequest
from localrag.modes.plain import PlainMode
from localrag.rasd import CopiedToken, RasdDecoder
from localrag.results import ChunkLike, CopiedSpan


class SpeedupMode(PlainMode):
    id = "rasd"
    label = "Speedup (RASD)"
    aliases = ("speedup",)
    summary = "Plain's answer, faster: retrieval + draft token trees verified losslessly"

    def decoder(self, answerer: Answerer, request: AnswerRequest, got: Retrieval) -> Decoder:
        # the datastore: the retrieved chunks (documents 0 .. k-1, so a copy's document is its
        # chunk), the conversation and the question (the prompt's own tokens are added by the
        # decoder's prefill)
        documents = [h.text for h in got.hits] + [m["content"] for m in request.history] + [request.question]
        return answerer.rasd_decoder(documents)

    def copied(self, generation: Generation, text: str, got: Retrieval) -> list[CopiedSpan]:
        decoder = generation.decoder
        if not isinstance(decoder, RasdDecoder) or not decoder.copies:
            return []
        return copied_spans(generation.backend, generation.tokens, generation.text, decoder.copies, got.hits)


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
