"""Markdown: ATX (#) and setext (===, ---) headings become the heading path of the text below them; a
pipe table's rows are written with their column labels (`labeled_tables`)."""

from __future__ import annotations

import re
from pathlib import Path

from knowledge.loaders.base import ParsedDocument, Section, clean_heading, label_cell, read_text

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```+|~~~+)")
_FRONT_MATTER = re.compile(r"\A---\n.*?\n(?:---|\.\.\.)\n", re.S)
# inline markup that should not reach a heading path: links, images, emphasis, code spans
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_|`)(.+?)\1")
# a pipe table's delimiter row, under its header row: "| --- | :---: |", "---|---"
_DELIMITER = re.compile(r"^ {0,3}\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)+\|?\s*$|^ {0,3}\|\s*:?-+:?\s*\|\s*$")
_PIPE = re.compile(r"(?<!\\)\|")


def clean_markdown_heading(raw: str) -> str:
    text = _LINK.sub(r"\1", raw)
    for _ in range(2):  # nested emphasis such as ***x***
        text = _EMPHASIS.sub(r"\2", text)
    return clean_heading(text)


def _fenced(fence: str | None, line: str) -> tuple[str | None, bool]:
    """(the code fence open after `line`, whether `line` is code: a fence line or inside a fenced block),
    given the fence open before it. A block closes at a fence of its character at least as long."""
    m = _FENCE.match(line)
    if fence:
        closes = bool(m) and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)
        return (None if closes else fence), True
    return (m.group(1), True) if m else (None, False)


def _cells(line: str) -> list[str]:
    """A pipe table row's cells: split at unescaped pipes, the outer ones optional."""
    row = line.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return [c.strip().replace("\\|", "|") for c in _PIPE.split(row)]


def labeled_tables(text: str) -> str:
    """The text with each pipe table (a header row, a delimiter row, then rows holding a pipe) written
    as its rows alone, each cell after its column's label: "| With Desktop | 1 GB |" under "| Install
    type | RAM |" becomes "Install type: With Desktop; RAM: 1 GB". Code blocks are left as written."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    fence: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.rstrip("\n")
        fence, code = _fenced(fence, stripped)
        if code:
            out.append(line)
            i += 1
            continue
        following = lines[i + 1].rstrip("\n") if i + 1 < len(lines) else ""
        if "|" not in stripped or not _DELIMITER.match(following) or len(_cells(stripped)) != len(_cells(following)):
            out.append(line)
            i += 1
            continue
        labels = _cells(stripped)  # said with every row below it, not on a line of its own
        i += 2
        while i < len(lines) and "|" in lines[i] and lines[i].strip():
            row = lines[i].rstrip("\n")
            out.append(_labeled_row(labels, _cells(row)) + lines[i][len(row):])
            i += 1
    return "".join(out)


def _labeled_row(labels: list[str], cells: list[str]) -> str:
    said, first = "", True
    for label, cell in zip(labels, cells):
        if cell:
            said += label_cell(label, first, said) + cell
            first = False
    return said


def parse_markdown(text: str) -> list[Section]:
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    front = _FRONT_MATTER.match(text)
    body_start = front.end() if front else 0

    sections: list[Section] = []
    stack: list[tuple[int, str]] = []  # (level, title) of the open headings
    section_start = body_start
    fence: str | None = None

    def close(end: int) -> None:
        if text[section_start:end].strip():
            sections.append(Section(tuple(t for _, t in stack), section_start, end))

    for i, line in enumerate(lines):
        if starts[i] < body_start:
            continue
        stripped = line.rstrip("\n")
        fence, code = _fenced(fence, stripped)
        if code:
            continue
        level, title, heading_start = 0, "", starts[i]
        if m := _ATX.match(stripped):
            level, title = len(m.group(1)), m.group(2) or ""
        elif (m := _SETEXT.match(stripped)) and i > 0 and starts[i - 1] >= section_start and lines[i - 1].strip() \
                and not _ATX.match(lines[i - 1]) and not lines[i - 1].lstrip().startswith(("-", "*", ">")):
            # "Title\n===" : the previous line is the heading (a lone "---" stays a rule)
            level, title, heading_start = (1 if m.group(1)[0] == "=" else 2), lines[i - 1], starts[i - 1]
        if not level:
            continue
        close(heading_start)
        while stack and stack[-1][0] >= level:
            stack.pop()
        if title := clean_markdown_heading(title):
            stack.append((level, title))
        section_start = starts[i + 1]
    close(len(text))
    return sections


def load_markdown(path: Path, data: bytes | None = None) -> ParsedDocument:
    text = labeled_tables(read_text(path, data))
    sections = parse_markdown(text)
    # a document title only when one top heading spans the whole file ("# Driving" then "# Safety"
    # are two chapters, and neither names the document)
    tops = {s.heading[0] for s in sections if s.heading}
    return ParsedDocument("markdown", text, sections, tops.pop() if len(tops) == 1 else None)
