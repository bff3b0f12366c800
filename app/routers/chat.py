"""POST /v1/chat/completions: OpenAI-compatible, retrieval-augmented, streaming (SSE) or not."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask

from app.accelerator import Reservation
from app.deps import Ready, check_api_key
from app.errors import APIError
from app.rag import PreparedChat, prepare_chat
from app.schemas import ChatRequest
from app.state import AppState
from app.voice import SentenceChunker, speakable
from runtime.llm import Delta, GenerationResult
from runtime.sampling import SamplingParams

router = APIRouter(prefix="/v1", dependencies=[Depends(check_api_key)])

VOICE_MODEL = "hexrag-voice"
_FINISH = {"stop": "stop", "length": "length", "cancelled": "length"}  # a timed-out answer is cut short


def _sampling(req: ChatRequest, default_penalty: float) -> SamplingParams:
    try:
        return SamplingParams(temperature=req.temperature or 0.0, top_p=req.top_p or 1.0, top_k=req.top_k or 0,
                              repetition_penalty=req.repetition_penalty or default_penalty, seed=req.seed)
    except ValueError as e:
        raise APIError(400, str(e), "invalid_request") from None


def _search(state: AppState):
    kb = state.kb
    if kb is None or kb.stats().get("chunks", 0) == 0:
        return None  # no knowledge: a plain chat

    return kb.search


class _Completion:
    """Ids and the chunk/response shapes of one completion."""

    def __init__(self, model: str, prepared: PreparedChat):
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model
        self.prepared = prepared
        self.citations = [c.model_dump() for c in prepared.citations]

    def usage(self, completion_tokens: int) -> dict:
        prompt = len(self.prepared.prompt_ids)
        return {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens}

    def response(self, text: str, finish: str, completion_tokens: int) -> dict:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": finish, "logprobs": None}],
                "usage": self.usage(completion_tokens), "citations": self.citations}

    def chunk(self, delta: dict, finish: str | None = None, **extra) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def usage_chunk(self, completion_tokens: int) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": self.usage(completion_tokens)}
        return f"data: {json.dumps(body)}\n\n"


@router.post("/chat/completions")
async def chat_completions(req: ChatRequest, state: Ready):
    if req.model not in state.model_ids:
        raise APIError(404, f"The model '{req.model}' does not exist; see GET /v1/models", "model_not_found",
                       param="model")
    req.voice = req.voice or req.model == VOICE_MODEL
    s = state.settings
    sampling = _sampling(req, s.default_repetition_penalty)
    prepared = await run_in_threadpool(prepare_chat, req, state.llm, _search(state) if req.rag else None,
                                       s.default_max_tokens, s.rag_k, s.rag_min_score)
    completion = _Completion(req.model, prepared)
    if prepared.canned_answer is not None:
        return _canned(completion, prepared.canned_answer, req.stream)

    reservation = await state.accelerator.acquire()

    def start(cancel):
        return state.llm.generate(prepared.prompt_ids, max_new_tokens=prepared.max_tokens, sampling=sampling,
                                  stop=req.stop, cancel=cancel)

    events = state.accelerator.stream(start, s.request_timeout_s)
    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return StreamingResponse(_sse(completion, events, reservation, req.voice, include_usage),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"},
                                 background=BackgroundTask(reservation.release))
    try:
        result = None
        async for item in events:
            if isinstance(item, GenerationResult):
                result = item
    finally:
        reservation.release()
    text = speakable(result.text) if req.voice else result.text
    return JSONResponse(completion.response(text, _FINISH[result.finish_reason], result.completion_tokens))


async def _sse(completion: _Completion, events: AsyncIterator, reservation: Reservation, voice: bool,
               include_usage: bool) -> AsyncIterator[str]:
    chunker = SentenceChunker() if voice else None
    try:
        yield completion.chunk({"role": "assistant", "content": ""}, citations=completion.citations)
        async for item in events:
            if isinstance(item, Delta):
                if not item.text:
                    continue
                if chunker is None:
                    yield completion.chunk({"content": item.text})
                else:  # voice: whole sentences, so text-to-speech can start on each one
                    for sentence in chunker.push(item.text):
                        yield completion.chunk({"content": speakable(sentence) + " "})
            else:
                for sentence in chunker.flush() if chunker else []:
                    yield completion.chunk({"content": speakable(sentence)})
                yield completion.chunk({}, _FINISH[item.finish_reason])
                if include_usage:
                    yield completion.usage_chunk(item.completion_tokens)
        yield "data: [DONE]\n\n"
    finally:
        try:
            await events.aclose()  # a disconnect lands here: the generation is cancelled first ...
        finally:
            reservation.release()  # ... and the slot freed even if this task is being cancelled


def _canned(completion: _Completion, text: str, stream: bool):
    """Retrieval found nothing relevant: say so instead of letting the model invent an answer."""
    if not stream:
        return JSONResponse(completion.response(text, "stop", 0))

    async def body():
        yield completion.chunk({"role": "assistant", "content": ""}, citations=[])
        yield completion.chunk({"content": text})
        yield completion.chunk({}, "stop")
        yield "data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")
