"""A process killed with SIGKILL in the middle of ingesting a large folder leaves a KB that opens,
passes check() (after catching its vector index up with SQLite) and can resume to completion."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from knowledge import KnowledgeBase
from knowledge.disk import read_disk_state
from runtime.embedder import Embedder

ROOT = Path(__file__).resolve().parents[1]
N_FILES = 300
INGEST = "import sys; from knowledge import KnowledgeBase; from runtime.embedder import Embedder; " \
         "KnowledgeBase.open(sys.argv[1], Embedder(sys.argv[2])).ingest([sys.argv[3]], progress=False)"


def write_folder(root: Path) -> None:
    root.mkdir()
    for i in range(N_FILES):
        paragraphs = [f"Section {i} paragraph {p}: the car checks tyre {p} and battery {i} "
                      f"before charging, then the wipers clean the screen." for p in range(6)]
        (root / f"doc{i:03d}.md").write_text(f"# Document {i}\n\n## Part\n\n" + "\n\n".join(paragraphs) + "\n")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_sigkill_during_ingest_then_resume(tmp_path, tiny_builds):
    folder, kb_dir = tmp_path / "docs", tmp_path / "kb"
    write_folder(folder)
    proc = subprocess.Popen([sys.executable, "-c", INGEST, str(kb_dir), str(tiny_builds["bert"]), str(folder)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while read_disk_state(kb_dir, load_index=False).documents < 20:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "ingest made no progress"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    embedder = Embedder(tiny_builds["bert"])
    saved = json.loads((kb_dir / "index.json").read_text())["count"]  # the index saved before the first commit
    kb = KnowledgeBase.open(kb_dir, embedder)
    done = len(kb.list_documents())
    assert 20 <= done < N_FILES, "the kill must land mid-ingest"
    # the index on disk lagged SQLite: caught up from it (rows past its high-water mark), not rebuilt
    assert saved == 0 and kb.last_rebuild_reason is None
    assert json.loads((kb_dir / "index.json").read_text())["count"] == kb.stats()["embeddings"]
    assert kb.check().ok, kb.check()
    assert kb.search("battery 7", k=1, mode="bm25")  # usable right away
    report = kb.ingest(folder, progress=False)
    assert len(report.unchanged) == done and len(report.added) == N_FILES - done and report.ok
    assert len(kb.list_documents()) == N_FILES and kb.check().ok
    kb.close()
    assert KnowledgeBase.open(kb_dir, embedder).last_rebuild_reason is None
