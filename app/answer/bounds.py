"""Which side of a number a sentence puts what it speaks of.

"Radar sensors watch the blind spots when you drive above 10 km/h" makes 10 km/h a lower bound; a
small model answering "up to what speed does it work?" says "it works up to 10 km/h": the passage's
number, its meaning reversed. So each number's bound is read off the words around it:

    "above / over / more than / at least / as little as / 超过 X", "X 以上"   -> lower
    "up to / below / under / at most / maximum / as much as / limits ... to / 不超过 X", "X 以下" -> upper
    a negation before the bound in its clause flips it: "do not drive faster than 50 km/h" -> upper
    "X to Y", "between X and Y", a number on its own                   -> no bound
"""

from __future__ import annotations

import re

from app.answer.facts import extract_facts, normalize

UPPER, LOWER = "upper", "lower"

_ABOUT = r"(?:about|around|approximately|roughly|约|大约)?\s*$"
# "with as little as 350MB" names the least that will do, "holds as much as 5 litres" the most
AS_LITTLE_AS = r"\bas\s+(?:little|few|low|small)\s+as"
AS_MUCH_AS = r"\bas\s+(?:much|many|high|large)\s+as"
_UPPER_BEFORE = re.compile(r"(?:\bup\s+to|\bbelow|\bunder|\b(?:less|lower|slower|shorter|lighter|smaller|fewer|"
                           r"narrower|younger)\s+than|\bat\s+most|" + AS_MUCH_AS + "|"
                           r"\bmax(?:imum)?(?:\s+(?:is|of))?|\bwithin|\blimit(?:s|ed)\s+(?:[\w-]+\s+){0,3}?to|"
                           r"不超过|低于|最多|最高|小于|少于|不到|不足|未满)\s*" + _ABOUT, re.I)
_LOWER_BEFORE = re.compile(r"(?:\babove|\bover|\b(?:more|higher|faster|greater|further|farther|longer|heavier|"
                           r"larger|bigger|wider|taller|older)\s+than|\bat\s+least|" + AS_LITTLE_AS + "|"
                           r"\bminimum(?:\s+(?:is|of))?|\bbeyond|\bexceed(?:s|ing)?|"
                           r"超过|高于|至少|大于|多于)\s*" + _ABOUT, re.I)
_UPPER_AFTER = re.compile(r"^\s*(?:以下|以内|之内|or\s+(?:less|below|under|lower)\b)", re.I)
_LOWER_AFTER = re.compile(r"^\s*(?:以上|or\s+(?:more|above|higher|over)\b|and\s+(?:above|over)\b)", re.I)
# a denial ("it does not switch itself off", "没有备胎") or a negated bound ("do not exceed", "不超过")
# 不 begins words that deny nothing: 不足 "insufficient", 不同 "different", 不断 "continually", 不少 "many" (不少于
# is "no fewer than"), 不久 "soon", 不过 / 不但 / 不仅 "but / not only", 不管 / 不论 "whatever", 不如 "rather",
# 不停 / 不时 "again and again"
NEGATION = re.compile(r"\b(?:not|no|never|cannot|none|nothing)\b|n't\b|不(?![足同断久过但仅管论如停时]|少(?!于))"
                      r"|没有|没法|无法|无需|无须|别|勿", re.I)
_CLAUSE_START = re.compile(r".*[,;:.!?，；：。！？]", re.S)
_RANGE = re.compile(r"\d\s*(?:-|–|—|~|to|至|到)\s*\d", re.I)


def _flip(side: str) -> str:
    return LOWER if side == UPPER else UPPER


def _side(before: str, after: str) -> str | None:
    for pattern, side in ((_UPPER_BEFORE, UPPER), (_LOWER_BEFORE, LOWER)):
        m = pattern.search(before)
        if m:
            clause = _CLAUSE_START.sub("", before[:m.start()])
            # "do not exceed", "no more than", "不超过": a negated lower bound is an upper one
            return _flip(side) if NEGATION.search(clause[-25:]) else side
    for pattern, side in ((_UPPER_AFTER, UPPER), (_LOWER_AFTER, LOWER)):
        if pattern.search(after):
            return side
    return None


def bounds(text: str) -> dict[str, set[str | None]]:
    """Each number's key -> the bounds the text makes it (None: a number said plainly, or a range's end)."""
    text = normalize(text)
    out: dict[str, set[str | None]] = {}
    for f in {f for f in extract_facts(text) if f.kind == "number"}:
        for m in re.finditer(re.escape(f.text), text):
            side = None if _RANGE.search(f.text) else _side(text[:m.start()], text[m.end():])
            out.setdefault(f.key, set()).add(side)
    return out
