"""The HTTP server of the API and the MCP tools: one FastAPI app over one ``Services``, so the
models, the indexes and the generation queue are the UI's own when both run in one process.

    app = create_app(services, host="127.0.0.1", api_key=None)   # /v1/... (documents too) and /mcp
    run(app, "127.0.0.1", 8000)                                    # uvicorn, until Ctrl-C

The launcher (``localrag.launch``) mounts the Gradio page on the same app at ``/``.
"""

from __future__ import annotations

import contextlib
import hmac
import signal
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


class _Stopped(Exception):
    """SIGINT or SIGTERM, raised again by uvicorn once it has shut down gracefully."""


def _stopped(signum, frame) -> None:
    raise _Stopped


def run(app: FastAPI, host: str, port: int) -> None:
    """Serve until Ctrl-C or SIGTERM, then return, so the caller's cleanup runs (the folder
    watchers stop). uvicorn shuts down gracefully and then raises the signal again for the handler
    that was there before it: this one, instead of the default that would end the process."""
    previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
    except _Stopped:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
