"""`hexrag serve` as a service manager sees it: a server whose model fails its check exits non-zero
instead of answering 503 forever, and SIGTERM during a long upload ingest ends the process within
seconds with the knowledge base whole (what was committed stays, the stopped document is not half in)."""

from __future__ import annotations

import shutil
import signal
import time

import httpx

from knowledge import KnowledgeBase
from runtime.embedder import Embedder
from tests.api_server import Server



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


def _big_markdown(sections: int) -> bytes:
    """A long manual: numbered sections of a few paragraphs each (~1 KB a section)."""
    para = ("Part {i} of a long manual: the {i}th procedure, step by step, with its checks and its warnings, "
            "written out in full for the reader who follows it. ")
    return "".join(f"# Section {i}\n\n" + "\n\n".join(para.format(i=i) * 2 for _ in range(3)) + "\n\n"
                   for i in range(sections)).encode()


def test_sigterm_mid_ingest_exits_within_seconds_and_leaves_the_kb_whole(tiny_builds, tmp_path):
    kb_dir = tmp_path / "kb"
    srv = Server(tiny_builds["llama"], tiny_builds["bert"], kb_dir, tmp_path / "log.txt")
    try:
        srv.wait_ready()
        url = srv.url + "/v1/knowledge/documents"
        small = httpx.post(url, files={"files": ("small.md", b"# Kept\n\nThis note is ingested first.\n")}).json()
        assert srv.wait_job(small)["status"] == "succeeded"
        big = _big_markdown(5_000)  # ~5 MB: tens of seconds of chunking and embedding
        assert len(big) > 4_000_000
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
