"""The FastAPI application: composes the routers; models load in the background at start-up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from fastapi import FastAPI

from app import errors, openapi
from app.accelerator import Accelerator
from app.body_limit import BodyLimit
from app.jobs import KnowledgeWriter
from app.origin import SameOriginGuard
from app.priority import Foreground, ForegroundRequests
from app.routers import chat, embeddings, health, knowledge, models, web
from app.settings import Settings
from app.state import AppState


FOREGROUND_PATHS = ("/v1/chat/completions", "/v1/knowledge/search", "/v1/embeddings")


def create_app(settings: Settings | None = None, load: bool = True,
               on_failure: Callable[[str], None] | None = None) -> FastAPI:
    """`on_failure` hears why, should loading the models or the KB fail (else /health says it)."""
    settings = settings or Settings()
    foreground = Foreground()  # the requests a user waits on; an upload's ingest yields to them

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        state = AppState(settings, Accelerator(settings.max_queue, settings.queue_timeout_s),
                         KnowledgeWriter(settings.max_pending_uploads, foreground), on_failure=on_failure)
        app.state.hexrag = state
        # /health answers 503 while this runs, so clients can wait for readiness
        loading = asyncio.get_running_loop().run_in_executor(None, state.load) if load else None
        yield
        await asyncio.to_thread(state.writer.close)  # a running ingest stops at its next step
        if loading is not None:
            await loading

    # Swagger UI and ReDoc load from a CDN: off unless asked for (HEXRAG_DOCS), the server works offline
    docs = {} if settings.docs else {"docs_url": None, "redoc_url": None}
    app = FastAPI(title="hexrag", version="0.1.0", lifespan=lifespan, **docs,
                  description="On-device retrieval-augmented chat: OpenAI-compatible API")
    errors.install(app)
    app.add_middleware(SameOriginGuard, check_host=settings.loopback)
    # uploads have their own per-file limit (max_upload_bytes)
    app.add_middleware(ForegroundRequests, foreground=foreground, paths=FOREGROUND_PATHS)
    app.add_middleware(BodyLimit, limit=settings.max_request_bytes, exempt=("/v1/knowledge/documents",))
    # every /v1 route: the API key, a foreign Origin or Host, and models still loading
    v1 = openapi.errors_doc(401, 403, 503)
    app.include_router(health.router)
    app.include_router(web.router)
    for router in (models.router, chat.router, embeddings.router):
        app.include_router(router, responses=v1)
    # the statuses the knowledge handlers return
    app.include_router(knowledge.router, responses=v1 | openapi.errors_doc(400, 404, 413, 429))
    openapi.document(app)
    return app
