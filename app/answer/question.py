"""What the driver asked: the question as meant, and the kind of fact it wants.

Spoken questions repair themselves: "how much range does the heat pump... no, how much range do I
get at 120 on the motorway?" asks only the part after the repair, and retrieving on the whole of it
finds the heat pump. A question that asks for a phone number is answered by a passage that states
one; one that asks "how much / how long" by a passage that states a quantity.
"""

from __future__ import annotations

import re

from app.answer.facts import AMOUNT_KINDS, UNIT_WORDS, extract_facts, named_units, states_phone, without_facts
from app.answer.places import asks_place, places
from app.answer.relevance import content_words, terms

# a repair: a pause (… , — ;) then "no", "sorry", "I mean", "wait" ... then the question again
_REPAIR = re.compile(r"(?:\.{2,}|…|,|;|—|–|\s-\s)\s*(?:no+|nope|sorry|i mean|wait|or rather|scratch that|"
                     r"no wait|actually no|no sorry)\s*[,.…!]*\s+", re.I)
_REPAIR_ZH = re.compile(r"(?:不对|不是不是|我是说|我的意思是|说错了|算了)[，,。…\s]*")
_CURRENCIES = (" eur", " usd", " gbp", " cny")
_MIN_TERMS = 2  # a repaired question has at least this many content terms, or the repair is not one

_HOW = "much|many|long|far|fast|often|heavy|big|quick|low|high|strong"  # how ... asks an amount
_ZH_HOW = "多少|多久|多长|多快|多远|多大"
_QUANTITY = re.compile(rf"\b(?:how\s+(?:{_HOW}|old)|what\s+(?:number|size|speed|pressure|type|limit)|which\s+number|"
                       rf"when)\b|{_ZH_HOW}|几|什么型号|电话", re.I)
_PRICE = re.compile(r"\bhow\s+much\b.*\b(?:cost|price|charge|pay)|\b(?:cost|price)\b|多少钱|价格|费用|收钱|收费|要钱|花钱|付钱", re.I)
_FREE = re.compile(r"\bfree\b|no charge|免费|不收费", re.I)
_PHONE = re.compile(r"\b(?:number|call|ring|phone|dial)\b|电话|号码|打给", re.I)
# "how long / how far / how many ...": an amount, whatever its unit ("when" asks for a moment or a condition)
_AMOUNT = re.compile(rf"\bhow\s+(?:{_HOW})\b|\bwhat\s+(?:[a-z]+\s+)?(?:size|speed|pressure|temperature|weight)\b"
                     rf"|{_ZH_HOW}|几[个年天次档秒分小公]", re.I)


def meant(question: str) -> str:
    """The question after its last speech repair; the question itself when it has none."""
    for pattern in (_REPAIR, _REPAIR_ZH):
        parts = pattern.split(question)
        if len(parts) > 1 and len(terms(parts[-1])) >= _MIN_TERMS:
            return parts[-1].strip()
    return question


_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s*")
# a question ends at "?"; a second one may follow a comma and "and" ("how fast, and how far ...?")
_QUESTION_END = re.compile(r"(?<=[?？])\s*")
_WH = r"what|what's|how|where|which|when|who|why|is|are|does|do|can|should|will|at what"
_AND_ASKS = re.compile(rf",?\s+(?:and|or|oh and|also)\s+(?=(?:{_WH})\b)", re.I)
ASKS = re.compile(rf"[?？]|\b(?:{_WH})\b|吗|呢|多少|多久|几|什么|怎么|哪", re.I)


# English inversion, a Chinese question ending in 吗, or Chinese "A-not-A" (够不够, 能不能, 有没有)
A_NOT_A = re.compile(r"([\u4e00-\u9fff])[不没]\1")  # 能不能, 可不可以, 有没有: a question, not a negation
_YES_NO = re.compile(r"^\W*(?:does|do|did|is|are|was|were|can|could|will|would|should|has|have|may|must)\b|吗\W*$"
                     rf"|{A_NOT_A.pattern}", re.I)


# a clause or phrase that sets a condition, a time or a circumstance before the question proper: "If I never
# touch the config, does ...?", "Once the update is done, can I ...?", "With chains on, can I ...?"
_LEADING_CLAUSE = re.compile(r"^\W*(?:if|when|whenever|once|after|before|while|unless|as\s+long\s+as|assuming"
                             r"|now\s+that|in\s+case|with|without|on|in|at|for|during|under)\b[^,?]*,\s*", re.I)


def main_clause(question: str) -> str:
    """The question without a leading condition or time clause."""
    return _LEADING_CLAUSE.sub("", question.strip(), count=1)


def asks_yes_no(question: str) -> bool:
    """"Does the car have a spare wheel?", "If I never touch the config, does it expire?",
    "电池质保能转给下一个车主吗？": a yes or a no answers it."""
    return bool(_YES_NO.search(main_clause(question)))


def asks_yes_no_somewhere(question: str) -> bool:
    """Whether any of the questions asked in one breath is a yes-or-no one: "Got a puncture and sealed it.
    Can I make it there, and how fast may I go?"."""
    return any(asks_yes_no(part) for sentence in _SENTENCE_END.split(question) for part in parts(sentence))


def parts(question: str) -> list[str]:
    """The questions a driver asks in one breath, in order: "How far can I drive on it now and how
    fast?" asks two things, and an answer that states one of them is half an answer. A sentence
    that asks nothing ("I'm just pottering through town.") is context, not a part."""
    out = []
    for sentence in _QUESTION_END.split(question):
        out += [p.strip() for p in _AND_ASKS.split(sentence) if p.strip() and ASKS.search(p)]
    return out or [question]


def asks_quantity(question: str) -> bool:
    return bool(_QUANTITY.search(question))


def asks_phone(question: str) -> bool:
    """A question for a phone number: not one asking where a call button is."""
    return bool(_PHONE.search(question)) and not asks_place(question)


def asks_amount(question: str) -> bool:
    """"How long / how far / at what file size / 多少 / 几档": an amount, whatever its unit; a phone number
    is none."""
    return bool(_AMOUNT.search(question)) and not asks_phone(question)


def asks_number(question: str) -> bool:
    """An amount no answer gives without a number: not a price, which may be "free"."""
    return asks_amount(question) and not _PRICE.search(question)


# words that say what kind of answer is wanted, not what it is about ("the lowest charge limit" asks
# about the charge limit, "how often" for an interval, "where is it located" for a place)
ASKING = terms("number phone call ring dial capacity amount size value maximum minimum lowest highest fastest "
               "slowest longest shortest biggest smallest largest heaviest lightest earliest latest furthest "
               "often located location position situated")


# English's vague and judging words: how anyone talks around what they mean ("how low can I set the max charge
# thing?", "I guess", "it seems", "a bit", "which type", "is it fine to ...", "a good way"), in any domain; a KB
# lacking them lacks no topic
_VAGUE = terms("actual thing stuff kind sort type bit lot think guess reckon wonder suppose seem way fine alright "
               "sure good great nice bad")


def incidental(word: str) -> bool:
    """Whether a question's word names nothing a KB could lack: a vague word (`_VAGUE`), a manner adverb
    ("actually", "roughly", "honestly") or a unit, which the KB may spell otherwise ("kilometres" for km)."""
    stems = terms(word)
    return (word.isascii() and word.endswith("ly")) or word in UNIT_WORDS or bool(stems) and stems <= _VAGUE


_PHONE_WORDS = ASKING | {"电话", "号码", "电话号码", "热线", "多少"}


def phone_topic(question: str) -> set[str]:
    """Whose phone number a question asks for: its words other than the asking ones ("the police",
    "报警", "when the car breaks down"); empty when it asks for none, or just "the number"."""
    return set(content_words(question, topic_only=True)) - _PHONE_WORDS if asks_phone(question) else set()


def topic(question: str) -> set[str]:
    """The question's content terms that name what it is about (numbers, units and words such as
    "number" or "capacity" taken out: they describe the answer)."""
    return terms(without_facts(question)) - ASKING


def on_topic(question: str, passage: str) -> bool:
    """Whether a passage names something the question is about: the washer-fluid entry ("the
    reservoir holds 4 litres") does not answer "what's the boot capacity in litres?"."""
    wanted = topic(question)
    return not wanted or bool(wanted & terms(passage))


# what "how fast / how far / how heavy / how quick / 多久" asks for, when the question names no unit itself
_IMPLIED_UNITS = ((re.compile(r"\bhow\s+fast\b|\bfastest\b|\bspeed\b|多快", re.I), {"km/h", "mph"}),
                  (re.compile(r"\bhow\s+far\b|多远", re.I), {"km", "m", "cm", "mm"}),
                  (re.compile(r"\bhow\s+heavy\b|多重", re.I), {"kg"}),
                  (re.compile(r"\bhow\s+quick(?:ly)?\b|多久|多长时间", re.I),
                   {"s", "min", "h", "day", "week", "month", "year"}))


def unit_of(fact) -> str | None:
    return fact.key.split(" ", 1)[1] if " " in fact.key else None


def wanted_units(question: str) -> set[str]:
    """The units an answer to `question` is in: those it names ("in litres", 多少升) less those it
    states itself ("is 2,000 kg too much?"), or those its asking words imply ("how fast")."""
    named = named_units(question) - {unit_of(f) for f in extract_facts(question)}
    if named:
        return named
    return set().union(*(units for pattern, units in _IMPLIED_UNITS if pattern.search(question)))


# what a question rules out: "when I'm not in Eco mode", "if it's not plugged in", "outside the Eco mode",
# "other than X", "不在经济模式的时候". A value the passages give for that condition answers some other question.
_ARTICLE = r"(?:the\s+|a\s+|an\s+|my\s+)?"
_RULED_OUT = (
    # a mode or a state ("not in Eco", "not towing", "not plugged in"), not an action left undone: "what if
    # I do not fasten the belt?" asks about the belt
    re.compile(rf"\b(?:when|while|if|whenever)\b[^,.;?]{{0,24}}?(?:\bnot|n't)\s+(?:(?:in|on|using|with)\s+"
               rf"{_ARTICLE}(?P<x>[a-z][\w-]*)|(?P<y>[a-z]+(?:ing|ed))\b)", re.I),
    re.compile(r"\b(?:other\s+than|apart\s+from|except(?:\s+in|\s+on|\s+for)?)\s+(?:the\s+|a\s+|an\s+|my\s+)?"
               r"(?P<x>[a-z][\w-]*)", re.I),
    # "outside" rules out what follows it as a place or a named state ("outside the city", "outside Eco"), not
    # as an adjective ("the outside temperature")
    re.compile(r"\b[Oo]utside(?:\s+of)?\s+(?:(?:the|a|an|my)\s+(?P<x>[a-z][\w-]*)|(?P<y>[A-Z][\w-]*))"),
    re.compile(r"(?:不在|没在|不开|没开|不用|除了)(?P<x>[\u4e00-\u9fff]{1,6}?)(?:的时候|时|以外|之外|模式|状态)"),
)


# a sentence about the case without some condition: "if it is not, it only runs above 20 percent"
_NOT_IF = re.compile(r"\b(?:when|while|if|whenever)\b[^,.;?]{0,24}?(?:\bnot\b|n't\b)|\bunless\b|"
                     r"(?:没有|不|未)[\u4e00-\u9fff]{1,6}(?:时|的时候)", re.I)


def ruled_out(question: str) -> set[str]:
    """The terms of the conditions a question excludes."""
    return terms(" ".join(w for p in _RULED_OUT for m in p.finditer(question) for w in m.groups() if w))


def about_ruled_out(ruled: set[str], sentence: str) -> bool:
    """Whether `sentence` speaks of a condition that was ruled out (`ruled`: its terms) for that
    condition only: a sentence naming the case without it as well ("if it is not, ...") may answer."""
    return bool(ruled & terms(sentence)) and not _NOT_IF.search(sentence)


def answers_kind(question: str, answer: str) -> bool:
    """Whether an answer states the kind of value the question asks for: a price for "how much does
    it cost" (or that it is free), a phone number when one is asked for, an amount for "how long /
    how far / 多少" (not the question's own: "the 12 volt battery" is no answer to how long its warranty
    lasts), in the unit the question names ("in litres", "how many kilometres"), a place, a menu or a
    control for "where"; and not about a condition the question rules out."""
    facts = extract_facts(answer)
    asked = {f.key for f in extract_facts(question)}
    if about_ruled_out(ruled_out(question), answer):  # "the top speed outside Eco mode?": not Eco's
        return False
    if asks_place(question) and not (places(answer) or any(f.kind in ("menu", "name") for f in facts)):
        return False
    if _PRICE.search(question) and not (_FREE.search(answer) or any(f.key.endswith(_CURRENCIES) for f in facts)):
        return False
    if asks_phone(question) and not states_phone(facts):
        return False
    if asks_amount(question) and not any(f.kind in AMOUNT_KINDS and f.key not in asked for f in facts):
        return False
    units = wanted_units(question)
    return not units or any(unit_of(f) in units for f in facts)
