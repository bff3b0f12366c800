"""Voice mode: answers shaped for text-to-speech, streamed a sentence at a time."""

from __future__ import annotations

import re

VOICE_INSTRUCTIONS = (
    "You are the voice assistant of a car. The driver hears your answer through the speakers, so answer in "
    "one to three short spoken sentences. No lists, no headings, no markdown, no emojis."
)

# unit spellings a text-to-speech engine reads correctly; longest first so "kWh" wins over "kW"
_UNITS = [
    ("km/h", "kilometres per hour"), ("kWh", "kilowatt hours"), ("kW", "kilowatts"), ("kPa", "kilopascals"),
    ("psi", "P S I"), ("km", "kilometres"), ("mm", "millimetres"), ("cm", "centimetres"), ("kg", "kilograms"),
    ("°C", "degrees Celsius"), ("°F", "degrees Fahrenheit"), ("%", " percent"), ("V", "volts"), ("A", "amps"),
    ("h", "hours"), ("min", "minutes"), ("m", "metres"),
]
_UNIT_RE = re.compile(r"(\d)\s*(" + "|".join(re.escape(u) for u, _ in _UNITS) + r")(?![A-Za-z])")
_UNIT_WORDS = dict(_UNITS)
_RANGE_RE = re.compile(r"(\d)\s*[–—-]\s*(\d)")  # 10–80 -> 10 to 80
_MARKDOWN = [
    (re.compile(r"^\s{0,3}#{1,6}\s*(.*?)\s*$", re.M), r"\1."),  # a heading becomes a short sentence
    (re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+", re.M), ""),  # list markers
    (re.compile(r"(\*\*|__|\*|_|`)(.+?)\1"), r"\2"),  # emphasis / code
    (re.compile(r"\[(\d+)\]"), ""),  # citation markers are shown on screen, not read aloud
    (re.compile(r"\s*\n+\s*"), " "),
]
VOICE_MAX_TOKENS = 96  # a spoken answer of a few sentences; small models ignore "be brief" otherwise
_LIST_MARKER = re.compile(r"^\s*\d+[.)]$")  # "1." is a list marker, not a sentence
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])[\"')\]]*\s+|(?<=[。！？])")


def speakable(text: str) -> str:
    """Strip markdown and spell units so the sentence reads naturally aloud."""
    for pattern, repl in _MARKDOWN:
        text = pattern.sub(repl, text)
    text = _RANGE_RE.sub(r"\1 to \2", text)
    text = _UNIT_RE.sub(lambda m: f"{m.group(1)} {_UNIT_WORDS[m.group(2)].strip()}", text)
    text = re.sub(r"\s+([.,;:!?])", r"\1", text)
    return re.sub(r"\s{2,}", " ", text).strip()


class SentenceChunker:
    """Buffers streamed text and releases whole sentences (for sentence-by-sentence TTS)."""

    def __init__(self):
        self._buf = ""

    def push(self, text: str) -> list[str]:
        self._buf += text
        parts = _SENTENCE_END.split(self._buf)
        self._buf = parts.pop()
        # list markers ("1.") end like sentences; a spoken answer drops the numbering
        return [p for p in parts if p.strip() and not _LIST_MARKER.match(p)]

    def flush(self) -> list[str]:
        rest, self._buf = self._buf, ""
        return [rest] if rest.strip() else []
