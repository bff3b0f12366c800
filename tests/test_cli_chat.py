"""`hexrag ask` and `hexrag chat` use the same RAG pipeline as the server."""

from __future__ import annotations

import json
import subprocess
import sys


def hexrag(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=300,
                          input=stdin)


def test_ask_json_cites_the_right_entry(smollm_build, minilm_build, sample_kb):
    proc = hexrag("ask", "the little tyre symbol is orange, what now?", "--json", "--llm", str(smollm_build),
                  "--embedder", str(minilm_build), "--kb", str(sample_kb))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["answer"].strip() and out["completion_tokens"] > 0
    assert "tpms-warning" in [c["entry_id"] for c in out["citations"]]


def test_ask_unanswerable_and_chat_session(smollm_build, minilm_build, sample_kb):
    common = ["--llm", str(smollm_build), "--embedder", str(minilm_build), "--kb", str(sample_kb)]
    proc = hexrag("ask", "Who won the football world cup in 2010?", "--json", *common)
    assert proc.returncode == 0 and "don't know" in json.loads(proc.stdout)["answer"]
    proc = hexrag("chat", *common, stdin="How do I pair my phone?\n\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("> ") and "aurora_faq.jsonl › How do I pair my phone with Bluetooth?" in proc.stderr
