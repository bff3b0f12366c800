"""Names that carry no number but are facts all the same: what a reader types or looks for.

A documentation KB's answers name configuration keys, functions, modules, flags, environment
variables, paths, boot parameters and products; a small model invents them fluently (`UploadError`,
`FLASK_RUN_PORT`, `--preseed`, "use GParted"). Each is a fact the passages (or the question, which
may name it) must state, written as the answer writes it:

    `code`                      any back-quoted span
    app.config.from_file()      dotted names and calls (a call is looked up without its brackets)
    get_flashed_messages        snake_case
    SECRET_KEY, VT4             capitals with an underscore or a digit
    UploadError, getElementById CamelCase and lowerCamelCase
    --port                      long flags
    /dev/sdb1                   absolute paths
    lowmem=1, priority=low      key=value settings
    GParted, Partition Magic    a capitalised name inside a sentence (not its first word)
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable

from app.answer.facts import Fact

_BACKTICKED = re.compile(r"`([^`\n]{1,80})`")
# names are ASCII (re.A): a Chinese answer writes them glued to its own characters ("在Settings应用中"),
# which a Unicode \w would take for part of the name
_PATTERNS = (
    re.compile(r"(?<![\w.])[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)+(?:\(\))?", re.A),  # dotted names
    re.compile(r"(?<![\w.])[A-Za-z_][\w]*\(\)", re.A),  # calls
    re.compile(r"(?<![\w.-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w-])", re.A),  # snake_case
    re.compile(r"(?<![\w.-])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?![\w-])", re.A),  # CONSTANT_CASE
    re.compile(r"(?<![\w.-])[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+(?![\w-])", re.A),  # CamelCase
    re.compile(r"(?<![\w.-])[a-z]{2,}[A-Z][A-Za-z0-9]*(?![\w-])", re.A),  # lowerCamelCase (not units: kW, mAh)
    re.compile(r"(?<![\w-])--[a-z][\w-]*", re.A),  # long flags
    re.compile(r"(?<![\w/.])/(?:[\w.-]+/)*[\w.-]*[A-Za-z][\w.-]*", re.A),  # absolute paths
    re.compile(r"(?<![\w/-])[a-z][\w./-]*=[\w./:-]+", re.A),  # key=value
)
# a capitalised word (or a run of them) after the sentence's first word, or anywhere in Chinese text: a
# product, a tool, a module
_CJK = "\u3400-\u9fff\u3001\uff0c\uff1a\uff1b"  # Chinese characters and their commas and colons
_PROPER = re.compile(rf"(?:(?<=[a-z0-9,;:)]\s)|(?<=[{_CJK}])|(?<=[{_CJK}]\s))"
                     r"(?:[A-Z][\w+-]*[a-z][\w+-]*)(?:\s+[A-Z][\w+-]*[a-z][\w+-]*)*", re.A)
# inside a dotted name: file names and abbreviations that are words, not identifiers
_ABBREVIATION = re.compile(r"^(?:[a-z]\.)+[a-z]?$", re.I)


def _clean(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def identifiers(text: str) -> list[Fact]:
    """The identifiers ("identifier" facts) and capitalised names ("proper") a text states, keyed by how they
    are looked up, in the order the patterns find them."""
    text = _clean(text)
    spans: list[tuple[int, int, str]] = []

    def add(start: int, end: int, written: str) -> None:
        if not any(a <= start and end <= b for a, b, _ in spans):
            spans.append((start, end, written))

    for m in _BACKTICKED.finditer(text):
        add(m.start(), m.end(), m.group(1).strip())
    for pattern in _PATTERNS:
        for m in pattern.finditer(text):
            if not _ABBREVIATION.match(m.group(0)):
                add(m.start(), m.end(), m.group(0))
    proper = len(spans)
    for m in _PROPER.finditer(text):
        add(m.start(), m.end(), m.group(0))
    keyed = [("identifier" if i < proper else "proper", key(written), written)
             for i, (_, _, written) in enumerate(spans)]
    return [Fact(kind, looked_up, written) for kind, looked_up, written in keyed if looked_up]


def key(written: str) -> str:
    """How an identifier is looked up: lower case, without a call's brackets and surrounding punctuation."""
    return re.sub(r"\(\)$", "", written.strip().strip(".,;:'\"")).lower()


def stated(fact: Fact, text: str) -> bool:
    """Whether `text` (passages, or the question) writes the identifier: the same characters, not
    glued to a longer name."""
    haystack = _clean(text).lower().replace("`", "")
    return re.search(rf"(?<![\w]){re.escape(fact.key)}(?![\w])", haystack, re.A) is not None


def stated_in_parts(fact: Fact, text: str, known: Callable[[str], bool]) -> bool:
    """Whether a capitalised name of several words ("Debian Jessie") is made of what `text` writes and
    of names `known(word)` says the knowledge base writes: some word of it in `text` ("the default since
    jessie"), each other one a name of the KB's own (its subject, "Debian"). A name qualified by the
    KB's subject is the passage's name; one whose every word is elsewhere in the KB is not this
    passage's ("Debian Bookworm" beside a passage on jessie)."""
    words = fact.key.split()
    if fact.kind != "proper" or len(words) < 2:
        return False
    here = [stated(Fact(fact.kind, w, w), text) for w in words]
    return any(here) and all(h or known(w) for w, h in zip(words, here))


_PARTS = re.compile(r"[/.=:]|--?")  # what joins the parts of a name: paths, dotted names, key=value, flags


def misquoted(fact: Fact, written: list[Fact]) -> Fact | None:
    """The identifier of `written` (the passages') that `fact` misquotes: a name of several parts
    written with one part changed ("dhcpserver/disable_autoconfig=true" for the passages'
    "netcfg/disable_autoconfig=true", "app.push_context" for "app.app_context"), where no other
    name of the passages is as close. A small model copying a long name it read changes a part of
    it; a name of one part has nothing kept to tell a misquote from an invention. None otherwise."""
    mine = _PARTS.split(fact.key)
    if fact.kind != "identifier" or len(mine) < 2:
        return None
    close = {w.key: w for w in written if w.kind == "identifier" and w.key != fact.key
             and len(theirs := _PARTS.split(w.key)) == len(mine)
             and sum(a != b for a, b in zip(mine, theirs)) == 1}
    return next(iter(close.values())) if len(close) == 1 else None

