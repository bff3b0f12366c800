"""What the server holds: settings, the loaded models and knowledge base, and the accelerator."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from app.accelerator import Accelerator
from app.answer.passage_kv import PassageKV, kept_rows
from app.jobs import KnowledgeWriter
from app.settings import Settings
from app.uploads import clear_staging
from knowledge import KnowledgeBase
from runtime.embedder import Embedder
from runtime.llm import LLM

log = logging.getLogger(__name__)


@dataclass
class AppState:
    settings: Settings
    accelerator: Accelerator
    writer: KnowledgeWriter  # every KB write of the API (upload ingest jobs, deletes), in order, off the event loop
    status: str = "loading"  # loading | ready | error
    error: str | None = None
    llm: LLM | None = None
    embedder: Embedder | None = None
    kb: KnowledgeBase | None = None
    passage_kv: PassageKV | None = None  # kept KV rows: the instructions', with settings.passage_kv the passages' too
    started: float = field(default_factory=time.time)

    def load(self) -> None:
        """Load models and the knowledge base (runs on a background thread at start-up)."""
        s = self.settings
        try:
            if s.backend == "auto":  # `hexrag serve` settles it before; an app made in code may not have
                from app.device import settle

                self.settings = s = settle(s)[0]
            log.info("loading LLM %s on %s", s.llm, s.backend)
            self.llm = LLM(s.llm, s.runtime())
            if s.prompt_lookup != "off" and self.llm.decoder.inplace and not self.llm.decoder.scores_every_position:
                log.warning("%s was built before prompt lookup: its answers decode a token per step "
                            "(rebuild it with `hexrag build llm` for sooner voice answers)", s.llm)
            log.info("loading embedder %s", s.embedder)
            self.embedder = Embedder(s.embedder, s.runtime())
            self.kb = _open_kb(s, self.embedder)
            clear_staging(self.kb.dir)
            self.passage_kv = kept_rows(self.llm, self.kb.dir, passages=s.passage_kv)
            if self.passage_kv is not None:
                self.passage_kv.warm()
            self.status = "ready"
            log.info("ready")
        except Exception as e:  # reported by /health; the server stays up to say why
            log.error("start-up failed: %s", e)
            self.status, self.error = "error", str(e)

    @property
    def model_ids(self) -> list[str]:
        return ["hexrag", "hexrag-voice"] + ([self.llm.name] if self.llm else [])


def _open_kb(settings: Settings, embedder: Embedder) -> KnowledgeBase:
    return KnowledgeBase.open(settings.kb, embedder)
