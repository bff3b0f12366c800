"""The answer engine, assembled in one place for the server and the CLI: the LLM, the embedder, the
knowledge base and the kept KV rows, loaded from the settings; `plan` and `generation` run the
grounded answer pipeline (app/answer) on them with the settings' defaults."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from app.answer.passage_kv import PassageKV, kept_rows
from app.answer.pipeline import AnswerPlan, GroundedGeneration, plan_answer
from app.answer.types import AnswerRequest
from app.settings import Settings
from knowledge import KnowledgeBase
from runtime.embedder import Embedder
from runtime.llm import LLM
from runtime.sampling import SamplingParams

log = logging.getLogger(__name__)


@dataclass
class Engine:
    settings: Settings
    llm: LLM
    embedder: Embedder | None  # None: no knowledge base (a plain chat)
    kb: KnowledgeBase | None
    passage_kv: PassageKV | None  # kept KV rows: the instructions', and the passages' (settings.passage_kv)

    @classmethod
    def load(cls, settings: Settings, rag: bool = True) -> Engine:
        llm = LLM(settings.llm, settings.runtime())
        embedder = kb = None
        if rag:
            embedder = Embedder(settings.embedder, settings.runtime())
            kb = KnowledgeBase.open(settings.kb, embedder)
            second = settings.second_embedder
            if kb.second_model_id is not None and second is not None:  # a KB with the multilingual side
                if not kb.use_second(Embedder(second, settings.runtime())):
                    log.warning("the KB holds second vectors of %s, not of %s: questions the embedder cannot "
                                "read are ranked by their words until `hexrag kb rebuild --second-embedder %s` "
                                "embeds them again", kb.second_model_id, second, second)
        mb = settings.passage_kv_max_mb
        passage_kv = kept_rows(llm, kb.dir if kb is not None else None, passages=settings.passage_kv if rag else False,
                               disk_bytes=mb << 20 if mb is not None else None,
                               precision=settings.passage_kv_precision)
        return cls(settings, llm, embedder, kb, passage_kv)

    def knowledge(self) -> KnowledgeBase | None:
        """The knowledge base answers draw on: none while it holds no chunk (a plain chat)."""
        kb = self.kb
        return kb if kb is not None and kb.stats().get("chunks", 0) else None

    def plan(self, request: AnswerRequest) -> AnswerPlan:
        """Retrieval, the refusal gate and the prompt (no accelerator needed)."""
        s = self.settings
        return plan_answer(request, self.llm, self.knowledge() if request.rag else None, s.default_max_tokens,
                           s.rag_k, s.rag_min_score, kept=self.passage_kv)

    def generation(self, plan: AnswerPlan, sampling: SamplingParams | None = None, stop: list[str] | None = None,
                   cancel: threading.Event | None = None) -> GroundedGeneration:
        """The model's answer to a plan, checked sentence by sentence (iterate it on the accelerator)."""
        s = self.settings
        sampling = sampling or SamplingParams(repetition_penalty=s.default_repetition_penalty)
        return GroundedGeneration(self.llm, plan, sampling, stop=stop, cancel=cancel, passage_kv=self.passage_kv,
                                  prompt_lookup=s.prompt_lookup)
