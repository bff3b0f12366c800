"""Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}}, never a traceback.

`DOMAIN_ERRORS` is the one table from the library's typed exceptions to an HTTP status and an
OpenAI error code; the API's exception handlers and its streams use it, and the CLI prints the same
exceptions as one-line messages. fastapi is imported only by `install`, so the CLI can share the
table without loading the web framework.
"""

from __future__ import annotations

import json
import logging
import re
from typing import NamedTuple

from pydantic import BaseModel
from starlette.responses import JSONResponse

from knowledge.errors import (EmbedderMismatchError, EmbedderRequiredError, IngestError, KnowledgeBaseCorruptError,
                              KnowledgeError, UnknownDocumentError)
from models.manifest import ManifestError
from runtime.chat_template import ChatTemplateError
from runtime.errors import ContextOverflowError, RuntimeModelError

log = logging.getLogger(__name__)


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str


class ErrorResponse(BaseModel):
    """The body of every error response (and of the `error` event that ends a failed stream)."""

    error: ErrorDetail


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
        return _ASCIIJSON(self.body(), status_code=self.status, headers=self.headers)


class _ASCIIJSON(JSONResponse):
    # an error may quote the client's text, which can hold lone surrogates: escape them, never fail
    def render(self, content) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode()


class Mapping(NamedTuple):
    status: int
    code: str
    type: str = "invalid_request_error"
    param: str | None = None


_UNAVAILABLE = "server_error"
# looked up along the exception's class hierarchy: the most specific entry wins
DOMAIN_ERRORS: dict[type[Exception], Mapping] = {
    ContextOverflowError: Mapping(400, "context_length_exceeded", param="messages"),
    ChatTemplateError: Mapping(400, "invalid_request", param="messages"),  # the model's template refused them
    UnknownDocumentError: Mapping(404, "document_not_found", param="source"),
    IngestError: Mapping(400, "ingest_failed", param="file"),
    EmbedderRequiredError: Mapping(400, "invalid_request", param="mode"),
    EmbedderMismatchError: Mapping(503, "knowledge_unavailable", _UNAVAILABLE),
    KnowledgeBaseCorruptError: Mapping(503, "knowledge_unavailable", _UNAVAILABLE),
    KnowledgeError: Mapping(400, "invalid_request"),
    RuntimeModelError: Mapping(503, "model_unavailable", _UNAVAILABLE),
    ManifestError: Mapping(503, "model_unavailable", _UNAVAILABLE),
}


def as_api_error(e: Exception) -> APIError:
    """Any exception as an API error: typed library errors by the table; anything else is a bug,
    logged, and the client hears only 'internal server error'."""
    if isinstance(e, APIError):
        return e
    mapping = next((DOMAIN_ERRORS[c] for c in type(e).__mro__ if c in DOMAIN_ERRORS), None)
    if mapping is None:
        log.error("unhandled error", exc_info=e)
        return APIError(500, "internal server error", "internal_error", type_="server_error")
    message, extra = str(e), {}
    if isinstance(e, ContextOverflowError):  # OpenAI's wording, and the numbers a client needs to trim
        message = (f"This model's maximum context length is {e.context} tokens; the request needs "
                   f"{e.prompt_tokens} prompt tokens plus room for the answer.")
        extra = {"prompt_tokens": e.prompt_tokens, "context": e.context}
    return APIError(mapping.status, message, mapping.code, mapping.type, mapping.param, **extra)


def overloaded(retry_after: int, status: int = 429) -> APIError:
    return APIError(status, "the accelerator is busy; retry later", "overloaded" if status == 429 else "unavailable",
                    type_="server_busy", headers={"Retry-After": str(retry_after)})


# validation errors raised on purpose carry their own code; among a union's per-branch errors the
# one that is not a plain type mismatch with another branch says what is wrong
_CODED = {"unsupported_parameter": "unsupported_parameter", "invalid_text": "invalid_request",
          "missing_content": "invalid_request", "only_tool_messages": "invalid_request"}
_NAME = re.compile(r"^\w+$")  # drops pydantic's union tags ("list[ContentPart]") from locations


def _invalid(errors: list[dict]) -> APIError:
    first = (next((e for e in errors if e.get("type") in _CODED), None)
             or next((e for e in errors if not str(e.get("type", "")).endswith("_type")), None)
             or (errors[0] if errors else {}))
    if first.get("type") == "json_invalid":  # its location is a character offset, not a field
        where = first.get("loc", ("body", "?"))[-1]
        return APIError(400, f"the body is not valid JSON: {first.get('ctx', {}).get('error', 'decode error')} "
                             f"at character {where}", "invalid_request")
    # a check over a whole object names the field it is about in its context
    path = (*first.get("loc", ()), *([first["ctx"]["field"]] if "field" in first.get("ctx", {}) else []))
    loc = ".".join(str(p) for p in path if p != "body" and (isinstance(p, int) or _NAME.match(p)))
    return APIError(400, f"{loc or 'request'}: {first.get('msg', 'invalid request')}",
                    _CODED.get(first.get("type"), "invalid_request"), param=loc or None)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


def _allowed_methods(request) -> str:
    """The methods some route of the request's path answers (each method tried against the routes: a
    path's routes may sit in several routers)."""
    from starlette.routing import Match

    methods = {"OPTIONS"}
    for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"):
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes):
            methods.add(method)
    return ", ".join(sorted(methods))


def install(app) -> None:
    from fastapi import Request, Response
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(APIError)
    async def _api_error(_: Request, e: APIError):
        return e.response()

    for cls in DOMAIN_ERRORS:
        @app.exception_handler(cls)
        async def _domain(_: Request, e: Exception):
            return as_api_error(e).response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError):
        return _invalid(list(e.errors())).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException):
        headers = dict(e.headers or {})
        if e.status_code == 405:  # the framework names the first route of the path only: name them all
            allowed = _allowed_methods(request)
            if request.method == "OPTIONS":
                return Response(status_code=204, headers={"Allow": allowed})
            headers["Allow"] = allowed
        return APIError(e.status_code, str(e.detail), _HTTP_CODES.get(e.status_code, "http_error"),
                        headers=headers).response()

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, e: Exception):
        return as_api_error(e).response()
