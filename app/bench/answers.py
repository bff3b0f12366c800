"""`hexrag eval answers`: strict answer grading on any KB, through the same Assistant `hexrag ask` uses.

Question file (JSONL): {"question", "lang", "answerable", "expected": [entry ids or "file#A > B"],
"facts": [[spellings of fact 1], [spellings of fact 2], ...], "wrong": [known false answers]} and, for
a question a yes or a no answers, "reply": "yes" | "no".

Strict, per answer:
  correct   every fact is stated (one of its spellings appears in the answer) and nothing false is
  partial   some facts stated, nothing false
  wrong     no fact stated, or something false: a "wrong" string, or a hard fact (number, phone
            number, code, menu item) that the expected entries do not state. An answer to an
            unanswerable question is wrong, and every hard fact in it counts as unsupported.
  refused   the answer says "I don't know" (the grounding decision); right only when unanswerable

A yes-or-no question's answer must open with its reply: the opposite reply is wrong whatever else it
states, and an answer that gives none (only the limit) is partial at best.

The unsupported-fact check reads the *expected* entries from the KB, not the passages the answer
used, so an answer built from the wrong passage fails it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from app.answer.facts import FactIndex, extract_facts
from app.bench.errors import BenchError
from knowledge.evaluation import matches
from knowledge.retrieval import Hit
from runtime.bench import spread


@dataclass
class AnswerQuestion:
    question: str
    lang: str
    answerable: bool
    expected: list[str]
    facts: list[list[str]]
    wrong: list[str]
    reply: str | None = None  # "yes" | "no": what a yes-or-no question's answer must open with


def load_answer_questions(path: Path) -> list[AnswerQuestion]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise BenchError(f"cannot read {path}: {e.strerror}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            facts = [[f] if isinstance(f, str) else list(f) for f in obj.get("facts", [])]
            answerable = bool(obj.get("answerable", bool(obj.get("expected"))))
            out.append(AnswerQuestion(obj["question"], obj.get("lang", "en"), answerable,
                                      list(obj.get("expected") or []), facts, list(obj.get("wrong", [])),
                                      obj.get("reply")))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise BenchError(f"{path}:{n}: not a question line ({type(e).__name__}: {e})") from None
        if out[-1].reply not in (None, "yes", "no"):
            raise BenchError(f"{path}:{n}: 'reply' is \"yes\" or \"no\", not {out[-1].reply!r}")
        if out[-1].answerable and (not out[-1].facts or not out[-1].expected):
            raise BenchError(f"{path}:{n}: an answerable question needs 'facts' and 'expected'")
    if not out:
        raise BenchError(f"{path} has no questions")
    return out


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().lower()


def _stated(answer: str, spellings: list[str]) -> bool:
    """Whether the answer states the fact: one of its spellings, or every value of one with its unit
    as the answer writes it (a voice answer says "240 kilopascals" for 240 kPa)."""
    text, said = _norm(answer), {f.key for f in extract_facts(answer)}
    return any(_norm(s) in text or (keys := {f.key for f in extract_facts(s)}) and keys <= said for s in spellings)


# how an answer opens: its first clause says no (a negation) or yes (an affirmation)
_NO = re.compile(r"^\W*(?:no|nope)\b|\b(?:not|cannot|can't|won't|shouldn't|mustn't|isn't|aren't|doesn't|don't|"
                 r"never)\b|^\W*(?:不|没|别|无法|未)|(?:不能|不可以|不行|不够|不要|不需要|不建议|不会|不是|没有)")
_YES = re.compile(r"^\W*(?:yes|yeah|yep|sure|absolutely|correct)\b|^\W*(?:是|对|可以|能|会|行|够|需要|没问题|当然)")
_FIRST_CLAUSE = re.compile(r"^[^,.;:!?，。；：！？—]*")


def reply_of(answer: str) -> str | None:
    """The reply an answer opens with: "no", "yes" or None (it states something without either)."""
    first = _FIRST_CLAUSE.match(_norm(answer)).group(0)
    return "no" if _NO.search(first) else "yes" if _YES.search(first) else None


def grade(q: AnswerQuestion, text: str, refused: bool, reference: list[str]) -> dict:
    row = {"question": q.question, "lang": q.lang, "answerable": q.answerable, "answer": text, "refused": refused}
    if refused:
        return {**row, "grade": "refused", "unsupported": []}
    if not q.answerable:
        return {**row, "grade": "wrong", "unsupported": [f.text for f in extract_facts(text)]}
    index = FactIndex.of([*reference, q.question])
    unsupported = [f.text for f in extract_facts(text) if not index.supports(f)]
    false = unsupported or [w for w in q.wrong if _norm(w) in _norm(text)]
    replied = reply_of(text) if q.reply else None
    if q.reply and replied not in (None, q.reply):
        false = [*false, f"reply: {replied}"]
    stated = sum(_stated(text, spellings) for spellings in q.facts)
    complete = stated == len(q.facts) and (not q.reply or replied == q.reply)
    grade_ = "wrong" if false or not stated else "correct" if complete else "partial"
    return {**row, "grade": grade_, "unsupported": unsupported, "false": false,
            "facts_stated": f"{stated}/{len(q.facts)}"}


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _share_and_correct(answerable: list[dict], key: str) -> dict:
    """The share of answerable questions whose row holds `key` true, and the share correct among them."""
    held = [r for r in answerable if r.get(key)]
    return {key: _rate(len(held), len(answerable)),
            f"correct_when_{key}": _rate(sum(r["grade"] == "correct" for r in held), len(held))}


def summarize(rows: list[dict]) -> dict:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    refused = [r for r in rows if r["refused"]]
    out = {
        "questions": len(rows),
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "correct": _rate(sum(r["grade"] == "correct" for r in answerable), len(answerable)),
        "partial": _rate(sum(r["grade"] == "partial" for r in answerable), len(answerable)),
        "wrong": _rate(sum(r["grade"] == "wrong" for r in answerable), len(answerable)),
        "refused_answerable": _rate(sum(r["refused"] for r in answerable), len(answerable)),
        # an expected entry among the passages shown; every expected fact written in them (a section's
        # window may leave out the sentence that answers); how often the answer was right when so
        **_share_and_correct(answerable, "shown"), **_share_and_correct(answerable, "facts_shown"),
        # over every answer given (refusals state nothing)
        "unsupported_fact_rate": _rate(sum(bool(r["unsupported"]) for r in rows), len(rows)),
        # answers that claim something false: any answer to a question the KB cannot answer, and an answer
        # stating a fact the expected passages do not, a known wrong value or the wrong reply
        "false_claim_rate": _rate(sum(not r["refused"] and (not r["answerable"] or bool(r.get("false")))
                                      for r in rows), len(rows)),
        "refusal_precision": _rate(sum(not r["answerable"] for r in refused), len(refused)),
        "refusal_recall": _rate(sum(r["refused"] for r in unanswerable), len(unanswerable)),
        "by_language": {},
    }
    for lang in sorted({r["lang"] for r in rows}):
        mine = [r for r in answerable if r["lang"] == lang]
        out["by_language"][lang] = {"answerable": len(mine),
                                    "correct": _rate(sum(r["grade"] == "correct" for r in mine), len(mine))}
    for key in ("first_sentence_ms", "answer_ms"):
        times = [r[key] for r in rows if r.get(key) is not None]
        if times:
            out[key] = spread(times)
    parts = [r["first_parts"] for r in rows if r.get("first_parts")]
    if parts:
        out["first_parts"] = {part: spread([p[part] for p in parts]) for part in FIRST_PARTS}
    drafted = sum(r.get("drafted_tokens", 0) for r in rows)
    if drafted:  # prompt lookup: how many drafted tokens greedy decoding kept
        out["drafts"] = {"drafted": drafted, "accepted": sum(r.get("accepted_tokens", 0) for r in rows)}
    return out




# where the time to the first said sentence goes, in order: the search, the rest of the plan (the refusal
# gate, the passages, the prompt), kept rows placed, the prompt's prefill, the model's tokens up to the
# end of that sentence (with any retry) and the checks of the sentences before it was said
FIRST_PARTS = ("retrieval", "prompt", "placement", "prefill", "draft", "verification")


def first_parts(timings: dict[str, float]) -> dict[str, float] | None:
    """The parts (FIRST_PARTS, ms) of an answer's time to its first sentence; None when it said none."""
    if "first_sentence_ms" not in timings:
        return None
    plan, retrieval = timings.get("plan_ms", 0.0), timings.get("retrieval_ms", 0.0)
    placement, prefill, verify = (timings.get(k, 0.0) for k in ("passage_kv_ms", "prefill_ms", "verify_ms"))
    draft = timings["first_sentence_ms"] - plan - placement - prefill - verify
    values = (retrieval, plan - retrieval, placement, prefill, max(draft, 0.0), verify)
    return {part: round(v, 1) for part, v in zip(FIRST_PARTS, values)}


def expected_shown(citations: list, expected: list[str]) -> bool:
    """Whether a passage the answer was shown is one of the expected references."""
    places = [Hit(0, "", c.source, c.source, c.heading or "", c.entry_id, 0.0) for c in citations]
    return any(matches(h, e) for h in places for e in expected)


def facts_shown(passages: list[str], facts: list[list[str]]) -> bool:
    """Whether the passages shown write every expected fact, as an answer would have to state it (`_stated`).
    A fact spelled in another language than the passages (a Chinese word for an English section's) counts
    as not shown."""
    text = "\n".join(passages)
    return bool(passages) and all(_stated(text, spellings) for spellings in facts)


def reference_texts(chunks: list, expected: list[str]) -> list[str]:
    """The texts of the KB chunks an expected reference names (entry id or "file#heading")."""
    return [h.text for h in chunks if any(matches(h, e) for e in expected)]


def evaluate_answers(assistant, questions: list[AnswerQuestion], voice: bool = False,
                     progress: bool = True) -> dict:
    if assistant.kb is None:
        raise BenchError("the answer eval needs a knowledge base")
    rows, chunks = [], assistant.kb.all_hits()
    for q in tqdm(questions, desc="answers", unit="question", disable=not progress, leave=False):
        reference = reference_texts(chunks, q.expected) if q.expected else []
        if q.answerable and not reference:
            raise BenchError(f"no chunk of the KB matches {q.expected} (question {q.question!r})")
        assistant.llm.decoder.reset()  # every question from a cold cache, as a new conversation
        answer = assistant.answer(q.question, voice=voice)
        refused = answer.grounding is not None and answer.grounding.decision == "refused"
        row = grade(q, answer.text, refused, reference)
        g = answer.grounding
        row.update(decision=g.decision if g else None, reason=g.reason if g else None,
                   refusal_probability=g.refusal_probability if g else None)
        if q.answerable:  # was an expected entry among the passages shown: retrieval's share of a failure
            row["shown"] = expected_shown(answer.citations, q.expected)
            row["facts_shown"] = facts_shown(answer.shown, q.facts)
        row["first_sentence_ms"] = answer.timings.get("first_sentence_ms")
        row["answer_ms"] = answer.timings.get("total_ms")
        row["first_parts"] = first_parts(answer.timings)
        row.update({k: answer.timings[k] for k in ("drafted_tokens", "accepted_tokens") if k in answer.timings})
        rows.append(row)
    failing = [r for r in rows if r["grade"] != "correct" and not (r["refused"] and not r["answerable"])]
    return {**summarize(rows), "failing": failing, "rows": rows}


def format_summary(result: dict) -> str:
    s = result
    lines = [f"{s['questions']} questions ({s['answerable']} answerable, {s['unanswerable']} not in the KB)",
             f"correct {s['correct']}  partial {s['partial']}  wrong {s['wrong']}  refused {s['refused_answerable']}"
             "  (of answerable)",
             f"answers with an unsupported fact {s['unsupported_fact_rate']}  with a false claim {s['false_claim_rate']}",
             f"refusals: precision {s['refusal_precision']}  recall {s['refusal_recall']}",
             f"an expected passage shown {s['shown']}  correct when shown {s['correct_when_shown']}",
             f"every expected fact in the passages shown {s['facts_shown']}  correct then "
             f"{s['correct_when_facts_shown']}"]
    for lang, v in s["by_language"].items():
        lines.append(f"  {lang}: correct {v['correct']} of {v['answerable']}")
    for key, what in (("first_sentence_ms", "first sentence"), ("answer_ms", "whole answer")):
        if key in s:
            lines.append(f"{what}: median {s[key]['median']} ms, p90 {s[key]['p90']} ms, max {s[key]['max']} ms")
    if "first_parts" in s:
        lines.append("  its parts (median / p90 / max ms): " + ", ".join(
            f"{part} {v['median']:g}/{v['p90']:g}/{v['max']:g}" for part, v in s["first_parts"].items()))
    if "drafts" in s:
        lines.append(f"prompt lookup: {s['drafts']['accepted']} of {s['drafts']['drafted']} drafted tokens kept")
    if s.get("failing"):
        lines.append("not fully correct:")
        for r in s["failing"]:
            extra = f" unsupported={r['unsupported']}" if r["unsupported"] else ""
            if r["answerable"] and not r.get("facts_shown"):
                extra += " (expected passage not shown)" if not r.get("shown") else " (an expected fact not shown)"
            lines.append(f"  [{r['grade']}] {r['question']} -> {r['answer'][:160]!r}{extra}")
    return "\n".join(lines)
