"""Request and response bodies of the OpenAI-compatible API (plus hexrag's extensions)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text or "" for p in self.content if p.type == "text")
        return self.content or ""


class KnowledgeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    k: int = Field(default=4, ge=1, le=20)
    mode: Literal["dense", "bm25", "hybrid"] = "hybrid"
    min_score: float | None = None
    sources: list[str] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ChatRequest(BaseModel):
    # unknown OpenAI fields (user, logprobs, ...) are accepted and ignored, as local servers do
    model_config = ConfigDict(extra="ignore")
    model: str = "hexrag"
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    repetition_penalty: float | None = Field(default=None, gt=0)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    # hexrag extensions
    rag: bool = True
    knowledge: KnowledgeOptions | None = None
    voice: bool = False

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int) -> int:
        if n != 1:
            raise ValueError("only n=1 is supported (one generation at a time on the accelerator)")
        return n

    @field_validator("stop")
    @classmethod
    def _stops(cls, stop):
        stops = [stop] if isinstance(stop, str) else (stop or [])
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        return stops


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
    passages: list[int] = Field(default_factory=list)  # citation indexes the answer could draw on
    supported: list[str] = Field(default_factory=list)  # hard facts stated, each found in the passages
    unsupported: list[str] = Field(default_factory=list)  # facts the model stated without support (not sent)


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    input: str | list[str] = Field(...)
    encoding_format: Literal["float", "base64"] = "float"

    @field_validator("input")
    @classmethod
    def _non_empty(cls, value):
        texts = [value] if isinstance(value, str) else value
        if not texts or any(not isinstance(t, str) for t in texts):
            raise ValueError("input must be a string or a non-empty list of strings")
        return texts


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1)
    k: int = Field(default=5, ge=1, le=50)
    mode: Literal["dense", "bm25", "hybrid"] = "hybrid"
    min_score: float | None = None
