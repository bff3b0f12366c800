"""What the answer layer is asked and what it says back, in its own types: the chat API, the CLI and the
benches map their inputs to an `AnswerRequest`; the API returns `Citation` and `Grounding` as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field


@dataclass(frozen=True)
class Turn:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class RetrievalOptions:
    """How to search the knowledge base for one answer; None: the engine's defaults."""

    k: int | None = None
    mode: Literal["dense", "bm25", "hybrid"] = "hybrid"
    min_score: float | None = None
    sources: list[str] | None = None


@dataclass(frozen=True)
class AnswerRequest:
    turns: list[Turn]  # the conversation, the question last
    voice: bool = False  # spoken: short, speakable sentences
    rag: bool = True  # False: a plain chat, no knowledge base
    retrieval: RetrievalOptions = field(default_factory=RetrievalOptions)
    max_tokens: int | None = None

    @classmethod
    def ask(cls, question: str, **options) -> AnswerRequest:
        """A one-turn request."""
        return cls([Turn("user", question)], **options)


class Citation(BaseModel):
    index: int  # the passage number the prompt labelled this source with
    source: str
    title: str | None = None  # what the passage is: the FAQ question or the section title
    heading: str | None = None
    entry_id: str | None = None
    snippet: str
    score: float


class Grounding(BaseModel):
    """Why the answer says what it says (the `grounding` extension of a chat completion)."""

    decision: Literal["answered", "extractive", "refused"]
    reason: str
    confidence: dict | None = None  # retrieval's answerability signal for the best passage
    # the model's own: the probability it gave to beginning its answer with a refusal, after the passages
    refusal_probability: float | None = None
    passages: list[int] = Field(default_factory=list)  # citation indexes the answer could draw on
    supported: list[str] = Field(default_factory=list)  # hard facts stated, each found in the passages
    unsupported: list[str] = Field(default_factory=list)  # facts the model stated without support (not sent)
    # the question in English, searched in its place: a language the KB's embedder cannot read (translation.py)
    translation: str | None = None
