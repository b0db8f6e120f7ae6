"""Errors in the OpenAI shape: ``{"error": {"message", "type", "param", "code"}}`` with the right
HTTP status, and never a traceback.

    raise ApiError(404, "model 'gpt-4' is not available; GET /v1/models lists the models",
                   code="model_not_found", param="model")
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("localrag.api")

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
               405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
               503: "server_error"}


class ApiError(Exception):
    """A request the API refuses or cannot serve, with its HTTP status."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": ERROR_TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Every error the app answers, in the OpenAI shape."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return ApiError(400, f"invalid request: {exc.errors()[0].get('msg', 'bad parameters')}").response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = "not found: " + request.url.path if exc.status_code == 404 else str(exc.detail)
        return ApiError(exc.status_code, message).response()

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error in the API")  # the traceback goes to the server log only
        return ApiError(500, f"internal error: {type(exc).__name__}: {exc}").response()
