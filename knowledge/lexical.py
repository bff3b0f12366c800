"""BM25 over the FTS5 indexes, routed by the query's script.

- Latin-script queries go to the word index (unicode61 + Porter stemming): OR of the content words,
  ranked as FTS5's bm25() ranks them (knowledge/postings.py computes the same scores from the
  posting lists, ~10x faster). If nothing matches (a word glued to CJK text, "OTA更新", is no unicode61 token), the trigram
  index is asked for the words as substrings.
- Queries with CJK characters: Chinese words are mostly two characters, which neither unicode61
  (it sees a whole CJK run as one token) nor trigram MATCH can look up. The query's CJK runs are
  cut into overlapping bigrams and chunks are scored by BM25 over those bigrams (+ Latin words).
  Up to SCAN_LIMIT chunks the candidates are every chunk containing a bigram (exact); above it the
  trigram index supplies candidates. Measured on the sample KB (23 Chinese questions, recall@5):
  unicode61 0.00, trigram OR 0.65, bigram BM25 0.96 (see the report in knowledge/README.md).
"""

from __future__ import annotations

import math
import re

from knowledge.postings import HEADING_WEIGHT, K1, B, Lengths, Postings, Term, fts5_idf
from knowledge.store import FTS_TABLES, Store

# Han, kana, CJK punctuation-free ranges; Hangul is spaced text and suits the word index
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"\w+")
# English function words (and contraction tails: I'm -> "m"); BM25's idf alone lets them add noise
_STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can could d did do does doing don down during each few for from further get got had has have having he
her here hers him his how i if in into is it its itself just ll m me more most my no nor not now of off on once
only or other our ours out over own re s same she should so some such t than that the their theirs them then
there these they this those through to too under until up ve very was we were what when where which while who
whom why will with won would you your yours
""".split())
# question words, and the grams of "要多长时间 / 多久 / 多少": an entry titled "在家充电要多长时间？" is
# not the answer to every how-long question ("软件升级安装要多长时间？" found it before the update entry)
_CJK_STOP_GRAMS = frozenset("什么 怎么 如何 为什 么会 哪些 可以 是否 我的 我们 一个 这个 那个 "
                            "多长 长时 多久 多少 要多 得多 多大 多远 多快".split())
SCAN_LIMIT = 10_000  # up to this many chunks CJK queries are scored exactly by a scan (~50 ms at 10k)
CANDIDATES = 2_000  # above it: trigram-index candidates re-scored with bigram BM25


def has_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def word_terms(query: str) -> list[str]:
    words = [w for w in _WORD.findall(query.lower()) if not _CJK.search(w)]
    content = [w for w in words if w not in _STOPWORDS]
    return list(dict.fromkeys(content or words))


def cjk_grams(query: str) -> tuple[list[str], list[str]]:
    """(trigrams, bigrams) of the query's CJK runs; a one-character run is kept as is."""
    trigrams, bigrams = [], []
    for run in _CJK_RUN.findall(query):
        if len(run) == 1:
            bigrams.append(run)
        trigrams += [run[i:i + 3] for i in range(len(run) - 2)]
        bigrams += [run[i:i + 2] for i in range(len(run) - 1)]
    bigrams = [g for g in bigrams if g not in _CJK_STOP_GRAMS] or bigrams
    return list(dict.fromkeys(trigrams)), list(dict.fromkeys(bigrams))


def _filter_sql(document_ids: list[int] | None, column: str) -> tuple[str, list[int]]:
    if document_ids is None:
        return "", []
    return (f" AND {column} IN (SELECT id FROM chunks WHERE document_id IN ({', '.join('?' * len(document_ids))}))",
            list(document_ids))


def _fts_search(store: Store, table: str, match: str, limit: int, document_ids) -> list[tuple[int, float]]:
    where, params = _filter_sql(document_ids, "rowid")
    rows = store.db.execute(
        f"SELECT rowid, bm25({table}, {HEADING_WEIGHT}, 1.0) AS s FROM {table} WHERE {table} MATCH ?{where} "
        "ORDER BY s LIMIT ?", [match, *params, limit])
    return [(cid, -s) for cid, s in rows]  # FTS5 bm25() is "lower is better"


def _ngram_bm25(grams: list[str], rows: list[tuple[int, str, str]], total: int, avg_len: float,
                document_frequency: dict[str, int]) -> list[tuple[int, float]]:
    scored = []
    for cid, heading, text in rows:
        score = 0.0
        for g in grams:
            tf = text.count(g) + HEADING_WEIGHT * heading.count(g)
            if tf:
                df = document_frequency[g]
                idf = math.log(1 + (total - df + 0.5) / (df + 0.5))
                score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(text) / avg_len))
        if score > 0:
            scored.append((cid, score))
    return sorted(scored, key=lambda t: -t[1])


def _contains(gram: str) -> tuple[str, list[str]]:
    """SQL test 'the chunk contains gram' (CJK has no case: instr; Latin words: LIKE, ASCII case-blind)."""
    if _CJK.search(gram):
        return "(instr(c.text, ?) > 0 OR instr(c.heading, ?) > 0)", [gram, gram]
    pattern = "%" + gram.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    return "(c.text LIKE ? ESCAPE '\\' OR c.heading LIKE ? ESCAPE '\\')", [pattern, pattern]


def _cjk_search(store: Store, query: str, limit: int, document_ids) -> list[tuple[int, float]]:
    trigrams, bigrams = cjk_grams(query)
    latin = [w for w in word_terms(query) if len(w) >= 3]
    grams = bigrams + latin
    total, avg_len = store.text_stats()
    rows = []
    if total > SCAN_LIMIT and (trigrams or latin):
        # large KB: the trigram index narrows the candidates first (a bigram-only match is missed)
        rows = store.db.execute(
            "SELECT c.id, c.document_id, c.heading, c.text FROM chunks_fts_cjk f JOIN chunks c ON c.id = f.rowid "
            "WHERE chunks_fts_cjk MATCH ? ORDER BY bm25(chunks_fts_cjk) LIMIT ?",
            [" OR ".join(_quote(t) for t in trigrams + latin), CANDIDATES]).fetchall()
    if not rows:
        # every chunk holding any query gram is a candidate, so document frequencies counted over
        # the candidates are exact (one scan; bounded by a LIMIT only on large KBs)
        tests = [_contains(g) for g in grams]
        rows = store.db.execute("SELECT c.id, c.document_id, c.heading, c.text FROM chunks c WHERE ("
                                + " OR ".join(sql for sql, _ in tests) + ") LIMIT ?",
                                [p for _, params in tests for p in params]
                                + [-1 if total <= SCAN_LIMIT else CANDIDATES]).fetchall()
    lowered = [(cid, doc, heading.lower(), text.lower()) for cid, doc, heading, text in rows]
    df = {g: sum(g in h or g in t for _, _, h, t in lowered) for g in grams}
    if document_ids is not None:
        keep = set(document_ids)
        lowered = [r for r in lowered if r[1] in keep]
    return _ngram_bm25(grams, [(cid, h, t) for cid, _, h, t in lowered], total, avg_len, df)[:limit]


class Lexical:
    """One process's BM25 search of a KB; it keeps the posting lists it has read (postings.py)."""

    def __init__(self, store: Store):
        self.store = store
        self.words = Postings(store, "chunks_fts", FTS_TABLES["chunks_fts"],
                              Lengths("chunks_fts_docsize", "sz", docsize=True), fts5_idf)

    def search(self, query: str, limit: int, document_ids: list[int] | None = None) -> list[tuple[int, float]]:
        """(chunk id, BM25 score) best first; higher is better."""
        if has_cjk(query):
            return _cjk_search(self.store, query, limit, document_ids)
        terms = word_terms(query)
        if not terms:
            return []
        tokens = self.words.tokens(terms)
        if all(len(t) == 1 for t in tokens):
            hits = self.words.search([Term(t[0]) for t in tokens], limit, document_ids)
        else:  # a word FTS5 reads as a phrase of several tokens ("wi_fi"): FTS5 ranks the query itself
            hits = _fts_search(self.store, "chunks_fts", " OR ".join(_quote(t) for t in terms), limit, document_ids)
        if not hits:  # a word glued to CJK text ("OTA更新") is no unicode61 token, but is a substring
            long_terms = [t for t in terms if len(t) >= 3]
            if long_terms:
                hits = _fts_search(self.store, "chunks_fts_cjk", " OR ".join(_quote(t) for t in long_terms), limit,
                                   document_ids)
        return hits
