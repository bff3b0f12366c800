"""The extractive answer: the passage's own sentences that answer the question, quoted verbatim.

Authored KB text is the safest thing a car can say. The sentences that share most of the question's
terms are chosen (a sentence with a number wins ties when the question asks for a quantity), at most
two or one for each thing the question asks, kept in the passage's order; a safety sentence of the
same passage ("never", "do not") goes with them, because a driver who hears only half of a safety
instruction is worse off than one who hears none.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from app.answer.facts import extract_facts, states_phone, states_quantity
from app.answer.question import answers_kind, asks_phone, asks_quantity, parts, unit_of, wanted_units
from app.answer.relevance import coverage, terms
from app.answer.sentences import join_sentences, split_sentences

MAX_SENTENCES = 2
MAX_PARTS = 3  # a spoken answer to more than three questions at once is too long to follow
Similarity = Callable[[str, list[str]], list[float]]
_SAFETY = re.compile(r"\b(?:never|do not|don't|must not|always|warning|danger)\b|切勿|不要|禁止|务必|必须", re.I)


def extract_answer(question: str, passage: str, similarity: Similarity | None = None,
                   max_sentences: int = MAX_SENTENCES) -> str:
    """The best sentences of `passage` for `question`, verbatim, in passage order; for a question
    asking several things (`parts`), the best sentence for each of them.

    `similarity(question, sentences)` (the embedder's cosines, when it reads the question) adds
    meaning to the shared-terms score: "every day" finds "for daily driving"."""
    sentences = [s for s in split_sentences(passage.strip()) if s.strip()]
    if not sentences:
        return ""
    asked = parts(question)
    if len(asked) > 1:
        chosen = {_best_for(part, sentences, similarity) for part in asked[:MAX_PARTS]}
    else:
        ranked = _ranked(question, sentences, similarity)
        first = _of_kind(question, sentences, ranked)
        best = dict(ranked)[first]
        chosen = {first} | {i for i, v in ranked[:max_sentences] if i != first and v >= 0.6 * best and v > 0}
    wanted = terms(question)
    safety = next((i for i in range(len(sentences)) if _SAFETY.search(sentences[i]) and i not in chosen), None)
    if safety is not None and terms(sentences[safety]) & wanted:
        chosen.add(safety)
    return join_sentences([sentences[i] for i in sorted(chosen)])


def best_sentence(question: str, passage: str, similarity: Similarity | None = None,
                  keep: Callable[[str], bool] = bool) -> str:
    """The one sentence of `passage` that best answers `question` among those `keep` accepts,
    verbatim; "" when there is none."""
    sentences = [s.strip() for s in split_sentences(passage.strip()) if s.strip() and keep(s.strip())]
    return sentences[_ranked(question, sentences, similarity)[0][0]] if sentences else ""


def _best_for(part: str, sentences: list[str], similarity: Similarity | None) -> int:
    """The best sentence for one part of a question (`_of_kind`)."""
    return _of_kind(part, sentences, _ranked(part, sentences, similarity))


def _of_kind(question: str, sentences: list[str], ranked: list[tuple[int, float]]) -> int:
    """The best ranked sentence among those stating the kind of value the question asks for when any
    does ("要收钱吗？": the sentence saying it is free; "where is it?": the one saying where, not the one
    saying what it does)."""
    return next((i for i, _ in ranked if answers_kind(question, sentences[i])), ranked[0][0])


def _ranked(question: str, sentences: list[str], similarity: Similarity | None) -> list[tuple[int, float]]:
    """(sentence index, score) best first: shared terms plus meaning, a bonus for stating the kind
    of fact asked for; earlier sentences win ties, since FAQ answers lead with the point."""
    quantity, phone, wanted = asks_quantity(question), asks_phone(question), terms(question)
    units = wanted_units(question)
    cosines = similarity(question, [s.strip() for s in sentences]) if similarity else [0.0] * len(sentences)

    def score(i: int) -> float:
        s, facts = sentences[i], extract_facts(sentences[i])
        value = (coverage(question, s) if wanted else 0.0) + cosines[i]
        if quantity and states_quantity(facts):
            value += 0.25
        if units and any(unit_of(f) in units for f in facts):  # "how fast": the speed, not the distance
            value += 0.25
        if phone and states_phone(facts):
            value += 0.5
        return value - 0.01 * i

    return sorted(((i, score(i)) for i in range(len(sentences))), key=lambda pair: pair[1], reverse=True)
