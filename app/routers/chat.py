"""POST /v1/chat/completions: OpenAI-compatible, retrieval-augmented, streaming (SSE) or not."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from app.accelerator import Reservation
from app.answer.pipeline import AnswerPlan, AnswerResult
from app.answer.types import AnswerRequest, RetrievalOptions, Turn
from app.deps import Ready, check_api_key
from app.errors import APIError, as_api_error
from app.openapi import errors_doc
from app.schemas import ChatRequest
from app.state import AppState
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


def answer_request(req: ChatRequest) -> AnswerRequest:
    """The chat request as the answer layer takes it: tool results are no part of its prompts (no tool
    calling), a developer message is a system one."""
    turns = [Turn("system" if m.role == "developer" else m.role, m.text()) for m in req.messages if m.role != "tool"]
    k = req.knowledge
    retrieval = RetrievalOptions(k.k, k.mode, k.min_score, k.sources) if k else RetrievalOptions()
    return AnswerRequest(turns, voice=req.voice, rag=req.rag, retrieval=retrieval,
                         max_tokens=req.max_completion_tokens or req.max_tokens)


class _Completion:
    """Ids and the chunk/response shapes of one completion."""

    def __init__(self, model: str, plan: AnswerPlan):
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model
        self.plan = plan
        self.citations = [c.model_dump() for c in plan.citations]

    def usage(self, result: AnswerResult) -> dict:
        prompt = result.prompt_tokens
        # `timings` (ms per stage: retrieval, plan, prefill, first token, first sentence) is hexrag's extension
        return {"prompt_tokens": prompt, "completion_tokens": result.completion_tokens,
                "total_tokens": prompt + result.completion_tokens, "timings": result.timings}

    @staticmethod
    def grounding(result: AnswerResult) -> dict | None:
        return result.grounding.model_dump() if result.grounding else None

    def response(self, result: AnswerResult) -> dict:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text},
                             "finish_reason": _FINISH[result.finish_reason], "logprobs": None}],
                "usage": self.usage(result), "citations": self.citations, "grounding": self.grounding(result)}

    def chunk(self, delta: dict, finish: str | None = None, **extra) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def usage_chunk(self, result: AnswerResult) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": self.usage(result)}
        return f"data: {json.dumps(body)}\n\n"


# Open API 3.1 has an event stream's schema describe each event (its fields); an event's data is a
# chunk or an error as JSON text, or the closing [DONE]
_EVENT = {"type": "object", "required": ["data"], "properties": {"data": {"anyOf": [
    {"const": "[DONE]"},
    {"type": "string", "contentMediaType": "application/json", "contentSchema": {"anyOf": [
        {"type": "object", "required": ["id", "object", "choices"],
         "properties": {"object": {"const": "chat.completion.chunk"}, "choices": {"type": "array"}}},
        {"$ref": "#/components/schemas/ErrorResponse"}]}}]}}}
_STREAM_DOC = {"content": {"text/event-stream": {"schema": _EVENT}},
               "description": "A chat.completion object, or with `stream: true` server-sent events: "
                              "chat.completion.chunk objects, an `error` object if the generation fails, "
                              "then `[DONE]`."}


@router.post("/chat/completions", responses={200: _STREAM_DOC, **errors_doc(400, 404, 413, 429)})
async def chat_completions(req: ChatRequest, state: Ready, request: Request):
    if req.model not in state.model_ids:
        raise APIError(404, f"The model '{req.model}' does not exist; see GET /v1/models", "model_not_found",
                       param="model")
    req.voice = req.voice or req.model == VOICE_MODEL
    s, engine = state.settings, state.engine
    sampling = _sampling(req, s.default_repetition_penalty)
    # off the event loop: the KB's counts are SQLite reads
    plan = await run_in_threadpool(engine.plan, answer_request(req))
    completion = _Completion(req.model, plan)
    if not plan.needs_model:  # "I don't know" or the passages' own words: never queued behind a generation
        gen = engine.generation(plan, sampling)
        pieces = list(gen)
        if req.stream:
            return StreamingResponse(_sse(completion, _replay([*pieces, gen.result]), None, False),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return JSONResponse(completion.response(gen.result))

    def start(cancel):
        return engine.generation(plan, sampling, stop=req.stop, cancel=cancel)

    if not req.stream:
        return await _unless_disconnected(request, _complete(state, completion, start))
    reservation = await state.accelerator.acquire()  # before the 200, so a full queue is a 429
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    events = state.accelerator.stream(start, s.request_timeout_s)
    return StreamingResponse(_sse(completion, events, reservation, include_usage),
                             media_type="text/event-stream", headers={"Cache-Control": "no-cache"},
                             background=BackgroundTask(reservation.release))


async def _complete(state: AppState, completion: _Completion, start) -> JSONResponse:
    reservation = await state.accelerator.acquire()
    try:
        result = None
        async for item in state.accelerator.stream(start, state.settings.request_timeout_s):
            if isinstance(item, AnswerResult):
                result = item
    finally:
        reservation.release()
    return JSONResponse(completion.response(result))


async def _unless_disconnected(request: Request, work: Awaitable[Response]) -> Response:
    """Run `work`; when the client hangs up first, cancel it: a waiting request leaves the queue and a
    running generation stops within one step, so the accelerator goes to the next client."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it
    return task.result()


async def _disconnected(request: Request) -> None:
    # the body is read already: the next message is the disconnect (or the end of the response)
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _replay(items: list) -> AsyncIterator:
    for item in items:
        yield item


async def _sse(completion: _Completion, events: AsyncIterator, reservation: Reservation | None,
               include_usage: bool) -> AsyncIterator[str]:
    """Pieces are verified sentences (or, for a plain chat, the model's deltas); the grounding comes last."""
    try:
        yield completion.chunk({"role": "assistant", "content": ""}, citations=completion.citations)
        try:
            async for item in events:
                if isinstance(item, AnswerResult):
                    yield completion.chunk({}, _FINISH[item.finish_reason], grounding=completion.grounding(item))
                    if include_usage:
                        yield completion.usage_chunk(item)
                elif item:
                    yield completion.chunk({"content": item})
        except Exception as e:  # the 200 is sent: the client learns of the failure from an event
            yield f"data: {json.dumps(as_api_error(e).body())}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        try:
            await events.aclose()  # a disconnect lands here: the generation is cancelled first ...
        finally:
            if reservation is not None:
                reservation.release()  # ... and the slot freed even if this task is being cancelled
