"""Where things are: the places a sentence states, and whether a question asks for one.

A place is a fact a driver acts on like a number: "the fuse box is on the dashboard" sends them
looking for something that is not there. A place is a spatial preposition and what follows its
article, up to the first function word:

    "under the boot floor" · "on the left steering wheel" · "at the back of the boot"  (English)
    "位于后备箱底部" · "在仪表板下方"                                                    (Chinese)

Its key is the content terms that name where (the first two English stems, or the Chinese
bigrams): "on the left steering wheel" -> left, steer. Trailing words the pattern over-reaches to
("on the steering column watches") stay out of the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.answer.facts import normalize
from app.answer.relevance import term_words

_PREPOSITION = (r"in|on|under|underneath|beneath|behind|inside|beside|below|above|next\s+to|near|"
                r"at\s+the\s+(?:back|front|rear|top|bottom|side|base|end)\s+of")
_FUNCTION = r"and|or|to|of|for|with|when|while|if|so|as|in|on|at|by|from|until|then|but|which|that|where|is|are"
_EN = re.compile(rf"\b(?:{_PREPOSITION})\s+(?:the|your|its|their)\s+"
                 rf"([a-z][\w'-]*(?:\s+(?!(?:{_FUNCTION})\b)[a-z][\w'-]*){{0,2}})", re.I)
_ZH = re.compile(r"(?:位于|在)([\u4e00-\u9fff]{2,6}?)的?(?:里面|里|内|上方|下方|下面|上面|底部|旁边|后面|前面|"
                 r"左侧|右侧|附近|中间|上|下|旁|后)")
_WHERE = re.compile(r"\bwhere\b|哪里|哪儿|在哪|什么位置|什么地方", re.I)


@dataclass(frozen=True)
class Place:
    text: str  # as written: "on the dashboard of"
    key: frozenset[str]  # the terms that say where: {"dashb"}


def places(text: str) -> list[Place]:
    """Every place the text states, in order; a place whose words are all stop words ("in the car")
    names nowhere in particular and is left out."""
    text = normalize(text)
    found = []
    for m in _EN.finditer(text):
        key = list(term_words(m.group(1)))[:2]
        if key:
            found.append(Place(m.group(0), frozenset(key)))
    for m in _ZH.finditer(text):
        key = term_words(m.group(1))
        if key:
            found.append(Place(m.group(0), frozenset(key)))
    return found


def asks_place(question: str) -> bool:
    return bool(_WHERE.search(question))
