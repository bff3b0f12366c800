"""Search results and how the three modes rank them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from knowledge.store import ChunkRecord

MODES = ("dense", "bm25", "hybrid")
# what Hit.score is in each mode: cosine similarity (-1..1, the scale of min_score), BM25 (higher is
# better, unbounded) or the fused score (fusion.fused_scores: the cosine plus shares of the query's
# relative BM25 and of the place cosine; about -1..1.3)
SCORE_KINDS = {"dense": "cosine", "bm25": "bm25", "hybrid": "fused"}
# candidates taken from each ranking before fusion; on the sample eval deeper lists only add
# BM25 noise (hybrid recall@5 with depth 10/20/50/100: 0.96/0.96/0.95/0.95)
FUSION_DEPTH = 20
# an embedder that maps more than this share of a query's tokens to its unknown token cannot read
# the query (all-MiniLM-L6-v2 on Chinese: 40-90% [UNK]); its ranking is noise and hybrid drops it
MAX_UNKNOWN_SHARE = 1 / 3
# Answerability threshold on the best cosine for all-MiniLM-L6-v2 (KnowledgeBase.search uses it
# when min_score is None). On knowledge/samples/eval_questions.jsonl it keeps 80 of 81 answerable
# English questions and rejects 2 of 3 unanswerable ones (`hexrag eval retrieval` prints the table).
DEFAULT_MIN_SCORE = 0.25


@dataclass
class Hit:
    chunk_id: int
    text: str
    source: str  # the document's resolved path (what `kb delete` takes)
    name: str  # path relative to the ingested folder: short, for citations
    heading: str  # heading path "A > B > C" ("" when the text has no heading)
    entry_id: str | None  # FAQ entry id
    score: float  # the mode's score: cosine (dense), BM25 (bm25), fused (hybrid)
    scores: dict[str, float] = field(default_factory=dict)  # every signal known for this chunk: dense, bm25, place, hybrid
    start: int = 0  # character span of the chunk in the document's extracted text
    end: int = 0
    document_id: int = 0
    score_kind: str = ""  # what `score` is: "cosine" | "bm25" | "fused" (SCORE_KINDS)

    def to_dict(self) -> dict:
        return asdict(self)


def section_key(record: ChunkRecord | Hit) -> tuple[int, str, str | None]:
    """The place a chunk (or a hit) belongs to: its document's section (heading path) or FAQ entry."""
    return record.document_id, record.heading, record.entry_id


def by_section(ranking: list[tuple[int, float]], records: dict[int, ChunkRecord]) -> list[tuple[int, float]]:
    """The ranking with only the best chunk of each section: k hits are k distinct places, not the
    five windows of one long section."""
    seen: set[tuple] = set()
    out = []
    for cid, score in ranking:
        key = section_key(records[cid])
        if key not in seen:
            seen.add(key)
            out.append((cid, score))
    return out
