"""HTML: visible text through the stdlib parser; h1-h6 become the heading path, blocks become paragraphs."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from knowledge.loaders.base import ParsedDocument, Section, read_text

_HIDDEN = {"script", "style", "noscript", "template", "head", "svg", "iframe", "object"}
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_LINE_BREAKS = {"br", "li", "tr", "dt", "dd", "option"}
_BLOCKS = {"p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "ul", "ol", "dl", "table",
           "thead", "tbody", "blockquote", "pre", "figure", "figcaption", "form", "fieldset", "details", "summary",
           "hr", "address", "body", "html"} | set(_HEADINGS)
_VOID = {"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source", "track", "wbr"}
_SPACES = re.compile(r"\s+")


class _TextExtractor(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.length = 0
        self.hidden = 0  # depth inside elements whose text is not shown
        self.pre = 0
        self.title: str | None = None
        self._in_title = False
        self.heading_level = 0
        self.heading_text: list[str] = []
        self.stack: list[tuple[int, str]] = []
        self.sections: list[Section] = []
        self.section_start = 0

    # -- output helpers
    def _emit(self, s: str) -> None:
        self.out.append(s)
        self.length += len(s)

    def _break(self, newlines: int) -> None:
        """End the current line/paragraph (never at the start, never more than `newlines` in a row)."""
        if not self.length:
            return
        tail = "".join(self.out[-3:])
        have = len(tail) - len(tail.rstrip("\n"))
        if have < newlines:
            self._emit("\n" * (newlines - have))

    def _close_section(self, end: int) -> None:
        if "".join(self.out)[self.section_start:end].strip():
            self.sections.append(Section(tuple(t for _, t in self.stack), self.section_start, end))

    # -- parser callbacks
    def handle_starttag(self, tag, attrs):
        if tag == "title":
            self._in_title = True
        if tag in _HIDDEN:
            if tag not in _VOID:
                self.hidden += 1
            return
        if tag == "pre":
            self.pre += 1
        if tag in _HEADINGS and not self.hidden:
            self._break(2)
            self._close_section(self.length)
            self.heading_level, self.heading_text = _HEADINGS[tag], []
        elif tag in _BLOCKS:
            self._break(2)
        elif tag in _LINE_BREAKS:
            self._break(1)

    def handle_startendtag(self, tag, attrs):
        if tag in _LINE_BREAKS or tag in _BLOCKS:
            self._break(1 if tag in _LINE_BREAKS else 2)

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        if tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag in _HEADINGS and self.heading_level:
            title = " ".join("".join(self.heading_text).split())
            while self.stack and self.stack[-1][0] >= self.heading_level:
                self.stack.pop()
            if title:
                self.stack.append((self.heading_level, title))
            self.heading_level = 0
            self._break(2)
            self.section_start = self.length
        elif tag in _BLOCKS:
            self._break(2)
        elif tag in _LINE_BREAKS:
            self._break(1)

    def handle_data(self, data):
        if self._in_title:
            self.title = " ".join(data.split()) or self.title
        if self.hidden:
            return
        if not self.pre:
            data = _SPACES.sub(" ", data)
            tail = self.out[-1] if self.out else "\n"
            if tail.endswith((" ", "\n")):
                data = data.lstrip(" ")
        if not data:
            return
        if self.heading_level:
            self.heading_text.append(data)
        self._emit(data)

    def finish(self) -> tuple[str, list[Section]]:
        self.close()
        self._close_section(self.length)
        return "".join(self.out), self.sections


def load_html(path: Path, data: bytes | None = None) -> ParsedDocument:
    parser = _TextExtractor()
    parser.feed(read_text(path, data))
    text, sections = parser.finish()
    return ParsedDocument("html", text, sections, parser.title)
