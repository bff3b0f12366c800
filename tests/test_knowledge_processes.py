"""One KB written by several processes: a running server sees CLI ingests and deletes at its next
request, and no writer ever saves a vector index that lacks another writer's vectors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from knowledge import KnowledgeBase
from knowledge.disk import read_disk_state
from runtime.embedder import Embedder
from tests.api_server import Server

ROOT = Path(__file__).resolve().parents[1]
NO_GATE = -1.0  # random tiny-model cosines say nothing about answerability
TEXTS = {
    "wipers.md": "# Wipers\n\nReplace the wiper blades every spring; the service position lifts the arms.\n",
    "tyres.md": "# Tyres\n\nWinter tyres need a tread depth of at least four millimetres.\n",
    "keys.md": "# Keys\n\nThe key fob battery is a CR2032 coin cell behind the logo cover.\n",
    "seats.md": "# Seats\n\nThe seat heating has three levels and switches off after an hour.\n",
}


def write(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(TEXTS[name])
    return folder / name


def body(name: str) -> str:
    return TEXTS[name].split("\n\n", 1)[1].strip()


def on_disk(kb_dir: Path) -> tuple[int, int]:
    """(vectors in the saved FAISS index per its sidecar, chunks in SQLite), read independently."""
    state = read_disk_state(kb_dir)
    assert state.index_error is None, state.index_error
    return state.index_count, state.chunks


def dense_names(kb: KnowledgeBase, query: str) -> list[str]:
    return [h.name for h in kb.search(query, k=10, mode="dense", min_score=NO_GATE)]


def test_two_writers_in_turn_never_lose_vectors(tmp_path, tiny_builds):
    docs, kb_dir = tmp_path / "docs", tmp_path / "kb"
    embedder = Embedder(tiny_builds["bert"])
    a = KnowledgeBase.open(kb_dir, embedder)
    a.ingest(write(docs, "wipers.md"), progress=False)
    b = KnowledgeBase.open(kb_dir, embedder)
    a.ingest(write(docs, "tyres.md"), progress=False)  # b's index is now one document behind
    assert dense_names(b, body("tyres.md"))[0] == "tyres.md"

    b.ingest(write(docs, "keys.md"), progress=False)
    a.ingest(write(docs, "seats.md"), progress=False)  # a saves after b: b's vectors must survive
    count, chunks = on_disk(kb_dir)
    assert count == chunks and chunks >= 4
    assert dense_names(a, body("keys.md"))[0] == "keys.md"

    b.delete("tyres.md")
    assert "tyres.md" not in dense_names(a, body("tyres.md"))
    a.ingest(write(docs, "tyres.md"), progress=False)  # back, under new rowids
    b.delete("wipers.md")
    count, chunks = on_disk(kb_dir)
    assert count == chunks and chunks >= 3
    assert a.check().ok and b.check().ok, (a.check(), b.check())
    a.close()
    b.close()
    reopened = KnowledgeBase.open(kb_dir, embedder)
    assert reopened.last_rebuild_reason is None and reopened.check().ok
    assert sorted(d.name for d in reopened.list_documents()) == ["keys.md", "seats.md", "tyres.md"]
    reopened.close()


def cli(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_server_sees_cli_ingest_and_delete(tmp_path, tiny_builds):
    docs, kb_dir = tmp_path / "docs", tmp_path / "kb"
    kb_args = ["--kb", str(kb_dir), "--embedder", str(tiny_builds["bert"])]
    cli("ingest", str(write(docs, "tyres.md")), "--quiet", *kb_args)
    server = Server(tiny_builds["llama"], tiny_builds["bert"], kb_dir, tmp_path / "server.log")

    def dense(text: str) -> list[str]:
        r = httpx.post(server.url + "/v1/knowledge/search", timeout=60,
                       json={"query": text, "k": 5, "mode": "dense", "min_score": NO_GATE})
        assert r.status_code == 200, r.text
        return [h["source"] for h in r.json()["data"]]

    try:
        server.wait_ready()
        assert dense(body("tyres.md"))[0] == "tyres.md"
        cli("ingest", str(write(docs, "wipers.md")), "--quiet", *kb_args)
        assert dense(body("wipers.md"))[0] == "wipers.md"  # no restart

        upload = {"files": ("keys.md", TEXTS["keys.md"].encode(), "text/markdown")}
        r = httpx.post(server.url + "/v1/knowledge/documents", files=upload, timeout=60)
        assert r.status_code == 202, r.text
        job = server.wait_job(r.json())  # uploads ingest in the background
        assert job["status"] == "succeeded" and len(job["added"]) == 1, job
        count, chunks = on_disk(kb_dir)
        assert count == chunks and chunks >= 3  # the server's save kept the CLI's vectors

        cli("kb", "delete", "wipers.md", "--kb", str(kb_dir))
        assert "wipers.md" not in dense(body("wipers.md"))
        assert dense(body("keys.md"))[0] == "keys.md"
        cli("ingest", str(write(docs, "seats.md")), "--quiet", *kb_args)  # the CLI keeps the server's upload
        count, chunks = on_disk(kb_dir)
        assert count == chunks and chunks >= 3
        assert dense(body("seats.md"))[0] == "seats.md"
    finally:
        server.stop()
    cli("kb", "check", "--kb", str(kb_dir))


@pytest.mark.parametrize("cached", [True, False])
def test_freshness_check_is_one_lookup(tmp_path, tiny_builds, cached):
    """A search with nothing new reads no vectors: the index is only caught up when the generation moved."""
    docs, kb_dir = tmp_path / "docs", tmp_path / "kb"
    embedder = Embedder(tiny_builds["bert"])
    with KnowledgeBase.open(kb_dir, embedder) as writer, KnowledgeBase.open(kb_dir, embedder) as reader:
        writer.ingest(write(docs, "wipers.md"), progress=False)
        dense_names(reader, "wipers")
        if not cached:
            writer.ingest(write(docs, "tyres.md"), progress=False)
        statements: list[str] = []
        reader.store.db.conn.set_trace_callback(statements.append)
        dense_names(reader, "wipers")
        reader.store.db.conn.set_trace_callback(None)
    reads = [s for s in statements if "embeddings" in s]
    assert (reads == []) if cached else any("chunk_id >" in s for s in reads), statements


def test_search_reads_one_commit_while_another_process_deletes(tmp_path, tiny_builds, monkeypatch):
    """A delete that another writer commits between a search's FTS query and its reads of the chunks
    (a server searching while `hexrag kb delete` or an ingest runs) does not break the search: it
    answers from the commit it started on, and the next search sees the delete."""
    docs, kb_dir = tmp_path / "docs", tmp_path / "kb"
    embedder = Embedder(tiny_builds["bert"])
    with KnowledgeBase.open(kb_dir, embedder) as writer, KnowledgeBase.open(kb_dir, embedder) as reader:
        for name in TEXTS:
            writer.ingest(write(docs, name), progress=False)
        bm25 = reader._lexical.search
        deleted = []

        def racing(*args):
            hits = bm25(*args)
            if not deleted:
                deleted.append(writer.delete("tyres.md"))
            return hits

        monkeypatch.setattr(reader._lexical, "search", racing)
        assert reader.search("winter tyres tread depth", k=4, mode="bm25")[0].name == "tyres.md"
        assert deleted
        assert "tyres.md" not in [h.name for h in reader.search("winter tyres tread depth", k=4, mode="bm25")]
        assert reader.check().ok
