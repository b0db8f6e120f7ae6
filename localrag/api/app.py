"""The HTTP server of the API and the MCP tools: one FastAPI app over one ``Services``, so the
models, the indexes and the generation queue are the UI's own when both run in one process.

    app = create_app(services, host="127.0.0.1", api_key=None)   # /v1/... (documents too) and /mcp
    run(app, "127.0.0.1", 8000)                                    # uvicorn, until Ctrl-C

The launcher (``localrag.launch``) mounts the Gradio page on the same app at ``/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import signal
import sys
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from localrag.api.documents import build_documents_router
from localrag.api.errors import ApiError, install_error_handlers
from localrag.api.mcp_tools import build_mcp
from localrag.api.routes import build_router
from localrag.app.services import Services

PROTECTED = ("/v1", "/mcp")  # the API and MCP routes; the key guards every call to them


class ApiKeyMiddleware:
    """With a key set, every API and MCP call must carry ``Authorization: Bearer <key>`` (or
    ``X-Api-Key: <key>``); compared in constant time; 401 in the OpenAI error shape otherwise."""

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.key = api_key.encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.key is not None and scope["type"] == "http" and _protected(scope["path"]):
            headers = dict(scope["headers"])
            auth = headers.get(b"authorization", b"")
            given = auth[7:].strip() if auth[:7].lower() == b"bearer " else headers.get(b"x-api-key", b"")
            if not hmac.compare_digest(given, self.key):
                response = ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                                    code="invalid_api_key").response()
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _protected(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in PROTECTED)


def create_app(services: Services, host: str = "127.0.0.1", api_key: str | None = None) -> FastAPI:
    """The API (``/v1``) and the MCP tools (``/mcp``) over ``services``."""
    mcp = build_mcp(services)
    # stateless: every MCP call stands alone (no session to leak); JSON answers instead of SSE
    mcp_http = mcp.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                       host=host)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with mcp.session_manager.run():
            yield

    app = FastAPI(title="localrag", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app)
    app.include_router(build_router(services))
    app.include_router(build_documents_router(services))
    app.router.routes.extend(mcp_http.routes)  # the /mcp route (its session manager runs in our lifespan)
    app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    return app


STOP_GRACE_S = 2.0  # how long a stop waits for a response that has not begun before ending it


class _Stopped(Exception):
    """SIGINT or SIGTERM, raised again by uvicorn once it has shut down gracefully."""


def _stopped(signum, frame) -> None:
    raise _Stopped


class EndStreams:
    """Ends every open HTTP response when the server stops. uvicorn's graceful shutdown waits for
    each connection to finish its response, and a browser tab's event stream (Gradio's queue,
    an SSE response) never finishes: with a tab open, SIGTERM closed the port and the process
    lived on, and a second Ctrl-C cancelled the streams, each with its traceback. Here a request
    runs as a task beside the stop event: on stop, the task is cancelled and the response ended
    as the client sees a finished one (its last body part, or a 503 before it started), so the
    server finds its connections done and nothing is left to log."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def stop(self) -> None:
        """From any thread (a signal handler): end the open responses, refuse new ones."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._stop is None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        started = ended = False

        async def tracked(message) -> None:
            nonlocal started, ended
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                ended = True
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, tracked))
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not task.done() and not started:
            # a request whose response has not begun (Gradio's unqueued predict, an API call) finishes
            # on its own: cancelled, Gradio's route prints the CancelledError's traceback (a Ctrl-C
            # that came while the page's handler waited for a worker thread)
            await asyncio.wait({task}, timeout=STOP_GRACE_S)
        if task.done():
            task.result()  # the response as the app gave it (its error raised as before)
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        if not started:
            await ApiError(503, "the server is stopping", code="server_stopping").response()(scope, receive, send)
        elif not ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Server(uvicorn.Server):
    """uvicorn's server that, at the first SIGINT or SIGTERM, says so in one line and ends the open
    responses (``EndStreams``) instead of waiting for them."""

    def __init__(self, config: uvicorn.Config, streams: EndStreams) -> None:
        super().__init__(config)
        self.streams = streams

    def handle_exit(self, sig: int, frame) -> None:
        if not self.should_exit:
            print(f"[localrag] {signal.Signals(sig).name}: stopping", file=sys.stderr, flush=True)
        super().handle_exit(sig, frame)
        self.streams.stop()


def run(app: FastAPI, host: str, port: int) -> None:
    """Serve until Ctrl-C or SIGTERM, then return, so the caller's cleanup runs (the folder
    watchers stop). uvicorn shuts down gracefully and then raises the signal again for the handler
    that was there before it: this one, instead of the default that would end the process."""
    previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    streams = EndStreams(app)
    try:
        _Server(uvicorn.Config(streams, host=host, port=port, log_level="warning"), streams).run()
    except _Stopped:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
