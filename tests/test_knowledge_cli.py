"""`ingest`, `kb`, `search` and `eval retrieval` as scripts see them: JSON on stdout, clean errors.

Run through `python -m app.cli`, the `hexrag` entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def cli(tmp_path, tiny_builds):
    base = {**os.environ, "HEXRAG_KB": str(tmp_path / "kb"), "HEXRAG_EMBEDDER": str(tiny_builds["bert"])}

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True,
                              timeout=300, cwd=ROOT, env={**base, **(env or {})})

    return run


@pytest.fixture()
def docs(docs):
    """The shared two documents and one that cannot be read."""
    (docs / "broken.txt").write_bytes(b"\x00\x01\x02")
    return docs


def test_ingest_reports_failures_and_fails_only_when_nothing_was_indexed_or_strict(cli, docs):
    (docs / "links.html").write_text("<html><body><nav><a href='a.html'>A</a></nav></body></html>")
    proc = cli("ingest", str(docs), "--quiet")
    assert proc.returncode == 0, proc.stderr  # the two readable documents are in
    assert "failed: " in proc.stderr and "broken.txt: binary" in proc.stderr and "Traceback" not in proc.stderr
    assert f"skipped: {docs / 'links.html'}: no text to index" in proc.stderr  # a page of links only
    assert proc.stdout.startswith("2 added, 0 updated, 0 unchanged, 0 deleted, 1 failed, 1 without text")
    assert cli("ingest", str(docs), "--quiet", "--strict").returncode == 2
    assert cli("ingest", str(docs / "broken.txt"), "--quiet").returncode == 2  # nothing given could be indexed
    (docs / "broken.txt").unlink()
    (docs / "links.html").unlink()
    proc = cli("ingest", str(docs), "--json")
    assert proc.returncode == 0 and len(json.loads(proc.stdout)["unchanged"]) == 2


def test_search_json_shape(cli, docs):
    (docs / "broken.txt").unlink()
    assert cli("ingest", str(docs), "--quiet").returncode == 0
    for mode in ("bm25", "hybrid", "dense"):
        proc = cli("search", "wallbox overnight", "--mode", mode, "--k", "2", "--json", "--min-score", "none")
        assert proc.returncode == 0, proc.stderr
        hits = json.loads(proc.stdout)
        assert isinstance(hits, list) and 1 <= len(hits) <= 2
        for hit in hits:
            assert {"text", "source", "heading", "score", "entry_id", "chunk_id", "scores", "start", "end"} <= set(hit)
            assert isinstance(hit["score"], float) and isinstance(hit["text"], str)
    top = json.loads(cli("search", "wallbox", "--mode", "bm25", "--json").stdout)[0]
    assert top["heading"] == "Charging > At home" and top["source"].endswith("manual.md")
    proc = cli("search", "wiper clip", "--mode", "bm25")
    assert proc.returncode == 0 and "faq.jsonl > care [wipers]" in proc.stdout


def test_kb_commands(cli, docs):
    (docs / "broken.txt").unlink()
    cli("ingest", str(docs), "--quiet")
    listed = json.loads(cli("kb", "list", "--json").stdout)
    assert sorted(d["name"] for d in listed) == ["faq.jsonl", "manual.md"]
    stats = json.loads(cli("kb", "stats", "--json").stdout)
    assert stats["documents"] == 2 and stats["index_kind"] == "flat"
    proc = cli("kb", "check")
    assert proc.returncode == 0 and proc.stdout.startswith("ok:")
    proc = cli("kb", "delete", "manual.md")
    assert proc.returncode == 0 and "deleted manual.md" in proc.stdout
    proc = cli("kb", "delete", "manual.md")
    assert proc.returncode == 1 and proc.stderr.startswith("error: no document 'manual.md'")
    (Path(stats["kb_dir"]) / "index.faiss").unlink()
    proc = cli("kb", "rebuild")
    assert proc.returncode == 0 and "flat index" in proc.stdout
    assert cli("kb", "check").returncode == 0


def test_errors_are_one_line(cli, docs, tmp_path):
    proc = cli("search", "x", "--embedder", str(tmp_path / "nowhere"))
    assert proc.returncode == 1 and proc.stderr.startswith("error: no embedder at")
    proc = cli("ingest", str(docs), "--embedder", str(tmp_path / "nowhere"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "kb.sqlite").write_bytes(b"not a database at all" * 100)
    proc = cli("kb", "list")
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "not a usable knowledge base" in proc.stderr


def test_eval_retrieval(cli, docs, tmp_path):
    (docs / "broken.txt").unlink()
    cli("ingest", str(docs), "--quiet")
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(json.dumps(q) for q in [
        {"question": "wallbox overnight", "expected": ["manual.md#Charging > At home"], "lang": "en"},
        {"question": "wiper blades clip", "expected": ["wipers"], "lang": "en"},
        {"question": "pizza", "expected": [], "lang": "en"}]) + "\n")
    proc = cli("eval", "retrieval", "--questions", str(questions), "--mode", "bm25", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {(r["mode"], r["lang"]): r for r in json.loads(proc.stdout)["results"]}
    assert rows["bm25", "all"]["recall@1"] == 1.0 and rows["bm25", "all"]["questions"] == 2
    proc = cli("eval", "retrieval", "--questions", str(questions))
    assert proc.returncode == 0 and "hybrid" in proc.stdout and "R@5" in proc.stdout


def test_ingest_refuses_fifos_and_devices(cli, docs):
    """A FIFO must not hang the ingest and a link to /dev/zero must not fill memory: one line each."""
    (docs / "broken.txt").unlink()
    os.mkfifo(docs / "pipe.md")
    (docs / "zero.md").symlink_to("/dev/zero")
    proc = cli("ingest", str(docs), "--quiet", "--strict")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    failures = [line for line in proc.stderr.splitlines() if line.startswith("failed: ")]
    assert sorted(failures) == ["failed: /dev/zero: not a regular file", f"failed: {docs / 'pipe.md'}: not a regular file"]
    assert proc.stdout.startswith("2 added, 0 updated, 0 unchanged, 0 deleted, 2 failed")
    proc = cli("ingest", str(docs / "pipe.md"), "--quiet")  # named on its own, too
    assert proc.returncode == 2 and proc.stderr.strip() == f"failed: {docs / 'pipe.md'}: not a regular file"


def test_ingest_refuses_files_over_the_size_limit(cli, docs):
    (docs / "broken.txt").unlink()
    (docs / "big.md").write_text("# Big\n\n" + "word " * 300_000)  # 1.5 MB
    proc = cli("ingest", str(docs), "--quiet", "--max-file-mb", "1", "--strict")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"failed: {docs / 'big.md'}: larger than the 1048576 byte limit"
    listed = json.loads(cli("kb", "list", "--json").stdout)
    assert sorted(d["name"] for d in listed) == ["faq.jsonl", "manual.md"]
    # the setting, read where every HEXRAG_* name is (app/settings.py), when the flag is not given
    proc = cli("ingest", str(docs / "big.md"), "--quiet", env={"HEXRAG_MAX_FILE_MB": "0.5"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"failed: {docs / 'big.md'}: larger than the 524288 byte limit"
    proc = cli("ingest", str(docs / "big.md"), "--quiet", env={"HEXRAG_MAX_FILE_MB": "-1"})
    assert proc.returncode == 1 and proc.stderr.startswith("error: HEXRAG_MAX_FILE_MB:")


@pytest.mark.parametrize("source", ["", "~nosuchuser/notes.md", "notes\x01.md"])
def test_kb_delete_of_no_document_is_a_clean_error(cli, docs, source):
    (docs / "broken.txt").unlink()
    assert cli("ingest", str(docs), "--quiet").returncode == 0
    proc = cli("kb", "delete", source)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert len(json.loads(cli("kb", "list", "--json").stdout)) == 2


def test_the_answer_profile_is_stored_with_the_kb(cli, docs, tmp_path):
    """`hexrag kb profile`: the defaults until one is set; a bad file is one line and changes nothing."""
    (docs / "broken.txt").unlink()
    assert cli("ingest", str(docs), "--quiet").returncode == 0
    shown = json.loads(cli("kb", "profile").stdout)
    assert shown["user"] == "the user" and shown["stop_words"] == []
    mine = tmp_path / "profile.json"
    mine.write_text(json.dumps({"assistant": "You are a washing machine's help screen.", "user": "the owner",
                                "stop_words": ["Washer", "washer"]}))
    proc = cli("kb", "profile", "--set", str(mine))
    assert proc.returncode == 0 and json.loads(proc.stdout)["stop_words"] == ["washer"]
    mine.write_text(json.dumps({"user": " ", "colour": "red"}))
    proc = cli("kb", "profile", "--set", str(mine))
    assert proc.returncode == 1 and proc.stderr.startswith(f"error: {mine} is no answer profile: ")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert json.loads(cli("kb", "profile").stdout)["user"] == "the owner"  # unchanged
    assert json.loads(cli("kb", "profile", "--reset").stdout)["user"] == "the user"
