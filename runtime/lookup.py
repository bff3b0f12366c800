"""Prompt-lookup decoding: draft the next tokens from the text already in the context.

A grounded answer copies spans of its passages ("The roadside assistance number is 800 555 0199"
is in the prompt almost word for word). When the context's last few tokens occurred earlier, the
tokens that followed them there are a cheap guess at what comes next. The engine scores the
current token and the guess in one graph step (`Decoder.score`) and keeps the guessed tokens up to
the first one greedy decoding would not have picked, plus the pick there: greedy decoding's tokens,
for the cost of about one step (a step reads all the weights whatever its width).

A checking step computes its logits with prefill's kernels, which round differently from a
one-token step's (equally close to the float model), and the rows it keeps round the same way: so
a drafted answer can take the other word where two were tied to the last digits. Measured: at
most 1 of 20 short voice answers changed, and 6 of 68 longer text answers did, two for the worse
(docs/benchmarks.md), which is why only voice answers draft by default (app/settings.py).

    context ... 800 555 0199 ... The number is 800 555 │ ◄ last 2 tokens seen before: draft "0199 ."
"""

from __future__ import annotations

from collections.abc import Iterable


class PromptLookup:
    """The tokens of one generation (prompt, then answer) and an index of their n-grams.

    Each n-gram of `min_ngram`..`max_ngram` tokens maps to where its latest occurrence was followed,
    so a draft costs a few dict lookups however long the prompt is."""

    def __init__(self, tokens: Iterable[int], max_draft: int, max_ngram: int = 3, min_ngram: int = 2):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"n-gram sizes must satisfy 1 <= {min_ngram} <= {max_ngram}")
        self.max_draft = max_draft
        self.sizes = range(max_ngram, min_ngram - 1, -1)  # longest first: the most specific match
        self.tokens: list[int] = []
        self._follows: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        for token in tokens:
            self.tokens.append(token)
            # index the n-grams that end just before this token: their follower is now known (the
            # one ending at the last token is not indexed yet, so a draft never matches itself)
            end = len(self.tokens) - 1
            for n in self.sizes:
                if end >= n:
                    self._follows[tuple(self.tokens[end - n:end])] = end

    def draft(self, limit: int) -> list[int]:
        """Up to min(limit, max_draft) tokens that followed the latest earlier occurrence of the
        longest n-gram the context ends with; [] when it ends with none seen before."""
        limit = min(limit, self.max_draft)
        if limit <= 0:
            return []
        for n in self.sizes:
            at = self._follows.get(tuple(self.tokens[-n:])) if len(self.tokens) >= n else None
            if at is not None:
                return self.tokens[at:at + limit]
        return []
