"""One chat request, answered in its turn on the shared model: the work behind
``/v1/chat/completions`` and the MCP ``ask_documents`` tool.

With a ``collection``, the answer is grounded: the mode from the registry answers the last user
message over the collection (its earlier turns as history), exactly as the UI would, and the
answer is checked against the documents (computed citations, the evidence of every sentence).
When the documents do not support it and the request (or the mode) refuses, the content is the
refusal and the text is kept in ``localrag.unsupported_answer``; in that case nothing is streamed
before the check. Without a collection, the mode answers from the client's own messages, laid out
as given (``AnswerRequest.documents`` False; Speedup speculates from the conversation, Grounded
refuses). Either way ``answer_chat`` yields progress (``AnswerProgress``), text pieces, then one ``ChatReply``.

    mode = check_request(services, req)              # ApiError 4xx before the turn
    ticket = services.queue.submit("api")
    if services.queue.wait_turn(ticket):
        for item in answer_chat(services, req, mode, ticket): ...
    services.queue.release(ticket)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from localrag.answer import PromptTooLong
from localrag.api.errors import ApiError
from localrag.api.schemas import ChatRequest
from localrag.app.services import LOAD_ERRORS, Services
from localrag.app.serving import Ticket
from localrag.backends.endpoint import EndpointError
from localrag.evidence import mark_citations
from localrag.models import ModelError, list_models
from localrag.modes import AnswerMode, AnswerRequest
from localrag.rag.config import IndexConfig
from localrag.results import AnswerEvidence, AnswerProgress, AnswerResult, AnswerStats, Citation, Judgement


@dataclass
class Grounding:
    """What a grounded answer carries beside its text (the response's ``localrag`` field): the
    computed citations (the chunks that support the answer, in order of first use; marker [n] is
    citation n), the retrieved chunks that support nothing, the answer with its markers, whether
    the documents support it, and the evidence of every sentence (its spans, score, supported)."""

    citations: list[Citation]
    supported: bool
    searched: str
    evidence: AnswerEvidence | None = None
    also_searched: list[Citation] = field(default_factory=list)
    answer_with_citations: str = ""  # the answer with [n] after each supported sentence
    refused: bool = False  # the content is the refusal; the answer is in ``unsupported_answer``
    unsupported_answer: str | None = None
    on_unsupported: str = "warn"
    judge: Judgement | None = None  # the answerability judge's view (its name, p(answerable))

    @classmethod
    def from_result(cls, result: AnswerResult) -> Grounding:
        marked = mark_citations(result.text, result.evidence).text if result.evidence is not None else result.text
        return cls(citations=list(result.citations), supported=result.supported, searched=result.searched,
                   evidence=result.evidence, also_searched=list(result.also_searched),
                   answer_with_citations="" if result.refused else marked, refused=result.refused,
                   unsupported_answer=result.text if result.refused else None, on_unsupported=result.on_unsupported,
                   judge=result.stats.judge if result.stats is not None else None)

    def to_dict(self) -> dict:
        return {"citations": [{**c.to_dict(), "spans": self.spans_in(c)} for c in self.citations],
                "also_searched": [c.to_dict() for c in self.also_searched], "supported": self.supported,
                "refused": self.refused, "on_unsupported": self.on_unsupported, "searched": self.searched,
                "answer_with_citations": self.answer_with_citations, "unsupported_answer": self.unsupported_answer,
                "evidence": self.evidence.to_dict() if self.evidence is not None else None,
                "judge": self.judge.to_dict() if self.judge is not None else None}

    def spans_in(self, citation: Citation) -> list[dict]:
        """The passages of ``citation``'s chunk that support the answer: character offsets
        [start, end) in its ``text`` (overlapping ones merged, in order) and their text, so a client
        can highlight them on the chunk's ``page`` (or lines) as the page does."""
        if self.evidence is None:
            return []
        ranges = sorted((sp.start, sp.end) for s in self.evidence.sentences for sp in s.spans
                        if sp.chunk_id == citation.chunk_id)
        merged: list[list[int]] = []
        for start, end in ranges:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        return [{"start": a, "end": b, "text": citation.text[a:b]} for a, b in merged]


@dataclass
class ChatReply:
    """The end of one answer: everything the response needs beside the streamed text."""

    text: str  # the streamed pieces, joined
    finish_reason: str  # OpenAI's: stop | length
    stats: AnswerStats
    prompt_tokens: int
    completion_tokens: int
    grounding: Grounding | None = None  # with a collection
    notes: list[str] = field(default_factory=list)


def model_ids(services: Services) -> list[str]:
    """The models a request may name: the loaded one first, then the registry's usable ones."""
    names = [services.engine.model_name] if services.engine is not None else []
    names += [m.name for m in list_models() if not isinstance(m, ModelError) and m.name not in names]
    return names


def check_request(services: Services, req: ChatRequest) -> AnswerMode:
    """The checks that need no turn: model known (404), mode known and taking the request, its
    options valid (400), collection (400/404)."""
    loaded = services.engine is not None and req.model == services.engine.model_name
    if not loaded and req.model not in model_ids(services):  # the registry reads GGUF headers: only when needed
        raise ApiError(404, f"model {req.model!r} is not available; GET /v1/models lists the models",
                       code="model_not_found", param="model")
    try:
        mode = services.mode(req.mode)
    except ValueError as exc:
        raise ApiError(400, str(exc), param="mode") from None
    try:
        request = _request(services, req, mode)
    except ValueError as exc:
        raise ApiError(400, f"mode {mode.id}: {exc}", param="options") from None
    why = mode.refuses(request)
    if why:
        raise ApiError(400, why, param="collection" if req.collection is None else "mode")
    if req.collection is None:
        return mode
    try:
        IndexConfig(index_dir=services.config.index_dir, collection=req.collection)
    except ValueError as exc:
        raise ApiError(400, str(exc), param="collection") from None
    known = services.collections()
    if req.collection not in known:
        raise ApiError(404, f"collection {req.collection!r} does not exist; collections: {', '.join(known)}",
                       code="collection_not_found", param="collection")
    return mode


def _request(services: Services, req: ChatRequest, mode: AnswerMode, ticket: Ticket | None = None) -> AnswerRequest:
    """The AnswerRequest of a chat request: grounded over its collection (the user and assistant
    turns as history), or, without one, the whole conversation as given."""
    grounded = req.collection is not None
    return services.request(mode.id, req.question, req.history if grounded else req.before_question, req.gen,
                            req.collection, req.values, cancel=ticket.cancel if ticket is not None else None,
                            documents=grounded)


def answer_chat(services: Services, req: ChatRequest, mode: AnswerMode, ticket: Ticket
                ) -> Iterator[str | AnswerProgress | ChatReply]:
    """In the ticket's turn: AnswerProgress before the text (reading the prompt, Grounded's
    drafting), text pieces, then one ChatReply. A cancelled ticket ends the text early."""
    t0 = time.perf_counter()
    if services.engine is None or services.engine.model_name != req.model:
        try:
            services.load_model(req.model)
        except LOAD_ERRORS as exc:
            raise ApiError(503, f"model {req.model!r} failed to load: {exc}", code="model_load_failed") from None
    ok, why = mode.available(services.answerer)
    if not ok:
        raise ApiError(400, f"mode {mode.id} is unavailable: {why}", param="mode")
    # The same greedy request must get the same answer whatever was asked before. A deterministic
    # backend (llama.cpp on the CPU) computes the same bits through a reused prompt prefix, so the
    # cached prefix is kept (a chat's next turn prefills only its new tokens). Any other backend
    # starts from an empty KV cache: a prompt prefilled on top of a reused prefix takes other
    # kernels than one prefilled whole, which moves near-tied logits (measured before the
    # deterministic kernels: a 24-token grounded answer changed its 10th word on a second ask).
    if not services.answerer.remote and not services.engine.backend.deterministic:
        services.engine.backend.truncate(0)
    request = _request(services, req, mode, ticket)
    services.note_prefill(request)
    if request.documents:
        services.ensure_embedder()
    held = request.documents and mode.policy(request) == "refuse"  # a refusal replaces the text: sent after the check
    pieces, result = [], None
    try:
        for item in mode.stream(services.answerer, request):
            if isinstance(item, AnswerResult):
                result = item
            elif isinstance(item, str):
                pieces.append(item)
                if not held:
                    yield item
            elif isinstance(item, AnswerProgress) and not pieces:  # (a stream sends it as a keep-alive)
                yield item
    except PromptTooLong as exc:
        raise ApiError(400, str(exc), code="context_length_exceeded", param="messages") from None
    except EndpointError as exc:  # the serving engine behind us: a gateway error, with its line
        raise ApiError(504 if exc.kind == "timeout" else 502, f"the serving engine failed: {exc}",
                       code=f"engine_{exc.kind}") from None
    if result is None:
        raise RuntimeError(f"mode {mode.id} ended without a result")
    # held: the checked result's text, which may be another candidate than the one written (Grounded)
    text = result.refusal if result.refused else result.text if held and result.text else "".join(pieces)
    if held and text:
        yield text
    gen = result.stats.generation
    if gen is not None:
        prompt_tokens, completion_tokens, reason = gen.prompt_tokens, gen.generated_tokens, gen.stop_reason
    else:  # Grounded: the chosen draft, written by the drafter
        prompt_tokens, reason = 0, "stop"
        completion_tokens = (len(text.split()) if services.answerer.remote  # (no tokenizer here: words)
                             else len(services.engine.backend.tokenize(text, add_special=False, parse_special=False)))
    result.stats.waited_s = ticket.waited_s
    result.stats.total_s = time.perf_counter() - t0
    yield ChatReply(text=text, finish_reason=_finish_reason(reason), stats=result.stats, prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens, notes=list(result.notes),
                    grounding=Grounding.from_result(result) if request.documents else None)


def _finish_reason(stop_reason: str) -> str:
    return "length" if stop_reason == "length" else "stop"
