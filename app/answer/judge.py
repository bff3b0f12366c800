"""The model's own judgement of whether a text answers a question.

A question's words that the knowledge base never writes are most often the user's way of putting it
("make the badge invalid" of an entry on removing a lost badge, "based on the room's size" of one on
the automatic mode), and sometimes what it asks about and the KB lacks ("a cooling lid" of an entry on
the heated lid). Words cannot tell the two apart; meaning can. The answer model is asked, in a prompt
of its own, whether the text answers the question as the user asked it, and the probability it gives
"yes" against "no" is its judgement (P(True), Kadavath et al. 2022). One prefill of the text and the
question (0.6-1.0 s for an FAQ entry with the 1.5B on two cores), run only where a quote would
otherwise not be said.
"""

from __future__ import annotations

import functools
import math

from runtime.errors import RuntimeModelError
from runtime.llm import LLM

# fitted on the development splits of four domains (docs/benchmarks.md, "Answers on three domains": the
# highest unanswerable question's was 0.74)
MIN_ANSWERS = 0.75
_SYSTEM = "You check whether a text answers a question."
_ASK = "Text:\n{text}\n\nQuestion: {question}\n\nDoes the text answer the question? Reply yes or no."


def judge_prompt(question: str, text: str) -> list[dict]:
    """The messages that ask the model whether `text` answers `question`."""
    return [{"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _ASK.format(text=text, question=question)}]


@functools.cache
def replies(llm: LLM) -> tuple[frozenset[int], frozenset[int]]:
    """The tokens a reply of yes and of no begins with."""
    def first(words: tuple[str, ...]) -> frozenset[int]:
        return frozenset(llm.encode(w, bos=False)[0] for w in words)

    return first(("yes", "Yes", " yes", " Yes", "YES")), first(("no", "No", " no", " No", "NO"))


def answers_probability(llm: LLM, question: str, text: str) -> float | None:
    """The probability the model gives to `text` answering `question` (yes against no, from its first step);
    None when it cannot be asked (no chat template) or puts neither among its likeliest first tokens."""
    try:
        ids = llm.encode_chat(judge_prompt(question, text))
    except RuntimeModelError:
        return None
    top = llm.generate(ids, max_new_tokens=1).run().first_top
    yes, no = replies(llm)
    p_yes = sum(math.exp(lp) for token, lp in top if token in yes)
    p_no = sum(math.exp(lp) for token, lp in top if token in no)
    return p_yes / (p_yes + p_no) if p_yes + p_no else None
