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


# a clause ends at a comma, semicolon or colon followed by a space ("1,500 kg" is one number), or at
# Chinese ，；： at once
_CLAUSE_END = re.compile(r"[,;:][\"')\]”’]*\s+|[，；：]\s*")
_WORDS = re.compile(r"[^\W\d_]+|\d[\d.,]*")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
# a first clause this long is worth saying on its own: six words, or twelve Chinese characters (a
# Chinese word is one to three characters, most often two); a shorter one ("Yes," "To do that,")
# waits for the rest of its sentence
FIRST_CLAUSE_WORDS = 6
FIRST_CLAUSE_HANZI = 12


def _long_clause(text: str) -> bool:
    hanzi = len(_CJK.findall(text))
    return hanzi >= FIRST_CLAUSE_HANZI or len(_WORDS.findall(_CJK.sub(" ", text))) >= FIRST_CLAUSE_WORDS


class SentenceStream:
    """Feed text deltas, take whole sentences; `flush` returns the unfinished rest. With `first_clause`
    (spoken answers) the first unit may be a long enough clause ending at a comma, semicolon or colon:
    text to speech starts on it while the model writes the rest of its sentence, and the checks still
    see every unit before it is said."""

    def __init__(self, first_clause: bool = False):
        self._buf = ""
        self._first = first_clause

    def push(self, text: str) -> list[str]:
        self._buf += text
        out = []
        if self._first:
            whole, _ = _split(self._buf)
            end = len(whole[0]) if whole else len(self._buf)  # a clause of the first sentence only
            m = next((m for m in _CLAUSE_END.finditer(self._buf, 0, end) if _long_clause(self._buf[:m.start()])),
                     None)
            if m:
                out.append(self._buf[:m.end()])
                self._buf = self._buf[m.end():]
            self._first = not (m or whole)
        whole, self._buf = _split(self._buf)
        return out + whole

    def flush(self) -> list[str]:
        rest, self._buf = self._buf, ""
        return [rest] if rest else []


def ends_clause(text: str) -> bool:
    """Whether a unit of a stream ends inside its sentence (a first clause, SentenceStream)."""
    return text.rstrip()[-1:] in (",", ";", ":", "，", "；", "：")


def is_list_marker(sentence: str) -> bool:
    return bool(_LIST_MARKER.match(sentence))


def is_lead_in(sentence: str) -> bool:
    """A sentence that announces what follows ("You can follow these steps:"): alone it answers
    nothing, so it is said only with the sentence after it."""
    return sentence.rstrip()[-1:] in (":", "：")


_MARKDOWN = [
    (re.compile(r"^\s{0,3}#{1,6}\s*(.*?)\s*$", re.M), r"\1."),  # a heading becomes a short sentence
    (re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+", re.M), ""),  # list markers
    (re.compile(r"(\*\*|\*|`)(.+?)\1"), r"\2"),  # emphasis / code
    # underscores emphasise only at a word's edges: MAX_CONTENT_LENGTH is a name (CommonMark)
    (re.compile(r"(?<!\w)(__|_)(.+?)\1(?!\w)"), r"\2"),
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
