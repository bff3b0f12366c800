"""Knowledge base: ingest files, chunk them by structure, embed, store in SQLite (+ FTS5, FAISS), retrieve.

    from knowledge import KnowledgeBase
    kb = KnowledgeBase.open("kb", Embedder("models/all-minilm-l6-v2"))
    kb.ingest(["docs/"])
    hits = kb.search("how do I enable one-pedal mode?", k=5, mode="hybrid")
"""

from knowledge.errors import (EmbedderMismatchError, EmbedderRequiredError, IngestCancelled, IngestError,
                              KnowledgeBaseCorruptError, KnowledgeError, UnknownDocumentError)
from knowledge.ingest import IngestReport
from knowledge.kb import CheckReport, KnowledgeBase
from knowledge.paths import default_embedder_dir, default_kb_dir
from knowledge.profile import AnswerProfile
from knowledge.retrieval import DEFAULT_MIN_SCORE, MODES, Hit
from knowledge.store import DocumentRecord

__all__ = ["AnswerProfile", "CheckReport", "DEFAULT_MIN_SCORE", "DocumentRecord", "EmbedderMismatchError",
           "EmbedderRequiredError", "Hit", "IngestCancelled", "IngestError", "IngestReport", "KnowledgeBase",
           "KnowledgeBaseCorruptError", "KnowledgeError", "MODES", "UnknownDocumentError", "default_embedder_dir",
           "default_kb_dir"]
