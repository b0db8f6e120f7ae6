"""Speedup mode (RASD): Plain's prompt and Plain's answer, decoded faster.

Continuations found in the retrieved chunks and the conversation (and, with a draft model of
the same vocabulary, the draft's guesses) form a token tree the target verifies in one forward
pass; decoding is lossless (``localrag.rasd``)."""

from __future__ import annotations

from localrag.answer import Answerer, Retrieval
from localrag.generation import Decoder
from localrag.modes.base import AnswerRequest
from localrag.modes.plain import PlainMode


class SpeedupMode(PlainMode):
    id = "rasd"
    label = "Speedup (RASD)"
    aliases = ("speedup",)
    summary = "Plain's answer, faster: retrieval + draft token trees verified losslessly"

    def decoder(self, answerer: Answerer, request: AnswerRequest, got: Retrieval) -> Decoder:
        # the datastore: the retrieved chunks, the conversation and the question (the prompt's
        # own tokens are added by the decoder's prefill)
        documents = [h.text for h in got.hits] + [m["content"] for m in request.history] + [request.question]
        return answerer.rasd_decoder(documents)
