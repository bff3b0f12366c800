"""FAQ files (JSON, JSONL, CSV) with question/answer fields and optional id/category.

Each entry becomes one section "question\\nanswer" headed by its category, so the chunker keeps a
question together with its answer."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from knowledge.errors import IngestError
from knowledge.loaders.base import ParsedDocument, Section, read_text

_FIELDS = {"question": ("question", "q"), "answer": ("answer", "a"), "id": ("id", "entry_id"),
           "category": ("category", "section", "topic")}


def _field(entry: dict[str, Any], name: str) -> str | None:
    lowered = {str(k).strip().lower(): v for k, v in entry.items()}
    for key in _FIELDS[name]:
        value = lowered.get(key)
        if value is not None and str(value).strip():
            return str(value).strip()
    return None


def _entries_from_json(text: str, path: Path) -> list[tuple[str, dict]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise IngestError(path, f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    if isinstance(data, dict):  # {"faq": [...]} and similar wrappers: the first list of objects
        data = next((v for v in data.values() if isinstance(v, list) and v and isinstance(v[0], dict)), None)
    if not isinstance(data, list):
        raise IngestError(path, "not an FAQ file: expected a list of {question, answer} objects")
    return [(f"entry {i}", e) for i, e in enumerate(data, 1)]


def _entries_from_jsonl(text: str, path: Path) -> list[tuple[str, dict]]:
    entries = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            entries.append((f"line {n}", json.loads(line)))
        except json.JSONDecodeError as e:
            raise IngestError(path, f"line {n}: invalid JSON ({e.msg})") from None
    return entries


def _entries_from_csv(text: str, path: Path) -> list[tuple[str, dict]]:
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    try:
        rows = list(csv.DictReader(io.StringIO(text), dialect=dialect))
    except csv.Error as e:
        raise IngestError(path, f"invalid CSV ({e})") from None
    return [(f"row {n}", row) for n, row in enumerate(rows, 2)]


_READERS = {".json": _entries_from_json, ".jsonl": _entries_from_jsonl, ".ndjson": _entries_from_jsonl,
            ".csv": _entries_from_csv}


def load_faq(path: Path, data: bytes | None = None) -> ParsedDocument:
    text = read_text(path, data)
    raw = _READERS[path.suffix.lower()](text, path)
    if not raw:
        raise IngestError(path, "no FAQ entries")
    out, sections = [], []
    length = 0
    for n, (where, entry) in enumerate(raw, 1):
        if not isinstance(entry, dict):
            raise IngestError(path, f"{where}: expected an object with question and answer")
        question, answer = _field(entry, "question"), _field(entry, "answer")
        if not question or not answer:
            raise IngestError(path, f"{where}: not an FAQ entry (needs non-empty question and answer fields)")
        category = _field(entry, "category")
        start = length
        block = f"{question}\n{answer}"
        out.append(block + "\n\n")
        length += len(block) + 2
        sections.append(Section((category,) if category else (), start, start + len(block),
                                entry_id=_field(entry, "id") or str(n)))
    return ParsedDocument("faq", "".join(out), sections)
