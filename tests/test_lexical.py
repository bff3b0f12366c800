"""BM25 from the posting lists (knowledge/postings.py) ranks as exact BM25 does: for Latin queries,
FTS5's own bm25() over the whole word index; on small KBs written straight through the store, with
the words a pruning scheme would get wrong (a rare word among common ones, only common words, words
in more than half the chunks), and after other connections change the KB."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge.chunking import Chunk
from knowledge.lexical import Lexical, _fts_search, _quote, word_terms
from knowledge.store import Store

COMMON = "battery charge cable"  # in nearly every chunk: FTS5 weighs them 1e-6
SOME = "brake pedal mirror wiper heater"  # in a fifth to a half of them
RARE = "isofix"  # in three


def corpus(seed: int = 0, n: int = 300) -> list[tuple[str, str]]:
    """(heading, text) of n chunks: common words everywhere, some in part of them, a rare one in three,
    lengths from 3 to 40 words (BM25's length normalisation matters)."""
    rng = np.random.default_rng(seed)
    filler = [f"word{i}" for i in range(200)]
    out = []
    for i in range(n):
        words = list(rng.choice(filler, rng.integers(3, 40)))
        words += [w for w in COMMON.split() if rng.random() < 0.9]
        words += [w for w in SOME.split() if rng.random() < 0.2 + 0.1 * SOME.split().index(w)]
        words += [RARE] * int(i in (7, 150, 299)) * (1 + i % 3)
        rng.shuffle(words)
        heading = "Brake pedal" if i % 17 == 0 else f"Section {i % 5}"
        out.append((heading, " ".join(words)))
    return out


def write(store: Store, name: str, rows: list[tuple[str, str]]) -> None:
    chunks = [Chunk(i, (h,), t, 0, len(t), None, h + t, 10) for i, (h, t) in enumerate(rows)]
    fields = {"source": f"/docs/{name}", "name": name, "kind": "markdown", "title": None, "content_hash": name,
              "chunker": "test", "size": 0, "mtime": None, "text": ""}
    store.replace_document(fields, chunks, np.zeros((len(rows), 4), np.float32))


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "kb.sqlite")
    rows = corpus()
    for d in range(3):
        write(s, f"doc{d}.md", rows[d * 100:(d + 1) * 100])
    yield s
    s.close()


def fts5_ranking(store: Store, query: str, limit: int, document_ids=None) -> list[tuple[int, float]]:
    """FTS5 ranks the OR of the query's words itself: bm25() on every matching row."""
    match = " OR ".join(_quote(w) for w in word_terms(query))
    return _fts_search(store, "chunks_fts", match, limit, document_ids)


def assert_same_ranking(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    """The same scores in the same order, each chunk with its own score; chunks whose scores tie may
    come in another order, and at the cut other chunks of the tied score may be the ones kept."""
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-9)
    g, w = dict(got), dict(want)
    for i in g.keys() & w.keys():
        assert g[i] == pytest.approx(w[i], rel=1e-9)
    cut = want[-1][1] if want else 0.0
    assert {i for i, s in got if s > cut * (1 + 1e-9)} == {i for i, s in want if s > cut * (1 + 1e-9)}


QUERIES = [f"{RARE} {COMMON}",  # a rare word among common ones
           COMMON,  # only words in nearly every chunk (idf clamped to 1e-6: length decides)
           "battery brake",  # a common word and one in a fifth of the chunks
           f"{SOME} {RARE}",
           "charging batteries cables",  # Porter stems: charg, batteri, cabl
           "Brake pedal wiper"]  # heading words weigh double


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("limit", [1, 5, 40, 400])
def test_word_ranking_is_fts5_bm25(store, query, limit):
    assert_same_ranking(Lexical(store).search(query, limit), fts5_ranking(store, query, limit))


def test_filters_and_phrases_rank_as_fts5(store):
    lexical = Lexical(store)
    doc = store.db.execute("SELECT id FROM documents WHERE name = 'doc1.md'").fetchone()[0]
    assert_same_ranking(lexical.search(f"{RARE} brake", 10, [doc]), fts5_ranking(store, f"{RARE} brake", 10, [doc]))
    assert lexical.search("wi_fi", 5) == fts5_ranking(store, "wi_fi", 5) == []  # a phrase: FTS5 answers it
    assert lexical.search("the of", 5) == fts5_ranking(store, "the of", 5) == []  # stopwords only, none indexed


def test_follows_writes_of_this_and_other_connections(store, tmp_path):
    """Postings read before a change are topped up, deleted chunks leave them, rowids grow: the same
    ranking as FTS5 after each change, whichever connection wrote it."""
    lexical = Lexical(store)
    query = f"{RARE} {COMMON} brake"
    assert_same_ranking(lexical.search(query, 20), fts5_ranking(store, query, 20))
    other = Store(tmp_path / "kb.sqlite")
    write(other, "doc3.md", corpus(seed=1, n=50))  # added by another process
    assert_same_ranking(lexical.search(query, 20), fts5_ranking(store, query, 20))
    other.delete_document(other.document("/docs/doc0.md").id)  # two of the rare word's chunks go with it
    write(store, "doc1.md", corpus(seed=2, n=80))  # replaced by this one: new rowids
    assert_same_ranking(lexical.search(query, 400), fts5_ranking(store, query, 400))
    hits = lexical.search(RARE, 10)  # doc2's chunk, doc3's and the new doc1's; no deleted one
    assert_same_ranking(hits, fts5_ranking(store, RARE, 10))
    assert len(hits) == 3
    assert {i for i, _ in hits} <= set(store.chunk_ids().tolist())
    other.close()
