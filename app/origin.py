"""Same-origin guard: a web page from elsewhere must not use the server through a browser on this
machine (plant or delete documents, run generations, read the knowledge base).

- Requests that change state (POST, PUT, PATCH, DELETE) carrying an `Origin` are accepted only from
  the server's own page: the Origin's host and port are the `Host` the request was sent to. Requests
  without `Origin` (curl, the openai client, scripts) pass: browsers always send it cross-site.
- On a loopback bind every request must be addressed to this machine by name (`localhost`,
  127.0.0.0/8, `::1`): a DNS-rebinding page reaches 127.0.0.1 under its own domain name, as the
  page's own origin, so only the Host header gives it away."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import APIError
from app.settings import is_loopback

STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}


def _hostname(host: str) -> str | None:
    try:
        return urlsplit(f"//{host}").hostname  # lower case, port and [] of IPv6 removed
    except ValueError:
        return None


def is_loopback_name(host: str) -> bool:
    """A Host header naming this machine: `localhost`, `*.localhost` or a loopback address."""
    name = _hostname(host)
    return name is not None and (name.endswith(".localhost") or is_loopback(name))


def is_same_origin(origin: str, host: str) -> bool:
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(host) and parts.netloc.lower() == host.lower()


class SameOriginGuard:
    """ASGI middleware; `check_host` on a loopback bind. Refusals are 403s in OpenAI's error shape,
    sent before the request body is read."""

    def __init__(self, app: ASGIApp, check_host: bool):
        self.app, self.check_host = app, check_host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            host, origin = headers.get("host", ""), headers.get("origin")
            error = None
            if self.check_host and host and not is_loopback_name(host):
                error = APIError(403, f"Host {host!r} is not this machine: the server is bound to loopback "
                                      "(use http://127.0.0.1 or http://localhost)", "host_not_allowed")
            elif scope["method"] in STATE_CHANGING and origin is not None and not is_same_origin(origin, host):
                error = APIError(403, f"requests from the web origin {origin!r} are not accepted; only the "
                                      "server's own page may send them", "origin_not_allowed")
            if error is not None:
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)
