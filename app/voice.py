"""Voice mode: answers shaped for text-to-speech, in the language they are spoken in.

A sentence is made speakable after it has been verified (app/answer), so the spoken text states the
same facts as the written one: markdown, citation markers and preambles go, units are spelled out,
phone numbers are read as digit groups (never "800 to 555"), and Chinese sentences get Chinese unit
names ("240 千帕", "百分之 80"), not English ones.
"""

from __future__ import annotations

import re

from app.answer.sentences import strip_markdown

VOICE_MAX_TOKENS = 96  # a spoken answer of a few sentences; small models ignore "be brief" otherwise

# unit spellings a text-to-speech engine reads correctly; longest first so "kWh" wins over "kW"
_UNITS_EN = [
    ("km/h", "kilometres per hour"), ("kWh", "kilowatt hours"), ("kW", "kilowatts"), ("kPa", "kilopascals"),
    ("psi", "P S I"), ("km", "kilometres"), ("mm", "millimetres"), ("cm", "centimetres"), ("kg", "kilograms"),
    ("°C", "degrees Celsius"), ("°F", "degrees Fahrenheit"), ("%", " percent"), ("V", "volts"), ("A", "amps"),
    ("h", "hours"), ("min", "minutes"), ("m", "metres"),
]
_UNITS_ZH = [
    ("km/h", "公里每小时"), ("kWh", "千瓦时"), ("kW", "千瓦"), ("kPa", "千帕"), ("psi", "磅每平方英寸"), ("km", "公里"),
    ("mm", "毫米"), ("cm", "厘米"), ("kg", "公斤"), ("°C", "摄氏度"), ("V", "伏"), ("A", "安"), ("h", "小时"),
    ("min", "分钟"), ("m", "米"),
]


def _unit_re(units: list[tuple[str, str]]) -> re.Pattern:
    return re.compile(r"(\d)\s*(" + "|".join(re.escape(u) for u, _ in units) + r")(?![A-Za-z])")


_UNIT_RE = {"en": (_unit_re(_UNITS_EN), dict(_UNITS_EN)), "zh": (_unit_re(_UNITS_ZH), dict(_UNITS_ZH))}
_PHONE = re.compile(r"(?<![\d-])\+?\d{2,4}(?:-\d{2,4}){2,4}(?![\d-])")
_RANGE_RE = re.compile(r"(\d)\s*[–—-]\s*(\d)")  # 10–80 -> 10 to 80 (phone numbers are grouped first)
_PERCENT_ZH = re.compile(r"(\d+(?:\.\d+)?)\s*%")
_CITED = re.compile(r"\s*\b(?:according to|as (?:stated|mentioned|described) in|as per|see|based on)\s+"
                    r"(?:\[\d+\]|passages?\s*\d+)\s*,?\s*|\s*\((?:see\s+)?\[\d+\]\)|\s*\[\d+\]|"
                    r"\s*\b(?:in\s+)?passages?\s+\d+\s*,?", re.I)
_PREAMBLE = re.compile(r"^\s*(?:the answer is|answer|here is the answer|sure|答案是|答)\s*[:：,，]\s*", re.I)
_CJK = re.compile(r"[\u4e00-\u9fff]")


def speakable(text: str, sentence_start: bool = True) -> str:
    """Strip markdown, citations and preambles; spell units and group phone digits for reading aloud.
    `sentence_start`: the text begins a sentence (not the rest of one whose first clause was said)."""
    lang = "zh" if _CJK.search(text) else "en"
    text = _PREAMBLE.sub("", _CITED.sub(" ", strip_markdown(text)))
    text = _PHONE.sub(lambda m: m.group(0).replace("-", " "), text)
    text = _RANGE_RE.sub(r"\1 到 \2" if lang == "zh" else r"\1 to \2", text)
    if lang == "zh":
        text = _PERCENT_ZH.sub(r"百分之\1", text)
    pattern, words = _UNIT_RE[lang]
    text = pattern.sub(lambda m: f"{m.group(1)} {words[m.group(2)].strip()}", text)
    text = re.sub(r"\s+([.,;:!?，。；：！？])", r"\1", text)
    text = re.sub(r"^[\s,;:，；：]+", "", text)
    text = re.sub(r"\s{2,}", " ", text).strip()
    return text[:1].upper() + text[1:] if lang == "en" and sentence_start else text
