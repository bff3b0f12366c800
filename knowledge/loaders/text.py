"""Plain text: one section without a heading; the chunker splits it on paragraphs and sentences."""

from __future__ import annotations

from pathlib import Path

from knowledge.loaders.base import ParsedDocument, Section, read_text


def load_text(path: Path, data: bytes | None = None) -> ParsedDocument:
    text = read_text(path, data)
    return ParsedDocument("text", text, [Section((), 0, len(text))])
