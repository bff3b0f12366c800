"""A question in a language the knowledge base's embedder cannot read, put into one it can.

A Chinese question asked of an English manual finds nothing by its words (BM25 matches no Chinese
in English text), and a multilingual second embedder ranks passages of the question's own language
first, whether or not they answer it. Translated by the answer model into English, the language the
first embedder reads, the question is searched and checked like an English one; the model still reads
the question as asked and answers in its language.

The translation serves retrieval and the checks of the question's words against the passages only:
the user's numbers and the question the model answers are the original's, as a small model sometimes
answers the question instead of translating it (such a translation, a statement for a question or one
adding a number, is not used). The answer's sentences that state no value are checked in English too
(across.py)."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from app.answer.facts import extract_facts
from app.answer.passages import turn_prefix
from runtime.llm import LLM
from runtime.sampling import SamplingParams

if TYPE_CHECKING:
    from app.answer.passage_kv import PassageKV

INSTRUCTION = ("Translate each message of the user into English. Translate every part of it, with every number and "
               "unit as written. Reply with the translation only; never answer it.")
# how a translation looks, shown before the question: a small model asked alone often answers instead
EXAMPLES = [("这个软件怎么把文件导出成 PDF？", "How do I export a file as a PDF with this software?"),
            ("我家只有 8 GB 内存，装得下吗？", "I only have 8 GB of memory at home. Will it fit?")]
MAX_TOKENS = 96  # a question of a few sentences; a longer reply is an answer, not a translation
# what English never writes: Chinese characters and punctuation, and the parts of a character a token may hold
_NOT_ENGLISH = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef\ufffd]")


def writes_chinese(text: str) -> bool:
    return bool(_NOT_ENGLISH.search(text))


@functools.cache
def _chinese_tokens(llm: LLM) -> frozenset[int]:
    """The model's tokens that write Chinese (or a part of a character)."""
    texts = llm.tokenizer.decode_batch([[i] for i in range(llm.tokenizer.get_vocab_size())])
    return frozenset(i for i, text in enumerate(texts) if writes_chinese(text))


def to_english(llm: LLM, text: str, whole: bool = False, kept: PassageKV | None = None, pieces: bool = False) -> str:
    """The text in English, by the model (greedy); "" when it gives nothing usable: no whole line, a statement
    for a question, or a number the text does not state (an answer, not a translation). `whole`: no Chinese
    token allowed, so a word the model would leave as it is gets put into English ("the滤网 cover"): what a
    sentence checked in English needs. Not at first for a question searched: a word left in Chinese is passed
    over by the English search, while the English word the model is made to pick may find another entry
    (a container's Chinese name made "pot" found no passage for a development question); but a question
    the model answered instead of translating is tried again so, which leads the model another way.
    `kept`: where the rows of the instructions and examples every translation starts with are kept, placed
    instead of prefilled (about 100 tokens: 0.7 s of a 1.5B's prefill on two cores). `pieces`: a question that
    gets no translation whole is translated piece by piece (`_by_pieces`)."""
    english = _translated(llm, text, whole, kept)
    if english or whole:
        return english
    return _translated(llm, text, True, kept) or (_by_pieces(llm, text, kept) if pieces else "")


# where a message's sentences end, and a clause of a sentence
_SENTENCE_END = re.compile(r"(?<=[。？！?!])")
_CLAUSE_END = re.compile(r"[，,](?=[^，,]*$)")


def _asks(text: str) -> bool:
    return text.rstrip().endswith(("?", "？"))


def _pieces(text: str) -> list[str]:
    """A message's sentences, with the clauses that lead up to a question apart from the clause that asks it
    ("路由器用了三年了，晚上老断网，是不是该换了？": how old it is and what it does, then whether to replace it)."""
    out = []
    for sentence in filter(str.strip, _SENTENCE_END.split(text.strip())):
        lead = _CLAUSE_END.split(sentence) if _asks(sentence) else [sentence]
        out += [f"{lead[0]}。", lead[1]] if len(lead) == 2 and lead[0].strip() else [sentence]
    return out


def _by_pieces(llm: LLM, text: str, kept: PassageKV | None) -> str:
    """A long question in English piece by piece (`_pieces`), where the model answers it whole or turns it into a
    statement: each piece is short, as the examples are. A piece telling what happened that gets no usable
    translation is left out; a question that gets none leaves the whole untranslated ("")."""
    said = []
    pieces = _pieces(text)
    if len(pieces) < 2:
        return ""
    for piece in pieces:
        english = _translated(llm, piece, False, kept)
        if not english and _asks(piece):
            return ""
        said.append(english)
    return " ".join(filter(None, said))


# what every translation starts with: the instructions, then the examples as turns
TOLD = [{"role": "system", "content": INSTRUCTION},
        *(turn for source, english in EXAMPLES
          for turn in ({"role": "user", "content": source}, {"role": "assistant", "content": english}))]


@functools.cache
def _told_prefix(llm: LLM) -> list[int]:
    """The token ids every translation prompt of this model starts with (whose kept rows are placed)."""
    return turn_prefix(llm, TOLD)


def _translated(llm: LLM, text: str, whole: bool, kept: PassageKV | None) -> str:
    ids = llm.encode_chat([*TOLD, {"role": "user", "content": text}])
    budget = min(MAX_TOKENS, 2 * len(llm.encode(text, bos=False)) + 8)
    ban = _chinese_tokens(llm) if whole else frozenset()
    placed = None
    if kept is not None:
        prefix = _told_prefix(llm)
        placed = {0: kept.rows([], prefix)} if ids[:len(prefix)] == prefix else None
    gen = llm.generate(ids, max_new_tokens=budget, sampling=SamplingParams(), ban=ban, placed=placed)
    out = "".join(delta.text for delta in gen).strip()
    english = out.splitlines()[0].strip() if out and gen.result.finish_reason == "stop" else ""
    if (_asks(text) and "?" not in english) or not _restates(_numbers(english), _numbers(text)):
        return ""
    return english


def _numbers(text: str) -> set[float]:
    """The amounts a text states, without their units: "一百二" is the translation's "120 km/h"."""
    return {float(f.value) for f in extract_facts(text) if f.kind == "number"}  # digits: facts._NUMBER


def _restates(said: set[float], amounts: set[float]) -> bool:
    """Whether a translation's amounts are the text's: each one of them, or inside the span they give: a
    range said as the one figure it is about ("两三百毫升", 200-300 ml, as "about 250 ml"). A number
    beyond them is the model's answer, not a translation."""
    return all(n in amounts or (amounts and min(amounts) <= n <= max(amounts)) for n in said)


def same_values(one: str, other: str) -> bool:
    """Whether a text and its translation state the same values: the same amounts and phone numbers
    (extract_facts' keys are written alike in either language), and every name, code or menu item of
    either written in the other. A name is found by the words around it ("the ACC button"), which a
    translation changes ("ACC 按钮"), so it is looked for as written."""
    facts = extract_facts(one), extract_facts(other)
    if len({frozenset(f.key for f in found if f.kind in _AMOUNTS) for found in facts}) > 1:
        return False
    return all(_writes(text, f.key) for text, found in zip((other, one), facts)
               for f in found if f.kind not in _AMOUNTS)


_AMOUNTS = ("number", "phone")


def _writes(text: str, key: str) -> bool:
    low = text.lower()
    return key in low or key in low.replace("-", "")
