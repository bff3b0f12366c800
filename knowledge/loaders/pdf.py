"""PDF through the optional `pypdf` package: one section per page, headed "page N"."""

from __future__ import annotations

from pathlib import Path

from knowledge.errors import IngestError
from knowledge.loaders.base import ParsedDocument, Section


def load_pdf(path: Path, data: bytes | None = None) -> ParsedDocument:
    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError:
        raise IngestError(path, "PDF support needs the optional pypdf package: pip install pypdf") from None
    import io

    try:
        reader = PdfReader(io.BytesIO(path.read_bytes() if data is None else data))
        if reader.is_encrypted:
            raise IngestError(path, "encrypted PDF")
        pages = [page.extract_text() or "" for page in reader.pages]
    except PdfReadError as e:
        raise IngestError(path, f"unreadable PDF ({e})") from None
    text, sections = "", []
    for n, page in enumerate(pages, 1):
        page = page.replace("\r\n", "\n").strip()
        if page:
            start = len(text)
            text += page + "\n\n"
            sections.append(Section((f"page {n}",), start, start + len(page)))
    title = (reader.metadata.title if reader.metadata else None) or None
    return ParsedDocument("pdf", text, sections, title)
