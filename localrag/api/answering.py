"""One chat request, answered in its turn on the shared model: the work behind
``/v1/chat/completions`` and the MCP ``ask_documents`` tool.

With a ``collection``, the answer is grounded: the mode from the registry answers the last user
message over the collection (its earlier turns as history), exactly as the UI would, and the
answer is checked against the documents (computed citations, the evidence of every sentence).
When the documents do not support it and the request (or the mode) refuses, the content is the
refusal and the text is kept in ``localrag.unsupported_answer``; in that case nothing is streamed
before the check. Without a collection, it is plain chat with the model on the client's own
messages (Speedup mode speculates from the conversation). Either way ``answer_chat`` yields text
pieces, then one ``ApiAnswer``.

    ticket = services.queue.submit("api")
    if services.queue.wait_turn(ticket):
        for item in answer_chat(services, request, ticket): ...
    services.queue.release(ticket)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from localrag.api.errors import ApiError
from localrag.api.schemas import ChatRequest
from localrag.evidence import mark_citations
from localrag.models import ModelError, list_models
from localrag.modes import AnswerMode, AnswerRequest, get_mode
from localrag.rag.config import IndexConfig
from localrag.results import AnswerEvidence, AnswerResult, AnswerStats, Citation, RetrievalStats
from localrag.serving import Ticket
from localrag.ui.services import LOAD_ERRORS, Services, Settings

CONTEXT_MARGIN = 8  # tokens kept free at the end of the context


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

    @classmethod
    def from_result(cls, result: AnswerResult) -> Grounding:
        marked = mark_citations(result.text, result.evidence).text if result.evidence is not None else result.text
        return cls(citations=list(result.citations), supported=result.supported, searched=result.searched,
                   evidence=result.evidence, also_searched=list(result.also_searched),
                   answer_with_citations="" if result.refused else marked, refused=result.refused,
                   unsupported_answer=result.text if result.refused else None, on_unsupported=result.on_unsupported)

    def to_dict(self) -> dict:
        return {"citations": [c.to_dict() for c in self.citations],
                "also_searched": [c.to_dict() for c in self.also_searched], "supported": self.supported,
                "refused": self.refused, "on_unsupported": self.on_unsupported, "searched": self.searched,
                "answer_with_citations": self.answer_with_citations, "unsupported_answer": self.unsupported_answer,
                "evidence": self.evidence.to_dict() if self.evidence is not None else None}


@dataclass
class ApiAnswer:
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
    """The checks that need no turn: model known (404), mode known (400), collection (400/404)."""
    loaded = services.engine is not None and req.model == services.engine.model_name
    if not loaded and req.model not in model_ids(services):  # the registry reads GGUF headers: only when needed
        raise ApiError(404, f"model {req.model!r} is not available; GET /v1/models lists the models",
                       code="model_not_found", param="model")
    try:
        mode = get_mode(req.mode)
    except ValueError as exc:
        raise ApiError(400, str(exc), param="mode") from None
    if req.collection is None:
        if mode.id == "grounded":
            raise ApiError(400, "mode grounded answers from documents: give a collection", param="collection")
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


def answer_chat(services: Services, req: ChatRequest, mode: AnswerMode, ticket: Ticket
                ) -> Iterator[str | ApiAnswer]:
    """In the ticket's turn: text pieces, then one ApiAnswer. A cancelled ticket ends the text early."""
    t0 = time.perf_counter()
    if services.engine is None or services.engine.model_name != req.model:
        try:
            services.load_model(req.model)
        except LOAD_ERRORS as exc:
            raise ApiError(503, f"model {req.model!r} failed to load: {exc}", code="model_load_failed") from None
    ok, why = mode.available(services.engine)
    if not ok:
        raise ApiError(400, f"mode {mode.id} is unavailable: {why}", param="mode")
    # The same greedy request must get the same answer whatever was asked before. A deterministic
    # backend (llama.cpp on the CPU) computes the same bits through a reused prompt prefix, so the
    # cached prefix is kept (a chat's next turn prefills only its new tokens). Any other backend
    # starts from an empty KV cache: a prompt prefilled on top of a reused prefix takes other
    # kernels than one prefilled whole, which moves near-tied logits (measured before the
    # deterministic kernels: a 24-token grounded answer changed its 10th word on a second ask).
    if not services.engine.backend.deterministic:
        services.engine.backend.truncate(0)
    if req.collection is None:
        answer = yield from _chat(services, req, mode, ticket)
    else:
        answer = yield from _grounded(services, req, mode, ticket)
    answer.stats.waited_s = ticket.waited_s
    answer.stats.total_s = time.perf_counter() - t0
    yield answer


def _chat(services: Services, req: ChatRequest, mode: AnswerMode, ticket: Ticket):
    """Plain chat on the client's messages; Speedup speculates from the conversation itself."""
    engine = services.engine
    msgs = [dict(m) for m in req.messages]
    prompt = engine.chat_tokens(msgs)  # laid out once: its length bounds the answer, then it is prefilled
    room = engine.backend.n_ctx - len(prompt) - CONTEXT_MARGIN
    if room < 1:
        raise ApiError(400, f"the messages are {len(prompt)} tokens; the model's context holds "
                            f"{engine.backend.n_ctx}", code="context_length_exceeded", param="messages")
    decoder = None
    if mode.id == "rasd":
        answerer, _ = services.answerer(Settings(mode="rasd"))
        decoder = answerer.rasd_decoder([m["content"] for m in msgs])
    generation = engine.reply(prompt, req.gen.with_(max_tokens=min(req.gen.max_tokens, room)), decoder=decoder)
    text = yield from _stream(iter(generation), ticket)
    if ticket.cancelled:
        generation.stats.stop_reason = "cancelled"
    gen = generation.stats
    stats = AnswerStats(mode=mode.id, retrieval=RetrievalStats(note="no collection: plain chat"), generation=gen)
    return ApiAnswer(text=text, finish_reason=_finish_reason(gen.stop_reason), stats=stats,
                     prompt_tokens=gen.prompt_tokens, completion_tokens=gen.generated_tokens)


def _grounded(services: Services, req: ChatRequest, mode: AnswerMode, ticket: Ticket):
    """The registry's mode over the collection, the way the UI answers."""
    services.ensure_embedder()
    answerer, notes = services.answerer(Settings(mode=mode.id, collection=req.collection, k=req.k))
    request = AnswerRequest(req.question, req.history, req.gen, k=req.k, collection=req.collection,
                            cancel=ticket.cancel, on_unsupported=req.on_unsupported)
    held = mode.policy(request) == "refuse"  # a refusal replaces the text: nothing is sent before the check
    pieces, result = [], None
    for item in mode.stream(answerer, request):
        if isinstance(item, AnswerResult):
            result = item
        elif isinstance(item, str):  # text; AnswerProgress (Grounded's drafting, verifying) is not sent
            pieces.append(item)
            if not held:
                yield item
    if result is None:
        raise RuntimeError(f"mode {mode.id} ended without a result")
    gen = result.stats.generation
    text = result.refusal if result.refused else "".join(pieces)
    if held and text:
        yield text
    if gen is not None:
        prompt_tokens, completion_tokens, reason = gen.prompt_tokens, gen.generated_tokens, gen.stop_reason
    else:  # Grounded: the chosen draft, written by the drafter
        prompt_tokens, reason = 0, "stop"
        completion_tokens = len(services.engine.backend.tokenize(text, add_special=False, parse_special=False))
    return ApiAnswer(text=text, finish_reason=_finish_reason(reason), stats=result.stats,
                     prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                     grounding=Grounding.from_result(result), notes=notes)


def _stream(pieces: Iterator[str], ticket: Ticket):
    """Yield the pieces until the end or a cancel; return the text written."""
    written = []
    for piece in pieces:
        written.append(piece)
        yield piece
        if ticket.cancelled:
            pieces.close()
            break
    return "".join(written)


def _finish_reason(stop_reason: str) -> str:
    return "length" if stop_reason == "length" else "stop"
