"""The FastAPI application: composes the routers; models load in the background at start-up."""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import FastAPI

from app import errors
from app.accelerator import Accelerator
from app.jobs import KnowledgeWriter
from app.origin import SameOriginGuard
from app.routers import chat, embeddings, health, knowledge, models, web
from app.settings import Settings
from app.state import AppState


def create_app(settings: Settings | None = None, load: bool = True) -> FastAPI:
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        state = AppState(settings, Accelerator(settings.max_queue, settings.queue_timeout_s),
                         KnowledgeWriter(settings.max_pending_uploads))
        app.state.hexrag = state
        # /health answers 503 while this runs, so clients can wait for readiness
        loading = asyncio.get_running_loop().run_in_executor(None, state.load) if load else None
        yield
        state.writer.close()
        if loading is not None:
            await loading

    app = FastAPI(title="hexrag", version="0.1.0", lifespan=lifespan,
                  description="On-device retrieval-augmented chat: OpenAI-compatible API")
    errors.install(app)
    app.add_middleware(SameOriginGuard, check_host=settings.loopback)
    for router in (health.router, models.router, chat.router, embeddings.router, knowledge.router, web.router):
        app.include_router(router)
    return app
