"""What every loader returns: the document's plain text and its sections, as spans into that text."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from pathlib import Path

from knowledge.errors import IngestError

# longest BOM first: the UTF-32 LE BOM starts with the UTF-16 LE one
_BOMS = [
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
]


# what documentation generators put beside a heading to link to it: Sphinx's pilcrow, MkDocs' and
# GitHub's anchors, and the words some themes render for screen readers
_HEADING_ANCHOR = re.compile(r"(?:\s*(?:[¶§#🔗]|permalink to this (?:headline|heading|definition|section)"
                             r"|link to this (?:heading|section)))+\s*$", re.I)


# zero-width space, word joiner and byte-order mark: no letter of any script (Docusaurus writes a
# zero-width space as the text of every heading's permalink). Zero-width (non-)joiners shape Arabic
# and Indic words and stay.
INVISIBLE = re.compile("[\u200b\u2060\ufeff]")


def clean_heading(raw: str) -> str:
    """Heading text as a path element: one line, without permalink anchors or invisible characters."""
    text = " ".join(INVISIBLE.sub("", raw).split())
    text = _HEADING_ANCHOR.sub("", text)
    return re.sub(r"^[¶§#🔗]\s*", "", text).strip()


_CLAUSE_END = (".", ";", ":", "!", "?", "。", "；", "：", "！", "？")


def label_cell(label: str, first: bool, before: str = "") -> str:
    """What is written before a table cell's text in a row written with its column labels: "RAM
    (minimum): " after a "; " from the cell before it (`before`: the text written so far, whose own
    stop stands for the separator). A row's values read without their header row ("With Desktop 1
    gigabytes 2 gigabytes 10 gigabytes") say nothing of which value is which, to a reader or to
    search: a chunk may hold the row and not the header."""
    separator = "" if first else " " if before.rstrip().endswith(_CLAUSE_END) else "; "
    return separator + (f"{label}: " if label else "")


@dataclass
class Section:
    heading: tuple[str, ...]  # heading path, outermost first
    start: int  # body span in ParsedDocument.text (headings themselves are outside it)
    end: int
    entry_id: str | None = None  # FAQ entries: the section is one question + its answer


@dataclass
class ParsedDocument:
    kind: str  # markdown | text | html | faq | pdf
    text: str  # the extracted text every chunk offset indexes into (== the file for .txt)
    sections: list[Section] = field(default_factory=list)
    title: str | None = None


def decode_text(data: bytes, path: str | Path) -> str:
    """Bytes -> str: a BOM decides the encoding, otherwise strict UTF-8; NUL bytes mean binary.

    Newlines are normalised to "\\n" so offsets and paragraph splitting see one convention."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                text = data[len(bom):].decode(encoding)
            except UnicodeDecodeError as e:
                raise IngestError(path, f"invalid {encoding} text after its byte-order mark ({e.reason} at byte {e.start})") from None
            break
    else:
        if b"\x00" in data[:65536]:
            raise IngestError(path, "binary file (NUL bytes), not text")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise IngestError(
                path, f"not UTF-8 text (invalid byte 0x{data[e.start]:02x} at offset {e.start}) and no byte-order mark; "
                      "re-save it as UTF-8") from None
    if "\x00" in text:
        raise IngestError(path, "binary file (NUL characters), not text")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_text(path: Path, data: bytes | None = None) -> str:
    return decode_text(path.read_bytes() if data is None else data, path)
