"""Retrieval-augmented prompts: pick the query, fit retrieved chunks into the token budget, cite them.

    messages ─► retrieval query (last user turn, plus the previous one when it is short)
             ─► knowledge search ─► passages "[n] source › heading: text" within budget, placed in the last
       user turn (small models follow passages next to the question far better than in the system
       prompt, where SmolLM2-135M tended to talk about the instructions) ─► chat template ─► ids
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.schemas import ChatRequest, Citation
from app.voice import VOICE_INSTRUCTIONS, VOICE_MAX_TOKENS
from runtime.errors import ContextOverflowError
from runtime.llm import LLM

RAG_INSTRUCTIONS = (
    "You are a helpful in-car assistant. Answer briefly, using only the numbered passages the user gives you, "
    "and cite them as [1], [2]. If the passages do not contain the answer, say that you do not know."
)
DONT_KNOW = "I'm sorry, I don't know: the knowledge base has no information about that."
DONT_KNOW_VOICE = "Sorry, I don't have any information about that."
_MARGIN = 8  # tokens kept free for template differences
_SNIPPET = 240


@dataclass
class PreparedChat:
    prompt_ids: list[int]
    max_tokens: int
    citations: list[Citation] = field(default_factory=list)
    canned_answer: str | None = None  # set when retrieval found nothing: answer without the LLM


def retrieval_query(messages: list[dict]) -> str:
    users = [m["content"] for m in messages if m["role"] == "user" and m["content"].strip()]
    if not users:
        return ""
    # follow-ups like "and in winter?" need the previous question to mean anything
    if len(users) > 1 and len(users[-1].split()) < 6:
        return f"{users[-2]} {users[-1]}"
    return users[-1]


def _messages(req: ChatRequest) -> list[dict]:
    out = []
    for m in req.messages:
        if m.role == "tool":
            continue  # no tool calling: tool results are not part of our prompts
        out.append({"role": "system" if m.role == "developer" else m.role, "content": m.text()})
    return out


def _with_system(messages: list[dict], instructions: list[str]) -> list[dict]:
    if not instructions:
        return messages
    user_system = [m["content"] for m in messages if m["role"] == "system"]
    system = "\n\n".join([*instructions, *user_system])
    return [{"role": "system", "content": system}] + [m for m in messages if m["role"] != "system"]


def _with_passages(messages: list[dict], passages: str) -> list[dict]:
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    question = messages[last]["content"]
    turn = {"role": "user", "content": f"Passages:\n{passages}\n\nQuestion: {question}"}
    return messages[:last] + [turn] + messages[last + 1:]


def _context_block(hits, llm: LLM, budget: int) -> tuple[str, list[Citation]]:
    lines, citations, used = [], [], 0
    for hit in hits:
        where = hit.name + (f" › {hit.heading}" if hit.heading else "")
        line = f"[{len(citations) + 1}] {where}: {hit.text.strip()}"
        cost = len(llm.encode(line)) + 1
        if used + cost > budget:
            continue  # a shorter passage further down may still fit
        used += cost
        lines.append(line)
        citations.append(Citation(index=len(citations) + 1, source=hit.name, heading=hit.heading or None,
                                  entry_id=hit.entry_id, snippet=hit.text.strip()[:_SNIPPET],
                                  score=float(hit.score)))
    return "\n".join(lines), citations


def prepare_chat(req: ChatRequest, llm: LLM, search, default_max_tokens: int, default_k: int,
                 default_min_score: float | None) -> PreparedChat:
    """`search(query, k, mode, min_score, sources)` returns hits, or is None when RAG is off/unavailable."""
    messages = _messages(req)
    max_tokens = req.max_completion_tokens or req.max_tokens or default_max_tokens
    if req.voice:
        max_tokens = min(max_tokens, VOICE_MAX_TOKENS)
    instructions = [VOICE_INSTRUCTIONS] if req.voice else []
    base_ids = llm.encode_chat(_with_system(messages, instructions))
    if len(base_ids) >= llm.context:
        raise ContextOverflowError(len(base_ids), llm.context)

    citations: list[Citation] = []
    if req.rag and search is not None:
        opts = req.knowledge
        hits = search(retrieval_query(messages), k=opts.k if opts else default_k, mode=opts.mode if opts else "hybrid",
                      min_score=opts.min_score if opts and opts.min_score is not None else default_min_score,
                      sources=opts.sources if opts else None)
        if not hits:
            return PreparedChat([], 0, canned_answer=DONT_KNOW_VOICE if req.voice else DONT_KNOW)
        # the passages may use what the answer does not: keep room for min(max_tokens, a quarter of the context)
        room = min(max_tokens, llm.context // 4)
        budget = llm.context - len(base_ids) - room - _MARGIN - len(llm.encode(RAG_INSTRUCTIONS))
        context, citations = _context_block(hits, llm, budget)
        if citations:  # when no passage fits, the answer comes from the conversation alone
            instructions = [RAG_INSTRUCTIONS, *instructions]
            messages = _with_passages(messages, context)
    prompt_ids = llm.encode_chat(_with_system(messages, instructions)) if citations else base_ids
    if len(prompt_ids) >= llm.context:
        raise ContextOverflowError(len(prompt_ids), llm.context)
    return PreparedChat(prompt_ids, min(max_tokens, llm.context - len(prompt_ids)), citations)
