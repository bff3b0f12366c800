"""Retrieval evaluation: recall@k and MRR of each search mode on a question file.

Question file: JSONL lines {"question", "expected": [...], "lang"}. An expected item is either an
FAQ entry id (matches a chunk with that entry_id; "file.jsonl#id" also pins the file) or
"file.md#A > B" (matches a chunk of that file whose heading path is "A > B", or ends with it).
Questions with `expected == []` are unanswerable: they are left out of recall and MRR and used to
calibrate the answerability threshold on the best dense score (of the questions the embedder can
read: for the others hybrid search does not apply the threshold)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from knowledge.chunking import HEADING_SEP
from knowledge.errors import KnowledgeError
from knowledge.kb import KnowledgeBase
from knowledge.retrieval import MAX_UNKNOWN_SHARE, MODES, Hit


@dataclass
class Question:
    question: str
    expected: list[str]
    lang: str = "en"


@dataclass
class ModeResult:
    mode: str
    lang: str
    n: int
    recall: dict[int, float]
    mrr: float


@dataclass
class EvalResult:
    rows: list[ModeResult] = field(default_factory=list)
    # best dense (cosine) score per question, for calibrating the answerability threshold
    answerable_top: list[float] = field(default_factory=list)
    unanswerable_top: list[float] = field(default_factory=list)
    unreadable: int = 0  # questions left out of calibration: the embedder cannot read them

    def get(self, mode: str, lang: str = "all") -> ModeResult:
        return next(r for r in self.rows if r.mode == mode and r.lang == lang)

    def threshold_table(self, thresholds=None) -> list[tuple[float, float, float]]:
        """(threshold, share of answerable questions kept, share of unanswerable ones rejected)."""
        a, u = np.array(self.answerable_top), np.array(self.unanswerable_top)
        thresholds = thresholds if thresholds is not None else np.round(np.arange(0.20, 0.61, 0.05), 2)
        return [(float(t), float((a >= t).mean()) if len(a) else 1.0, float((u < t).mean()) if len(u) else 1.0)
                for t in thresholds]

    def to_dict(self) -> dict:
        return {"results": [{"mode": r.mode, "lang": r.lang, "questions": r.n, "mrr": round(r.mrr, 4),
                             **{f"recall@{k}": round(v, 4) for k, v in r.recall.items()}} for r in self.rows],
                "threshold": [{"min_score": t, "answerable_kept": round(a, 4), "unanswerable_rejected": round(u, 4)}
                              for t, a, u in self.threshold_table()]}


def load_questions(path: str | Path) -> list[Question]:
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            out.append(Question(obj["question"], list(obj.get("expected") or []), obj.get("lang", "en")))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise KnowledgeError(f"{path} line {n}: not a question object ({e})") from None
    return out


def matches(hit: Hit, expected: str) -> bool:
    if "#" in expected:
        file, anchor = expected.split("#", 1)
        if Path(hit.name).name != Path(file).name:
            return False
        if hit.entry_id is not None and hit.entry_id == anchor:
            return True
        heading = HEADING_SEP.join(p.strip() for p in hit.heading.split(HEADING_SEP))
        anchor = HEADING_SEP.join(p.strip() for p in anchor.split(">"))
        return heading == anchor or heading.endswith(HEADING_SEP + anchor)
    return hit.entry_id == expected


def first_relevant_rank(hits: list[Hit], expected: list[str]) -> int | None:
    for rank, hit in enumerate(hits, 1):
        if any(matches(hit, e) for e in expected):
            return rank
    return None


def evaluate(kb: KnowledgeBase, questions: list[Question], modes=MODES, ks=(1, 5), depth: int = 10) -> EvalResult:
    result = EvalResult()
    answerable = [q for q in questions if q.expected]
    langs = ["all", *sorted({q.lang for q in answerable})]
    ranks: dict[str, list[int | None]] = {}
    for mode in modes:
        ranks[mode] = [first_relevant_rank(kb.search(q.question, k=depth, mode=mode, min_score=-1.0), q.expected)
                       for q in answerable]
    for mode in modes:
        for lang in langs:
            sel = [r for r, q in zip(ranks[mode], answerable) if lang == "all" or q.lang == lang]
            if not sel:
                continue
            recall = {k: sum(r is not None and r <= k for r in sel) / len(sel) for k in ks}
            mrr = sum(1 / r for r in sel if r is not None) / len(sel)
            result.rows.append(ModeResult(mode, lang, len(sel), recall, mrr))
    if kb.embedder is not None:  # the hybrid gate's signal, for questions the embedder can read
        for q in questions:
            if kb.unknown_share(q.question) > MAX_UNKNOWN_SHARE:
                result.unreadable += 1
                continue
            hits = kb.search(q.question, k=1, mode="dense", min_score=-1.0)
            (result.answerable_top if q.expected else result.unanswerable_top).append(hits[0].score if hits else 0.0)
    return result
