"""Answer quality on the sample in-car KB: does the answer state the fact, and cite the entry it is in?

answer_questions.jsonl: {"question", "expected": [FAQ ids], "facts": [strings, any one counts]}.
Per question, through the same Assistant `hexrag ask` uses:
  fact       the answer contains one of the facts (case and spacing ignored)
  retrieved  a passage given to the model came from an expected entry
  cited      the answer's text cites ([n]) a passage from an expected entry
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tqdm import tqdm

QUESTIONS = Path(__file__).with_name("answer_questions.jsonl")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def load_answer_questions(path: Path = QUESTIONS) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def grade(answer, q: dict) -> dict:
    text = _norm(answer.text)
    right = {c.index for c in answer.citations if c.entry_id in q["expected"]}
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", answer.text)}
    return {"question": q["question"], "answer": answer.text, "fact": any(_norm(f) in text for f in q["facts"]),
            "retrieved": bool(right), "cited": bool(right & cited)}


def answer_quality(assistant, questions: list[dict] | None = None, progress: bool = True) -> dict:
    questions = questions or load_answer_questions()
    rows = []
    for q in tqdm(questions, desc="answers", unit="question", disable=not progress, leave=False):
        assistant.llm.decoder.reset()
        rows.append(grade(assistant.answer(q["question"]), q))
    n = len(rows)
    return {"questions": n, "fact_rate": round(sum(r["fact"] for r in rows) / n, 4),
            "retrieved_rate": round(sum(r["retrieved"] for r in rows) / n, 4),
            "cited_rate": round(sum(r["cited"] for r in rows) / n, 4), "rows": rows}
