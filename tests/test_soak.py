"""The soak entry, short: a real server under streaming clients and an upload, then SIGKILL trials of
`hexrag ingest` and of the server, on the tiny models. Every stream must be well-formed, every
429/503 must say when to retry, and every kill must leave a KB that the next process opens, that is
consistent, and that answers the query set like an uninterrupted ingest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.bench.soak import SoakOptions, format_report, run_soak
from knowledge import KnowledgeBase
from knowledge.disk import read_disk_state
from runtime.embedder import Embedder
from tests.conftest import SAMPLES


@pytest.fixture(scope="module")
def soak_kb(tiny_builds, tmp_path_factory):
    kb_dir = tmp_path_factory.mktemp("soak_kb")
    with KnowledgeBase.open(kb_dir, Embedder(tiny_builds["bert"])) as kb:
        kb.ingest([SAMPLES / "aurora_faq.jsonl"], progress=False)
    return kb_dir


@pytest.mark.skipif(sys.platform != "linux", reason="SIGKILL, /proc and inotify")
def test_soak_short_run(tiny_builds, soak_kb, tmp_path):
    before = read_disk_state(soak_kb, load_index=False)
    questions = tmp_path / "questions.txt"  # short: the tiny model's context is 64 tokens
    questions.write_text("tyres?\nwipers\ncharging?\nhi\n")
    # six clients whose first requests arrive together at a queue of one, every answer from the model
    # (random tiny-model retrieval would refuse without it): some must be turned away with a 429
    options = SoakOptions(llm=tiny_builds["llama"], embedder=tiny_builds["bert"], kb=soak_kb, clients=6, minutes=0.05,
                          max_tokens=12, rag=False, questions=questions, max_queue=1, upload_files=8, idle_s=0.5,
                          kill_trials=2, kill_files=4, nice=0, threads=1, work_dir=tmp_path / "work")
    report = run_soak(options)

    s = report.streams.streams
    assert s.succeeded > 0 and s.broken == 0, s
    assert s.rejected_429 > 0 and s.rejections_without_retry_after == 0, s
    assert s.other_status == {}, s
    assert report.streams.rss is not None and report.streams.rss.baseline_mb > 10

    u = report.upload
    assert u.job_status == "succeeded" and u.added == 8 and u.health_failures == 0, u
    assert u.health_ms.samples > 0 and u.stream_broken == 0

    for kills in (report.ingest_kills, report.server_kills):
        assert len(kills.trials) == 2 and kills.consistent == 2, [t.problems for t in kills.trials]
        assert kills.trials[1].aimed_at == "index-write" and kills.trials[1].landed == "index-write"
        for t in kills.trials:
            assert t.restart_ok and t.counts_agree and t.check_ok and t.same_hits
    final = read_disk_state(tmp_path / "work" / "kb")
    assert final.agree and not final.temp_files  # the next write removed what the killed writes left
    assert final.documents == before.documents + 8 + 4 + 4  # the sample, the upload, two folders
    assert read_disk_state(soak_kb, load_index=False) == before  # the given KB was only copied

    text = format_report(report)
    assert "2/2 consistent" in text and "broken streams 0" in text
    assert json.loads(report.model_dump_json())["targets"]


def test_soak_cli_refuses_a_folder_without_a_kb(tiny_builds, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "app.bench.soak", "--llm", str(tiny_builds["llama"]), "--embedder",
                           str(tiny_builds["bert"]), "--kb", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.strip().startswith("error:") and "kb.sqlite" in proc.stderr
