"""The assistant without a server: the same grounded answer pipeline the chat API uses, for `hexrag ask` / `chat`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from app.answer.passage_kv import kept_rows
from app.answer.pipeline import AnswerResult, GroundedGeneration, plan_answer
from app.schemas import ChatRequest, Citation
from app.settings import Settings
from runtime.llm import LLM
from runtime.sampling import SamplingParams


@dataclass
class Answer(AnswerResult):
    """An answer with the passages it drew on."""

    citations: list[Citation] = field(default_factory=list)

    @property
    def first_sentence_s(self) -> float:
        return self.timings.get("first_sentence_ms", 0.0) / 1000


class Assistant:
    def __init__(self, settings: Settings, rag: bool = True):
        from knowledge import KnowledgeBase
        from runtime.embedder import Embedder

        self.settings = settings
        self.llm = LLM(settings.llm, settings.runtime())
        self.kb = None
        if rag:
            self.kb = KnowledgeBase.open(settings.kb, Embedder(settings.embedder, settings.runtime()))
        self.passage_kv = kept_rows(self.llm, settings.kb if rag else None, passages=rag and settings.passage_kv)
        self.history: list[dict] = []

    def ask(self, question: str, voice: bool = False, keep_history: bool = False) -> Iterator[str]:
        """Stream the answer's text; the finished `Answer` is the generator's return value."""
        s = self.settings
        messages = [*self.history, {"role": "user", "content": question}]
        req = ChatRequest(messages=messages, voice=voice, rag=self.kb is not None)
        kb = self.kb if self.kb is not None and self.kb.stats()["chunks"] else None
        plan = plan_answer(req, self.llm, kb, s.default_max_tokens, s.rag_k, s.rag_min_score)
        gen = GroundedGeneration(self.llm, plan, SamplingParams(repetition_penalty=s.default_repetition_penalty),
                                 passage_kv=self.passage_kv, prompt_lookup=s.prompt_lookup)
        yield from gen
        answer = Answer(**vars(gen.result), citations=plan.citations)
        if keep_history:
            self.history += [{"role": "user", "content": question}, {"role": "assistant", "content": answer.text}]
        return answer

    def answer(self, question: str, voice: bool = False) -> Answer:
        """The whole answer at once."""
        gen = self.ask(question, voice=voice)
        while True:
            try:
                next(gen)
            except StopIteration as done:
                return done.value


def citation_lines(citations: list[Citation]) -> list[str]:
    return [f"[{c.index}] {Path(c.source).name}" + (f" › {c.title}" if c.title else "") for c in citations]
