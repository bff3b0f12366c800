"""Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}}, never a traceback."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from runtime.errors import ContextOverflowError

log = logging.getLogger(__name__)


class APIError(Exception):
    def __init__(self, status: int, message: str, code: str, type_: str = "invalid_request_error",
                 param: str | None = None, headers: dict[str, str] | None = None, **extra):
        super().__init__(message)
        self.status, self.message, self.code, self.type, self.param = status, message, code, type_, param
        self.headers = headers or {}
        self.extra = extra

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code,
                          **self.extra}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def overloaded(retry_after: int, status: int = 429) -> APIError:
    return APIError(status, "the accelerator is busy; retry later", "overloaded" if status == 429 else "unavailable",
                    type_="server_busy", headers={"Retry-After": str(retry_after)})


def context_exceeded(e: ContextOverflowError) -> APIError:
    return APIError(400, f"This model's maximum context length is {e.context} tokens; the request needs "
                         f"{e.prompt_tokens} prompt tokens plus room for the answer.",
                    "context_length_exceeded", param="messages", prompt_tokens=e.prompt_tokens, context=e.context)


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, e: APIError):
        return e.response()

    @app.exception_handler(ContextOverflowError)
    async def _overflow(_: Request, e: ContextOverflowError):
        return context_exceeded(e).response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError):
        first = e.errors()[0] if e.errors() else {}
        loc = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return APIError(400, f"{loc or 'request'}: {first.get('msg', 'invalid request')}", "invalid_request",
                        param=loc or None).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(e.status_code, "http_error")
        return APIError(e.status_code, str(e.detail), code).response()

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, e: Exception):
        log.exception("unhandled error")
        return APIError(500, "internal server error", "internal_error", type_="server_error").response()
