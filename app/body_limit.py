"""Request bodies over a byte limit get a 413 in OpenAI's shape, before anything parses them: at once
when Content-Length says so, else as soon as the bytes read pass the limit (chunked uploads)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import APIError


def declared_over(headers: Mapping[str, str], limit: int) -> bool:
    """Whether the request's Content-Length already says the body is over `limit` bytes."""
    length = headers.get("content-length", "")
    return length.isdigit() and int(length) > limit


def capped(receive: Receive, limit: int, error: Callable[[], Exception]) -> Receive:
    """`receive` that raises `error()` as soon as the body bytes read pass `limit` (chunked bodies
    have no Content-Length to refuse them by)."""
    seen = 0

    async def limited() -> dict:
        nonlocal seen
        message = await receive()
        seen += len(message.get("body", b""))
        if seen > limit:
            raise error()
        return message

    return limited


def _message(limit: int) -> str:
    return f"the request body is larger than the server's limit of {limit} bytes"


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int, exempt: tuple[str, ...] = ()):
        self.app, self.limit, self.exempt = app, limit, exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            return await self.app(scope, receive, send)
        if declared_over(Headers(scope=scope), self.limit):
            return await APIError(413, _message(self.limit), "request_too_large").response()(scope, receive, send)
        # an HTTPException passes through the framework's body parsing to the error handler
        await self.app(scope, capped(receive, self.limit, lambda: HTTPException(413, _message(self.limit))), send)
