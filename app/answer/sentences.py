"""Sentences out of streamed text: the unit the answer layer verifies, holds back and releases.

Each sentence keeps the whitespace that followed it in the model's text, so joining the released
sentences gives back exactly what was generated (streamed and non-streamed answers are the same text).
"""

from __future__ import annotations

import re

# a sentence ends at . ! ? followed by whitespace (so "7.4" and "800-555-0199." inside a line do
# not split), after Chinese 。！？ at once, and at a line break (lists, headings)
_END = re.compile(r"(?<=[.!?])[\"')\]”’]*\s+|(?<=[。！？；])[”’」]*\s*|\n+\s*")
_CLAUSE = re.compile(r"[;；]")
_LIST_MARKER = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s*$")  # "1." alone is a list marker, not a sentence


def _split(text: str) -> tuple[list[str], str]:
    """Whole sentences (each with its trailing whitespace) and the unfinished rest."""
    out, start = [], 0
    for m in _END.finditer(text):
        if m.start() > start:
            out.append(text[start:m.end()])
            start = m.end()
    return out, text[start:]


def clauses(sentence: str) -> list[str]:
    """A sentence's clauses, split at ";": "with 18-inch wheels ... 480 km for the all-wheel drive
    version; 19-inch wheels reduce it"."""
    return [c for c in _CLAUSE.split(sentence) if c.strip()]


def split_sentences(text: str) -> list[str]:
    """Every sentence of a finished text; "".join(result) == text."""
    whole, rest = _split(text)
    return whole + ([rest] if rest else [])


class SentenceStream:
    """Feed text deltas, take whole sentences; `flush` returns the unfinished rest."""

    def __init__(self):
        self._buf = ""

    def push(self, text: str) -> list[str]:
        whole, self._buf = _split(self._buf + text)
        return whole

    def flush(self) -> list[str]:
        rest, self._buf = self._buf, ""
        return [rest] if rest else []


def is_list_marker(sentence: str) -> bool:
    return bool(_LIST_MARKER.match(sentence))


_MARKDOWN = [
    (re.compile(r"^\s{0,3}#{1,6}\s*(.*?)\s*$", re.M), r"\1."),  # a heading becomes a short sentence
    (re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+", re.M), ""),  # list markers
    (re.compile(r"(\*\*|__|\*|_|`)(.+?)\1"), r"\2"),  # emphasis / code
    (re.compile(r"\s*\n+\s*"), " "),
]


def strip_markdown(text: str) -> str:
    """Plain text: a quoted manual sentence ("- **High** – strong deceleration") is said, not rendered."""
    for pattern, repl in _MARKDOWN:
        text = pattern.sub(repl, text)
    return text


def join_sentences(sentences: list[str]) -> str:
    """Whole sentences as one plain text: a space after each, except after Chinese end punctuation."""
    return "".join(strip_markdown(t).strip() + ("" if t.rstrip()[-1:] in "。！？；" else " ") for t in sentences).strip()
