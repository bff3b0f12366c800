"""The prompts a grounded answer is given, defined once: the app builds every answer prompt from
these (app/answer), and PTQ calibration (build_scripts/quantize/calibration.py) renders its
retrieval samples with them, so the activation ranges it calibrates are those of the prompts the
device will run. What differs between KBs comes from the KB's answer profile (knowledge/profile.py).

    system turn   answer_instructions(profile[, voice])  (+ any system text of the request's own)
    user turn     passage_turn([passage_text(1, head, body), ...], question[, note])
"""

from __future__ import annotations

import re

from knowledge.profile import AnswerProfile


def answer_instructions(profile: AnswerProfile, voice: bool = False) -> list[str]:
    """The answer instructions (the system turn) for a KB's profile: who the assistant is and whom it
    answers come from the profile; what makes an answer grounded is the same for every KB."""
    grounded = (f"{profile.assistant} Answer {profile.user}'s question in one or two short, complete sentences, "
                "using only the facts in the passages. Write numbers, units, names, commands and settings exactly as "
                "the passages write them. Do not mention the passages. If the passages do not contain the answer, "
                "reply only: I don't know. Answer in the language of the question.")
    return [grounded, voice_instructions(profile)] if voice else [grounded]


def voice_instructions(profile: AnswerProfile) -> str:
    """What a spoken answer adds to the instructions; how it reaches the listener is the KB's profile."""
    return (f"{profile.listening}, so answer in one or two short spoken sentences. "
            "No lists, no headings, no markdown, no emojis.")


def with_system(messages: list[dict], instructions: list[str]) -> list[dict]:
    """One system turn first: the instructions, then any system text of the request's own."""
    if not instructions:
        return messages
    user_system = [m["content"] for m in messages if m["role"] == "system"]
    system = "\n\n".join([*instructions, *user_system])
    return [{"role": "system", "content": system}] + [m for m in messages if m["role"] != "system"]


PASSAGE = "Passage"  # what the prompt calls each passage, before its number


def passage_text(index: int, head: str, body: str) -> str:
    """One passage as the model reads it; `head`: "FAQ: <question>" for an FAQ entry, else its section."""
    return f"{PASSAGE} {index} ({head}):\n{body}"


_NUMBERS = r"\d+(?:\s*(?:,|and|&)\s*\d+)*"
# an answer pointing at the prompt's passages, which the user never sees: "(Passage 2)", "as shown in
# Passage 2", "according to passages 1 and 3"
_MENTION = re.compile(rf"\s*\((?:see\s+)?{PASSAGE}s?\s+{_NUMBERS}\)|,?\s*(?:(?:as\s+)?(?:shown|described|stated|"
                      rf"explained|mentioned|given|seen)\s+)?(?:in|from|per|see|according\s+to)\s+(?:the\s+)?"
                      rf"{PASSAGE}s?\s+{_NUMBERS}", re.I)


def without_passage_mentions(sentence: str) -> str:
    """An answer's sentence without its mentions of the prompt's passages (the instructions ask for none,
    and a small model still writes them): "Set it as shown in Passage 2." is "Set it."."""
    out = _MENTION.sub("", sentence)
    if out == sentence:
        return sentence
    out = re.sub(r"^\s*[,;:]?\s*", "", out)
    out = re.sub(r"\s+([.,;:!?])", r"\1", out)
    return out[:1].upper() + out[1:] if sentence[:1].isupper() else out


PASSAGE_SEP = "\n\n"  # between passages (app/answer/passages.py reads the spans of passages with it)


def passage_turn(passages: list[str], question: str, note: str = "") -> str:
    """The user turn: the passages beside the question (1-3B models follow passages next to the
    question best); `note`: what the host worked out for the model, after the question."""
    told = f"\n({note})" if note else ""
    return f"{PASSAGE_SEP.join(passages)}\n\nQuestion: {question}{told}"
