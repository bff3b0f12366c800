"""From search hits to the passages an answer may use, and the prompt that shows them to the model.

    hits ─► re-rank on scores (relevance.py) ─► confidence of the best ─► refuse early when it is low
         ─► one FAQ entry when it leads clearly, else the passages close to the best (a relevance
            budget, not a fixed k) ─► chat-template prompt: instructions as system, passages + question
            as the user turn (1-3B models follow passages next to the question best)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from app.answer.relevance import Confidence, coverage, rerank, score
from knowledge.profile import AnswerProfile
from knowledge.prompts import PASSAGE_SEP, passage_text, passage_turn
from knowledge.retrieval import Hit

# Answerability on the best passage, the defaults of a KB's profile: set on the sample car KB's
# eval_questions.jsonl (no answerable question of 104 below them, 9 of 16 unanswerable ones below),
# and low for any KB: on the development splits of the three answer-eval domains (knowledge/samples/
# evals, 2026-12-04) the lowest answerable question scored 0.44 / 9.5, while on the two documentation
# KBs unanswerable ones scored up to 0.93 (a question about a config key the docs never name matches
# the config page well). Retrieval alone cannot refuse those; the model's own "I don't know" and the
# fact and identifier checks carry them.
MIN_CONFIDENCE = 0.30  # cosine + 0.2 x term coverage, for questions the embedder reads
MIN_BM25 = 5.8  # BM25 of the best passage, for questions it cannot read (Chinese with MiniLM)
COVERAGE_WEIGHT = 0.2
# a passage joins the best one when its score is this close (cosine scale / share of the best BM25)
BUDGET_MARGIN, BUDGET_SHARE = 0.08, 0.75
# one FAQ entry answers alone when it leads the next passage by this much
FAQ_LEAD, FAQ_LEAD_SHARE = 0.05, 0.8
MAX_PASSAGES = 3



_CJK = re.compile(r"[\u4e00-\u9fff]")


def language(text: str) -> str:
    letters = re.findall(r"[^\W\d_]", text)
    return "zh" if letters and sum(bool(_CJK.match(c)) for c in letters) * 3 >= len(letters) else "en"


@dataclass
class Passage:
    index: int  # 1-based, as cited
    hit: Hit
    title: str  # the FAQ question or the section title: what a citation names
    body: str  # the answer text of an FAQ entry, else the chunk text
    faq: bool

    @classmethod
    def of(cls, index: int, hit: Hit, text: str | None = None) -> Passage:
        """`text`: what the passage shows of the hit's place (its whole section); the hit's own text by default."""
        text = (hit.text if text is None else text).strip()
        if hit.entry_id is not None and "\n" in text:  # FAQ chunks are "question\nanswer"
            question, answer = text.split("\n", 1)
            return cls(index, hit, question.strip(), answer.strip(), True)
        title = hit.heading.split(">")[-1].strip() if hit.heading else hit.name
        return cls(index, hit, title, text, False)

    @property
    def text(self) -> str:
        """The passage as it reads to the checks: its title, then its body."""
        return f"{self.title}\n{self.body}"

    def render(self) -> str:
        head = f"FAQ: {self.title}" if self.faq else (self.hit.heading or self.title)
        return passage_text(self.index, head, self.body)


def confidence(question: str, best: Hit, readable: bool, ignore: set[str] = frozenset(),
               others: list[Hit] = ()) -> Confidence:
    """The answerability signal of the best passage: its cosine plus term coverage where the first
    embedder reads the question, else its BM25; `others`, the passages beside a best passage chosen
    by a second embedder's meaning (`select`), stand for it on BM25 when one of them scores higher."""
    if not readable:
        best = max([best, *others], key=lambda h: h.scores.get("bm25", 0.0))
    cov = coverage(question, best.text, ignore)
    if readable:
        dense = best.scores.get("dense", 0.0)
        return Confidence(dense, cov, dense + COVERAGE_WEIGHT * cov)
    return Confidence(None, cov, best.scores.get("bm25", 0.0))


def confident(c: Confidence, profile: AnswerProfile = AnswerProfile()) -> bool:
    if c.dense is not None:
        return c.value >= (MIN_CONFIDENCE if profile.min_confidence is None else profile.min_confidence)
    return c.value >= (MIN_BM25 if profile.min_bm25 is None else profile.min_bm25)


def select(hits: list[Hit], readable: bool, limit: int = MAX_PASSAGES,
           states_wanted: Callable[[Hit], bool] | None = None, ranked_by_kb: bool = False) -> list[Hit]:
    """The hits an answer may use, best first: an FAQ entry that leads clearly stands alone.

    `readable`: the KB's first embedder reads the question, whose cosines the margins are set on; else
    hits are close to the best by their share of its BM25. `ranked_by_kb`: a question the first
    embedder cannot read but a second one does (KnowledgeBase.read_by): the KB's order (that one's
    cosines fused with BM25) is kept, the first hit is the best by meaning, and the others join it
    by their share of the best BM25 among the hits: another model's cosines have another scale.
    `states_wanted(hit)`: whether a hit states the kind of fact the question asks for (a phone
    number); among the hits about as relevant as the best, those that do come first."""
    ranked = list(hits) if ranked_by_kb else rerank(hits, readable)
    if not ranked:
        return []
    top = max(score(h, readable) for h in ranked) if ranked_by_kb else score(ranked[0], readable)

    def close(h: Hit, margin: float, share: float) -> bool:
        s = score(h, readable)
        return s >= top - margin if readable else (s >= share * top or h is ranked[0])

    if states_wanted is not None:
        first = [h for h in ranked if close(h, BUDGET_MARGIN, BUDGET_SHARE) and states_wanted(h)]
        ranked = first + [h for h in ranked if h not in first]

    if ranked[0].entry_id is not None and (len(ranked) == 1 or not close(ranked[1], FAQ_LEAD, FAQ_LEAD_SHARE)):
        return ranked[:1]
    return [h for h in ranked[:limit] if close(h, BUDGET_MARGIN, BUDGET_SHARE)]


def with_passages(messages: list[dict], passages: list[Passage], note: str = "") -> list[dict]:
    """Instructions as the system turn, the passages beside the last question; `note`: what the host
    worked out for the model (limits.comparison_note), after the question."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    turn = {"role": "user", "content": passage_turn([p.render() for p in passages], messages[last]["content"], note)}
    return messages[:last] + [turn] + messages[last + 1:]


@dataclass
class PassagePrompt:
    """A prompt's token ids with each passage's span, so the rows of a passage's tokens can be kept
    and placed (answer/passage_kv.py)."""

    ids: list[int]
    spans: list[tuple[int, int]]  # (offset, length) of the tokens lying wholly inside each passage
    prefix: list[int]  # what a one-turn prompt with these instructions has before its first passage


_SLOT = "\ue000"  # a private-use character marks where the user turn's content goes


def turn_prefix(llm, messages: list[dict]) -> list[int]:
    """The token ids a prompt of `messages` and then a user turn has before that turn's content: what
    every such prompt starts with, whose KV rows can be kept (answer/passage_kv.py)."""
    return llm.encode(llm.chat_prompt(messages + [{"role": "user", "content": _SLOT}]).split(_SLOT)[0])


def passage_prompt(llm, messages: list[dict], passages: list[Passage], note: str = "") -> PassagePrompt:
    """The `with_passages` prompt of `messages` (system turn already in place) encoded whole, as
    before, with the spans read from the tokens' character offsets: a token crossing a passage's
    edge (Qwen's ".\n\n" is one) belongs to no span and is prefilled."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    text = llm.chat_prompt(with_passages(messages, passages, note))
    head = llm.chat_prompt(messages[:last] + [{"role": "user", "content": _SLOT}] + messages[last + 1:]).split(_SLOT)[0]
    ids = llm.encode(text)
    encoding = llm.tokenizer.encode(text, add_special_tokens=False)
    shift = len(ids) - len(encoding.ids)  # a BOS the model adds
    spans, start = [], len(head)
    for p in passages:
        end = start + len(p.render())
        inside = [i + shift for i, (a, b) in enumerate(encoding.offsets) if a >= start and b <= end]
        spans.append((inside[0], len(inside)) if inside else (0, 0))
        start = end + len(PASSAGE_SEP)
    system = [m for m in messages if m["role"] == "system"]
    return PassagePrompt(ids, [s for s in spans if s[1]], turn_prefix(llm, system))
