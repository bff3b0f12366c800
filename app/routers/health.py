"""GET /health: 200 when ready, 503 while loading or after a failed start (llama.cpp server style)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from app.deps import State

router = APIRouter()


_LOADING = {"description": "Models still loading (`status: loading`, with Retry-After) or failed to load "
                           "(`status: error` and the reason)",
            "content": {"application/json": {"schema": {"type": "object", "properties": {
                "status": {"type": "string", "enum": ["loading", "error"]}, "error": {"type": "string"}}}}}}


@router.get("/health", responses={503: _LOADING})
async def health(state: State):
    if state.status != "ready":
        body = {"status": state.status} | ({"error": state.error} if state.error else {})
        return JSONResponse(body, status_code=503, headers={"Retry-After": "2"})
    # stats() reads without the KB lock, and off the loop: health never waits for an ingest
    kb = await run_in_threadpool(state.kb.stats) if state.kb is not None else None
    return {"status": "ok", "model": state.llm.name, "backend": state.settings.backend,
            "context": state.llm.context, "embedder": state.embedder.manifest.name, "knowledge": kb,
            "queue": {"busy": state.accelerator.busy, "waiting": state.accelerator.waiting,
                      "max": state.accelerator.max_queue}}
