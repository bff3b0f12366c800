"""BM25 from the posting lists (knowledge/postings.py) ranks as exact BM25 does: for Latin queries,
FTS5's own bm25() over the whole word index, for Chinese ones bigram BM25 with every chunk scanned;
on small KBs written straight through the store, with the words a pruning scheme would get wrong (a
rare word among common ones, only common words, words in more than half the chunks), Chinese mixed
with Latin words, and after other connections change the KB."""

from __future__ import annotations

import math

import numpy as np
import pytest

from knowledge.chunking import Chunk
from knowledge.cjk import bigram_text, has_cjk, query_grams
from knowledge.lexical import Lexical, _fts_search, _quote, word_terms
from knowledge.store import BIGRAM_TABLE, Store

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


def test_warmed_indexes_read_no_lengths_at_the_first_search(store):
    """A server warms its KB at start-up: the first search then reads only its words' postings, and
    ranks as a cold one does."""
    warmed, cold = Lexical(store), Lexical(store)
    warmed.warm()
    reads = []
    store.db.conn.set_trace_callback(reads.append)
    ranked = warmed.search(f"{RARE} brake", 10)
    store.db.conn.set_trace_callback(None)
    lengths = [r for r in reads if r.startswith("SELECT id, ")]  # Postings._sync's read of every chunk's length
    assert not lengths
    assert ranked == cold.search(f"{RARE} brake", 10) and ranked


# ---- Chinese: BM25 over character bigrams from the bigram index
HANZI = "充电桩快慢胎压灯亮导航屏幕升级座椅加热雨刮空调车门钥匙"


def chinese_corpus(seed: int = 0, n: int = 240) -> list[tuple[str, str]]:
    """Chinese chunks drawn from a few characters (common bigrams everywhere, some rare ones), a few
    with Latin words glued on ("OTA更新", "P挡") and English chunks, which count in N and the mean length."""
    rng = np.random.default_rng(seed)
    p = 1 / np.arange(1, len(HANZI) + 1)
    out = []
    for i in range(n):
        if i % 4 == 3:
            out.append(("Section", " ".join(rng.choice(["battery", "charge", "ota", "update"], 12))))
            continue
        text = "".join(rng.choice(list(HANZI), rng.integers(8, 60), p=p / p.sum())) + "。"
        if i % 9 == 0:
            text += "OTA更新后重启。" if i % 2 else "挂P挡再下车，哈哈哈。"
        out.append(("常见问题" if i % 5 == 0 else "", text))
    return out


def chinese_ranking(store: Store, query: str, limit: int) -> list[tuple[int, float]]:
    """Exact bigram BM25, every chunk scanned: a gram's count is its (overlapping) occurrences, a
    Latin word's the times it stands as a word in a chunk with CJK text; heading occurrences count
    twice; Lucene's idf over all chunks; a chunk's length is that of its text in characters."""
    grams = query_grams(query) + [w for w in word_terms(query) if len(w) >= 3]
    rows = store.db.execute("SELECT id, lower(heading), lower(text) FROM chunks").fetchall()
    n, mean = len(rows), sum(len(t) for _, _, t in rows) / len(rows)

    def count(gram: str, text: str) -> int:
        if not has_cjk(gram):
            return bigram_text(text).split().count(gram) if has_cjk(text) else 0
        return sum(text.startswith(gram, i) for i in range(len(text)))

    tf = {(cid, g): count(g, t) + 2.0 * count(g, h) * has_cjk(h + t) for cid, h, t in rows for g in grams}
    df = {g: sum(tf[cid, g] > 0 for cid, _, _ in rows) for g in grams}
    scores = []
    for cid, _, text in rows:
        s = sum(math.log(1 + (n - df[g] + 0.5) / (df[g] + 0.5)) * tf[cid, g] * 2.2
                / (tf[cid, g] + 1.2 * (0.25 + 0.75 * len(text) / mean)) for g in grams if tf[cid, g])
        if s:
            scores.append((cid, s))
    return sorted(scores, key=lambda t: (-t[1], t[0]))[:limit]


@pytest.fixture
def chinese_store(tmp_path):
    s = Store(tmp_path / "kb.sqlite")
    rows = chinese_corpus()
    write(s, "faq_zh.md", rows[:120])
    write(s, "manual_zh.md", rows[120:])
    yield s
    s.close()


@pytest.mark.parametrize("query", ["充电桩", "胎压灯亮了",  # common bigrams; bigrams rare in the corpus
                                   "充电要多长时间",  # question-word grams are left out
                                   "OTA更新", "ota 更新怎么用",  # mixed Chinese and Latin
                                   "挂P挡", "桩 快",  # one-character runs: every occurrence of the character
                                   "哈哈"])  # a bigram overlapping itself ("哈哈哈" holds it twice)
def test_chinese_ranking_is_exact_bigram_bm25(chinese_store, query):
    assert_same_ranking(Lexical(chinese_store).search(query, 30), chinese_ranking(chinese_store, query, 30))


def test_chinese_ranking_follows_writes(chinese_store, tmp_path):
    lexical, query = Lexical(chinese_store), "充电桩胎压"
    assert_same_ranking(lexical.search(query, 50), chinese_ranking(chinese_store, query, 50))
    other = Store(tmp_path / "kb.sqlite")
    other.delete_document(other.document("/docs/faq_zh.md").id)
    write(other, "more_zh.md", chinese_corpus(seed=3, n=60))
    assert_same_ranking(lexical.search(query, 50), chinese_ranking(chinese_store, query, 50))
    other.close()


def test_the_disk_check_counts_the_bigram_index(chinese_store, tmp_path):
    """read_disk_state (the soak's and crash tests' outside view) sees a bigram index that lost rows."""
    from knowledge.disk import read_disk_state

    state = read_disk_state(tmp_path, load_index=False)
    assert state.cjk_chunks == 180 and state.bigram_rows == 180 and state.chunks == 240  # every fourth is English
    chinese_store.db.execute(f"INSERT INTO {BIGRAM_TABLE}({BIGRAM_TABLE}) VALUES ('delete-all')")
    chinese_store.db.conn.commit()
    state = read_disk_state(tmp_path, load_index=False)
    assert state.bigram_rows == 0 and not state.agree and "bigram 0 of 180" in state.counts()


def test_a_kb_of_schema_1_gets_the_bigram_index(tmp_path):
    """A KB written before the bigram index gets it filled when it is opened, whole and consistent."""
    store = Store(tmp_path / "kb.sqlite")
    write(store, "faq_zh.md", chinese_corpus(n=40))
    for name in ("", "_ai", "_ad", "_au"):  # back to schema 1
        store.db.execute(f"DROP {'TRIGGER' if name else 'TABLE'} {BIGRAM_TABLE}{name}")
    store.set_meta(schema_version=1)
    store.close()
    store = Store(tmp_path / "kb.sqlite")
    assert store.get_meta("schema_version") == "2"
    np.testing.assert_array_equal(store.fts_ids(BIGRAM_TABLE), store.bigram_chunk_ids())
    assert len(store.bigram_chunk_ids()) == 30 and store.fts_integrity(BIGRAM_TABLE) is None
    assert_same_ranking(Lexical(store).search("充电桩", 10), chinese_ranking(store, "充电桩", 10))
    store.close()
