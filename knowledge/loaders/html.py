"""HTML: the page's main content as text; h1-h6 become the heading path, blocks become paragraphs.

Documentation pages carry a lot of chrome (navigation bars, sidebars, tables of contents, "Show
Source" / "Edit this page" links, copyright footers) that would otherwise be indexed as knowledge
and win searches for words like "contents" or "index". lxml parses the page (it repairs broken
HTML the way browsers do); the content is then, in order:

1. the main region: `<main>` or `role="main"`, else the `<article>`, else `<body>`; a block classed as a
   title that comes first in it (Doxygen's `<div class="title">`, pandoc's `<h1 class="title">` in the
   page's `<header>`, above `<h1>` sections) is the page's top heading;
2. minus chrome: landmark elements (`nav`, `aside`, `footer`, a `header` without a heading, forms)
   and ARIA roles of the same meaning, elements whose class or id names navigation / sidebar /
   table-of-contents / breadcrumb / footer parts, permalink anchors, "edit / report / show source"
   links, short lines whose every link only moves through the site (next / index), lists whose
   every entry is a link to a place on the same page (the page's own table of contents: man2html's
   "Index"), banners, and copyright lines; never the words of a heading, whatever element inside it carries a
   chrome-like class (Sphinx wraps heading text in `<a class="toc-backref">`), and never a heading or
   section by its id when that id is the slug of its own heading (MkDocs' "Search", "nav");
3. a table whose first row is a header row: each of its other rows is written as one line with every
   cell after its column's label (`base.label_cell`), so a row read alone still says what its values are.

General extractors were measured on Sphinx pages and small pages and not used: trafilatura keeps the
chrome of a page that has no content and drops the headings of short pages; readability-lxml
drops the page's h1 and keeps copyright footers. Headings are what sections split on."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import lxml.html
from lxml import etree

from knowledge.errors import IngestError
from knowledge.loaders.base import INVISIBLE, ParsedDocument, Section, clean_heading, label_cell, read_text

_HIDDEN = {"script", "style", "noscript", "template", "head", "svg", "iframe", "object", "title", "button", "select"}
_CHROME_TAGS = {"nav", "aside", "footer", "form", "dialog"}
_CHROME_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary", "toolbar", "menu", "menubar"}
# one class or id token names a chrome part (matched whole or as a -/_ separated part: "md-sidebar")
_CHROME_NAME = re.compile(r"(?:^|[-_])(?:sidebar|sphinxsidebar|sidenav|navbar|navigation|nav|menu|toc|toctree"
                          r"|breadcrumbs?|footer|headerlink|searchbox|search|skip|pager|pagination|related"
                          r"|edit|share|copyright|prev|next|feedback"
                          # the site's own name above the page: ARIA's "banner" as a class, Bootstrap's and
                          # many themes' "masthead", Doxygen's "titlearea" (project name and brief)
                          r"|banner|masthead|titlearea)(?:[-_]|$)")
_CHROME_LINK = re.compile(r"^\s*(?:edit|report|show|view|improve|suggest)\b.{0,30}"
                          r"\b(?:page|source|bug|issue|github|gitlab|file)s?\s*$", re.I)
_COPYRIGHT = re.compile(r"^\s*(?:©|\(c\)|copyright\b)", re.I)
# a block that names itself the page's title without being a heading element (Doxygen writes the page
# title as <div class="title"> above <h1> sections); pandoc's "title", "page-title", "doc-title" alike
_TITLE_CLASS = re.compile(r"(?:^|[-_])title$")
# icon fonts (Font Awesome in MkDocs' themes, Material icons) draw permalink glyphs with code points of
# Unicode's private use area: never a word of the heading
_ICON_GLYPHS = re.compile("[\ue000-\uf8ff]")
_SLUG_NOISE = re.compile(r"[\W_]+")
# the words of links that only move through the site: a short block whose every link is one of them is a
# navigation line (Doxygen's manual ends each page with "Go to the next section or return to the index",
# DocBook's footers read "Prev Up Next Home"); a content link names its target
_NAV_LINK = re.compile(r"^(?:next|previous|prev|up|index|home|top|back|contents)$", re.I)
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_LINE_BREAKS = {"br", "li", "tr", "dt", "dd", "option"}
_BLOCKS = {"p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "ul", "ol", "dl", "table",
           "thead", "tbody", "blockquote", "pre", "figure", "figcaption", "form", "fieldset", "details", "summary",
           "hr", "address", "body", "html"} | set(_HEADINGS)
_SPACES = re.compile(r"\s+")
_WORD = re.compile(r"\w")
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
# HTTP header lines before the markup: a page written by a CGI program (man2html starts every page with
# "Content-type: text/html") or a saved response
_HTTP_HEADERS = re.compile(r"^(?:[A-Za-z][\w-]*:[^\n<]*\r?\n)+(?=\s*<)")
_BLANK_LINES = re.compile(r"\n[ \t]*(?:\n[ \t]*)+")


def _main_region(root: etree._Element) -> etree._Element:
    for xpath in ("//main", "//*[@role='main']", "//article"):
        found = root.xpath(xpath)
        if found:
            return found[0]
    body = root.find("body")
    return body if body is not None else root


def _is_chrome(el: etree._Element) -> bool:
    tag = el.tag if isinstance(el.tag, str) else ""
    if tag in _CHROME_TAGS:
        return True
    if tag == "header" and not any(h in _HEADINGS for h in (d.tag for d in el.iter() if isinstance(d.tag, str))):
        return True
    if (el.get("role") or "").lower() in _CHROME_ROLES:
        return True
    names = (el.get("class") or "").lower().split()
    if not _id_is_own_heading(el):
        names += (el.get("id") or "").lower().split()
    if any(_CHROME_NAME.search(n) for n in names):
        return True
    text = " ".join(el.text_content().split()) if tag in ("a", "p", "div") else ""
    if tag == "a" and (_CHROME_LINK.match(text) or (text and not clean_heading(text))):
        return True  # "Show Source", "Edit on GitHub", and anchors that are only a pilcrow
    if tag in ("p", "div") and len(text) < 120 and _only_navigation_links(el):
        return True
    if tag in ("ul", "ol", "dl") and _only_in_page_links(el):
        return True
    return tag in ("p", "div") and len(text) < 300 and bool(_COPYRIGHT.match(text))


def _only_navigation_links(el: etree._Element) -> bool:
    links = [" ".join(a.text_content().split()) for a in el.iter("a") if a.get("href")]
    return bool(links) and all(_NAV_LINK.match(t) for t in links)


def _only_in_page_links(el: etree._Element) -> bool:
    """A list whose words are all in links to anchors of the page itself: its table of contents."""
    links = [a for a in el.iter("a") if (a.get("href") or "").startswith("#")]
    linked = "".join(a.text_content() for a in links)
    return bool(links) and _SPACES.sub("", linked) == _SPACES.sub("", el.text_content())


def _slug(text: str) -> str:
    return _SLUG_NOISE.sub("", text.lower())


def _id_is_own_heading(el: etree._Element) -> bool:
    """The element's id is the slug of its own heading (its text, or its first heading's).

    Python-Markdown's toc (MkDocs), Sphinx, pandoc, Hugo and Docusaurus give every heading, or the
    section around it, an id made from the heading's words, so "Search", "nav", "edit_uri" or
    "min_search_length" are content there, not the names of a search box or a navigation bar (MkDocs'
    configuration page lost those sections to the chrome names). A chrome container's id is never the
    slug of a heading it holds ("searchbox" around "Quick search", "sidebar" around "Contents")."""
    ident = el.get("id")
    if not ident:
        return False
    tag = el.tag if isinstance(el.tag, str) else ""
    heading = el if tag in _HEADINGS else next(el.iter(*_HEADINGS), None)
    return heading is not None and _slug(ident) == _slug(heading.text_content()) != ""


def _in_heading(el: etree._Element) -> bool:
    return any(a.tag in _HEADINGS for a in el.iterancestors() if isinstance(a.tag, str))


def _rows(table: etree._Element) -> list[etree._Element]:
    """A table's own rows (not those of a table inside one of its cells), in order."""
    return table.xpath("./tr|./thead/tr|./tbody/tr|./tfoot/tr")


def _cells(row: etree._Element) -> list[etree._Element]:
    return row.xpath("./th|./td")


def _spans(cell: etree._Element) -> bool:
    return any((cell.get(a) or "1").strip() not in ("", "1") for a in ("colspan", "rowspan"))


def _column_labels(table: etree._Element) -> tuple[etree._Element, list[str]] | None:
    """The header row and its labels, when the table's first row is one: two or more `<th>` cells, none
    spanning. A layout table (DocBook's admonitions put an icon cell beside a `<th>`, its page headers a
    spanning title) has none."""
    rows = _rows(table)
    cells = _cells(rows[0]) if rows else []
    if len(cells) < 2 or any(c.tag != "th" or _spans(c) for c in cells):
        return None
    return rows[0], [" ".join(INVISIBLE.sub("", c.text_content()).split()) for c in cells]


def _drop_chrome(region: etree._Element) -> None:
    for el in list(region.iter()):
        if el is region or el.getparent() is None or not _is_chrome(el):
            continue
        # a heading's text is never chrome, whatever wraps it (Sphinx's <a class="toc-backref">): inside
        # a heading only a permalink anchor goes, one with no letter or digit (a pilcrow, "#", an icon
        # font's glyph)
        if _in_heading(el) and _WORD.search(clean_heading(el.text_content())):
            continue
        el.drop_tree()  # keeps the element's tail text (it belongs to the parent)


@dataclass
class _Row:
    """A table row being written with its column labels: the labels and the next cell's place."""

    labels: list[str]
    next: int = 0
    said: bool = False  # a cell of it is written


class _TextWriter:
    """Walks the cleaned tree, writing text with paragraph breaks and recording heading sections."""

    def __init__(self):
        self.out: list[str] = []
        self.length = 0
        self.stack: list[tuple[int, str]] = []
        self.sections: list[Section] = []
        self.section_start = 0
        # inside a definition list's description: its paragraphs are one paragraph with its term, so a
        # chunk never starts at an entry's last paragraph ("Default: 31 days") and reads it as the next
        # term's; each term (dt) starts a paragraph
        self.describing = 0
        # per open table: its header row and column labels (None: it has no header row); per open table
        # or row: the labeled row being written (None: none)
        self.tables: list[tuple[etree._Element, list[str]] | None] = []
        self.rows: list[_Row | None] = []

    def _emit(self, s: str) -> None:
        if not s:
            return
        self.out.append(s)
        self.length += len(s)

    def _inline(self, s: str | None) -> None:
        if not s:
            return
        s = _SPACES.sub(" ", INVISIBLE.sub("", s))
        if not self.out or self.out[-1].endswith((" ", "\n")):
            s = s.lstrip(" ")
        self._emit(s)

    def _break(self, newlines: int) -> None:
        """End the current line/paragraph (never at the start, never more than `newlines` in a row; one
        inside a definition's description)."""
        if self.describing:
            newlines = min(newlines, 1)
        if self.rows and self.rows[-1] is not None:  # a labeled row is one line, whatever its cells hold
            if self.out and not self.out[-1].endswith((" ", "\n")):
                self._emit(" ")
            return
        if not newlines or not self.length:
            return
        self._trim()  # a line never ends in a space
        tail = "".join(self.out[-3:])
        have = len(tail) - len(tail.rstrip("\n"))
        if have < newlines:
            self._emit("\n" * (newlines - have))

    def _trim(self) -> None:
        """Drop the spaces the text written so far ends in."""
        if self.out and self.out[-1].endswith(" "):
            stripped = self.out[-1].rstrip(" ")
            self.length -= len(self.out[-1]) - len(stripped)
            self.out[-1] = stripped

    def _close_section(self) -> None:
        # no letter or digit left (" / " between two dropped links) is no knowledge
        if _WORD.search("".join(self.out)[self.section_start:]):
            self.sections.append(Section(tuple(t for _, t in self.stack), self.section_start, self.length))

    def walk(self, el: etree._Element, tail: bool = True) -> None:
        tag = el.tag if isinstance(el.tag, str) else ""  # comments and processing instructions: no text
        if tag and tag not in _HIDDEN:
            if self._is_page_title(el):
                self._heading(0, el.text_content())  # above every h1 that follows
            elif tag in _HEADINGS:
                self._heading(_HEADINGS[tag], el.text_content())
            elif tag == "pre":
                self._break(2)
                # one code block = one paragraph: blank lines inside it must not look like paragraph
                # breaks to the chunker, which splits there first
                self._emit(_BLANK_LINES.sub("\n", INVISIBLE.sub("", _pre_text(el)).strip("\n")).rstrip())
                self._break(2)
            elif tag == "table":
                self._table(el)
            elif tag == "tr" and self.tables and self.tables[-1] is not None:
                self._labeled_row(el, self.tables[-1])
            else:
                # a term starts a paragraph; its description follows on the next line
                self._break(2 if tag in _BLOCKS or tag == "dt" else 1 if tag in _LINE_BREAKS else 0)
                self.describing += tag == "dd"
                if tag in ("td", "th"):
                    self._cell_start(el)
                self._inline(el.text)
                for child in el:
                    self.walk(child)
                self.describing -= tag == "dd"
                self._break(2 if tag in _BLOCKS else 1 if tag in _LINE_BREAKS else 0)
        if tail:
            self._inline(el.tail)

    def _table(self, el: etree._Element) -> None:
        header = _column_labels(el)
        self.tables.append(header)
        self.rows.append(None)  # a cell of this table outside a labeled row: no label
        self._break(2)
        self._inline(el.text)
        for child in el:
            self.walk(child)
        self.rows.pop()
        self.tables.pop()
        self._break(2)

    def _labeled_row(self, row: etree._Element, header: tuple[etree._Element, list[str]]) -> None:
        """A row of a table with a header row: its cells after their labels when it has one cell a
        column, else as a plain row; the header row itself is said with every row, not on its own."""
        if row is header[0]:
            return
        cells = _cells(row)
        fits = len(cells) == len(header[1]) and not any(_spans(c) for c in cells)
        self.rows.append(_Row(list(header[1])) if fits else None)
        self._break(1)
        self._inline(row.text)
        for child in row:
            self.walk(child)
        self.rows.pop()
        self._break(1)

    def _cell_start(self, cell: etree._Element) -> None:
        """Before a cell's text: in a labeled row its column's label (after a separator from the cell
        before it), none for an empty cell; else a space, as cells side by side are words apart however
        the page lays them out."""
        row = self.rows[-1] if self.rows else None
        if row is None:
            if self.out and not self.out[-1].endswith((" ", "\n")):
                self._emit(" ")
            return
        label = row.labels[row.next]
        row.next += 1
        if cell.text_content().strip():
            self._trim()
            self._emit(label_cell(label, first=not row.said, before="".join(self.out[-3:])))
            row.said = True

    def _is_page_title(self, el: etree._Element) -> bool:
        """A block classed as a title, first in the content, before any heading and holding none; or a
        heading classed as a title in the page's `<header>` (pandoc's title block, whose page sections
        are `<h1>` too).

        Only the first text of the page counts: asciidoc's and DocBook's "title" blocks name examples,
        tables and figures inside sections, and a title class further down is not the page's; DocBook's
        section headings are classed "title" too, outside any `<header>`."""
        if self.length or self.stack or self.sections:
            return False
        if not any(_TITLE_CLASS.search(c) for c in (el.get("class") or "").lower().split()):
            return False
        if el.tag in _HEADINGS:
            return any(a.tag == "header" for a in el.iterancestors())
        return next(el.iter(*_HEADINGS), None) is None and 0 < len(clean_heading(el.text_content())) <= 200

    def _heading(self, level: int, raw: str) -> None:
        self._break(2)
        self._close_section()
        title = clean_heading(_ICON_GLYPHS.sub("", raw))
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        if title:
            self.stack.append((level, title))
        self.section_start = self.length

    def finish(self) -> tuple[str, list[Section]]:
        self._close_section()
        return "".join(self.out), self.sections


def _pre_text(el: etree._Element) -> str:
    """A code block's text with each `<br>` as the line break it draws (Docusaurus writes every line of a
    code block as a `<div>` ending in `<br>`, with no newline character between them)."""
    head = "\n" if el.tag == "br" else (el.text or "") if isinstance(el.tag, str) else ""
    return head + "".join(_pre_text(child) + (child.tail or "") for child in el)


def load_html(path: Path, data: bytes | None = None) -> ParsedDocument:
    # lxml refuses a str that declares its encoding; read_text has decoded it already
    source = _HTTP_HEADERS.sub("", _XML_DECLARATION.sub("", read_text(path, data)))
    try:
        root = lxml.html.document_fromstring(source)
    except etree.ParserError as e:  # "Document is empty"
        raise IngestError(path, f"no HTML content ({e})") from None
    title = " ".join((root.findtext(".//title") or "").split()) or None
    region = _main_region(root)
    _drop_chrome(region)
    writer = _TextWriter()
    writer.walk(region, tail=False)
    text, sections = writer.finish()
    return ParsedDocument("html", text, sections, title)
