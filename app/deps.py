"""Shared request dependencies, as `Annotated` aliases."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request

from app.errors import APIError
from app.state import AppState


def get_state(request: Request) -> AppState:
    return request.app.state.hexrag


def ready_state(state: Annotated[AppState, Depends(get_state)]) -> AppState:
    if state.status == "loading":
        raise APIError(503, "models are loading", "loading", type_="server_busy", headers={"Retry-After": "2"})
    if state.status == "error":
        raise APIError(503, f"the server could not load its models: {state.error}", "load_failed",
                       type_="server_error")
    return state


def check_api_key(request: Request, state: Annotated[AppState, Depends(get_state)]) -> None:
    key = state.settings.api_key
    if not key:
        return
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), key.encode()):
        raise APIError(401, "missing or wrong API key (Authorization: Bearer <key>)", "invalid_api_key",
                       type_="authentication_error")


State = Annotated[AppState, Depends(get_state)]
Ready = Annotated[AppState, Depends(ready_state)]
