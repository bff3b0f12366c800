"""Checking an answer in another language than its passages, by its English translation.

A Chinese answer drawn from English passages shares no words with them: the verifier can check its
values (numbers, names, phone numbers), which are written alike in both (`Verifier(across=True)`), but
a sentence stating none (where a part is, what a light means) has nothing it could be checked by, and
was left out, so that most such answers were refusals. Such a sentence is put into English by the
model (translation.to_english) and checked as the model's English answer to the translated question
would be. The translation is made without the passages: a word of theirs in it is the sentence's own
meaning, not copied from them.

The model owns one KV cache, so a translation cannot run while the answer is being generated: an
answer checked this way is generated whole first, then checked sentence by sentence (generation.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from app.answer.facts import Fact
from app.answer.translation import same_values, writes_chinese
from app.answer.verify import Check, Verifier

# what the value check cannot decide for a sentence in another language: a sentence of words alone, its
# negation and its reply. A value or name that failed is wrong in any language.
_WORDS = frozenset({"unchecked", "negation", "reply"})


class CrossLingualVerifier:
    """A Verifier for an answer in another language than its passages: values are checked as written
    (`native`), the rest by the sentence's English translation (`english`, a Verifier of the translated
    question). `translate(sentence)`: its English ("" when the model gives none)."""

    def __init__(self, native: Verifier, english: Verifier, translate: Callable[[str], str]):
        self.native, self.english = native, english
        self._translate = lru_cache(maxsize=64)(translate)

    def _english(self, sentence: str) -> str:
        """The sentence in English, or "" when the translation cannot stand for it: Chinese left in it,
        or values other than the sentence's (the model answered it instead of translating it)."""
        english = self._translate(sentence.strip())
        if not english or writes_chinese(english) or not same_values(english, sentence):
            return ""
        return english

    def check(self, sentence: str) -> Check:
        check = self.native.check(sentence)
        if check.ok or check.refusal or check.off_topic or check.empty:
            return check
        if any(f.kind not in _WORDS for f in check.unsupported):
            return check
        english = self._english(sentence)
        if not english:
            return check
        said = self.english.check(english)  # "我 don't know." is a refusal its English shows
        if said.refusal:
            return Check(sentence, check.facts, [], True, [])
        # words alone about a thing the KB never names are no reading of the passages, however well checked
        unsupported = said.unsupported + ([Fact("unnamed", "", english)] if self.english.uses_unnamed(english) else [])
        return Check(sentence, check.facts, unsupported, False, said.off_topic)

    def grounded(self, sentence: str) -> bool:
        english = self._english(sentence)
        return bool(english) and self.english.grounded(english)

    def leans_on_next(self, sentence: str) -> bool:
        return self.native.leans_on_next(sentence)

    def quote_fails(self, quote: str) -> list[Fact]:
        return self.native.quote_fails(quote)

    def source_of(self, check: Check) -> str | None:
        return self.native.source_of(check)
