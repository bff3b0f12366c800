"""A second embedder beside the KB's own, for the queries the first cannot read: the tiny random BERT
(its vocabulary has no Chinese) with the tiny e5 (reads Chinese), on real SQLite files and FAISS
indexes. Random weights rank nothing by meaning, so each check compares with the cosines the second
embedder gives on its own."""

from __future__ import annotations

import pytest

from knowledge import KnowledgeBase
from knowledge.chunking import HEADING_SEP, context_path, embed_text
from knowledge.errors import IngestCancelled
from runtime.embedder import Embedder
from tests.test_knowledge_base import NO_GATE, write_docs

ZH_QUESTION = "胎压灯亮了是什么意思？"  # the FAQ entry's own question: its chunk is "question\nanswer"


@pytest.fixture(scope="module")
def bert(tiny_builds):
    return Embedder(tiny_builds["bert"])


@pytest.fixture(scope="module")
def e5(tiny_builds):
    return Embedder(tiny_builds["e5"])


def cosines(kb: KnowledgeBase, e5: Embedder, query: str) -> dict[int, float]:
    """Chunk id -> the second embedder's own cosine of the query with the chunk as embedded (its place,
    then its text), computed here from the stored chunks."""
    rows = [row for batch in kb.store.iter_chunk_texts() for row in batch]
    texts = [embed_text(context_path(title, tuple(heading.split(HEADING_SEP)) if heading else ()), text)
             for _, title, heading, _, text in rows]
    q = e5.embed([query], kind="query").vectors[0]
    return dict(zip([row[0] for row in rows], (e5.embed(texts).vectors @ q).tolist()))


def test_a_query_the_first_cannot_read_is_ranked_by_the_second(tmp_path, bert, e5):
    assert bert.unknown_share(ZH_QUESTION) > 1 / 3 >= e5.unknown_share(ZH_QUESTION)
    docs = write_docs(tmp_path / "docs")
    with KnowledgeBase.open(tmp_path / "kb", bert, second_embedder=e5) as kb:
        report = kb.ingest(docs, progress=False)
        stats = kb.stats()
        assert report.second_embedded == stats["chunks"] == stats["second_embeddings"] > 0
        assert kb.second_model_id == e5.model_id and kb.check().ok, kb.check()
        assert kb.read_by(ZH_QUESTION) is e5 and kb.read_by("What does the tyre light mean?") is bert
        by_id = cosines(kb, e5, ZH_QUESTION)
        dense = kb.search(ZH_QUESTION, k=len(by_id), mode="dense", min_score=NO_GATE)
        assert dense[0].chunk_id == max(by_id, key=by_id.get)
        for h in dense:
            assert h.scores["dense"] == pytest.approx(by_id[h.chunk_id], abs=1e-4)
        hybrid = kb.search(ZH_QUESTION, k=3, mode="hybrid")  # no answerability gate on another model's scale
        assert hybrid and all(h.scores["dense"] == pytest.approx(by_id[h.chunk_id], abs=1e-4) for h in hybrid)
    # opened without it, the same KB ranks the question by its words alone
    with KnowledgeBase.open(tmp_path / "kb", bert) as kb:
        assert kb.read_by(ZH_QUESTION) is None
        assert all("dense" not in h.scores for h in kb.search(ZH_QUESTION, k=3, mode="hybrid"))
        assert kb.use_second(e5) and kb.read_by(ZH_QUESTION) is e5


def test_second_vectors_follow_deletes_and_updates(tmp_path, bert, e5):
    docs = write_docs(tmp_path / "docs")
    with KnowledgeBase.open(tmp_path / "kb", bert, second_embedder=e5) as kb:
        kb.ingest(docs, progress=False)
        (docs / "faq.jsonl").write_text('{"id": "x", "question": "空调怎么开？", "answer": "按下空调键。"}\n')
        kb.ingest(docs, progress=False)
        kb.delete(docs / "notes")
        stats = kb.stats()
        assert stats["second_embeddings"] == stats["chunks"] and kb.check().ok, kb.check()
    (tmp_path / "kb" / KnowledgeBase.SECOND_INDEX_FILE).write_bytes(b"not an index")
    with KnowledgeBase.open(tmp_path / "kb", bert) as kb:  # rebuilt from SQLite, with or without the model
        assert kb.rebuild_index()["second_model_id"] == e5.model_id
    # a new process loads the saved index and finds it in step with SQLite
    with KnowledgeBase.open(tmp_path / "kb", bert, second_embedder=e5) as kb:
        assert kb.check().ok, kb.check()
        assert kb.search("空调怎么开？", k=1, mode="dense")[0].entry_id == "x"


def test_an_interrupted_fill_goes_on_where_it_stopped(tmp_path, bert, e5, monkeypatch):
    monkeypatch.setattr("knowledge.kb.SECOND_STEP", 2)  # several steps over these few chunks
    docs = write_docs(tmp_path / "docs")
    with KnowledgeBase.open(tmp_path / "kb", bert) as kb:
        kb.ingest(docs, progress=False)
        total = kb.stats()["chunks"]
    steps = iter(range(2))

    def stop_after_one_step():
        if next(steps, None) is None:
            raise IngestCancelled("stop")

    with KnowledgeBase.open(tmp_path / "kb", bert, second_embedder=e5) as kb:
        assert kb.read_by(ZH_QUESTION) is None  # no second vectors yet: the KB does not rank by them
        with pytest.raises(IngestCancelled):
            kb.embed_second(checkpoint=stop_after_one_step)
        done = kb.stats()["second_embeddings"]
        assert 0 < done < total and kb.check().ok
        assert kb.embed_second() == total - done
        assert kb.stats()["second_embeddings"] == total and kb.check().ok


def test_another_second_model_is_replaced_not_mixed(tmp_path, bert, e5):
    docs = write_docs(tmp_path / "docs")
    with KnowledgeBase.open(tmp_path / "kb", bert, second_embedder=bert) as kb:
        kb.ingest(docs, progress=False)
        assert kb.second_model_id == bert.model_id
    with KnowledgeBase.open(tmp_path / "kb", bert) as kb:  # another model is not taken unless asked
        assert not kb.use_second(e5) and kb.second_embedder is None
    with KnowledgeBase.open(tmp_path / "kb", bert, second_embedder=e5) as kb:
        assert kb.read_by(ZH_QUESTION) is None  # the vectors held are another model's
        assert kb.embed_second() == kb.stats()["chunks"]
        assert kb.second_model_id == e5.model_id and kb.read_by(ZH_QUESTION) is e5 and kb.check().ok


def test_the_cli_ingests_searches_and_rebuilds_with_a_second_embedder(tmp_path, tiny_builds):
    """`hexrag ingest --second-embedder`, then `search` (the KB's second model found again by its id) and
    `kb rebuild --second-embedder` with another model, which replaces the vectors."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    docs = write_docs(tmp_path / "docs")
    env = {**os.environ, "HEXRAG_KB": str(tmp_path / "kb"), "HEXRAG_EMBEDDER": str(tiny_builds["bert"]),
           "HEXRAG_SECOND_EMBEDDER": str(tiny_builds["e5"])}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=300,
                              cwd=Path(__file__).resolve().parents[1], env=env)

    proc = cli("ingest", str(docs), "--second-embedder", str(tiny_builds["e5"]), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["second_embedded"] == report["chunks"] > 0
    proc = cli("search", ZH_QUESTION, "--json")  # hybrid: a cosine only where the second embedder read it
    assert proc.returncode == 0, proc.stderr
    hits = json.loads(proc.stdout)
    assert hits and all("dense" in h["scores"] for h in hits)
    proc = cli("kb", "rebuild", "--second-embedder", str(tiny_builds["bert"]))
    assert proc.returncode == 0 and "second model bert:" in proc.stdout, proc.stderr
    stats = json.loads(cli("kb", "stats", "--json").stdout)
    assert stats["second_embeddings"] == stats["chunks"] and stats["second_model_id"] == stats["model_id"]
