"""Request and response bodies of the OpenAI-compatible API (plus hexrag's extensions).

Bodies are validated as their JSON schema reads: "5" is no number and 1 no boolean (pydantic's strict
mode), while 5.0 is the integer 5 (as in JSON Schema).

OpenAI fields hexrag cannot honour are declared with the only values it accepts (what clients send
by default), so the OpenAPI document says so and any other value is refused with the error code
`unsupported_parameter` instead of being silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WrapValidator,
                      model_validator)
from pydantic_core import PydanticCustomError

MAX_EMBEDDING_INPUTS = 256  # texts per embeddings request


def _unicode(text: str) -> str:
    # JSON may escape a lone surrogate ("\ud800"): not Unicode text, and no tokenizer takes it
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError("invalid_text", "text must be valid Unicode (it holds a lone surrogate)") from None
    return text


Text = Annotated[str, AfterValidator(_unicode)]


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def Int(**bounds) -> Any:
    """An integer, strictly, but as in JSON Schema 5.0 is one; `bounds` as Field's (ge=..., le=...)."""
    return Annotated[int, Field(**bounds), BeforeValidator(_integral)]


def unsupported(allowed: Any, why: str) -> Any:
    """`allowed` (the harmless values) or a validation error of type `unsupported_parameter`."""

    def refuse(value, handler):
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("unsupported_parameter", f"not supported: {why}") from None

    return Annotated[allowed, WrapValidator(refuse), Field(description=f"Not supported: {why}.")]


class ContentPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    type: unsupported(Literal["text"], "content other than text (images, audio, files)")
    text: Text | None = None


# As in OpenAI's API, only an assistant's message may come without content (it may have called a tool)
_CONTENT_REQUIRED = {"if": {"properties": {"role": {"not": {"const": "assistant"}}}},
                     "then": {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}}}


class ChatMessage(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", json_schema_extra=_CONTENT_REQUIRED)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[ContentPart] | None = None

    @model_validator(mode="after")
    def _content(self) -> ChatMessage:
        if self.content is None and self.role != "assistant":
            raise PydanticCustomError("missing_content", "a {role} message needs content (only an assistant's "
                                      "may be null)", {"role": self.role, "field": "content"})
        return self

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text or "" for p in self.content if p.type == "text")
        return self.content or ""


class KnowledgeOptions(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    k: Int(ge=1, le=20) = 4
    mode: Literal["dense", "bm25", "hybrid"] = "hybrid"
    min_score: float | None = Field(default=None, allow_inf_nan=False)
    sources: list[Text] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    include_usage: bool = False


class TextFormat(BaseModel):
    model_config = ConfigDict(strict=True)
    type: Literal["text"]


def _stops(stop: str | list[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else (stop or [])


# hexrag calls no tools, so tool results are left out of its prompts: they alone are no conversation
_NOT_ONLY_TOOLS = {"contains": {"properties": {"role": {"not": {"const": "tool"}}}}}


def _not_only_tools(messages: list[ChatMessage]) -> list[ChatMessage]:
    if all(m.role == "tool" for m in messages):
        raise PydanticCustomError("only_tool_messages", "give at least one message that is not a tool result "
                                  "(hexrag calls no tools)")
    return messages


class ChatRequest(BaseModel):
    # other unknown fields (user, metadata, store, ...) change nothing about the answer: ignored
    model_config = ConfigDict(strict=True, extra="ignore")
    model: Text = "hexrag"
    messages: Annotated[list[ChatMessage], AfterValidator(_not_only_tools)] = Field(
        min_length=1, json_schema_extra=_NOT_ONLY_TOOLS)
    max_tokens: Int(ge=1) | None = None
    max_completion_tokens: Int(ge=1) | None = None
    temperature: float | None = Field(default=None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    top_k: Int(ge=0) | None = None
    repetition_penalty: float | None = Field(default=None, ge=0.01, le=10, allow_inf_nan=False)
    seed: Int() | None = Field(default=None, description="Any integer; taken modulo 2**64 (so -1 is valid).")
    stop: Annotated[Text | Annotated[list[Text], Field(max_length=4)] | None, AfterValidator(_stops)] = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # OpenAI fields accepted only with their harmless values
    n: unsupported(Literal[1], "n other than 1 (one generation at a time)") = 1
    tools: unsupported(None, "no function calling") = None
    tool_choice: unsupported(Literal["none"] | None, "no function calling") = None
    functions: unsupported(None, "no function calling") = None
    function_call: unsupported(Literal["none"] | None, "no function calling") = None
    response_format: unsupported(TextFormat | None, "formats other than text") = None
    logprobs: unsupported(Literal[False] | None, "no log probabilities") = None
    top_logprobs: unsupported(Literal[0] | None, "no log probabilities") = None
    logit_bias: unsupported(Annotated[dict, Field(max_length=0)] | None, "no logit bias") = None
    frequency_penalty: unsupported(Annotated[float, Field(ge=0, le=0)] | None,
                                   "use repetition_penalty") = None
    presence_penalty: unsupported(Annotated[float, Field(ge=0, le=0)] | None,
                                  "use repetition_penalty") = None
    modalities: unsupported(list[Literal["text"]] | None, "modalities other than text") = None
    audio: unsupported(None, "no audio output") = None
    # hexrag extensions
    rag: bool = True
    knowledge: KnowledgeOptions | None = None
    voice: bool = False


def _texts(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    model: Text | None = None
    input: Annotated[Text | Annotated[list[Text], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)],
                     AfterValidator(_texts)] = Field(description="A string or a non-empty list of strings "
                                                                 f"(at most {MAX_EMBEDDING_INPUTS}).")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: unsupported(None, "the embedder's vectors have one fixed size") = None


class SearchRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    query: Text = Field(min_length=1)
    k: Int(ge=1, le=50) = 5
    mode: Literal["dense", "bm25", "hybrid"] = "hybrid"
    min_score: float | None = Field(default=None, allow_inf_nan=False)
