"""A question that states the user's own quantity, held against the passages' values of the same kind.

"Can I tow my 1,800 kg caravan?" beside "a braked trailer of up to 1,500 kg", "I have 512 MB of RAM,
will the installer run?" beside "at least 780MB", "开到一百六还能用自适应巡航吗？" beside "30 到 180
公里每小时": a small model compares numbers badly, so it refuses or agrees at random. The comparison
is made here, on the numbers, and shown to the model beside the question; what the passage's number
means (a limit to stay under, a minimum to reach) the model still reads from the passage.

    the question's quantities (a bare number takes the kind of the passages' values: "doing 60")
      x the values the passages state in a unit of the same kind (converted: mph/km/h, psi/kPa/bar,
        MB/GB, minutes/hours, ...)
    ─► "60 km/h is more than 50 km/h."  ("160 公里每小时大于 30 公里每小时，小于 180 公里每小时。")
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, replace

from app.answer.bounds import AS_LITTLE_AS, AS_MUCH_AS, LOWER, UPPER, bounds
from app.answer.facts import extract_facts, normalize, without_facts
from app.answer.pairing import said_of
from app.answer.question import A_NOT_A
from app.answer.question import ASKS as _ASKS
from app.answer.question import asks_yes_no, main_clause, on_topic, parts, unit_of
from app.answer.relevance import in_context, terms
from app.answer.sentences import clauses, split_sentences

# units of one kind and their size in the kind's base unit
_KINDS: dict[str, dict[str, float]] = {
    "speed": {"km/h": 1.0, "mph": 1.609344},
    "pressure": {"kpa": 1.0, "psi": 6.894757, "bar": 100.0},
    "mass": {"kg": 1.0, "g": 0.001, "t": 1000.0},
    "length": {"km": 1000.0, "m": 1.0, "cm": 0.01, "mm": 0.001, "inch": 0.0254},
    "time": {"s": 1.0, "min": 60.0, "h": 3600.0, "day": 86400.0, "week": 604800.0, "month": 2629800.0,
             "year": 31557600.0},
    "power": {"w": 1.0, "kw": 1000.0},
    "energy": {"kwh": 1.0},
    "share": {"%": 1.0},
    "temperature": {"°c": 1.0},
    "voltage": {"v": 1.0},
    "current": {"a": 1.0},
    "volume": {"l": 1.0},
    "data": {"b": 1.0, "kb": 2.0 ** 10, "mb": 2.0 ** 20, "gb": 2.0 ** 30, "tb": 2.0 ** 40},
    "frequency": {"mhz": 1e6, "ghz": 1e9},
}
_KIND_OF = {unit: kind for kind, units in _KINDS.items() for unit in units}
# data sizes and clock rates, which the fact reader leaves as bare numbers: "780MB", "4 gigs", "8G 内存"
# a letter or digit before the number makes it part of a word ("R18"); a Chinese character does not ("只有256MB")
_DATA = re.compile(r"(?<![A-Za-z0-9_.])(\d+(?:\.\d+)?)\s*(?:(bytes?|字节)|(kb|kib|kilobytes?)"
                   r"|(mb|mib|megabytes?|megs?|兆)"
                   r"|(gb|gib|gigabytes?|gigs?|g)|(tb|tib|terabytes?)|(mhz)|(ghz))(?![a-z])", re.I)
_DATA_UNITS = ("b", "kb", "mb", "gb", "tb", "mhz", "ghz")
MAX_VALUES = 4  # passage values compared: the question's sentence-mates first
MIN_BARE = 10  # a bare number this large in a question is an amount (_asked)
# two values closer than this share are one amount in two units: 35 psi is 241 kPa, written "240 kPa (35 psi)"
SAME_SHARE = 0.02


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str | None  # canonical unit; None: a bare number
    text: str

    @property
    def kind(self) -> str | None:
        return _KIND_OF.get(self.unit) if self.unit else None

    def base(self) -> float:
        return self.value * _KINDS[self.kind][self.unit] if self.kind else self.value

    @property
    def key(self) -> str:
        """The fact key the fact reader (and bounds()) gives the value; data sizes are bare numbers to it."""
        value = f"{self.value:g}"
        return f"{value} {self.unit}" if self.unit and self.unit not in _DATA_UNITS else value


def quantities(text: str) -> list[Quantity]:
    """The numbers a text states, with units where it gives them (data sizes and clock rates too)."""
    text = normalize(text)
    out, taken = [], []
    for m in _DATA.finditer(text):
        unit = next(u for u, g in zip(_DATA_UNITS, m.groups()[1:]) if g)
        out.append(Quantity(float(m.group(1)), unit, m.group(0).strip()))
        taken.append(m.group(1))
    for f in extract_facts(text):
        if f.kind != "number" or (f.value in taken and not unit_of(f)):
            continue
        try:
            value = float(f.value)
        except ValueError:
            continue
        out.append(Quantity(value, unit_of(f), f.text))
    return out


def _say(q: Quantity) -> str:
    value = f"{q.value:.10g}"
    return f"{value} {q.unit}" if q.unit and q.unit != "%" else f"{value}%" if q.unit else value


def _relation(asked: Quantity, stated: Quantity, lang: str) -> str:
    a, b = asked.base(), stated.base()
    words = ({"more": "大于", "less": "小于", "same": "等于"} if lang == "zh" else
             {"more": "is more than", "less": "is less than", "same": "is the same as"})
    rel = "same" if abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0) else "more" if a > b else "less"
    return f"{words[rel]} {_say(stated)}"


Ranked = tuple[tuple[str, list[Quantity], int], ...]  # (sentence, its values, which passage)


def _ranked(question: str, passages: list[str]) -> Ranked:
    """The passages' sentences that state a value of a known kind, with those values and their passage's
    index, the sentences most about the question first (the terms they share with it, numbers aside,
    for their length)."""
    return _ranked_once(question, tuple(passages))


# a plan asks three things of the same question and passages (comparison_note, judge_limit,
# bound_sentence): the sentences are read and ranked once (~6 ms for three manual sections)
@functools.lru_cache(maxsize=8)
def _ranked_once(question: str, passages: tuple[str, ...]) -> Ranked:
    wanted = terms(without_facts(question))
    stating = []
    for i, p in enumerate(passages):
        sentences = split_sentences(p)
        # a fragment ("Defaults to 4093.") is ranked and quoted with its entry (relevance.in_context)
        stating += [(c, quantities(s), i) for s, c in zip(sentences, in_context(sentences)) if s.strip()]

    def about(sentence: str) -> float:  # shared terms, a long sentence's counting for less: "charge at 200 kW?"
        said = terms(sentence)           # is about "charges at up to 150 kW", not a long sentence on the charge port
        return len(wanted & said) / math.sqrt(len(said) or 1)

    return tuple(sorted((x for x in stating if x[1]), key=lambda x: -about(x[0])))


def _asked(question: str, ranked: Ranked) -> list[Quantity]:
    """The question's quantities of a known kind; a lone bare number ("doing 60") takes the unit of the
    first value the sentences most about the question bound ("do not drive faster than 50 km/h"), else
    of their first value: a yes or no about the user's amount asks it against a bound, not against what
    the thing is fitted to ("chains only fit 18-inch wheels")."""
    asked = quantities(question)
    bare = [q for q in asked if q.unit is None]
    # a small bare number counts things ("five of us", "下一个车主"), a measured amount is spoken bare
    # only when it is larger ("doing 60", "开到一百六")
    if bare and len(bare) == len(asked) == 1 and bare[0].value >= MIN_BARE:
        kinded = [(v, s) for s, values, _ in ranked for v in values if v.kind]
        bounding = [v for v, s in kinded if bounds(s).get(v.key, set()) - {None}]
        if kinded:
            return [Quantity(bare[0].value, (bounding or [kinded[0][0]])[0].unit, bare[0].text)]
    return _distinct([q for q in asked if q.kind])


def _distinct(values: list[Quantity]) -> list[Quantity]:
    """One of each amount: the user's "350 kW" said twice, or "240 kPa (35 psi)", is one amount (within
    SAME_SHARE of each other, in the kind's base unit)."""
    out: list[Quantity] = []
    for v in values:
        if not any(w.kind == v.kind and abs(w.base() - v.base()) <= SAME_SHARE * max(w.base(), v.base())
                   for w in out):
            out.append(v)
    return out


def _of_kind(ranked: Ranked, kind: str) -> Ranked:
    """The sentences stating values of `kind` (with only those values), most about the question first."""
    return [(s, [v for v in values if v.kind == kind], i) for s, values, i in ranked
            if any(v.kind == kind for v in values)]


def comparison_note(question: str, passages: list[str], lang: str, about: str = "") -> str:
    """The note shown beside the question: each of its quantities against the passages' values of the
    same kind, from the sentences most about the question first; "" when the question states no
    quantity or the passages none of its kind."""
    ranked = _ranked(about or question, passages)
    notes = []
    for q in _asked(question, ranked):
        values: list[Quantity] = []
        for _, stated, _ in _of_kind(ranked, q.kind):
            values = _distinct(values + stated)
        said = [_relation(q, v, lang) for v in values[:MAX_VALUES]]
        if said:
            notes.append(f"{_say(q)} {'，'.join(said)}。" if lang == "zh" else f"{_say(q)} {', and '.join(said)}.")
    return " ".join(notes)


def bound_sentence(question: str, passages: list[str], about: str = "") -> str:
    """The passages' sentence most about the question that states a value of the kind of the question's
    one amount, as written: what a yes-or-no question about the user's amount is told when nothing
    decides the reply ("My daughter is 140 cm, may she sit without her booster?": "Children under
    150 cm must travel in a booster seat."). "" when the question states no one amount, or no sentence
    sharing a topic word with it states one of its kind."""
    ranked = _ranked(about or question, passages)
    asked = _asked(question, ranked)
    if len(asked) != 1:
        return ""
    return next((s.strip() for s, _, _ in _of_kind(ranked, asked[0].kind) if on_topic(about or question, s)), "")


# asking whether a thing happens or is so, not whether it may be done: "will the seats heat up at 12 degrees?",
# "座椅会自己热起来吗？" (会 as "will": not 会议 a meeting, 机会 a chance)
_WILL_ZH = r"会不会|(?<![机社议学])会(?!议)[^，。,？?]*吗"
_OWED_ZH = r"需要|要不要|用不用|还得|还要|必须"  # "need", "still have to", "must"
_HAPPENS = re.compile(r"^\W*(?:will|would|does|do|is|are)\b|" + _WILL_ZH + "|" + _OWED_ZH, re.I)
# a condition on a value ("when it is below 10 degrees", "if the stop lasts less than 3 seconds", "低于 10 度时"):
# what the sentence says happens only then, which answers whether it happens at the user's amount ("unless"
# says the opposite, and is no condition here)
_CONDITION = re.compile(r"(?:\b(?:when|whenever|if|once|while|only)\b|当|如果|若|只有|只在)[^.,;:!?，。；：！？]*?"
                        r"(?:\b(?:below|under|above|over|beyond|(?:less|more|fewer|lower|higher|longer|shorter)"
                        r"\s+than)|低于|高于|超过|不到|少于|多于|小于|大于)\s*(?:about|around|approximately|roughly|约|大约)?"
                        r"\s*$", re.I)
# a condition on who or what a sentence is about, said at its start: "Children under 150 cm tall must ...",
# "Trailers over 750 kg need ...", "身高不到 150 厘米的儿童 ..." (not "It is most efficient above minus 10
# degrees", which says how well, not when)
_SUBJECT_CONDITION = re.compile(r"^\W*(?:[^\W\d_]+\s+){1,2}(?:under|over|below|above|(?:less|more)\s+than)\s*$",
                                re.I)
_SUBJECT_CONDITION_ZH = re.compile(r"(?:低于|高于|超过|不到|小于|大于)\s*$")  # with 的 after the value
# the words that turn what happens round ("switches off", "stops", "does not"): a condition answers a question
# about the same outcome only, not "will it stay on?" by "it switches off when ..."
_OUTCOME_TURNED = re.compile(r"\b(?:off|stops?|stopped|disabled?|deactivated?|not|no|never|cannot)\b|n't\b"
                             r"|关闭|关掉|停止|不(?!到|足|超过|低于|高于|少于|多于|小于|大于)|没|无法", re.I)

# asking whether the user's amount is allowed, possible or enough: a yes says it is within the bound
# the words that judge an amount acceptable: "is it OK / safe / enough ..."
_ACCEPTABLE = r"ok|okay|alright|all\s+right|safe|possible|fine|enough|allowed|legal"
# asking whether a thing may be done: "is he allowed in the front?", "可以吗"
_MAY = re.compile(rf"\b(?:can|could|may|{_ACCEPTABLE}|permitted)\b"
                  r"|可以|能不能|能否|行不行|行吗|(?<![功性智])能(?![量耗源力])", re.I)
_WITHIN = re.compile(rf"^\W*(?:can|could|may|might|am\s+i\s+allowed|is\s+(?:it|that|this)\s+(?:{_ACCEPTABLE})"
                     r"|will|would|does|do|is|are)\b|可以|能不能|能|够|行不行|行吗|" + _WILL_ZH +
                     # a verb's potential complement asks whether it can be done: 拖得动, 装得下, 开得了
                     r"|[\u4e00-\u9fff]得(?:动|了|下|起|进|住|完)", re.I)
# "is 2,000 kg too much?", "is it over the limit?": a yes says the amount is beyond the bound ("超充桩", a
# fast charger, is no "超过")
_BEYOND = re.compile(r"\b(?:too|over|above|beyond|exceed\w*|more\s+than|less\s+than|under|below)\b"
                     r"|太|超过|超出|低于|高于", re.I)
# "is she allowed to sit without her booster at 140 cm?": a negated question turns the reply round
_NEGATED = re.compile(r"\b(?:without|not|never|no)\b|n't\b|不|没|无", re.I)
_NEGATED_SPAN = 30  # characters after a negation that say what it negates ("without the “Standard system” task")


@dataclass(frozen=True)
class Limit:
    """The reply a yes-or-no question about the user's amount has, by the passages' bound on it."""

    reply: str  # "yes" | "no"
    asked: Quantity
    bound: str  # the passage sentence that states the bound
    alone: bool  # the question asks nothing else: the reply and the bound answer it whole

    def answer(self, question: str, lang: str) -> str:
        """The reply and the passage's own sentence for it: "No. Do not drive faster than 50 km/h ..."."""
        if lang != "zh":
            return f"{'Yes' if self.reply == 'yes' else 'No'}. {self.bound}"
        # a Chinese yes or no repeats the question's verb: 能 / 不能, 够 / 不够, 可以 / 不可以
        verb = next((v for v in ("可以", "需要", "能", "够", "会", "行") if v in question), "")
        said = (verb or "是的") if self.reply == "yes" else (f"不{verb}" if verb else "不是")
        return f"{said}。{self.bound}"


def _within(part: str) -> bool:
    """Whether a question asks if the user's amount stays within what is allowed or needed."""
    part = main_clause(part)
    return bool(_WITHIN.search(part)) and asks_yes_no(part) and not _BEYOND.search(without_facts(part))


# a bound that says what may be done or what is needed ("up to 1,500 kg", "do not exceed", "at least 780MB",
# "confirm within 2 minutes", "limits the output to 130 W"; not the noun: "set the limit to 80 percent" is
# advice), not a condition ("children under 150 cm must ...", "when you drive above 10 km/h"):
# only a limit decides whether the user's amount is allowed
_LIMIT_WORDS = re.compile(r"(?:\bup\s+to|" + AS_LITTLE_AS + "|" + AS_MUCH_AS + "|"
                          r"\bat\s+most|\bmax(?:imum)?\b|\bexceed|\bwithin|\blimit(?:s|ed)\b"
                          r"|(?:\bnot?|n't)\s+(?:\w+\s+){0,2}?\w+er\s+than"
                          r"|\bat\s+least|\bminimum\b|\bmin\b|不超过|不得超过|最多|最高|最大|以内|之内|至少|最低|最少|不低于|不少于)"
                          r"[^.,;:!?，。；：！？]*$", re.I)
# what a thing takes, needs or uses ("a minimal installation will take 1012MB", "charging takes 30 minutes",
# "需要 10GB"): a minimum the user's amount must reach, said right before the value (an instruction's "use
# 260 kPa" is the value to set, no minimum)
_NEEDS = re.compile(r"(?:\b(?:takes?(?:\s+up)?|took|requires?|required|needs?|needed|uses|used)|需要|占用|要求)"
                    r"\s*(?:about|around|approximately|roughly|at\s+least|约|大约|至少)?\s*$", re.I)


def judge_limit(question: str, passages: list[str], about: str = "", titles: list[str] = ()) -> Limit | None:
    """The reply to "can I tow 1,800 kg?" when the question asks whether its one amount is within
    what the passages allow or need and the sentences most about the question bound it one way: an
    upper bound ("up to 1,500 kg", "do not exceed 50 km/h"), a lower one ("at least 780MB") or a
    range ("between 50 and 100 percent"). An amount the user gives as a range ("五六米", "5-6 m") gets
    a reply only when both its ends get the same one. None when any of that is unclear, or two
    sentences disagree, or another passage bounds the amount at another value (which limit is the
    question's is then unclear). `about`: the question in the passages' language (its translation,
    plan.py), whose words rank their sentences; the amount is the question's own. `titles`: each
    passage's entry title."""
    asked_parts = [p for p in _question_parts(question) if _ASKS.search(p)]
    asking = [p for p in asked_parts if _within(p) or _asks_if_due(p)]
    if len(asking) != 1:
        return None
    ranked = _ranked(about or question, passages)
    asked = _asked(question, ranked)  # said anywhere: "My trailer is 1,800 kg. Can I tow it?"
    if len(asked) > 1 and not _one_range(asked):
        asked = _asked_about(asked, question, asking[0])
    if not (len(asked) == 1 or _one_range(asked)):
        return None
    limits = [_judged(q, question, asking[0], ranked, about, titles) for q in asked]
    if None in limits or len({limit.reply for limit in limits}) != 1:
        return None
    return replace(limits[0], alone=len(asked_parts) == 1)


def asks_within(question: str) -> bool:
    """Whether a part of the question asks if the user's amount is allowed or enough ("can I ...?"), where a
    yes says it is within the bound (not "is 2,000 kg too much?")."""
    return any(_within(p) for p in _question_parts(question))


def _question_parts(question: str) -> list[str]:
    """Each sentence's parts (question.parts), in order."""
    return [p for sentence in re.split(r"(?<=[.!?。！？])\s*", question) for p in parts(sentence)]


def bounded_away(sentence: str, amounts: list[Quantity]) -> bool:
    """Whether a sentence bounds a value of its own so that one of `amounts` (the user's) lies outside it:
    "you can open it at temperatures below 40 °C" leaves out 50 °C."""
    sides = bounds(sentence)
    for v in quantities(sentence):
        side = sides.get(v.key, set()) - {None}
        for q in amounts:
            if q.kind == v.kind and side in ({UPPER}, {LOWER}) and not _inside(q, v, side):
                return True
    return False


def _inside(q: Quantity, v: Quantity, side: set[str]) -> bool:
    """Whether the amount `q` keeps to the bound `v` on its `side` ({UPPER} or {LOWER})."""
    return q.base() <= v.base() if side == {UPPER} else q.base() >= v.base()


def _one_range(asked: list[Quantity]) -> bool:
    """Whether the user's amounts are the two ends of one range they gave ("5-6 米")."""
    return len(asked) == 2 and asked[0].text == asked[1].text


def _asked_about(asked: list[Quantity], question: str, asking: str) -> list[Quantity]:
    """Of the several amounts a question states, those its asking part is about: stated in it, else said
    with one of its terms, between the amounts before and after it in its clause ("My machine has 8 GB of
    memory and I made a 256 MB swap partition. Is that enough swap?": the 256 MB of swap, not the 8 GB)."""
    said = [q for q in asked if normalize(q.text) in normalize(asking)]
    if said:
        return said
    topic, meant = terms(without_facts(asking)), []
    for clause in _CLAUSE_BREAK.split(normalize(question)):
        at = sorted(((clause.find(normalize(q.text)), q) for q in asked if normalize(q.text) in clause),
                    key=lambda x: x[0])
        for n, (_, q) in enumerate(at):
            after = at[n - 1][0] + len(normalize(at[n - 1][1].text)) if n else 0
            before = at[n + 1][0] if n + 1 < len(at) else len(clause)
            if terms(without_facts(clause[after:before])) & topic:
                meant.append(q)
    return meant


def _judged(q: Quantity, question: str, asking: str, ranked: Ranked, about: str, titles: list[str]) -> Limit | None:
    """judge_limit's reply for one amount of the user's, `asking` the part that asks about it."""
    words = about or question
    wanted = terms(without_facts(words))
    # a question whether something happens is answered by a condition on the same outcome, too
    happens = bool(_HAPPENS.search(main_clause(asking))) and not _MAY.search(asking)
    decided = [(sentence, passage, *_verdict(q, sentence, values, wanted,
                                             happens and _same_outcome(asking, sentence)))
               for sentence, values, passage in _of_kind(ranked, q.kind)]
    decided = [d for d in decided if d[2]]
    # "is that enough?": the value the sentence most about the question names, stated plainly (a table row's
    # "Disk: 10 gigabytes"), comes before a bound further down of another thing ("as little as 350MB" of memory)
    framed = _framed(q, _of_kind(ranked, q.kind), wanted) if _asks_if_enough(question, q) else []
    if framed and framed[0][0] not in [d[0] for d in decided]:
        decided = framed + decided
    # a value's question is answered by the value, whatever negation it is asked with
    value_asked = not decided and _asks_if_it_is(asking, q)
    if value_asked:
        decided = _stated(q, question, ranked, wanted)
    # "净水器滤芯一年没换了，该换了吗？": the time since it was last done, against how often it is due
    due = not decided and _asks_if_due(asking) and not _said_after(_EVERY, q, question)
    if due:
        decided = _due(q, _of_kind(ranked, q.kind), words)
    # "may she sit without her booster at 140 cm?": going without what a rule obliges of whom the user's
    # amount names ("children under 150 cm must travel in a booster seat") is not allowed
    forgone = not decided and bool(_MAY.search(asking)) and _forgone(q, question, _of_kind(ranked, q.kind),
                                                                         wanted)
    if forgone:
        decided = forgone
    if not decided or decided[0][2] == "unclear":
        return None
    sentence, passage, reply, bound = decided[0]  # the sentence most about the question that bounds it
    # "she keeps begging to sit without her booster. Is she allowed to?": a negation anywhere turns it
    # round, unless the bound's sentence says it too, of the thing it bounds ("a minimal installation,
    # without the Standard system task, will take 1012MB"); what is due is told by the time since ("一年
    # 没换", "not done in a year"), whose clause negates nothing asked unless it asks it too
    told = A_NOT_A.sub("", question)
    if due:
        told = "，".join(c for c in _CLAUSE_BREAK.split(normalize(told))
                        if normalize(q.text) not in c or _DUE.search(c))
    if not (value_asked or forgone) and not all(_says_too(negation, sentence) for negation in _NEGATED.finditer(told)):
        return None
    # another passage bounding the same kind at other values: which limit is the question's is unclear
    # ("can I charge at 200 kW?" beside the fast charger's 150 kW and the power outlet's 3.6 kW), unless
    # it bounds something the question never names, in its sentence or its entry's title, where the
    # deciding one does: "can the kettle run on 250 V?" is not asked of the toaster's range. Unclear
    # even when both give the same reply: the bound said with it must be the question's (choosing by
    # the search's order and the embedder's nearest said the power outlet's 3.6 kW to "can I charge at
    # 200 kW?")
    def named(said: str, i: int) -> bool:
        return bool((terms(said) | terms(titles[i] if i < len(titles) else "")) & wanted)

    if any(other != passage and values != bound and (named(said, other) or not named(sentence, passage))
           for said, other, _, values in decided[1:]):
        return None
    return Limit(reply, q, sentence.strip(), alone=True)


# asking whether the user's amount is what is needed or advised: "I have 4 GB. Is that at least what the
# guide recommends?", "我只打了 33 psi，这气压够不够？"; the question makes the value a passage states
# plainly ("RAM (recommended): 2 gigabytes", "前轮 240 kPa") the amount to reach
_ENOUGH = re.compile(r"\b(?:enough|sufficient|at\s+least|meets?|satisf(?:y|ies))\b|够|满足", re.I)
_CLAUSE_BREAK = re.compile(r"[,;.!?，；。！？]")


def _asks_if_enough(question: str, q: Quantity) -> bool:
    """Whether the question asks if the user's amount `q`, said in a clause of its own, is enough. Said in
    the asking clause, the amount is what the user needs, and the passage's value what they have: "is
    the charge enough for 300 km?", "电量够开到 300 公里吗？" ask the other way round."""
    asking = [c for c in _CLAUSE_BREAK.split(normalize(question)) if _ENOUGH.search(without_facts(c))]
    return bool(asking) and not any(normalize(q.text) in c for c in asking)


# asking whether a value is the user's amount, said in the asking clause or pointed back at: "does a permanent
# session cookie expire after 30 days?", "... past 4093 bytes. Is that already the default threshold?"; not
# whether the amount is allowed ("is it OK to tow 1,200 kg?") or enough for something ("is the installer fine?")
_IS_VALUE = re.compile(r"^\W*(?:is|are|was|were|does|do|did|has|have)\b", re.I)
_POINTS_BACK = re.compile(r"^\W*(?:is|was)\s+(?:that|this)\b", re.I)
_JUDGED = re.compile(rf"\b(?:{_ACCEPTABLE}|problem|risk\w*|bad|good|wise|recommended)\b", re.I)


# asking about the user's own doing ("do I need to change it after 3 years?", "should we ..."): what is due,
# not what a value is
_OWED = r"need|needs|have\s+to|has\s+to|must|should"
_DOING = re.compile(rf"^\W*\w+\s+(?:i|we|you)\b|\b(?:{_OWED}|required|necessary)\b", re.I)


# asking whether something is due: "do I need to change it?", "should it be replaced by now?", "需要换了吗？"
_DUE = re.compile(rf"\b(?:{_OWED}|due|time\s+to)\b|{_OWED_ZH}|该", re.I)
# how often a thing is due: "every 2 years", "each 10,000 km", "每 2 年", "每隔 3 个月"
_EVERY = re.compile(r"(?:\bevery|\beach|每隔?)(?:\s*[\d.,]+\s*[^\s\d]+\s*(?:or|或者?)\s*(?:every|每)?)?\s*$", re.I)


def _asks_if_due(part: str) -> bool:
    """Whether a question asks if something is due: a yes-or-no question about what has to be done."""
    part = main_clause(part)
    return asks_yes_no(part) and bool(_DUE.search(part))


_BEFORE = 40  # characters before a value that say what it is: "up to", "at least", "every"
# a condition's clause, from its "when" ("when the remote control or the paired phone is more than about 3 metres
# away")
_CONDITION_BEFORE = 100


# what a rule obliges: "must", "have to", "必须"
_OBLIGED = re.compile(r"\b(?:must|shall|required\s+to|have\s+to|has\s+to|needs?\s+to)\b|必须|应当|需要", re.I)


def _forgone(q: Quantity, question: str, stating: Ranked, wanted: set[str]) -> list:
    """The reply "no" to a question whether the user may go without something (`question` negates it) when the
    sentence most about it that obliges it does so of whom the user's amount names; [] when that sentence's
    condition leaves the user out (the rule then says nothing of them) or none obliges what is negated."""
    told = A_NOT_A.sub("", question)
    negated = [_negated_terms(m) for m in _NEGATED.finditer(told)]
    for sentence, values, passage in stating:
        obliged = _OBLIGED.search(sentence)
        if not obliged:
            continue
        reply, used = _verdict(q, sentence, values, wanted, conditions=True)
        if reply is None:
            continue
        # what the question goes without is what the rule obliges: "without her booster", "travel in a booster seat"
        owed = terms(without_facts(sentence[obliged.end():]))
        if reply == "yes" and any(n & owed for n in negated):
            return [(sentence, passage, "no", used)]
        return []
    return []


def _around(q: Quantity, text: str) -> tuple[str, str] | None:
    """What `text` (normalised) says before and after the amount `q`; None where it does not say it."""
    text, said = normalize(text), normalize(q.text)
    at = text.find(said)
    return (text[:at], text[at + len(said):]) if at >= 0 else None


def _of_the_subject(q: Quantity, sentence: str) -> bool:
    """Whether the amount `q` bounds whom or what `sentence` is about (_SUBJECT_CONDITION)."""
    around = _around(q, sentence)
    if around is None:
        return False
    before, after = around
    # a Chinese one is a modifier: the value's 的 follows its unit ("不到 150 厘米的儿童")
    return bool(_SUBJECT_CONDITION.search(before) or (_SUBJECT_CONDITION_ZH.search(before)
                                                      and re.match(r"[^，。；、\s]{0,3}的", after)))


def _said_after(words: re.Pattern, q: Quantity, text: str, before: int = _BEFORE) -> bool:
    """Whether the amount `q` is said right after `words` in `text` ("every 3 years", "up to 1,500 kg"), in
    the `before` characters before it."""
    around = _around(q, text)
    return around is not None and bool(words.search(around[0][-before:]))


def _due(q: Quantity, stating: Ranked, words: str) -> list[tuple[str, int, str, frozenset]]:
    """The reply to "is it due after `q`?" from the sentence most about the question (`words`: the question
    in the passages' language, a translated question's translation) that says how often it is due in `q`'s
    kind ("every 2 years"): yes once `q` reaches it. No only when the sentence gives no interval of
    another kind: "every 12 months or 15,000 km, whichever comes first" may be due by the time the user
    did not say."""
    for sentence, values, passage in stating:
        every = [v for v in values if _said_after(_EVERY, v, sentence)]
        if not every or not on_topic(words, sentence):
            continue
        if len(_distinct(every)) != 1:
            return []
        v = every[0]
        others = [w for w in quantities(sentence) if w.kind != q.kind and _said_after(_EVERY, w, sentence)]
        reached = q.base() >= v.base() * (1 - SAME_SHARE)
        if others and not reached:
            return []
        return [(sentence, passage, "yes" if reached else "no", frozenset({v.base()}))]
    return []


def _asks_if_it_is(asking: str, q: Quantity) -> bool:
    """Whether the asking clause asks if a value is the user's amount, not whether the amount is good or
    what the user has to do."""
    clause = main_clause(asking)
    return (bool(_IS_VALUE.search(clause)) and not _JUDGED.search(clause) and not _DOING.search(clause)
            and (normalize(q.text) in normalize(clause) or bool(_POINTS_BACK.search(clause))))


# the user setting a value of their own ("X = 1800", "set it to 40 percent", "调到百分之四十"), and a value
# the passages give as what holds when nothing is set
_SETS = re.compile(r"=\s*\S|\b(?:set|sets|changed?|configured?)\b[^.?!,;]*?\bto\s+\S"
                   r"|设为|设成|设置[为成]|调到|改[成为]", re.I)
_DEFAULT = re.compile(r"\bdefaults?\b|默认", re.I)


def _stated(q: Quantity, question: str, ranked: Ranked, wanted: set[str]) -> list[tuple[str, int, str, frozenset]]:
    """The reply to "is it `q`?" from the sentence most about the question that states a value of its
    kind, or its very number bare ("Defaults to 4093."): yes when that value is `q` (within SAME_SHARE),
    no when it is another of the same kind; none when the sentence is about none of the question's
    topic or names several values alike. A bare number of another size decides nothing: what it counts
    is unknown; nor does a default when the user sets a value themselves ("I set the lifetime = 1800.
    Does it expire after 30 minutes?" is not asked of the 31 days that hold when nothing is set)."""
    for sentence, values, passage in ranked:
        candidates = [v for v in values if v.kind == q.kind or (v.kind is None and v.value == q.value)]
        if not candidates:
            continue
        named = _distinct(_named(sentence, candidates, wanted)) if on_topic(question, sentence) else []
        if len(named) != 1 or (_DEFAULT.search(sentence) and _SETS.search(question)):
            return []
        v = named[0]
        same = v.kind is None or abs(v.base() - q.base()) <= SAME_SHARE * max(v.base(), q.base())
        return [(sentence, passage, "yes" if same else "no", frozenset({v.base()}))]
    return []


def _framed(q: Quantity, stating: Ranked, wanted: set[str]) -> list[tuple[str, int, str, frozenset]]:
    """The reply to a question asking whether `q` is enough, from the sentence most about the question
    that states a value of its kind: yes when `q` reaches the one value the question names (`_named`),
    none when it names several."""
    for sentence, values, passage in stating[:1]:
        named = _distinct(_named(sentence, values, wanted))
        if len(named) == 1:
            return [(sentence, passage, "yes" if q.base() >= named[0].base() else "no",
                     frozenset({named[0].base()}))]
    return []


def _named(sentence: str, values: list[Quantity], wanted: set[str]) -> list[Quantity]:
    """The values of a sentence the question names most: those whose own words share the most terms with
    the question (`wanted`); every value when none shares one. A value's own words are what a list says
    it is of ("front 240 kPa, rear 260 kPa": pairing.said_of), else its clause's (a table row's "RAM
    (recommended): 2 gigabytes; Hard Drive: 10 gigabytes")."""
    told, parts_ = said_of(sentence), clauses(sentence)

    def words(v: Quantity) -> set[str]:
        if v.key in told:
            return told[v.key]
        clause = next((c for c in parts_ if normalize(v.text) in normalize(c)), sentence)
        return terms(without_facts(clause))

    shared = [len(words(v) & wanted) for v in values]
    return [v for v, n in zip(values, shared) if n == max(shared)] if values else []


def _negated_terms(negation: re.Match) -> set[str]:
    """The terms a negating word (a match) says no to: those of the _NEGATED_SPAN characters after it."""
    return terms(without_facts(negation.string[negation.end():negation.end() + _NEGATED_SPAN]))


def _says_too(negation: re.Match, sentence: str) -> bool:
    """Whether `sentence` negates what the question's `negation` (a match in it) does: the same negating
    word before a word the question negates."""
    negated = _negated_terms(negation)
    return any(_negated_terms(m) & negated
               for m in re.finditer(re.escape(negation.group(0)), sentence, re.I)) if negated else False


def _same_outcome(asking: str, sentence: str) -> bool:
    """Whether a sentence's outcome is the one a question asks about as far as turning words tell: both say
    "off", "stops", "not" ..., or neither does."""
    return bool(_OUTCOME_TURNED.search(without_facts(asking))) == bool(_OUTCOME_TURNED.search(without_facts(sentence)))


def _verdict(q: Quantity, sentence: str, values: list[Quantity], wanted: set[str],
             conditions: bool = False) -> tuple[str | None, frozenset]:
    """The reply `sentence` gives the amount `q` ("yes", "no", "unclear" when its limits disagree, None
    when it states no limit of `q`'s kind) and the limits it holds it against. `conditions`: a condition
    on a value ("when it is below 10 °C", "children under 150 cm ...") counts as its limit (the question
    asks whether what it says happens or applies)."""
    sides, told = bounds(sentence), said_of(sentence)
    # a list's values each belong to their own thing ("braked ... 1,500 kg, unbraked ... 750 kg"): those
    # of the thing the question names, when it names one
    named = [v for v in values if told.get(v.key, set()) & wanted]
    said, used = set(), set()
    for v in named or values:
        needed = _said_after(_NEEDS, v, sentence)
        conditional = conditions and (_said_after(_CONDITION, v, sentence, _CONDITION_BEFORE)
                                      or _of_the_subject(v, sentence))
        if not (needed or conditional or _said_after(_LIMIT_WORDS, v, sentence)):
            continue
        if conditional and q.base() == v.base():  # "below 10" says nothing of 10 itself
            continue
        side = sides.get(v.key, set()) - {None} or ({LOWER} if needed else set())
        if side in ({UPPER}, {LOWER}):
            said.add("yes" if _inside(q, v, side) else "no")
            used.add(v.base())
    ends = [v for v in values if sides.get(v.key) == {None}]
    if not said and len(ends) == 2 and _RANGE.search(normalize(sentence)):
        low, high = sorted(v.base() for v in ends)
        said.add("yes" if low <= q.base() <= high else "no")
        used |= {low, high}
    if not said:
        return None, frozenset()
    return (said.pop() if len(said) == 1 else "unclear"), frozenset(used)


_RANGE = re.compile(r"\d\s*(?:-|–|—|~|to|至|到)\s*\d|between\s+\d[\d,.]*\s*\S*\s+and\s+\d"
                    r"|在\s*\d.*(?:到|至).*\d.*之间", re.I)
