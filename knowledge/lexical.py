"""BM25 over the FTS5 indexes, routed by the query's script.

- Latin-script queries go to the word index (unicode61 + Porter stemming): OR of the content words,
  ranked as FTS5's bm25() ranks them (knowledge/postings.py computes the same scores from the
  posting lists, ~10x faster). If nothing matches (a word glued to CJK text, "OTA更新", is no
  unicode61 token), the trigram index is asked for the words as substrings.
- Queries with CJK characters go to the bigram index (knowledge/cjk.py): BM25 over the query's
  bigrams and Latin words, with Lucene's idf and a chunk's length in characters, as when every
  chunk holding a bigram was scanned and counted: the same ranking, exact at any size. (The scan
  took 255 ms p99 at 100k chunks; above 10k chunks trigram-index candidates stood in for it, which
  missed chunks holding only bigrams of the query.)
"""

from __future__ import annotations

import re

from knowledge.cjk import has_cjk, query_grams
from knowledge.postings import HEADING_WEIGHT, Lengths, Postings, Term, fts5_idf, lucene_idf
from knowledge.store import BIGRAM_TABLE, BIGRAM_TOKENIZER, FTS_TABLES, Store

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


def word_terms(query: str) -> list[str]:
    words = [w for w in _WORD.findall(query.lower()) if not has_cjk(w)]
    content = [w for w in words if w not in _STOPWORDS]
    return list(dict.fromkeys(content or words))


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


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


class Lexical:
    """One process's BM25 search of a KB; it keeps the posting lists it has read (postings.py)."""

    def __init__(self, store: Store):
        self.store = store
        self.words = Postings(store, "chunks_fts", FTS_TABLES["chunks_fts"],
                              Lengths("chunks_fts_docsize", "sz", docsize=True), fts5_idf)
        self.bigrams = Postings(store, BIGRAM_TABLE, BIGRAM_TOKENIZER, Lengths("chunks", "length(text)"), lucene_idf)

    def warm(self) -> None:
        """What every first search would read (both indexes' chunk lengths), read now."""
        self.words.warm()
        self.bigrams.warm()

    def search(self, query: str, limit: int, document_ids: list[int] | None = None) -> list[tuple[int, float]]:
        """(chunk id, BM25 score) best first; higher is better."""
        if has_cjk(query):
            return self._cjk_search(query, limit, document_ids)
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

    def _cjk_search(self, query: str, limit: int, document_ids) -> list[tuple[int, float]]:
        grams = query_grams(query) + [w for w in word_terms(query) if len(w) >= 3]
        # a one-character gram counts every occurrence of its character: the tokens starting with it
        terms = [Term(token, prefix=len(gram) == 1)
                 for gram, tokens in zip(grams, self.bigrams.tokens(grams)) for token in tokens]
        return self.bigrams.search(terms, limit, document_ids)
