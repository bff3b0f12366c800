"""KnowledgeBase on real SQLite files and FAISS indexes with the tiny random BERT embedder:
ingest / re-ingest / update / delete keep SQLite, both FTS indexes and FAISS consistent; broken
files are reported and skipped; a missing or altered index is rebuilt on open."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from knowledge import EmbedderMismatchError, KnowledgeBase, UnknownDocumentError
from knowledge.fusion import BM25_SHARE, PLACE_SHARE
from runtime.embedder import Embedder

NO_GATE = -1.0  # random tiny-model cosines say nothing about answerability


@pytest.fixture(scope="module")
def embedder(tiny_builds):
    return Embedder(tiny_builds["bert"])


def write_docs(root):
    root.mkdir(parents=True, exist_ok=True)
    (root / "manual.md").write_text("# Driving\n\n## Regenerative braking\n\nLift off the pedal to slow down "
                                    "and recover energy.\n\n### One-pedal mode\n\nThe car stops by itself "
                                    "when you lift off.\n")
    (root / "faq.jsonl").write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in [
        {"id": "tpms", "category": "tyres", "question": "What does the tyre light mean?",
         "answer": "A tyre is low on pressure; check all four."},
        {"id": "tpms-zh", "category": "tyres", "question": "胎压灯亮了是什么意思？",
         "answer": "至少有一个轮胎气压偏低，请检查四个轮胎。"},
    ]) + "\n")
    (root / "notes").mkdir(exist_ok=True)
    (root / "notes" / "charging.txt").write_text("Charging at home takes about eight hours on a wallbox.\n")
    (root / "notes" / "page.html").write_text("<h1>Wipers</h1><p>Replace the wiper blades every year.</p>")
    return root


def bm25(kb, query, k=3):
    return kb.search(query, k=k, mode="bm25")


def test_ingest_search_and_consistency(tmp_path, embedder):
    docs = write_docs(tmp_path / "docs")
    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        report = kb.ingest(docs, progress=False)
        assert len(report.added) == 4 and report.ok and report.chunks == report.embedded > 0
        assert kb.check().ok, kb.check()
        assert sorted(d.name for d in kb.list_documents()) == ["faq.jsonl", "manual.md", "notes/charging.txt",
                                                               "notes/page.html"]
        hit = bm25(kb, "one-pedal")[0]
        assert hit.heading == "Driving > Regenerative braking > One-pedal mode" and hit.entry_id is None
        assert kb.store.document_text(hit.document_id)[hit.start:hit.end] == hit.text
        hit = bm25(kb, "wallbox")[0]
        assert hit.name == "notes/charging.txt" and hit.scores["bm25"] > 0 and hit.heading == ""
        # one id everywhere: the dense hit for a chunk's own text is that chunk (FAISS id = FTS rowid)
        dense = kb.search(hit.text, k=1, mode="dense", min_score=NO_GATE)[0]
        assert dense.chunk_id == hit.chunk_id and dense.score == pytest.approx(1.0, abs=1e-4)
        hybrid = kb.search("wallbox", k=3, mode="hybrid", min_score=NO_GATE)
        assert hit.chunk_id in [h.chunk_id for h in hybrid] and "hybrid" in hybrid[0].scores
        stats = kb.stats()
        assert stats["documents"] == 4 and stats["index_kind"] == "flat" and stats["dim"] == embedder.dim



def test_hybrid_fusion_keeps_the_margins_of_its_signals():
    from knowledge.fusion import fused_scores

    # "a" leads the cosine by a hair, "b" leads BM25 by far: ranks called it a tie, the scores do not
    ranked = fused_scores(dict.fromkeys("ab"), {"a": 0.61, "b": 0.60}, {"a": 2.0, "b": 10.0}, {}, readable=True)
    assert [c for c, _ in ranked] == ["b", "a"]
    # the place cosine separates siblings that the chunk cosine and BM25 score alike
    ranked = fused_scores(dict.fromkeys("ab"), {"a": 0.5, "b": 0.5}, {"a": 3.0, "b": 3.0}, {"a": 0.1, "b": 0.4}, True)
    assert [c for c, _ in ranked] == ["b", "a"]
    # a query the embedder cannot read: BM25 alone; a candidate outside the lexical list scores 0 there
    ranked = fused_scores(dict.fromkeys("abc"), {"a": 0.9, "b": 0.1, "c": 0.5}, {"b": 4.0, "a": 1.0}, {}, False)
    assert [c for c, _ in ranked] == ["b", "a", "c"]
    # equal scores keep the candidates' order (the dense side's first)
    assert [c for c, _ in fused_scores(dict.fromkeys("xy"), {"x": 0.5, "y": 0.5}, {}, {}, True)] == ["x", "y"]

def test_reingest_is_a_noop_update_replaces_delete_removes(tmp_path, embedder):
    docs = write_docs(tmp_path / "docs")
    kb = KnowledgeBase.open(tmp_path / "kb", embedder)
    kb.ingest(docs, progress=False)
    before = kb.stats()
    again = kb.ingest(docs, progress=False)
    assert len(again.unchanged) == 4 and not (again.added or again.updated) and again.embedded == 0
    assert kb.stats()["chunks"] == before["chunks"]

    (docs / "notes" / "charging.txt").write_text("Charging at home takes about eight hours on a wallbox.\n\n"
                                                 "A granny cable takes a full day.\n")
    updated = kb.ingest(docs, progress=False)
    assert [p.endswith("charging.txt") for p in updated.updated] == [True] and len(updated.unchanged) == 3
    assert updated.embedded < updated.chunks or updated.chunks == 1  # the unchanged paragraph reused its vector
    assert bm25(kb, "granny")[0].name == "notes/charging.txt"
    assert kb.check().ok, kb.check()

    deleted = kb.delete("manual.md")
    assert [d.name for d in deleted] == ["manual.md"]
    assert not any(h.name == "manual.md" for h in bm25(kb, "pedal regenerative braking", k=10))
    assert not any(h.name == "manual.md" for h in kb.search("pedal", k=20, mode="dense", min_score=NO_GATE))
    with pytest.raises(UnknownDocumentError):
        kb.delete("manual.md")

    (docs / "notes" / "page.html").unlink()  # a file removed from an ingested folder is pruned
    pruned = kb.ingest(docs, progress=False)
    assert [p.endswith("page.html") for p in pruned.deleted] == [True]
    assert pruned.added == [str((docs / "manual.md").resolve())]  # and the deleted one comes back
    assert kb.check().ok, kb.check()
    kb.close()
    # what was written is what a fresh open sees, without an index rebuild
    reopened = KnowledgeBase.open(tmp_path / "kb", embedder)
    assert reopened.last_rebuild_reason is None and reopened.check().ok
    assert len(reopened.list_documents()) == 3


def test_broken_files_are_reported_and_skipped(tmp_path, embedder):
    docs = write_docs(tmp_path / "docs")
    (docs / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00IHDR")
    (docs / "latin1.md").write_bytes("Caf\xe9 au lait".encode("latin-1"))
    (docs / "bad.jsonl").write_text('{"question": "q", "answer": "a"}\nnot json\n')
    (docs / "image.png").write_bytes(b"\x89PNG")  # unsupported types in folders are skipped quietly
    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        report = kb.ingest([docs, tmp_path / "missing.md"], progress=False)
        reasons = {p.rsplit("/", 1)[-1]: r for p, r in report.failed}
        assert set(reasons) == {"binary.txt", "latin1.md", "bad.jsonl", "missing.md"}
        assert "binary" in reasons["binary.txt"] and "not UTF-8" in reasons["latin1.md"]
        assert "line 2" in reasons["bad.jsonl"] and "no such file" in reasons["missing.md"]
        assert len(report.added) == 4 and report.skipped[0].endswith("image.png")
        assert kb.check().ok


def test_missing_or_altered_index_is_rebuilt_on_open(tmp_path, embedder):
    docs = write_docs(tmp_path / "docs")
    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        kb.ingest(docs, progress=False)
        expected = [h.chunk_id for h in kb.search("wiper blades", k=3, mode="dense", min_score=NO_GATE)]
    index = tmp_path / "kb" / "index.faiss"

    def reopen():
        kb = KnowledgeBase.open(tmp_path / "kb", embedder)
        assert kb.check().ok, kb.check()
        assert [h.chunk_id for h in kb.search("wiper blades", k=3, mode="dense", min_score=NO_GATE)] == expected
        kb.close()
        return kb.last_rebuild_reason

    index.unlink()
    assert "missing" in reopen()
    data = bytearray(index.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the vectors
    index.write_bytes(bytes(data))
    assert "altered" in reopen()
    index.write_bytes(b"garbage")
    assert reopen() is not None
    sidecar = index.with_suffix(".json")
    sidecar.write_text(sidecar.read_text().replace('"count": ', '"count": 1'))
    assert reopen() is not None
    assert reopen() is None  # and a healthy index is simply loaded


def test_check_reports_fts_and_sqlite_damage(tmp_path, embedder):
    docs = write_docs(tmp_path / "docs")
    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        kb.ingest(docs, progress=False)
    db = sqlite3.connect(tmp_path / "kb" / "kb.sqlite")
    with db:  # what a buggy writer or a manual edit could do
        db.execute("DELETE FROM chunks_fts_cjk_docsize WHERE id = (SELECT min(id) FROM chunks)")
        db.execute("DELETE FROM embeddings WHERE chunk_id = (SELECT max(id) FROM chunks)")
    db.close()
    kb = KnowledgeBase.open(tmp_path / "kb")
    problems = " | ".join(kb.check().problems)
    assert "chunks_fts_cjk" in problems and "lack a vector" in problems
    kb.close()


def test_chinese_bm25(tmp_path, embedder):
    docs = write_docs(tmp_path / "docs")
    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        kb.ingest(docs, progress=False)
        for query in ["胎压", "胎压灯亮了怎么办", "轮胎气压低", "气压"]:  # 2-char words and longer questions
            hits = bm25(kb, query)
            assert hits and hits[0].entry_id == "tpms-zh", query
        assert bm25(kb, "雨刮器") == []
        # the English-only tokenizer cannot read Chinese: hybrid falls back to BM25's ranking
        assert kb.unknown_share("胎压灯亮了怎么办") > 0.5 and kb.unknown_share("tyre light") == 0.0
        assert kb.search("胎压灯亮了怎么办", k=1, mode="hybrid")[0].entry_id == "tpms-zh"


def test_chinese_question_words_do_not_pick_the_passage(tmp_path, embedder):
    """"要多长时间" asks how long; the entry whose title says it too is not the answer to a question
    about a software update (the words that name the topic must decide)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "faq.jsonl").write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in [
        {"id": "home-charging", "question": "在家充电要多长时间？",
         "answer": "使用壁挂充电桩从空电到充满大约需要 8 小时。充电桩需由专业电工安装。"},
        {"id": "updates", "question": "车机系统怎么升级？",
         "answer": "车辆通过移动网络在线升级。安装需要 20 到 40 分钟，期间车辆不能行驶。"},
        {"id": "wipers", "question": "雨刮片多久换一次？", "answer": "建议每年更换一次雨刮片。"},
    ]) + "\n")
    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        kb.ingest(tmp_path / "docs", progress=False)
        assert bm25(kb, "软件升级安装要多长时间？")[0].entry_id == "updates"
        assert bm25(kb, "充电要多长时间？")[0].entry_id == "home-charging"

def test_filters(tmp_path, embedder):
    docs = write_docs(tmp_path / "docs")
    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        kb.ingest(docs, progress=False)
        for mode in ("dense", "bm25", "hybrid"):
            hits = kb.search("tyre pressure wallbox", k=10, mode=mode, sources=["notes/*"], min_score=NO_GATE)
            assert hits and {h.name for h in hits} <= {"notes/charging.txt", "notes/page.html"}, mode
            hits = kb.search("tyre pressure wallbox", k=10, mode=mode, document="faq.jsonl", min_score=NO_GATE)
            assert hits and {h.name for h in hits} == {"faq.jsonl"}, mode
        assert kb.search("tyre", sources=["nothing.md"]) == []


@pytest.mark.parametrize("kind", ["hnsw", "flat"])
def test_index_kinds_follow_deletes(tmp_path, embedder, kind):
    docs = write_docs(tmp_path / "docs")
    with KnowledgeBase.open(tmp_path / "kb", embedder, index=kind) as kb:
        kb.ingest(docs, progress=False)
        assert kb.stats()["index_kind"] == kind
        kb.delete("notes/page.html")
        assert kb.check().ok, kb.check()
        hits = kb.search("Replace the wiper blades every year.", k=20, mode="dense", min_score=NO_GATE)
        assert hits and all(h.name != "notes/page.html" for h in hits)
    kb = KnowledgeBase.open(tmp_path / "kb", embedder)  # the kind is remembered
    assert kb.stats()["index_kind"] == kind and kb.last_rebuild_reason is None and kb.check().ok


def test_ivf_index_on_many_vectors(tmp_path):
    from knowledge.index import IVF_MIN_VECTORS, build_index

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((IVF_MIN_VECTORS, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(100, 100 + len(vectors), dtype=np.int64)
    index = build_index("ivf", 32, ids, vectors)
    index.remove(ids[:10])
    assert len(index) == len(ids) - 10 and np.array_equal(index.ids(), ids[10:])
    scores, found = index.search(vectors[10:20], 1)
    assert (found[:, 0] == ids[10:20]).mean() >= 0.8
    _, found = index.search(vectors[505:506], 5, allowed=ids[500:510])
    assert found[0, 0] == ids[505] and set(found[0]) <= set(ids[500:510]) | {-1}  # unprobed cells give -1


def test_embedder_mismatch_and_bm25_without_embedder(tmp_path, embedder, tiny_builds):
    docs = write_docs(tmp_path / "docs")
    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        kb.ingest(docs, progress=False)
    with KnowledgeBase.open(tmp_path / "kb") as kb:  # no embedder: BM25, list, delete, stats work
        assert bm25(kb, "wallbox")[0].name == "notes/charging.txt"
        kb.delete("notes/charging.txt")
        assert kb.check().ok
    other = Embedder(tiny_builds["bert"])
    other.model_id = "another-model:0123"
    with KnowledgeBase.open(tmp_path / "kb", other) as kb:
        with pytest.raises(EmbedderMismatchError, match="kb rebuild --reembed"):
            kb.search("wallbox", mode="dense")
        kb.rebuild_index(reembed=True)
        assert kb.model_id == "another-model:0123" and kb.check().ok
        assert kb.search("wallbox", mode="dense", min_score=NO_GATE)


def test_hits_are_distinct_sections_and_say_what_their_score_is(tmp_path, embedder):
    long_section = "\n\n".join(f"Paragraph {i}: the wiper blades sweep the screen, and wiper fluid {i} helps."
                                for i in range(12))
    (tmp_path / "wipers.md").write_text(f"# Wipers\n\n## Blades\n\n{long_section}\n\n## Fluid\n\n"
                                        "Top up the wiper fluid in winter.\n\n## Service\n\nThe wiper "
                                        "service position lifts the arms.\n")
    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        kb.ingest(tmp_path / "wipers.md", progress=False)
        blades = [c for c in kb.store.chunks(kb.store.chunk_ids().tolist()).values() if c.heading == "Wipers > Blades"]
        assert len(blades) >= 4  # the long section is several chunks, each matching "wiper" more often
        for mode, kind in (("bm25", "bm25"), ("dense", "cosine"), ("hybrid", "fused")):
            hits = kb.search("wiper blades fluid", k=3, mode=mode, min_score=NO_GATE)
            assert sorted(h.heading for h in hits) == ["Wipers > Blades", "Wipers > Fluid", "Wipers > Service"], mode
            assert {h.score_kind for h in hits} == {kind} and hits[0].to_dict()["score_kind"] == kind
        hybrid = kb.search("wiper blades fluid", k=3, mode="hybrid", min_score=NO_GATE)
        top = kb.search("wiper blades fluid", k=1, mode="bm25")[0].score
        for h in hybrid:  # the cosine, plus shares of the relative BM25 and of the place cosine
            assert h.score == h.scores["hybrid"] and -1 <= h.scores["dense"] <= 1
            if h.heading != "Wipers > Blades":  # one chunk: its BM25 is its section's
                assert h.score == pytest.approx(h.scores["dense"] + BM25_SHARE * h.scores["bm25"] / top
                                                + PLACE_SHARE * h.scores["place"])
        # a hit's whole section: every paragraph of it, in order, and nothing of the next section
        blade_hit = next(h for h in hits if h.heading == "Wipers > Blades")
        assert kb.section_text(blade_hit) == long_section
        fluid_hit = next(h for h in hits if h.heading == "Wipers > Fluid")
        assert kb.section_text(fluid_hit) == fluid_hit.text == "Top up the wiper fluid in winter."
        # its chunks in document order, slices of the section, each with its cosine with a query the
        # embedder reads (from the stored vectors: the same as a dense search's)
        chunks = kb.section_chunks(blade_hit, "wiper blades fluid")
        assert [c.chunk_id for c in chunks] == [c.id for c in sorted(blades, key=lambda c: c.start)]
        assert blade_hit.chunk_id in [c.chunk_id for c in chunks] and all(c.text in long_section for c in chunks)
        dense = {h.chunk_id: h.scores["dense"] for h in kb.search("wiper blades fluid", k=3, mode="dense",
                                                                      min_score=NO_GATE)}
        assert all(-1 <= c.scores["dense"] <= 1 for c in chunks)
        assert [c.scores["dense"] for c in chunks if c.chunk_id in dense] == pytest.approx(
            [dense[c.chunk_id] for c in chunks if c.chunk_id in dense], abs=1e-5)
        assert [c.scores for c in kb.section_chunks(blade_hit)] == [{}] * len(chunks)  # no query: unscored
        assert [c.text for c in kb.section_chunks(fluid_hit, "wiper")] == [fluid_hit.text]
        # a question is embedded once for its search and its sections' windows, with the same cosines
        calls = []
        embed = kb.embedder.embed
        kb.embedder.embed = lambda texts, **kw: calls.append(texts) or embed(texts, **kw)
        try:
            again = kb.section_chunks(blade_hit, "wiper blades fluid")
            kb.search("wiper blades fluid", k=3, mode="dense", min_score=NO_GATE)
            assert calls == [] and [c.scores for c in again] == [c.scores for c in chunks]
            kb.section_chunks(blade_hit, "how do I change the blades")
            assert calls == [["how do I change the blades"]]
        finally:
            del kb.embedder.embed  # the class's method again (the embedder is shared by this module's tests)


def test_the_sample_kb_is_held_once_whichever_checkout_filled_it(tmp_path, embedder):
    """A KB filled by an older checkout keeps its samples under that path: quickstart replaces them."""
    import shutil

    from app.quickstart import ensure_sample_kb
    from knowledge.sample_kb import SAMPLES

    old = tmp_path / "old-clone" / "knowledge" / "samples"
    shutil.copytree(SAMPLES, old)
    mine = tmp_path / "notes" / "aurora_faq.jsonl"  # the driver's own file of the same name stays
    mine.parent.mkdir()
    mine.write_text('{"question": "Where is the spare key?", "answer": "In the glovebox."}\n')
    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        kb.ingest([old / "aurora_faq.jsonl", old / "aurora_manual.md", mine], progress=False)
        ensure_sample_kb(kb)
        sources = sorted(d.source for d in kb.list_documents())
    wanted = sorted(str((SAMPLES / n).resolve()) for n in ("aurora_faq.jsonl", "aurora_faq_zh.jsonl", "aurora_manual.md"))
    assert sources == sorted([*wanted, str(mine.resolve())])


def _placeless(kb_dir) -> int:
    """Chunks without a place vector."""
    with sqlite3.connect(kb_dir / "kb.sqlite") as db:
        return db.execute("SELECT count(*) FROM chunks WHERE id NOT IN (SELECT chunk_id FROM places)").fetchone()[0]


def _places(kb_dir) -> list[tuple[str, np.ndarray]]:
    """(heading or FAQ entry id, place vector) of every place row, read from the SQLite file itself."""
    with sqlite3.connect(kb_dir / "kb.sqlite") as db:
        rows = db.execute("SELECT coalesce(c.entry_id, c.heading), p.vector FROM places p JOIN chunks c ON c.id = p.chunk_id")
        return [(key, np.frombuffer(blob, "<f4")) for key, blob in rows]


def test_places_are_embedded_kept_and_ranked(tmp_path, embedder):
    """Each chunk's place (title + heading path, or the FAQ question) is embedded alone at ingest,
    follows the chunk through update, delete and re-embedding, and is hybrid's third ranking; a KB
    written before places ranks as it did until its documents are ingested again."""
    docs = write_docs(tmp_path / "docs")
    kb_dir = tmp_path / "kb"
    with KnowledgeBase.open(kb_dir, embedder) as kb:
        kb.ingest(docs, progress=False)
        places = dict(_places(kb_dir))
        texts = {"Driving > Regenerative braking > One-pedal mode": "Driving > Regenerative braking > One-pedal mode",
                 "tpms": "What does the tyre light mean?", "tpms-zh": "胎压灯亮了是什么意思？"}
        expected = dict(zip(texts, embedder.embed(list(texts.values())).vectors))
        for key, vector in expected.items():
            np.testing.assert_allclose(places[key], vector, atol=1e-5)
        # the text file has neither title nor heading: its chunks are placed by their own words
        assert _placeless(kb_dir) == 0
        text_chunk = bm25(kb, "wallbox")[0]
        np.testing.assert_array_equal(places[""], kb.store.vectors(np.array([text_chunk.chunk_id]), kb.dim)[0])

        query = "lift off the pedal to stop"
        hit = kb.search(query, k=1, mode="hybrid", min_score=NO_GATE)[0]
        qvec = embedder.embed([query]).vectors[0]
        key = hit.entry_id or hit.heading
        assert hit.scores["place"] == pytest.approx(float(places[key] @ qvec), abs=1e-5)

        kb.delete("faq.jsonl")
        assert not {"tpms", "tpms-zh"} & {key for key, _ in _places(kb_dir)}  # no orphan rows
        kb.rebuild_index(reembed=True)
        np.testing.assert_allclose(dict(_places(kb_dir))[texts["Driving > Regenerative braking > One-pedal mode"]],
                                   expected["Driving > Regenerative braking > One-pedal mode"], atol=1e-5)

    # a KB from before: no place rows and the older chunker signature
    with sqlite3.connect(kb_dir / "kb.sqlite") as db:
        db.execute("DELETE FROM places")
        db.execute("UPDATE documents SET chunker = 'v2:max=128:overlap=0.15'")
    with KnowledgeBase.open(kb_dir, embedder) as kb:
        hits = kb.search("lift off the pedal to stop", k=3, mode="hybrid", min_score=NO_GATE)
        # fused without them: the cosine and the relative BM25's share
        assert hits and all("place" not in h.scores and h.score <= h.scores["dense"] + BM25_SHARE + 1e-9 for h in hits)
        again = kb.ingest(docs, progress=False)
        assert len(again.updated) == 3  # re-chunked: vectors of unchanged chunks reused, their places embedded
        assert _placeless(kb_dir) == 0
        hits = kb.search("lift off the pedal to stop", k=3, mode="hybrid", min_score=NO_GATE)
        assert all("place" in h.scores for h in hits)


def test_an_upload_job_goes_on_after_a_file_fails_in_any_way(tmp_path, embedder, monkeypatch):
    """A parser's unexpected exception on one staged file is that file's failure; the files after it are
    still ingested, and a page with no text is reported, not dropped."""
    import time

    import app.jobs as jobs
    from app.uploads import staging_dir

    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        staging = staging_dir(kb.dir)
        staging.mkdir(parents=True, exist_ok=True)
        names = {"a1.md": "# One\n\nThe first note.\n", "bad.md": "# Bad\n\nNever read.\n",
                 "links.html": "<html><body><nav><a href='x'>x</a></nav></body></html>",
                 "a2.md": "# Two\n\nThe second note.\n"}
        staged = []
        for name, text in names.items():
            (staging / name).write_text(text)
            staged.append((staging / name, name))
        real = jobs.ingest_staged

        def flaky(kb, path, name, checkpoint=None):
            if name == "bad.md":
                raise MemoryError("a parser's resource limit")
            return real(kb, path, name, checkpoint)

        monkeypatch.setattr(jobs, "ingest_staged", flaky)
        writer = jobs.KnowledgeWriter(max_pending=2)
        job = writer.submit_ingest(kb, staged)
        for _ in range(600):
            if writer.get(job.id).finished_at is not None:
                break
            time.sleep(0.05)
        done = writer.get(job.id)
        writer.close()
        assert done.added and sorted(done.added) == sorted(str(kb.dir / "uploads" / n) for n in ("a1.md", "a2.md"))
        assert {f.file: f.reason for f in done.failed} == {"bad.md": "internal error; see the server log",
                                                          "links.html": "no text to index"}
        assert done.status == "failed" and done.error.code == "internal_error"


def test_an_upload_ingest_waits_while_interactive_requests_run(tmp_path, embedder):
    """An upload's ingest yields to answers and searches in flight between its steps (each step waits
    at most a while, so steady traffic slows it but cannot stop it), and goes on once they end."""
    import time

    from app.jobs import KnowledgeWriter
    from app.priority import MAX_YIELD_S, Foreground
    from app.uploads import staging_dir

    foreground = Foreground()
    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        staging = staging_dir(kb.dir)
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "note.md").write_text("# Note\n\nA note to ingest.\n")
        writer = KnowledgeWriter(max_pending=2, foreground=foreground)
        foreground.enter()
        job = writer.submit_ingest(kb, [(staging / "note.md", "note.md")])
        time.sleep(MAX_YIELD_S / 2)
        assert writer.get(job.id).status == "running" and kb.list_documents() == []
        foreground.exit()
        started = time.monotonic()
        while writer.get(job.id).finished_at is None:
            assert time.monotonic() - started < MAX_YIELD_S, "the ingest went on waiting after the request ended"
            time.sleep(0.02)
        writer.close()
        assert writer.get(job.id).status == "succeeded" and [d.name for d in kb.list_documents()] == ["note.md"]


def test_a_background_fill_waits_for_quiet_and_gives_way_to_writes(tmp_path, embedder):
    """The writer's background fill computes a step only after FILL_IDLE_S without questions, stops for
    a KB write that waits (a delete) and goes on after it, and stops when the writer closes."""
    import asyncio
    import threading
    import time

    from app import jobs
    from app.jobs import KnowledgeWriter
    from app.priority import Foreground

    steps, runs, go = [], [], threading.Event()

    def fill(checkpoint):
        runs.append(time.monotonic())
        for _ in range(100):
            checkpoint()
            steps.append(time.monotonic())
            go.wait(0.05)
        return len(steps), 0

    foreground = Foreground()
    writer = KnowledgeWriter(max_pending=2, foreground=foreground)
    foreground.enter()  # a question in flight
    writer.keep_filling(fill)
    time.sleep(0.3)
    assert len(runs) == 1 and steps == []
    foreground.exit()
    ended = time.monotonic()
    deadline = ended + jobs.FILL_IDLE_S + 2
    while not steps and time.monotonic() < deadline:
        time.sleep(0.02)
    assert steps and steps[0] - ended >= jobs.FILL_IDLE_S - 0.05  # a quiet spell first
    wrote = asyncio.run(writer.run(lambda: len(steps)))  # a delete waits for one step at most
    assert wrote < 100
    deadline = time.monotonic() + 5
    while len(runs) < 2 and time.monotonic() < deadline:  # and the fill goes on after it
        time.sleep(0.02)
    assert len(runs) == 2
    started = time.monotonic()
    writer.close()
    assert time.monotonic() - started < 1 and len(steps) < 200


def test_searches_do_not_wait_for_an_ingest(tmp_path, embedder, monkeypatch):
    """While a long ingest embeds its files, a search answers at once: only each document's commit
    holds the lock searches take. The documents it has committed are found whole."""
    import threading
    import time

    with KnowledgeBase.open(tmp_path / "kb", embedder) as kb:
        write_docs(tmp_path / "first")
        kb.ingest([tmp_path / "first"], progress=False)
        before = len(kb.list_documents())
        folder = tmp_path / "more"
        folder.mkdir()
        for i in range(6):
            (folder / f"note{i}.md").write_text(f"# Note {i}\n\nThe spare fuse number {i} sits in the boot.\n")
        slow = threading.Event()
        real = type(embedder).embed

        def embed(self, texts, buckets=True, kind="passage"):
            if len(texts) > 1:  # an ingest batch, not a one-question search
                slow.set()
                time.sleep(1.5)
            return real(self, texts, buckets, kind)

        monkeypatch.setattr(type(embedder), "embed", embed)
        ingest = threading.Thread(target=kb.ingest, args=([folder],), kwargs={"progress": False})
        ingest.start()
        assert slow.wait(30)
        started = time.perf_counter()
        hits = kb.search("one-pedal mode", k=3, mode="hybrid", min_score=NO_GATE)
        waited = time.perf_counter() - started
        assert ingest.is_alive() and waited < 1.0 and hits, waited
        ingest.join(60)
        assert len(kb.list_documents()) == before + 6
