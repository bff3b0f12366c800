"""Markdown: ATX (#) and setext (===, ---) headings become the heading path of the text below them."""

from __future__ import annotations

import re
from pathlib import Path

from knowledge.loaders.base import ParsedDocument, Section, clean_heading, read_text

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```+|~~~+)")
_FRONT_MATTER = re.compile(r"\A---\n.*?\n(?:---|\.\.\.)\n", re.S)
# inline markup that should not reach a heading path: links, images, emphasis, code spans
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_|`)(.+?)\1")


def clean_markdown_heading(raw: str) -> str:
    text = _LINK.sub(r"\1", raw)
    for _ in range(2):  # nested emphasis such as ***x***
        text = _EMPHASIS.sub(r"\2", text)
    return clean_heading(text)


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
        fence_match = _FENCE.match(stripped)
        if fence:
            if fence_match and fence_match.group(1)[0] == fence[0] and len(fence_match.group(1)) >= len(fence):
                fence = None
            continue
        if fence_match:
            fence = fence_match.group(1)
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
    text = read_text(path, data)
    sections = parse_markdown(text)
    # a document title only when one top heading spans the whole file ("# Driving" then "# Safety"
    # are two chapters, and neither names the document)
    tops = {s.heading[0] for s in sections if s.heading}
    return ParsedDocument("markdown", text, sections, tops.pop() if len(tops) == 1 else None)
