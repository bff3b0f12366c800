"""A question in a language the knowledge base's embedder cannot read, put into one it can.

A Chinese question asked of an English manual finds nothing by its words (BM25 matches no Chinese
in English text), and a multilingual second embedder ranks passages of the question's own language
first, whether or not they answer it. Translated by the answer model into English, the language the
first embedder reads, the question is searched and checked like an English one; the model still reads
the question as asked and answers in its language.

The translation serves retrieval and the checks of the question's words against the passages only:
the user's numbers and the question the model answers are the original's, as a small model sometimes
answers the question instead of translating it."""

from __future__ import annotations

from runtime.llm import LLM
from runtime.sampling import SamplingParams

INSTRUCTION = "Translate each message of the user into English. Reply with the translation only; never answer it."
# how a translation looks, shown before the question: a small model asked alone often answers instead
EXAMPLES = [("这个软件怎么把文件导出成 PDF？", "How do I export a file as a PDF with this software?"),
            ("我家只有 8 GB 内存，装得下吗？", "I only have 8 GB of memory at home. Will it fit?")]
MAX_TOKENS = 96  # a question of a few sentences; a longer reply is an answer, not a translation


def to_english(llm: LLM, text: str) -> str:
    """The text in English, by the model (greedy); "" when it gives nothing usable."""
    shown = [turn for source, english in EXAMPLES
             for turn in ({"role": "user", "content": source}, {"role": "assistant", "content": english})]
    ids = llm.encode_chat([{"role": "system", "content": INSTRUCTION}, *shown, {"role": "user", "content": text}])
    budget = min(MAX_TOKENS, 2 * len(llm.encode(text, bos=False)) + 8)
    gen = llm.generate(ids, max_new_tokens=budget, sampling=SamplingParams())
    out = "".join(delta.text for delta in gen).strip()
    return out.splitlines()[0].strip() if out and gen.result.finish_reason == "stop" else ""
