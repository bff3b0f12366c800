"""What the server holds: settings, the loaded models and knowledge base, and the accelerator."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from app.accelerator import Accelerator
from app.answer.passage_kv import fill
from app.engine import Engine
from app.jobs import KnowledgeWriter
from app.settings import Settings
from app.uploads import clear_staging

log = logging.getLogger(__name__)


@dataclass
class AppState:
    settings: Settings
    accelerator: Accelerator
    writer: KnowledgeWriter  # every KB write of the API (upload ingest jobs, deletes), in order, off the event loop
    status: str = "loading"  # loading | ready | error
    error: str | None = None
    engine: Engine | None = None  # set once loaded
    started: float = field(default_factory=time.time)
    on_failure: Callable[[str], None] | None = None  # told why when loading fails (`serve` exits with it)

    def load(self) -> None:
        """Load models and the knowledge base (runs on a background thread at start-up)."""
        s = self.settings
        try:
            if s.backend == "auto":  # `hexrag serve` settles it before; an app made in code may not have
                from app.device import settle

                self.settings = s = settle(s)[0]
            log.info("loading LLM %s on %s, embedder %s", s.llm, s.backend, s.embedder)
            engine = Engine.load(s)
            decoder = engine.llm.decoder
            if s.prompt_lookup != "off" and decoder.inplace and not decoder.scores_every_position:
                log.warning("%s was built before prompt lookup: its answers decode a token per step "
                            "(rebuild it with `hexrag build llm` for sooner voice answers)", s.llm)
            clear_staging(engine.kb.dir)
            engine.kb.warm()
            if engine.passage_kv is not None:
                engine.passage_kv.warm(engine.kb.profile)
            self.engine = engine
            self.status = "ready"
            log.info("ready")
            store = engine.passage_kv
            if store is not None and store.passages and store.dir is not None:
                # every passage's rows kept ahead, as `hexrag kb passage-kv` would: the first question
                # about any entry then waits only for its own tokens
                store.on_new_style = self.writer.refill
                self.writer.keep_filling(partial(fill, engine.kb, store))
        except Exception as e:  # reported by /health, and to whoever started the server
            log.error("start-up failed: %s", e)
            self.status, self.error = "error", str(e)
            if self.on_failure is not None:
                self.on_failure(str(e))

    # what the routers use of the engine (None until it has loaded)
    @property
    def llm(self):
        return self.engine.llm if self.engine else None

    @property
    def embedder(self):
        return self.engine.embedder if self.engine else None

    @property
    def kb(self):
        return self.engine.kb if self.engine else None

    @property
    def model_ids(self) -> list[str]:
        return ["hexrag", "hexrag-voice"] + ([self.llm.name] if self.llm else [])
