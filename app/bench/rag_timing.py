"""Time to first token of a RAG answer, by stage: what a driver waits for after asking.

    question ─► embed the query ─► search (BM25 + vector + fusion) ─► build the prompt (fit passages,
    chat template, tokenize) ─► prefill on a cold cache ─► first token

Each stage is timed on its own and runs once: the search gets the query vector the embed stage
made, prompt building gets the finished hits; medians over `repeats`. Absolute timings: reported,
never gated.
"""

from __future__ import annotations

import statistics
import time

TYPICAL_QUESTION = "The tyre pressure warning light is on. What should I do?"  # the quickstart's question


class _Embedded:
    """The KB's embedder with the question's vector already made, so the search stage times
    retrieval alone (KnowledgeBase.search embeds its query itself)."""

    def __init__(self, embedder, text: str, embeddings):
        self._embedder, self._text, self._embeddings = embedder, text, embeddings

    def embed(self, texts: list[str], buckets: bool = True, kind="passage"):
        if texts == [self._text] and kind == "query":
            return self._embeddings
        return self._embedder.embed(texts, buckets, kind)

    def __getattr__(self, name: str):
        return getattr(self._embedder, name)


class _Searched:
    """The KB with this question's hits already found, so the prompt stage times prompt building alone."""

    def __init__(self, kb, hits):
        self._kb, self._hits = kb, hits

    def search(self, *args, **kwargs):
        return self._hits

    def __getattr__(self, name: str):
        return getattr(self._kb, name)


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, (time.perf_counter() - start) * 1000


def rag_ttft(assistant, question: str = TYPICAL_QUESTION, repeats: int = 3) -> dict:
    from app.answer.pipeline import plan_answer
    from app.answer.types import AnswerRequest

    s, kb, llm = assistant.settings, assistant.kb, assistant.llm
    req = AnswerRequest.ask(question)
    stages: dict[str, list[float]] = {"embed_ms": [], "search_ms": [], "prompt_ms": [], "prefill_ms": []}
    prompt_tokens = passages = 0
    for _ in range(repeats):
        embedder = kb.embedder
        vectors, embed_ms = _timed(lambda: embedder.embed([question], kind="query"))
        kb.embedder = _Embedded(embedder, question, vectors)
        try:
            hits, search_ms = _timed(lambda: kb.search(question, k=s.rag_k, min_score=s.rag_min_score))
        finally:
            kb.embedder = embedder
        prepared, prompt_ms = _timed(lambda: plan_answer(req, llm, _Searched(kb, hits), s.default_max_tokens,
                                                         s.rag_k, s.rag_min_score))
        if prepared.refusal is not None:  # nothing relevant found: no LLM call to time
            prefill_ms = 0.0
        else:
            llm.decoder.reset()  # cold cache: a new question after another conversation
            prefill_ms = llm.generate(prepared.prompt_ids, max_new_tokens=1).run().ttft_s * 1000
        stages["embed_ms"].append(embed_ms)
        stages["search_ms"].append(search_ms)
        stages["prompt_ms"].append(prompt_ms)
        stages["prefill_ms"].append(prefill_ms)
        prompt_tokens, passages = len(prepared.prompt_ids), len(prepared.passages)
    out = {k: round(statistics.median(v), 1) for k, v in stages.items()}
    out["total_ms"] = round(sum(out.values()), 1)
    return {"question": question, "prompt_tokens": prompt_tokens, "passages": passages, "repeats": repeats,
            "refused": prepared.refusal is not None, **out}
