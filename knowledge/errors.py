"""Typed knowledge-base errors; the CLI and the HTTP API map each to a clear message / status code."""

from __future__ import annotations

from pathlib import Path


class KnowledgeError(Exception):
    """Base of every knowledge-base error."""


class IngestError(KnowledgeError):
    """One file cannot be ingested (unreadable, binary, unknown encoding, malformed FAQ...).

    The batch reports it and carries on with the other files."""

    def __init__(self, path: str | Path, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"{path}: {reason}")


class EmbedderRequiredError(KnowledgeError):
    """The operation embeds text (ingest, dense or hybrid search) but the KB was opened without an embedder."""


class EmbedderMismatchError(KnowledgeError):
    """The KB's vectors come from another embedding model than the one given."""


class UnknownDocumentError(KnowledgeError):
    """`delete` / a search filter names a source the KB does not hold."""


class KnowledgeBaseCorruptError(KnowledgeError):
    """The SQLite file is not a hexrag KB or has a schema this version cannot read."""


class KnowledgeBaseBusyError(KnowledgeError):
    """Another process kept the vector-index lock longer than the wait allows."""


class IngestCancelled(KnowledgeError):
    """The ingest was asked to stop (a server shutting down): what it committed before stays, whole."""


class EmptyDocumentError(IngestError):
    """A file that parses but holds no text to index (a page of links, a scanned PDF): skipped, not failed."""

    def __init__(self, path: str | Path):
        super().__init__(path, "no text to index")
