"""The assistant without a server: the same RAG pipeline the chat API uses, for `hexrag ask` / `chat`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from app.rag import prepare_chat
from app.schemas import ChatRequest, Citation
from app.settings import Settings
from app.voice import SentenceChunker, speakable
from runtime.llm import LLM
from runtime.sampling import SamplingParams


@dataclass
class Answer:
    text: str = ""
    citations: list[Citation] = field(default_factory=list)
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float = 0.0


class Assistant:
    def __init__(self, settings: Settings, rag: bool = True):
        from knowledge import KnowledgeBase
        from runtime.embedder import Embedder

        self.settings = settings
        self.llm = LLM(settings.llm, backend=settings.backend, threads=settings.threads)
        self.kb = None
        if rag:
            self.kb = KnowledgeBase.open(settings.kb, Embedder(settings.embedder, backend=settings.backend,
                                                                 threads=settings.threads))
        self.history: list[dict] = []

    def ask(self, question: str, voice: bool = False, keep_history: bool = False) -> Iterator[str]:
        """Stream the answer's text; the finished `Answer` is the generator's return value."""
        s = self.settings
        messages = [*self.history, {"role": "user", "content": question}]
        req = ChatRequest(messages=messages, voice=voice, rag=self.kb is not None)
        search = self.kb.search if self.kb is not None and self.kb.stats()["chunks"] else None
        prepared = prepare_chat(req, self.llm, search, s.default_max_tokens, s.rag_k, s.rag_min_score)
        answer = Answer(citations=prepared.citations, prompt_tokens=len(prepared.prompt_ids))
        if prepared.canned_answer is not None:
            answer.text = prepared.canned_answer
            yield answer.text
        else:
            gen = self.llm.generate(prepared.prompt_ids, max_new_tokens=prepared.max_tokens,
                                    sampling=SamplingParams(repetition_penalty=s.default_repetition_penalty))
            chunker = SentenceChunker() if voice else None
            parts = []
            for delta in gen:
                for piece in ([delta.text] if chunker is None else map(speakable, chunker.push(delta.text))):
                    parts.append(piece)
                    yield piece
            for piece in map(speakable, chunker.flush()) if chunker else []:
                parts.append(piece)
                yield piece
            r = gen.result
            answer.text = (" " if voice else "").join(parts)
            answer.finish_reason, answer.completion_tokens, answer.ttft_s = (r.finish_reason, r.completion_tokens,
                                                                             r.ttft_s)
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
    return [f"[{c.index}] {Path(c.source).name}" + (f" › {c.heading}" if c.heading else "") for c in citations]
