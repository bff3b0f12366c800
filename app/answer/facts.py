"""Hard facts in text: numbers with their units, phone numbers, codes, menu paths and named controls.

A driver acts on these, so the answer layer checks every one against the passages it cited.
Each fact carries a comparison key that is the same however it was written:

    "1,500 kg" · "1500 kilograms" · "一千五百公斤"          -> number 1500 kg
    "thirty minutes" · "30 min" · "三十分钟" · "３０分钟"    -> number 30 min
    "minus 10 degrees" · "-10 °C" · "零下十度"               -> number -10 °c
    "800-555-0199" · "800 555 0199"                         -> phone 8005550199
    "Settings > Vehicle > Tyres" · “设置”→“车辆”              -> menu items settings, vehicle, tyres

    text ─► NFKC (full-width digits/punctuation) ─► Chinese numerals and English number words as digits
         ─► regexes (phone, code, number+unit, menu, quoted names) ─► Fact(kind, key, span)
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# ---- units: every spelling a KB or a model writes, mapped to one canonical name -------------------
_UNIT_SPELLINGS: dict[str, tuple[str, ...]] = {
    "km/h": ("km/h", "kph", "kmh", "kilometres per hour", "kilometers per hour", "公里每小时", "公里/小时",
             "千米每小时"),
    "mph": ("mph", "miles per hour"),
    "kwh": ("kwh", "kilowatt hours", "kilowatt-hours", "kilowatt hour", "千瓦时", "度电"),
    "wh": ("wh", "watt hours", "watt-hours", "watt hour", "瓦时"),
    "mah": ("mah", "milliamp hours", "milliamp-hours", "毫安时"),
    "ah": ("ah", "amp hours", "amp-hours", "ampere hours", "ampere-hours", "安时", "安培时"),
    "kw": ("kw", "kilowatts", "kilowatt", "千瓦"),
    "kpa": ("kpa", "kilopascals", "kilopascal", "千帕"),
    "psi": ("psi", "p s i"),
    "bar": ("bar",),
    "km": ("km", "kilometres", "kilometers", "kilometre", "kilometer", "公里", "千米"),
    "mm": ("mm", "millimetres", "millimeters", "millimetre", "millimeter", "毫米"),
    "cm": ("cm", "centimetres", "centimeters", "centimetre", "centimeter", "厘米"),
    "m": ("m", "metres", "meters", "metre", "meter", "米"),
    "kg": ("kg", "kilograms", "kilogram", "kilos", "公斤", "千克"),
    "t": ("tonnes", "tonne", "吨"),  # not "ton(s)": a US ton is 907 kg
    "l": ("l", "litres", "liters", "litre", "liter", "升"),
    "ml": ("ml", "millilitres", "milliliters", "millilitre", "milliliter", "毫升"),
    "h": ("h", "hours", "hour", "hrs", "hr", "小时", "个小时"),
    "min": ("min", "mins", "minutes", "minute", "分钟"),
    "s": ("s", "sec", "secs", "seconds", "second", "秒", "秒钟"),
    "day": ("days", "day", "天"),
    "week": ("weeks", "week", "周", "个星期", "星期"),
    "month": ("months", "month", "个月"),
    "year": ("years", "year", "年"),
    "%": ("%", "percent", "per cent", "percentage points"),
    "°c": ("°c", "degrees celsius", "degrees c", "degrees", "摄氏度", "度"),
    "v": ("v", "volts", "volt", "伏", "伏特"),
    "a": ("a", "amps", "amperes", "amp", "ampere", "安", "安培"),
    "g": ("g",),
    "inch": ("inch", "inches", "英寸", "寸"),
    "w": ("watts", "watt", "瓦特", "瓦"),
    "times": ("times", "次"),
}
_UNIT_OF = {spelling: unit for unit, spellings in _UNIT_SPELLINGS.items() for spelling in spellings}
# units of measure the reader gives no value in (a US ton is 907 kg, a UK one 1,016), words of no topic all the
# same: a question translated from "一吨二" asks about "1.2 tons"
_UNCONVERTED_UNITS = ("tons", "pounds", "lbs", "ounces", "feet", "yards", "miles", "gallons")
UNIT_WORDS = frozenset(w for s in _UNIT_OF for w in s.split()) | frozenset(_UNCONVERTED_UNITS)
# longest first so "kwh" wins over "kw" and "km/h" over "km"
_UNIT_ALT = "|".join(re.escape(s) for s in sorted(_UNIT_OF, key=len, reverse=True))
_CURRENCY = {"€": "eur", "$": "usd", "£": "gbp", "¥": "cny", "元": "cny", "euros": "eur", "euro": "eur",
             "dollars": "usd"}

# ---- numbers written as words ---------------------------------------------------------------------
_EN_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_EN_TENS = {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split())
            if w != "_"}
_EN_SCALES = {"hundred": 100, "thousand": 1000}
_EN_WORD = "|".join(sorted([*_EN_UNITS, *_EN_TENS, *_EN_SCALES, "a"], key=len, reverse=True))
_EN_NUMBER = re.compile(rf"\b(?:{_EN_WORD})(?:[\s-]+(?:and[\s-]+)?(?:{_EN_WORD}))*\b", re.I)

_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
              "九": 9}
_ZH_SCALES = {"十": 10, "百": 100, "千": 1000, "万": 10000}
_ZH_NUMBER = re.compile(r"(百分之)?([零〇一二两三四五六七八九十百千万]+(?:点[零〇一二两三四五六七八九]+)?)")
# Chinese words that contain numeral characters but are not numbers ("together", "once", "certainly" ...)
_ZH_NOT_NUMBER = re.compile(r"一(?:起|下|定|直|般|些|旦|样|致|切|边|同|点儿|会儿|路|键)|统一|万一|唯一|之一|十分"
                            r"|千万|第[一二三四五六七八九十]|星期[一二三四五六日天]|周[一二三四五六日]")


def _en_value(words: str) -> int | None:
    total, current = 0, 0
    tokens = [t for t in re.split(r"[\s-]+", words.lower()) if t and t != "and"]
    if tokens == ["a"]:
        return None
    for t in tokens:
        if t == "a":
            current = 1  # "a hundred"
        elif t in _EN_UNITS:
            current += _EN_UNITS[t]
        elif t in _EN_TENS:
            current += _EN_TENS[t]
        elif t == "hundred":
            current = max(current, 1) * 100
        elif t == "thousand":
            total, current = total + max(current, 1) * 1000, 0
    return total + current


def _zh_int(text: str) -> int:
    if all(c in _ZH_DIGITS for c in text):  # "二〇二四": digit by digit
        return int("".join(str(_ZH_DIGITS[c]) for c in text))
    # a digit right after 百/千/万 with nothing between counts the next place down, as spoken: 一百六
    # is 160, 两千五 2,500 (一百零六, with its 零, is 106)
    if len(text) >= 3 and text[-1] in _ZH_DIGITS and text[-2] in "百千万" and text[-1] not in "零〇":
        return _zh_int(text[:-1]) + _ZH_DIGITS[text[-1]] * {"百": 10, "千": 100, "万": 1000}[text[-2]]
    total, section, digit = 0, 0, 0
    for c in text:
        if c in _ZH_DIGITS:
            digit = _ZH_DIGITS[c]
        elif c == "万":
            total, section, digit = (total + section + digit) * 10000, 0, 0
        else:
            section += (digit or 1) * _ZH_SCALES[c]
            digit = 0
    return total + section + digit


def _zh_value(text: str) -> str:
    whole, _, frac = text.partition("点")
    value = str(_zh_int(whole)) if whole else "0"
    return value + ("." + "".join(str(_ZH_DIGITS[c]) for c in frac) if frac else "")


# two neighbouring digits say "about this or the next": 五六米 is 5 or 6 metres, 两三天 2 or 3 days, 七八十 70 to 80
# (not 56 metres: a number spoken digit by digit, "二〇二四", has more than two)
_ZH_ABOUT = re.compile(r"([一两二三四五六七八])([二三四五六七八九])([十百千万]?)")
# 一成 ... 九成: tenths, as spoken (三成: 30 percent; "还剩两成": 20 percent left), said as 百分之X十; not the
# idiom 一成不变 nor a word beginning with 成 (一成年人: one adult; 三成员)
_ZH_TENTHS = re.compile(r"([一二两三四五六七八九])成(?!不变|年|员|为|功|本|立|绩|果|分|人|交|都|就)")


def _zh_numbers(text: str) -> str:
    text = _ZH_TENTHS.sub(lambda m: f"百分之{m.group(1)}十", text)

    def repl(m: re.Match) -> str:
        percent, number = m.group(1), m.group(2)
        before, after = text[max(0, m.start() - 1):m.start()], text[m.end():m.end() + 2]
        if not percent and _ZH_NOT_NUMBER.match(text, m.start() - (1 if before in "统万唯之第星周" else 0)):
            return m.group(0)
        # like English "one", 一 is the article ("一个文件": a file) far more often than a count: a
        # number only before a unit
        if not percent and number == "一" and not re.match(_UNIT_ALT, after):
            return m.group(0)
        about = _ZH_ABOUT.fullmatch(number)
        if about and not percent and _ZH_DIGITS[about.group(2)] == _ZH_DIGITS[about.group(1)] + 1:
            scale = _ZH_SCALES.get(about.group(3), 1)
            return f" {_ZH_DIGITS[about.group(1)] * scale}-{_ZH_DIGITS[about.group(2)] * scale} "
        value = _zh_value(number)
        return f"{value}%" if percent else f" {value} "

    return _ZH_NUMBER.sub(repl, text)


def _en_numbers(text: str) -> str:
    def repl(m: re.Match) -> str:
        value = _en_value(m.group(0))
        if value is None:
            return m.group(0)
        after = text[m.end():m.end() + 24].lower()
        # "one" is a pronoun far more often than a count: a number only before a unit
        if value == 1 and not re.match(rf"\s*(?:{_UNIT_ALT})\b", after):
            return m.group(0)
        return str(value)

    return _EN_NUMBER.sub(repl, text)


# Chinese units that begin with a numeral character (千瓦 is kilowatt, not "thousand 瓦")
_ZH_KILO_UNITS = re.compile(r"千瓦时|千瓦|千克|千米|千帕")
_ZH_KILO = {"千瓦时": "kWh", "千瓦": "kW", "千克": "kg", "千米": "km", "千帕": "kPa"}


# spoken Chinese fractions of an amount: 一米四 is 1.4 metres (a height, a length; not 1 m and a 4), 一米七五 1.75,
# 一吨二 1.2 tonnes, 三公里半 3.5 km, 一个半小时 1.5 hours, 半个小时 half an hour
_ZH_AND_TENTHS = re.compile(r"(\d+)\s*(米|吨)\s*(\d{1,2})(?![\d.])"
                            r"(?!\s*(?:厘米|毫米|公分|米|吨|个|只|人|辆|次|号|位|岁|[a-z]))", re.I)
_ZH_AND_A_HALF = re.compile(r"(\d+|一)\s*个?半\s*(小时|钟头|月)|(\d+)\s*(公里|千米|米|公斤|斤|吨|升|度)半")
_ZH_HALF = re.compile(r"(?<![\d.个])半个?(小时|钟头|月)")


def _zh_fractions(text: str) -> str:
    text = _ZH_AND_TENTHS.sub(lambda m: f"{m.group(1)}.{m.group(3)} {m.group(2)}", text)
    text = _ZH_AND_A_HALF.sub(lambda m: f" {1 if m.group(1) == '一' else m.group(1)}.5 {m.group(2)}" if m.group(1)
                              else f"{m.group(3)}.5 {m.group(4)}", text)
    return _ZH_HALF.sub(lambda m: f" 0.5 {m.group(1)}", text)


# an interval said in words: "once a month" is every 1 month, as "every 12 months" is every 12
_ONCE_A = re.compile(r"\bonce\s+(?:a|an|per|every)\s+(day|week|month|year)\b", re.I)
# a speed as Chinese speakers say it: with its "per hour" first, "每小时二十五公里" (not "每小时充 30 公里", a range
# gained per hour: nothing but a word of how much may come between), or as its distance or bare after the word
# for speed, "车速大概二十公里", "时速一百二", "车速开到120": km/h
_PER_HOUR_FIRST = re.compile(r"每个?小时\s*(?:大概|大约|约|只有|也就|就|才)?\s*(\d+(?:\.\d+)?)\s*(?:公里|km)"
                             r"(?!\s*(?:每|/))", re.I)
_SPEED_AS_KM = re.compile(r"((?:车速|时速|速度)[^，。,.;；？?！!]{0,8}?\d+(?:\.\d+)?(?:-\d+)?\s*)(?:公里|千米|km)?"
                          r"(?!\s*(?:每小时|/小时|/时|/h|[\d.]|[A-Za-z%]|公|千|米|分|秒|小时|个|次))", re.I)


def normalize(text: str) -> str:
    """One spelling for numbers: NFKC (full-width forms), Chinese numerals and number words as digits."""
    text = unicodedata.normalize("NFKC", text).replace("\u2212", "-").replace("零下", " minus ")
    text = _ZH_KILO_UNITS.sub(lambda m: _ZH_KILO[m.group(0)], text)
    text = _ONCE_A.sub(lambda m: f"every 1 {m.group(1)}", text)
    text = _en_numbers(_zh_fractions(_zh_numbers(text)))
    return _SPEED_AS_KM.sub(r"\1km/h", _PER_HOUR_FIRST.sub(r"\1 km/h", text))


# ---- facts ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fact:
    kind: str  # "phone" | "code" | "number" | "menu" | "name" (+ for an unsupported one, "negation": a denial the
    # passages do not make, "place": where they do not say, "reply": a yes or no that rests on nothing they say,
    # "forbidden": what they say not to do)
    key: str  # comparison key: "8005550199", "1500 kg", "30", "settings", ...
    text: str  # as written (after normalization)

    @property
    def value(self) -> str:
        return self.key.split(" ", 1)[0]


# digit groups joined by "-" or ".", or by spaces after "+" or a group of three ("800 555 0199", "+44 20 7946
# 0958"): a table row's numbers ("4584 1316 5900", "85 19 104") are no phone number
_PHONE = re.compile(r"(?<![0-9A-Za-z.])(?:\+?\d{2,4}(?:[.-]\d{2,4}){2,4}"
                    r"|(?:\+\d{1,4}|(?<![\d+])\d{3})(?:[\s.-]\d{2,4}){2,4})(?![0-9A-Za-z])")
# letters and digits in one word: "CCS2", "R18", "P0A80" (a digit run with a unit is a number instead)
_CODE = re.compile(r"(?<![0-9A-Za-z])(?=[A-Za-z0-9-]*\d)[A-Za-z][A-Za-z0-9]*(?:-?[A-Za-z0-9]+)*(?![0-9A-Za-z])")
# a sign is part of the value: "above minus 10 degrees" is not "above 10 degrees" ("4-6 years" is a range)
_NUMBER = re.compile(r"(?P<cur>[€$£¥])?\s?(?P<sign>(?<![\w.,])-|\bminus\s+|\bnegative\s+)?"
                     r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
                     rf"(?:\s*(?:-|to|–|—|~|至|到)\s*\d+(?:\.\d+)?)?"
                     rf"(?:[\s-]?(?P<unit>{_UNIT_ALT})(?![A-Za-z]))?(?:\s?(?P<cur2>元|euros?|dollars))?", re.I)
# "between 50 and 100 percent": the unit said once, after the range's second end, is the first end's too
_BETWEEN = re.compile(rf"\bbetween\s+(?P<num>\d[\d,]*(?:\.\d+)?)\s+and\s+\d[\d,]*(?:\.\d+)?[\s-]?(?P<unit>{_UNIT_ALT})"
                      r"(?![A-Za-z])", re.I)
_MENU_SEP = re.compile(r"\s*(?:>|›|→)\s*")
_MENU = re.compile(r"[^\n>›→。.!?]+?(?:\s*(?:>|›|→)\s*[^\n>›→。.!?,，]+)+")
# one menu item next to a separator: a quoted name, up to three capitalised words, or a short CJK run
_ITEM = r"(“[^”]+”|\"[^\"]+\"|「[^」]+」|[A-Z][\w-]*(?:\s+[A-Z][\w-]*){0,2}|[\u4e00-\u9fff]{1,8})"
_VERB = re.compile(r"^(?:Open|Go to|Go|Tap|Select|Press|Choose|Touch)\s+")
_ITEM_END, _ITEM_START = re.compile(_ITEM + r"\W*$"), re.compile(r"^\W*" + _ITEM)
_QUOTED = re.compile(r"[\"“”「」『』]([^\"“”「」『』\n]{2,40})[\"“”「」『』]")
_BUTTON = re.compile(r"\b((?:[A-Z][\w-]*\s){0,3}[A-Z][\w-]*)\s+(?:button|switch|paddle|icon|menu|page|tab)\b")
# a control the driver is told to use: "tap Reset TPMS", "select Winter wheel set", "press SET"
_CONTROL = re.compile(r"\b(?:[Tt]ap|[Ss]elect|[Pp]ress|[Cc]hoose|[Tt]urn on|[Ss]witch on)\s+(?:the\s+)?"
                      r"((?:[A-Z][\w-]*)(?:\s+[A-Z][\w-]*){0,3})")
_CITATION = re.compile(r"\[\d+\]")
# a numbered list's "1." or "2)" at a line's start orders the steps; it states nothing
_ENUMERATOR = re.compile(r"^[ \t]*\d{1,2}[.)](?=[ \t]+\S)", re.M)
# a value passed as an argument named for its unit ("timedelta(days=31)", "hours = 12") is that many of it
_UNIT_ARGUMENT = re.compile(r"\b(?P<unit>[a-z]{3,})\s*=\s*(?P<num>\d+(?:\.\d+)?)\b", re.I)
# a path told in words: "open Settings, then Safety, then Passenger airbag, select Off"; an item is a
# capitalised word and the words after it up to the next ", then" or the end of the path
_THEN_ITEM = r"[A-Z][\w-]*(?:\s+[\w-]+){0,3}?"
_THEN_PATH = re.compile(rf"\b(?:[Oo]pen|[Gg]o to|[Cc]hoose|[Ss]elect|[Tt]ap)\s+(?:the\s+)?"
                        rf"(?P<path>{_THEN_ITEM}(?:,\s*then\s+{_THEN_ITEM})+)(?=\s*(?:[,.;:!?]|$|\s+(?:and|to|on|"
                        rf"before|after|where|for|in|so|until|when|with|from|or)\b))")


def _menu_items(path: str) -> list[str]:
    parts = _MENU_SEP.split(path)
    items = []
    for i, part in enumerate(parts):
        m = (_ITEM_END.search if i == 0 else _ITEM_START.search)(part)
        if m:
            items.append(_VERB.sub("", m.group(1).strip("“”\"「」")).lower())
    return items


def menu_paths(text: str) -> list[list[str]]:
    """The menu paths a text gives, each as its items in order: "Settings > Vehicle > Tyres", "open
    Settings, then Vehicle, then Tyres", “设置”→“车辆”→“轮胎”."""
    text = normalize(_CITATION.sub(" ", text))
    paths = [_menu_items(m.group(0)) for m in _MENU.finditer(text)]
    paths += [[_loose(i) for i in re.split(r",\s*then\s+", m.group("path"))] for m in _THEN_PATH.finditer(text)]
    return [p for p in paths if len(p) > 1]


def extract_facts(text: str) -> list[Fact]:
    """Every hard fact in the text, in order of appearance (citation markers [n] and a list's numbers are
    not facts)."""
    text = normalize(_ENUMERATOR.sub(lambda m: " " * len(m.group(0)), _CITATION.sub(" ", text)))
    facts: list[Fact] = []
    taken = [False] * len(text)

    def claim(m: re.Match, fact: Fact) -> None:
        facts.append(fact)
        for i in range(m.start(), m.end()):
            taken[i] = True

    for m in _PHONE.finditer(text):
        digits = re.sub(r"\D", "", m.group(0))
        if len(digits) >= 7:
            claim(m, Fact("phone", digits, m.group(0)))
    for m in _CODE.finditer(text):
        if any(taken[m.start():m.end()]) or re.fullmatch(rf"\d+(?:{_UNIT_ALT})", m.group(0), re.I):
            continue  # "30min", "11kW" are numbers with units
        claim(m, Fact("code", m.group(0).lower().replace("-", ""), m.group(0)))
    for m in _UNIT_ARGUMENT.finditer(text):
        unit = _UNIT_OF.get(m.group("unit").lower())
        if unit and not any(taken[m.start():m.end()]):
            claim(m, Fact("number", f"{m.group('num')} {unit}", m.group(0)))
    shared_unit = {b.start("num"): b.group("unit") for b in _BETWEEN.finditer(text)}
    for m in _NUMBER.finditer(text):
        if any(taken[m.start("num"):m.end("num")]):
            continue
        value = m.group("num").replace(",", "")
        value = value.rstrip("0").rstrip(".") if "." in value else value
        value = "-" + value if m.group("sign") and value != "0" else value
        cur = m.group("cur") or m.group("cur2")
        unit = _CURRENCY[cur.lower()] if cur else _UNIT_OF.get(
            (m.group("unit") or shared_unit.get(m.start("num")) or "").lower())
        facts.append(Fact("number", f"{value} {unit}" if unit else value, m.group(0).strip()))
        rng = re.search(r"(?:-|to|–|—|~|至|到)\s*(\d+(?:\.\d+)?)", m.group(0)[m.end("num") - m.start():])
        if rng:  # a range states both ends, with the same unit
            facts.append(Fact("number", f"{rng.group(1)} {unit}" if unit else rng.group(1), m.group(0).strip()))
    for m in _MENU.finditer(text):
        facts.extend(Fact("menu", item, m.group(0).strip()) for item in _menu_items(m.group(0)))
    for m in _QUOTED.finditer(text):
        facts.append(Fact("name", m.group(1).strip().lower(), m.group(0)))
    for m in (*_BUTTON.finditer(text), *_CONTROL.finditer(text)):
        facts.append(Fact("name", m.group(1).strip().lower(), m.group(0)))
    return facts


def without_facts(text: str) -> str:
    """The words a sentence says around its facts (numbers and unit words taken out)."""
    text = normalize(text)
    for f in extract_facts(text):
        text = text.replace(f.text, " ")
    return " ".join(w for w in text.split() if w.lower().strip(".,;:!?()") not in UNIT_WORDS)


# unit spellings that name a unit in a question ("in litres", "how many kilometres", "多少升"): short
# Latin ones ("a", "m", "kw") and one-character Chinese ones (天 "day" in 每天 "every day", 安 in 安全
# "safety") are other words as often as units; 升, 秒 and 瓦 are not
_NAMED_SPELLINGS = [s for s in _UNIT_OF if (len(s) >= 3 if s.isascii() else len(s) >= 2 or s in "升秒瓦")
                    and s not in ("degrees", "times")]
_NAMED_UNIT = re.compile(r"(?<![a-z])(?:" + "|".join(re.escape(s) for s in sorted(_NAMED_SPELLINGS, key=len,
                                                                                   reverse=True)) + r")(?![a-z])",
                         re.I)


def named_units(text: str) -> set[str]:
    """The units a text names without a number: what a question wants its answer in."""
    return {_UNIT_OF[m.group(0).lower()] for m in _NAMED_UNIT.finditer(normalize(text))}


# a unit right after the words that ask for an amount ("how many litres", "多少公里", "几年", "in kWh"): there
# even a short spelling is the unit ("几天" asks for days, though 天 is a day in other words too)
_ASKED_UNIT = re.compile(r"(?:\bhow\s+(?:many|much)\s+|多少个?|几个?)(?P<unit>" + _UNIT_ALT + r")(?![a-z])|"
                         r"\bin\s+(?P<named>" + _NAMED_UNIT.pattern + ")", re.I)
# what a unit measures: an amount asked in one is answered in any unit of the same kind (psi for kPa)
_DIMENSIONS = (("km/h", "mph"), ("kwh", "wh"), ("kw", "w"), ("kpa", "psi", "bar"), ("km", "m", "cm", "mm", "inch"),
               ("kg", "g", "t"), ("l", "ml"), ("ah", "mah"), ("h", "min", "s", "day", "week", "month", "year"))
_DIMENSION = {unit: kind[0] for kind in _DIMENSIONS for unit in kind}


def asked_units(question: str) -> set[str]:
    """The units a question asks its amount in, by what it measures (each as its kind's first unit): named
    right after its asking words, not a unit it names otherwise ("next month", 升级 "upgrade"). Not a count
    or a degree: "how many times a year" is answered by "every 12 months", and "多少度" asks as often for
    kilowatt hours as for a temperature."""
    units = {_UNIT_OF[(m.group("unit") or m.group("named")).lower()] for m in _ASKED_UNIT.finditer(normalize(question))}
    return {dimension(u) for u in units - {"times", "°c"}}


def dimension(unit: str | None) -> str | None:
    """What a unit measures, named by the first unit of its kind ("psi" -> "kpa"); a unit of no kind is its own."""
    return _DIMENSION.get(unit, unit)


QUANTITY_KINDS = ("number", "phone", "code")  # facts that answer "how much / which number"
AMOUNT_KINDS = ("number", "code")  # those that answer "how long / 多少": a phone number is no amount


def states_quantity(facts: list[Fact]) -> bool:
    return any(f.kind in QUANTITY_KINDS for f in facts)


def states_phone(facts: list[Fact]) -> bool:
    return any(f.kind == "phone" for f in facts)


@dataclass
class FactIndex:
    """What a set of passages states, for support checks."""

    phones: set[str]
    codes: set[str]
    numbers: set[str]  # "1500 kg", "4"
    values: set[str]  # "1500", "4": every value, with or without its unit
    bare: set[str]  # values stated without a unit
    text: str  # lower-cased normalized text, for names and menu items

    @classmethod
    def of(cls, texts: list[str]) -> FactIndex:
        facts = [f for t in texts for f in extract_facts(t)]
        numbers = [f for f in facts if f.kind == "number"]
        return cls({f.key for f in facts if f.kind == "phone"}, {f.key for f in facts if f.kind == "code"},
                   {f.key for f in numbers}, {f.value for f in numbers},
                   {f.key for f in numbers if " " not in f.key}, normalize(" ".join(texts)).lower())

    def supports(self, fact: Fact) -> bool:
        if fact.kind == "phone":
            return fact.key in self.phones
        if fact.kind == "code":
            return fact.key in self.codes or fact.key in re.sub(r"[\s-]", "", self.text)
        if fact.kind == "number":
            # with a unit: that value with that unit ("240 psi" is not "240 kPa"), or the value stated bare;
            # without one: the value with any unit
            return fact.key in self.numbers or fact.value in self.bare if " " in fact.key else fact.key in self.values
        return _loose(fact.key) in _loose(self.text)  # menu items, named controls: the words as written


def _loose(text: str) -> str:
    return re.sub(r"[\s\"'“”「」‘’]+", " ", text.lower()).strip()
