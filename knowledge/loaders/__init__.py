"""File loaders by suffix: each turns one file into a ParsedDocument (text + heading sections)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from knowledge.errors import EmptyDocumentError, IngestError
from knowledge.loaders.base import ParsedDocument, Section, decode_text
from knowledge.loaders.faq import load_faq
from knowledge.loaders.html import load_html
from knowledge.loaders.markdown import load_markdown
from knowledge.loaders.pdf import load_pdf
from knowledge.loaders.text import load_text

Loader = Callable[[Path, bytes | None], ParsedDocument]

LOADERS: dict[str, Loader] = {
    ".md": load_markdown, ".markdown": load_markdown, ".mdown": load_markdown,
    ".txt": load_text, ".text": load_text, ".rst": load_text,
    ".html": load_html, ".htm": load_html, ".xhtml": load_html,
    ".json": load_faq, ".jsonl": load_faq, ".ndjson": load_faq, ".csv": load_faq,
    ".pdf": load_pdf,
}


def is_supported(path: Path) -> bool:
    return path.suffix.lower() in LOADERS


def load_document(path: Path, data: bytes | None = None) -> ParsedDocument:
    """Parse one file; every failure is an IngestError naming the file and the reason."""
    loader = LOADERS.get(path.suffix.lower())
    if loader is None:
        raise IngestError(path, f"unsupported file type {path.suffix or '(no suffix)'!r}; "
                                f"supported: {', '.join(sorted(LOADERS))}")
    try:
        doc = loader(path, data)
    except IngestError:
        raise
    except (ValueError, UnicodeError, RecursionError) as e:  # malformed input the parsers choke on
        raise IngestError(path, f"cannot parse: {e}") from None
    if not doc.text.strip() or not doc.sections:
        raise EmptyDocumentError(path)
    return doc


__all__ = ["LOADERS", "ParsedDocument", "Section", "decode_text", "is_supported", "load_document"]
