"""PDF through the optional `pypdf` package: one section per page, headed "page N", without the
page's frame: lines that run at the top or bottom of most pages (the manual's title, a chapter name,
"Page 3 of 40") are left out, as they would otherwise be a chunk's most repeated words."""

from __future__ import annotations

import re
from collections import Counter
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
    pages = _without_frame([page.replace("\r\n", "\n").strip().split("\n") for page in pages])
    text, sections = "", []
    for n, page in enumerate(pages, 1):
        page = page.strip()
        if page:
            start = len(text)
            text += page + "\n\n"
            sections.append(Section((f"page {n}",), start, start + len(page)))
    title = (reader.metadata.title if reader.metadata else None) or None
    return ParsedDocument("pdf", text, sections, title)


EDGE_LINES = 2  # a page's frame: its first and last two lines
RUNNING_SHARE = 0.6  # a frame line is running when it is at an edge of this share of the pages
MIN_PAGES = 3  # fewer pages say nothing about what repeats


def _shape(line: str) -> str:
    """A line as compared across pages: case and spacing folded, every number alike ("Page 3 of 40")."""
    return re.sub(r"\d+", "#", " ".join(line.lower().split()))


def _without_frame(pages: list[list[str]]) -> list[str]:
    """Each page's text without the running header and footer lines."""
    running: set[str] = set()
    if len(pages) >= MIN_PAGES:
        edges = [{_shape(line) for line in lines[:EDGE_LINES] + lines[-EDGE_LINES:] if line.strip()} for lines in pages]
        counts = Counter(shape for shapes in edges for shape in shapes)
        running = {shape for shape, n in counts.items() if n >= RUNNING_SHARE * len(pages)}
    out = []
    for lines in pages:
        edge = set(range(min(EDGE_LINES, len(lines)))) | set(range(max(len(lines) - EDGE_LINES, 0), len(lines)))
        out.append("\n".join(line for i, line in enumerate(lines) if not (i in edge and _shape(line) in running)))
    return out
