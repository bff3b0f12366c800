"""Structure-aware chunking measured in the embedder's own tokens.

A section (the text under one heading path, or one FAQ entry) becomes one chunk when it fits;
otherwise it is split on paragraphs, then lines, sentences (Latin and CJK punctuation), clauses and
finally token windows, and the pieces are packed greedily back up to the budget with ~15% overlap.
The document title and the heading path are prepended to the text that gets embedded (never to the
stored text), so a chunk deep in a manual still "knows" it is about "Driving > Regenerative
braking", and a page section that its title calls "Logging — Flask Documentation" knows that."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from tokenizers import Tokenizer

from knowledge.loaders import ParsedDocument, Section

HEADING_SEP = " > "
CHUNKER_VERSION = 5  # 2: the document title is embedded with the heading path; 3: places are embedded too;
# 4: an HTML definition-list entry (term and description) is one paragraph; 5: HTML table cells are words
# apart

# split levels, coarsest first; each regex matches the separator between two pieces
_LEVELS = [
    re.compile(r"\n[ \t]*\n\s*"),  # paragraphs
    re.compile(r"\n"),  # lines (lists, tables)
    re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+|(?<=[。！？；!?])[”」』）)]*\s*"),  # sentences; CJK needs no space
    re.compile(r"(?<=[,;:])\s+|(?<=[，、：；])"),  # clauses
]


_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


@dataclass
class Chunk:
    ordinal: int
    heading: tuple[str, ...]
    text: str  # == document text[start:end]
    start: int
    end: int
    entry_id: str | None
    embed_text: str  # title + heading path line, then the text: what the embedder sees
    tokens: int  # tokens of embed_text, special tokens included
    place: str = ""  # what names the chunk's place, embedded alone too (place_text); "" for none

    @property
    def heading_path(self) -> str:
        return HEADING_SEP.join(self.heading)

    @property
    def hash(self) -> str:
        """Identifies the vectors: an unchanged chunk of an edited document reuses its embeddings."""
        return hashlib.sha256(f"{self.place}\0{self.embed_text}".encode()).hexdigest()


def embed_text(heading: tuple[str, ...] | str, text: str) -> str:
    """The text the embedder sees: heading path on the first line, then the chunk."""
    path = heading if isinstance(heading, str) else HEADING_SEP.join(heading)
    return f"{path}\n{text}" if path else text


def place_text(title: str | None, heading: tuple[str, ...], entry_id: str | None, text: str) -> str:
    """The words that name a chunk's place: an FAQ entry's question, else the document's title and
    heading path. Embedded on their own, they let a question phrased like a section's title find
    that section among its siblings, where the chunk's own embedding is mostly its body ("Configuring
    from Python Files" vs "... from Environment Variables")."""
    if entry_id is not None:
        return text.split("\n", 1)[0].strip()
    return HEADING_SEP.join(context_path(title, heading))


def context_path(title: str | None, heading: tuple[str, ...]) -> tuple[str, ...]:
    """Where a chunk is: the document's title, then its heading path.

    A title that contains the first heading (an HTML page's <title> "Logging — Flask Documentation
    (2.2.x)" over its h1 "Logging") is left out: what it adds is the site's name, the same on every
    page, and on the Flask pages of knowledge/samples/realdocs putting it in every chunk lowered
    dense recall@1 from 0.80 to 0.76."""
    if not title or (heading and heading[0] in title):
        return heading
    return (title, *heading)


class Chunker:
    def __init__(self, tokenizer: Tokenizer, max_tokens: int, overlap: float = 0.15):
        if max_tokens < 16:
            raise ValueError(f"max_tokens={max_tokens} is too small for useful chunks (>= 16)")
        self.tokenizer, self.max_tokens, self.overlap = tokenizer, max_tokens, overlap
        tokenizer.no_padding()  # counts must be of the text itself (the Embedder sets the same)
        tokenizer.no_truncation()
        self.specials = len(tokenizer.encode("", add_special_tokens=True).ids)  # [CLS] [SEP]
        self._heading_cache: dict[tuple[str, ...], int] = {}

    @property
    def signature(self) -> str:
        """Recorded per document: a change re-chunks documents even when their file is unchanged."""
        return f"v{CHUNKER_VERSION}:max={self.max_tokens}:overlap={self.overlap:g}"

    def count(self, texts: list[str]) -> list[int]:
        if len(texts) <= 4:  # encode_batch's thread pool costs more than it saves on a few texts
            return [len(self.tokenizer.encode(t, add_special_tokens=False).ids) for t in texts]
        return [len(e.ids) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    # -- public
    def chunk(self, doc: ParsedDocument, between: Callable[[], None] | None = None) -> list[Chunk]:
        """`between` is called between sections and token counts (it may raise to stop a long document)."""
        spans: list[tuple[tuple[str, ...], str | None, int, int]] = []
        for section in doc.sections:
            if between is not None:
                between()
            spans.extend(self._section_spans(doc.text, section, context_path(doc.title, section.heading)))
        texts = [self.embed_text(context_path(doc.title, h), doc.text[s:e]) for h, _, s, e in spans]
        counts: list[int] = []
        for start in range(0, len(texts), 256):
            if between is not None:
                between()
            counts += self.count(texts[start:start + 256])
        return [Chunk(i, h, doc.text[s:e], s, e, entry, t, n + self.specials,
                      place_text(doc.title, h, entry, doc.text[s:e]))
                for i, ((h, entry, s, e), t, n) in enumerate(zip(spans, texts, counts))]

    def embed_heading(self, heading: tuple[str, ...] | str) -> tuple[str, ...]:
        """The heading path as embedded: outer levels are dropped until it takes at most a quarter
        of the window, so a deep path cannot crowd the chunk's own text out of the embedding."""
        parts = tuple(heading.split(HEADING_SEP)) if isinstance(heading, str) else heading
        parts = tuple(p for p in parts if p)
        while len(parts) > 1 and self._heading_tokens(parts) > self.max_tokens // 4:
            parts = parts[1:]
        return parts

    def _heading_tokens(self, heading: tuple[str, ...]) -> int:
        if heading not in self._heading_cache:  # every chunk of a section asks again
            self._heading_cache[heading] = self.count([HEADING_SEP.join(heading)])[0] if heading else 0
        return self._heading_cache[heading]

    def embed_text(self, heading: tuple[str, ...] | str, text: str) -> str:
        return embed_text(self.embed_heading(heading), text)

    # -- sections
    def _budget(self, heading: tuple[str, ...]) -> int:
        heading_tokens = self._heading_tokens(self.embed_heading(heading))
        # a single very long heading may still eat the budget; the body keeps at least half of it
        return max(self.max_tokens - self.specials - heading_tokens, self.max_tokens // 2)

    def _section_spans(self, text: str, section: Section, context: tuple[str, ...]):
        heading, s, e = section.heading, *_trim(text, section.start, section.end)
        if s >= e:
            return
        budget = self._budget(context)
        if section.entry_id is not None:
            # one chunk per FAQ entry, whatever its length: the question must stay with its whole
            # answer; a long entry's embedding covers the question and the start of the answer
            # (the ingest report counts such truncations), BM25 and the LLM see all of it
            yield heading, section.entry_id, s, e
            return
        for ps, pe in self.split(text, s, e, budget):
            yield heading, section.entry_id, ps, pe

    # -- splitting
    def split(self, text: str, start: int, end: int, budget: int) -> list[tuple[int, int]]:
        """Spans of text[start:end], each at most `budget` tokens, preferring structural boundaries."""
        if self.count([text[start:end]])[0] <= budget:
            return [(start, end)]
        pieces = self._pieces(text, start, end, budget, 0)
        counts = self.count([text[s:e] for s, e in pieces])
        breaks = [bool(_LEVELS[0].search(text, a[1], b[0])) for a, b in zip(pieces, pieces[1:])]
        windows = _pack(pieces, counts, [False, *breaks], budget, int(budget * self.overlap))
        # token counts of joined pieces are nearly additive; re-check and cut any rare overflow
        out = []
        for (s, e), n in zip(windows, self.count([text[s:e] for s, e in windows])):
            out.extend([(s, e)] if n <= budget else self._token_windows(text, s, e, budget))
        return out

    def _pieces(self, text: str, start: int, end: int, budget: int, level: int) -> list[tuple[int, int]]:
        """Split at `level`, recursing into any piece still over budget."""
        if level == len(_LEVELS):
            return self._token_windows(text, start, end, budget, overlap=0)
        spans, cursor = [], start
        for m in _LEVELS[level].finditer(text, start, end):
            spans.append((cursor, m.start()))  # the separator itself (whitespace) belongs to neither piece
            cursor = m.end()
        spans.append((cursor, end))
        spans = [t for t in (_trim(text, s, e) for s, e in spans) if t[0] < t[1]]
        counts = self.count([text[s:e] for s, e in spans])
        out = []
        for (s, e), n in zip(spans, counts):
            out.extend([(s, e)] if n <= budget else self._pieces(text, s, e, budget, level + 1))
        return out

    def _token_windows(self, text: str, start: int, end: int, budget: int, overlap: int | None = None):
        """Last resort (a run-on sentence, CJK without punctuation): cut between tokens, preferring
        token boundaries that are not inside a word."""
        enc = self.tokenizer.encode(text[start:end], add_special_tokens=False)
        offsets = [o for o in enc.offsets if o[1] > o[0]]
        if not offsets:
            return [(start, end)]
        sub = text[start:end]

        def inside_word(i: int) -> bool:  # is the boundary before token i inside a Latin word?
            a, b = sub[offsets[i - 1][1] - 1], sub[offsets[i][0]]
            return offsets[i][0] == offsets[i - 1][1] and _is_word_char(a) and _is_word_char(b)

        overlap = int(budget * self.overlap) if overlap is None else overlap
        out, i = [], 0
        while i < len(offsets):
            j = min(i + budget, len(offsets))
            if j < len(offsets):  # back off (at most a third of the window) to a word boundary
                k = j
                while k > i + 2 * budget // 3 and inside_word(k):
                    k -= 1
                j = k if not inside_word(k) else j
            out.append((start + offsets[i][0], start + offsets[j - 1][1]))
            if j == len(offsets):
                break
            i = max(j - overlap, i + 1)
            while i < j and inside_word(i):  # start the next window at a word start too
                i += 1
        return out


def _is_word_char(c: str) -> bool:
    return c.isalnum() and not _CJK_CHAR.match(c)


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _pack(pieces: list[tuple[int, int]], counts: list[int], paragraph_starts: list[bool], budget: int,
          overlap: int) -> list[tuple[int, int]]:
    """Greedy packing; a new window starts with the previous window's last pieces (~`overlap` tokens).

    A window at least half full also ends where a new paragraph starts (and then carries nothing):
    paragraph boundaries are the natural places to cut."""
    windows: list[tuple[int, int]] = []
    current: list[tuple[tuple[int, int], int]] = []
    total = 0
    for piece, n, new_paragraph in zip(pieces, counts, paragraph_starts):
        at_paragraph = new_paragraph and total >= budget // 2
        if current and (total + n > budget or at_paragraph):
            windows.append((current[0][0][0], current[-1][0][1]))
            carry, carried = [], 0
            for p, c in reversed(current if not at_paragraph else []):
                # whole pieces only; the last sentence may take up to twice the overlap, else
                # sentence-level overlap would rarely happen at ~15% of a small budget
                if carried + c > (overlap if carry else 2 * overlap):
                    break
                carry.insert(0, (p, c))
                carried += c
            current, total = carry, carried
            while current and total + n > budget:
                total -= current.pop(0)[1]
        current.append((piece, n))
        total += n
    if current:
        windows.append((current[0][0][0], current[-1][0][1]))
    return windows
