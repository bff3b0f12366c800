"""`hexrag serve` as a service manager and its users see it: a server whose model fails its check exits
non-zero instead of answering 503 forever; searches and a streaming chat answer while a large upload
is ingested, without waiting for it; SIGTERM during that ingest ends the process within seconds with
the knowledge base whole (what was committed stays, the stopped document is not half in)."""

from __future__ import annotations

import shutil
import signal
import time

import httpx

from app.bench.ingest_load import long_markdown
from knowledge import KnowledgeBase
from runtime.embedder import Embedder
from tests.api_server import Server
from tests.conftest import SAMPLES


def test_a_model_that_fails_its_check_ends_the_server(tiny_builds, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_builds["llama"], model)
    with open(model / "decode.onnx", "ab") as f:
        f.write(b"\0")
    srv = Server(model, tiny_builds["bert"], tmp_path / "kb", tmp_path / "log.txt")
    try:
        rc = srv.proc.wait(120)
    finally:
        srv.stop()
    log = (tmp_path / "log.txt").read_text(errors="replace")
    assert rc == 1, log[-2000:]
    assert "start-up failed" in log and "decode.onnx was altered" in log
    assert "Traceback" not in log


def _job_status(srv: Server, job: dict) -> str:
    return httpx.get(f"{srv.url}/v1/knowledge/jobs/{job['id']}").json()["status"]


def test_searches_and_a_rag_chat_answer_during_a_large_ingest(smollm_build, minilm_build, tmp_path):
    """SmolLM2 and MiniLM (a retrieval-augmented prompt needs a real context) over the sample FAQ."""
    kb_dir = tmp_path / "kb"
    with KnowledgeBase.open(kb_dir, Embedder(minilm_build)) as kb:
        kb.ingest([SAMPLES / "aurora_faq.jsonl"], progress=False)
    srv = Server(smollm_build, minilm_build, kb_dir, tmp_path / "log.txt")
    try:
        srv.wait_ready()
        search = {"query": "How do I charge the car at home?", "k": 4}
        idle = [httpx.post(srv.url + "/v1/knowledge/search", json=search).elapsed.total_seconds() for _ in range(5)]
        job = httpx.post(srv.url + "/v1/knowledge/documents", files={"files": ("manual.md", long_markdown(0.5))},
                         timeout=60).json()
        while _job_status(srv, job) == "queued":
            time.sleep(0.05)
        during = []
        for _ in range(20):
            r = httpx.post(srv.url + "/v1/knowledge/search", json=search, timeout=30)
            assert r.status_code == 200 and r.json()["data"], r.text
            during.append(r.elapsed.total_seconds())
        chat = {"messages": [{"role": "user", "content": "How do I charge at home?"}], "stream": True,
                "max_tokens": 8}
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=chat, timeout=60) as r:
            events = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert r.status_code == 200 and events[-1] == "data: [DONE]"
        assert _job_status(srv, job) == "running"  # none of them waited for the ingest to end
        assert max(during) < max(idle) + 1.0, (idle, during)
        assert srv.wait_job(job)["status"] == "succeeded"
    finally:
        srv.stop()


def test_sigterm_mid_ingest_exits_within_seconds_and_leaves_the_kb_whole(tiny_builds, tmp_path):
    kb_dir = tmp_path / "kb"
    srv = Server(tiny_builds["llama"], tiny_builds["bert"], kb_dir, tmp_path / "log.txt")
    try:
        srv.wait_ready()
        url = srv.url + "/v1/knowledge/documents"
        small = httpx.post(url, files={"files": ("small.md", b"# Kept\n\nThis note is ingested first.\n")}).json()
        assert srv.wait_job(small)["status"] == "succeeded"
        big = long_markdown(4.6)  # tens of seconds of chunking and embedding
        job = httpx.post(url, files={"files": ("big.md", big)}, timeout=60).json()
        deadline = time.monotonic() + 60
        while httpx.get(f"{srv.url}/v1/knowledge/jobs/{job['id']}").json()["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)  # well inside its embedding
        started = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.proc.wait(30)
        took = time.monotonic() - started
    finally:
        srv.stop()
    log = (tmp_path / "log.txt").read_text(errors="replace")
    assert took < 5, f"{took:.1f} s after SIGTERM\n{log[-2000:]}"
    assert rc in (0, -signal.SIGTERM), log[-2000:]  # uvicorn ends by re-raising the signal it handled
    assert "Application shutdown complete" in log and "Traceback" not in log
    with KnowledgeBase.open(kb_dir, Embedder(tiny_builds["bert"])) as kb:
        report = kb.check()
        names = [d.name for d in kb.list_documents()]
    assert report.ok, str(report)
    assert names == ["small.md"]  # the stopped document is not half in
    assert not (kb_dir / "uploads" / "big.md").exists()
