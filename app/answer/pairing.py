"""What each of a sentence's numbers is said of, when it gives several in one unit.

"Inflate the front tyres to 240 kPa and the rear tyres to 260 kPa" pairs 240 with the front and 260
with the rear; a small model answering about the rear tyres may still say 240. Each number's words
are the nearest terms on its side of the list: before it when the list names its things first
("summer tyres at 3 mm and winter tyres at 4 mm"), after it when the list ends in a name ("use 260
kPa front and 290 kPa rear", "520 km for the rear-wheel drive version and 480 km for the all-wheel
drive version"). Only the words that tell the numbers apart count: "tyres" is said of both.
"""

from __future__ import annotations

import re

from app.answer.facts import extract_facts, normalize, without_facts
from app.answer.question import unit_of
from app.answer.relevance import term_words
from app.answer.sentences import clauses

NEAREST = 2  # terms per number: "replacing summer tyres at 3 mm" is said of summer tyres, not of replacing


def said_of(text: str) -> dict[str, set[str]]:
    """For each number of a unit a clause of the text gives two or more values in: the terms that
    tell it apart from the others (empty when its words are the others' too). Numbers of a unit given
    once in their clause are left out."""
    out: dict[str, set[str]] = {}
    for clause in clauses(normalize(text)):
        for key, words in _said_of(clause).items():
            out.setdefault(key, set()).update(words)
    return out


def _said_of(text: str) -> dict[str, set[str]]:
    facts = [f for f in extract_facts(text) if f.kind == "number" and unit_of(f)]
    out: dict[str, set[str]] = {}
    for unit in {unit_of(f) for f in facts}:
        groups: list[tuple[set[str], int, int]] = []  # the keys a stretch of text states, where it is
        at = 0
        for f in (f for f in facts if unit_of(f) == unit):  # in order of appearance
            start = text.find(f.text, at)
            if start < 0:  # a range's other end: the same words as the end before it
                groups[-1][0].add(f.key)
                continue
            if groups and _SPAN.fullmatch(text[groups[-1][2]:start]):  # "从10%充到80%": one span, not a list
                groups[-1] = (groups[-1][0] | {f.key}, groups[-1][1], start + len(f.text))
            else:
                groups.append(({f.key}, start, start + len(f.text)))
            at = start + len(f.text)
        if len(groups) > 1:
            out.update(_words(text, groups))
    return out


_CJK = re.compile(r"([\u4e00-\u9fff]+)")
_CONJUNCTION = re.compile(r"\b(?:and|or|while|but|whereas)\b|[,，、]|和|而", re.I)
_SPAN = re.compile(r"\s*(?:to|and|-|–|—|~|[\u4e00-\u9fff]?[到至])\s*", re.I)


def _terms(text: str) -> list[str]:
    """The text's content terms in order (term_words' English stems and Chinese bigrams)."""
    out = []
    for piece in _CJK.split(without_facts(text)):
        known = term_words(piece)  # English stems in order of appearance; Chinese bigrams as a set
        if _CJK.fullmatch(piece):
            known = [g for g in ([piece[i:i + 2] for i in range(len(piece) - 1)] or [piece]) if g in known]
        out += list(known)
    return out


def _words(text: str, groups: list[tuple[set[str], int, int]]) -> dict[str, set[str]]:
    """Each number's nearest terms on its side of the list, less every term the other numbers' stretches
    say: "480 km for the all-wheel drive version" keeps nothing the rear-wheel drive's stretch says too.
    Between two numbers a conjunction splits the words: before it they follow the first number
    ("260 kPa front and"), after it they lead to the next ("and the rear tyres to 260 kPa"). The
    side with more words between the numbers is the list's; a tie goes to the side the list's
    ends have words on (the head before the first number or the tail after the last)."""
    between = [_CONJUNCTION.split(text[a[2]:b[1]], maxsplit=1) for a, b in zip(groups, groups[1:])]
    follow = [_terms(parts[0]) if len(parts) > 1 else [] for parts in between]
    lead = [_terms(parts[-1]) for parts in between]
    head, tail = _terms(text[:groups[0][1]]), _terms(text[groups[-1][2]:])
    after = (sum(map(len, follow)), bool(tail)) > (sum(map(len, lead)), bool(head))
    if after:  # "use 260 kPa front and 290 kPa rear": the names follow their numbers
        stretches = [*follow, tail]
        near = [set(w[:NEAREST]) for w in stretches]
    else:  # "the front tyres to 240 kPa and the rear tyres to 260 kPa"
        stretches = [head, *lead]
        near = [set(w[-NEAREST:]) for w in stretches]
    out: dict[str, set[str]] = {}
    for i, (keys, _, _) in enumerate(groups):
        own = near[i] - set().union(*(set(w) for j, w in enumerate(stretches) if j != i))
        for key in keys:
            out.setdefault(key, set()).update(own)
    return out
