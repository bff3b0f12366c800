"""The assistant without a server: the same grounded answer pipeline the chat API uses, for `hexrag ask` / `chat`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from app.answer.pipeline import AnswerResult
from app.answer.types import AnswerRequest, Citation, Turn
from app.engine import Engine
from app.settings import Settings


@dataclass
class Answer(AnswerResult):
    """An answer with the passages it drew on."""

    citations: list[Citation] = field(default_factory=list)
    # the passages as the model read them: a title and the section's window, not only the chunk found
    shown: list[str] = field(default_factory=list)

    @property
    def first_sentence_s(self) -> float:
        return self.timings.get("first_sentence_ms", 0.0) / 1000


class Assistant:
    def __init__(self, settings: Settings, rag: bool = True):
        self.engine = Engine.load(settings, rag)
        self.settings, self.llm, self.kb = settings, self.engine.llm, self.engine.kb
        self.history: list[Turn] = []

    @property
    def passage_kv(self):
        return self.engine.passage_kv

    @passage_kv.setter
    def passage_kv(self, value) -> None:
        self.engine.passage_kv = value

    def ask(self, question: str, voice: bool = False, keep_history: bool = False) -> Iterator[str]:
        """Stream the answer's text; the finished `Answer` is the generator's return value."""
        turns = [*self.history, Turn("user", question)]
        plan = self.engine.plan(AnswerRequest(turns, voice=voice, rag=self.kb is not None))
        gen = self.engine.generation(plan)
        yield from gen
        answer = Answer(**vars(gen.result), citations=plan.citations, shown=[p.text for p in plan.passages])
        if keep_history:
            self.history += [Turn("user", question), Turn("assistant", answer.text)]
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
