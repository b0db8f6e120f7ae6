"""The OpenAI-compatible routes: ``GET /v1/models``, ``POST /v1/chat/completions`` (streamed as
server-sent events or not), ``POST /v1/embeddings``.

A request joins the shared ``GenerationQueue`` at once (a full line is refused with 429). It is
checked and answered on the process's one ``GenerationThread`` (``Services.generation``):
straight away when nothing is ahead of it in line; otherwise it is checked at once and waits for
its turn on a thread of its own, which computes nothing, then moves there. The pieces it writes
reach the event loop through an asyncio queue; the route waits for the first of them before it
answers, so an error found before the first piece (an unknown model or collection, a model that
fails to load, a prompt over the context) is still an HTTP error, not a broken stream. The pieces
that arrived while the loop was busy go out together, as one server-sent event, in one write. A
client that disconnects cancels its request, waiting or running.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from localrag.api.answering import ChatReply, answer_chat, check_request, model_ids
from localrag.api.errors import ApiError
from localrag.api.responses import (
    chunk,
    completion_body,
    completion_id,
    embeddings_body,
    final_chunks,
    model_list,
    sse,
)
from localrag.api.schemas import MAX_BODY_BYTES, ChatRequest, parse_chat, parse_embeddings, read_json
from localrag.app.services import DEFAULT_COLLECTION, Services
from localrag.app.serving import GenerationThread, QueueFull, Ticket
from localrag.modes import AnswerMode
from localrag.results import AnswerProgress

DISCONNECT_POLL_S = 0.25
# A streamed answer's first piece is written before the model computes on: decoding takes every
# core (llama.cpp runs a thread per core), and the event loop, woken for the first piece, then
# waited for one (measured on 2 cores: 2.7-3.5 ms in 2 answers of 12, 0.1 ms otherwise). The
# wait costs the second token ~0.7 ms; it ends after this long whatever happens.
FIRST_WRITE_WAIT_S = 0.05
BUNDLED_EMBEDDER = "all-MiniLM-L6-v2"  # the bundled sentence-transformers model (localrag.rag)


@dataclass(frozen=True)
class Piece:
    text: str


@dataclass(frozen=True)
class Progress:
    message: str  # "Reading your documents: 420 of 980 tokens…": a stream's keep-alive comment


@dataclass(frozen=True)
class Failed:
    error: ApiError


@dataclass(frozen=True)
class Finished:
    answer: ChatReply


Event = Piece | Progress | Failed | Finished


class ReplyStream:
    """One request, checked and answered in its turn on the generation thread; its events arrive
    on an asyncio queue: pieces, then one ``Finished`` or ``Failed``."""

    def __init__(self, services: Services, req: ChatRequest, ticket: Ticket, loop: asyncio.AbstractEventLoop) -> None:
        self.services, self.req, self.ticket, self.loop = services, req, ticket, loop
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.first_written = threading.Event()  # set once the first write of a stream has gone out

    def start(self, generation: GenerationThread) -> ReplyStream:
        if self.services.queue.wait_turn(self.ticket, timeout=0):  # nothing ahead: its turn has begun
            generation.submit(self._check_and_generate)
        else:
            threading.Thread(target=self._check_and_wait, args=(generation,), name="localrag-api-waiting",
                             daemon=True).start()
        return self

    def _emit(self, event: Event) -> None:
        self.loop.call_soon_threadsafe(self.events.put_nowait, event)

    def _check_and_generate(self) -> None:
        mode = self._checked()
        if mode is not None:
            self._generate(mode)

    def _check_and_wait(self, generation: GenerationThread) -> None:
        mode = self._checked()  # before the turn: a bad request waits for nothing
        if mode is None:
            return
        if not self.services.queue.wait_turn(self.ticket):
            self._fail(ApiError(499, "the client went away", code="cancelled"))
            return
        generation.submit(lambda: self._generate(mode))

    def _checked(self) -> AnswerMode | None:
        """The request's mode; None once the client has been told why it cannot be answered."""
        try:
            return check_request(self.services, self.req)
        except Exception as exc:
            self._fail(exc)
            return None

    def _generate(self, mode: AnswerMode) -> None:
        """In the ticket's turn, on the generation thread."""
        try:
            waited = False
            for item in answer_chat(self.services, self.req, mode, self.ticket):
                if isinstance(item, AnswerProgress):
                    if self.req.stream:
                        self._emit(Progress(item.message))
                    continue
                self._emit(Finished(item) if isinstance(item, ChatReply) else Piece(item))
                if not waited and self.req.stream:  # once: a stream never started must not slow every token
                    waited = True
                    self.first_written.wait(FIRST_WRITE_WAIT_S)  # see FIRST_WRITE_WAIT_S
        except Exception as exc:
            self._emit(Failed(api_error(exc)))
        finally:
            self.services.queue.release(self.ticket)

    def _fail(self, exc: Exception) -> None:
        self._emit(Failed(api_error(exc)))
        self.services.queue.release(self.ticket)

    async def next_events(self, request: Request) -> Batch:
        """The events that have arrived, after waiting for the first; cancels the request if the
        client disconnects meanwhile."""
        first = None
        while first is None:
            try:
                async with asyncio.timeout(DISCONNECT_POLL_S):  # no task per wait, unlike wait_for
                    first = await self.events.get()
            except TimeoutError:
                if await request.is_disconnected():
                    self.ticket.cancel.set()
        events = [first]
        while not self.events.empty():
            events.append(self.events.get_nowait())
        return Batch.of(events)


def api_error(exc: Exception) -> ApiError:
    """The error the client gets: an ApiError as it is, anything else as one line, never a traceback."""
    return exc if isinstance(exc, ApiError) else ApiError(500, f"{type(exc).__name__}: {exc}", code="generation_failed")


@dataclass(frozen=True)
class Batch:
    """Events taken from the queue together: the text of their pieces, and the event that ended
    the answer among them (None while it goes on)."""

    text: str
    end: Failed | Finished | None
    progress: str = ""  # the latest progress message among them ('' if none)

    @classmethod
    def of(cls, events: list[Event]) -> Batch:
        end = events[-1] if isinstance(events[-1], Failed | Finished) else None  # the thread's last event
        progress = [e.message for e in events if isinstance(e, Progress)]
        return cls("".join(e.text for e in events if isinstance(e, Piece)), end, progress[-1] if progress else "")


def build_router(services: Services) -> APIRouter:
    router = APIRouter(prefix="/v1")

    @router.get("/models")
    async def models() -> JSONResponse:
        names = await run_in_threadpool(model_ids, services)
        return JSONResponse(model_list(names, embedder_name(services)))

    @router.post("/chat/completions")
    async def chat_completions(request: Request):
        req = parse_chat(read_json(await read_body(request)))
        try:
            ticket = services.queue.submit(owner=f"api-{id(request)}")
        except QueueFull as exc:
            raise ApiError(429, f"{exc}; retry later", code="queue_full") from None
        answer = ReplyStream(services, req, ticket, asyncio.get_running_loop()).start(services.generation)
        try:
            first = await answer.next_events(request)
        except BaseException:
            ticket.cancel.set()
            raise
        if isinstance(first.end, Failed) and not first.text:
            raise first.end.error
        cid, created = completion_id(), int(time.time())
        if req.stream:
            return StreamingResponse(stream_events(answer, first, request, cid, created),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        batch = first
        try:
            while batch.end is None:
                batch = await answer.next_events(request)
        finally:
            if batch.end is None:
                ticket.cancel.set()
        if isinstance(batch.end, Failed):
            raise batch.end.error
        return JSONResponse(completion_body(cid, created, req.model, batch.end.answer))

    async def stream_events(answer: ReplyStream, first: Batch, request: Request, cid: str,
                            created: int) -> AsyncIterator[bytes]:
        batch, done = first, False
        try:
            yield stream_bytes(cid, created, answer.req, batch, opening=True)
            if batch.text or batch.end is not None:
                answer.first_written.set()
            while batch.end is None:
                batch = await answer.next_events(request)
                yield stream_bytes(cid, created, answer.req, batch)
                if batch.text:
                    answer.first_written.set()
            done = True
        finally:
            answer.first_written.set()
            if not done:  # the client went away mid-stream: stop generating for it
                answer.ticket.cancel.set()

    @router.post("/embeddings")
    async def embeddings(request: Request) -> JSONResponse:
        req = parse_embeddings(read_json(await read_body(request)))
        name = embedder_name(services)
        if req.model != name:
            raise ApiError(404, f"embedding model {req.model!r} is not available; this server embeds with {name}",
                           code="model_not_found", param="model")
        vectors, n_tokens = await run_in_threadpool(embed, services, list(req.inputs))
        return JSONResponse(embeddings_body(name, vectors, n_tokens, req.encoding_format))

    return router


def stream_bytes(cid: str, created: int, req: ChatRequest, batch: Batch, opening: bool = False) -> bytes:
    """One write of a streamed answer: the role chunk first (``opening``), the batch's text as one
    chunk, and with the answer's end the closing chunks (or the error) and [DONE]."""
    events = [chunk(cid, created, req.model, {"role": "assistant", "content": ""})] if opening else []
    # progress while the prompt is read: an SSE comment, which clients skip (and proxies see traffic)
    keep_alive = f": {batch.progress}\n\n".encode() if batch.progress and not batch.text else b""
    if batch.text:
        events.append(chunk(cid, created, req.model, {"content": batch.text}))
    if isinstance(batch.end, Failed):  # after the first piece, an error can only end the stream
        events.append(batch.end.error.body())
    elif batch.end is not None:
        events += final_chunks(cid, created, req.model, batch.end.answer, req.include_usage)
    if batch.end is not None:
        events.append("[DONE]")
    return keep_alive + b"".join(sse(e) for e in events)


async def read_body(request: Request) -> bytes:
    """The body, refused with 413 past MAX_BODY_BYTES (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes", code="request_too_large")
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > MAX_BODY_BYTES:
            raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes", code="request_too_large")
    return bytes(body)


def embedder_name(services: Services) -> str:
    """The embedding model's name (a configured model's folder name), without loading it."""
    configured = services.index(DEFAULT_COLLECTION).config.embedding_model
    return Path(configured).name if configured else BUNDLED_EMBEDDER


def embed(services: Services, texts: list[str]) -> tuple[np.ndarray, int]:
    """Unit vectors for ``texts`` and the word pieces they took."""
    services.ensure_embedder()
    embedder = services.index(DEFAULT_COLLECTION).embedder
    n_tokens = embedder.count_tokens(texts)
    return embedder.embed(texts), n_tokens
