"""`hexrag export bundle` and `hexrag serve --bundle`: tiny random-weight models compiled for
sm8650 (shared weights: a device build) and sm8750, a tiny KB, the files the bundle holds and
their sha256, a real server started by the bundle's own start script, and the refusals."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import onnxruntime as ort
import pytest

pytest.importorskip("onnxruntime_qnn")

from app.bundle import BundleError, bundle_settings, export_bundle  # noqa: E402
from app.device import HtpStatus  # noqa: E402
from app.settings import Settings  # noqa: E402
from build_scripts.compile import compile_model_dir, record_target  # noqa: E402
from models.manifest import load_manifest  # noqa: E402
from tests.api_server import Server  # noqa: E402
from tests.conftest import SAMPLES  # noqa: E402


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "app.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, **kw)


@pytest.fixture(scope="module")
def device_models(tiny_builds, tmp_path_factory):
    """Tiny llama compiled shared for sm8650 and sm8750, tiny BERT shared for sm8650, a KB embedded with it."""
    from knowledge import KnowledgeBase
    from runtime.embedder import Embedder

    root = tmp_path_factory.mktemp("device_models")
    out = {}
    for key, targets in (("llama", ["sm8650", "sm8750"]), ("bert", ["sm8650"])):
        out[key] = root / key
        shutil.copytree(tiny_builds[key], out[key])
        record_target(out[key], compile_model_dir(out[key], targets, shared=True))
    kb = KnowledgeBase.open(root / "kb", Embedder(out["bert"]))
    kb.ingest([SAMPLES / "aurora_faq.jsonl"], progress=False)
    kb.close()
    out["kb"] = root / "kb"
    return out


@pytest.fixture(scope="module")
def bundle(device_models, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundles") / "sm8650"
    proc = _cli("export", "bundle", "--llm", device_models["llama"], "--embedder", device_models["bert"],
                "--kb", device_models["kb"], "--target", "8gen3", "--out", out, "--cpu-fallback")
    assert proc.returncode == 0, proc.stderr
    assert "Snapdragon 8 Gen 3 (sm8650, shared HTP build, CPU fallback)" in proc.stdout
    return out


def test_bundle_holds_the_targets_build_and_a_sha256_of_every_file(bundle, device_models, tmp_path):
    src = device_models["llama"]
    llm = load_manifest(bundle / "models/llm")  # verifies the copy's files against its manifest
    assert [(b.target, b.variant) for b in llm.target.builds] == [("sm8650", "shared")]
    shared = sorted(p.relative_to(src).as_posix() for p in (src / "htp/sm8650/shared").iterdir())
    copied = sorted(p.relative_to(bundle / "models/llm").as_posix() for p in (bundle / "models/llm/htp").rglob("*")
                    if p.is_file())
    assert copied == shared and len([p for p in shared if p.endswith(".bin")]) == 1  # one shared binary
    for rel in shared:
        assert _sha(bundle / "models/llm" / rel) == _sha(src / rel)
    assert not (bundle / "models/llm/htp/sm8750").exists()
    # the CPU fallback: graphs and weights; the model's files are exactly what its manifest lists
    assert {"decode.onnx", "weights.data", "tokenizer.json"} <= {p.name for p in (bundle / "models/llm").iterdir()}
    assert set(llm.files) == {p.relative_to(bundle / "models/llm").as_posix()
                              for p in (bundle / "models/llm").rglob("*") if p.is_file() and p.name != "manifest.json"}
    # SHA256SUMS: every file but itself, each hash right
    listed = dict(reversed(line.split("  ", 1)) for line in (bundle / "SHA256SUMS").read_text().splitlines())
    on_disk = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()} - {"SHA256SUMS"}
    assert set(listed) == on_disk
    assert all(_sha(bundle / rel) == digest for rel, digest in listed.items())
    assert {"src/app/cli.py", "src/runtime/qnn.py", "src/app/static/index.html", "kb/kb.sqlite"} <= on_disk
    assert not any("/htp/" in rel for rel in on_disk if rel.startswith("src/"))  # no built model from the source tree
    requirements = (bundle / "requirements.txt").read_text()
    assert f"onnxruntime=={ort.__version__}\n" in requirements and "onnxruntime-qnn==" in requirements
    assert os.access(bundle / "start.sh", os.X_OK) and "Termux" in (bundle / "README.md").read_text()
    # without the fallback: only the HTP build (plus tokenizer and template)
    lean = export_bundle(device_models["llama"], device_models["bert"], device_models["kb"], "sm8650", tmp_path / "lean")
    assert not lean.cpu_fallback and not (tmp_path / "lean/models/llm/weights.data").exists()
    assert not (tmp_path / "lean/models/llm/decode.onnx").exists()


def test_export_refusals(device_models, tmp_path):
    proc = _cli("export", "bundle", "--llm", device_models["llama"], "--embedder", device_models["bert"],
                "--kb", device_models["kb"], "--target", "sm8750", "--out", tmp_path / "b")
    assert proc.returncode == 1 and "has no sm8750 HTP build" in proc.stderr and str(device_models["bert"]) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "b").exists()
    proc = _cli("export", "bundle", "--llm", device_models["llama"], "--embedder", device_models["bert"],
                "--kb", device_models["llama"], "--target", "sm8650", "--out", tmp_path / "b")
    assert proc.returncode == 1 and "not a knowledge-base directory" in proc.stderr


def test_serve_from_the_bundle_with_its_start_script(bundle, tmp_path, monkeypatch):
    work = tmp_path / "device"
    shutil.copytree(bundle, work)  # the bundle as copied onto a device
    monkeypatch.setenv("PYTHON", sys.executable)  # the start script puts the bundle's own src/ first on the path
    srv = Server(None, None, None, tmp_path / "server.log", command=["sh", str(work / "start.sh")])
    try:
        health = srv.wait_ready()
        assert health["backend"] == "cpu"  # x86: no NPU, so the bundle's CPU fallback
        hits = httpx.post(srv.url + "/v1/knowledge/search", json={"query": "tyre pressure", "k": 3}, timeout=60).json()
        assert hits["data"] and all(h["source"].endswith("aurora_faq.jsonl") for h in hits["data"])
        r = httpx.post(srv.url + "/v1/chat/completions", timeout=120,
                       json={"model": "hexrag", "messages": [{"role": "user", "content": "tyre pressure?"}],
                             "max_tokens": 8})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    finally:
        srv.stop()
    log = (tmp_path / "server.log").read_text()
    assert "hexrag: backend cpu: x86_64 host" in log
    assert (work / "data/kb/kb.sqlite").is_file()
    # the working KB in data/ is no tampering; --backend htp on this host is refused in one line
    proc = _cli("serve", "--bundle", work, "--backend", "htp")
    assert proc.returncode == 1 and "Snapdragon 8 Gen 3 NPU; this x86_64 machine has none" in proc.stderr


def test_altered_or_foreign_files_are_refused(bundle, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(bundle, bad)
    binary = next((bad / "models/llm/htp/sm8650/shared").glob("*.bin"))
    data = bytearray(binary.read_bytes())
    data[len(data) // 2] ^= 1
    binary.write_bytes(bytes(data))
    proc = _cli("serve", "--bundle", bad)
    assert proc.returncode == 1 and proc.stderr.strip().startswith("error:")
    assert "was altered" in proc.stderr and binary.name in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    extra = tmp_path / "extra"
    shutil.copytree(bundle, extra)
    (extra / "src/app/sitecustomize.py").write_text("print('hello')\n")
    proc = _cli("serve", "--bundle", extra)
    assert proc.returncode == 1 and "src/app/sitecustomize.py is not part of the bundle" in proc.stderr


def test_bundle_for_another_soc_is_refused(bundle, device_models, tmp_path):
    def soc0(machine, soc_id):
        d = tmp_path / machine / "soc0"
        d.mkdir(parents=True)
        for k, v in {"vendor": "Qualcomm", "family": "Snapdragon", "machine": machine, "soc_id": soc_id}.items():
            (d / k).write_text(f"{v}\n")
        return d

    loads = HtpStatus(installed=True, loads=True, simulator=False, device_type="NPU")
    with pytest.raises(BundleError, match=r"bundle is for sm8650 \(Snapdragon 8 Gen 3\); this device is sm8750") as e:
        bundle_settings(bundle, Settings(), machine="aarch64", sysfs=soc0("SM8750", 618), probe=lambda: loads)
    assert "--target sm8750" in str(e.value)
    settings, choice = bundle_settings(bundle, Settings(), machine="aarch64", sysfs=soc0("SM8650", 557),
                                       probe=lambda: loads)
    assert (choice.backend, choice.target, settings.backend, settings.qnn_target) == ("htp", "sm8650", "htp", "sm8650")
    assert settings.llm == bundle.resolve() / "models/llm" and settings.kb == bundle.resolve() / "data/kb"
    # no NPU here and no CPU fallback in the bundle: refused, saying how to make one that runs
    lean = tmp_path / "lean"
    export_bundle(device_models["llama"], device_models["bert"], device_models["kb"], "sm8650", lean)
    proc = _cli("serve", "--bundle", lean)
    assert proc.returncode == 1 and "--cpu-fallback" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_kb_with_a_second_embedder_takes_it_along(device_models, tmp_path):
    """A KB holding a second embedder's vectors is exported only with that model (here the compiled tiny
    BERT again: any embedder may be the second), and a server from the bundle searches with it."""
    from app.engine import Engine
    from knowledge import KnowledgeBase
    from runtime.embedder import Embedder

    llm, bert = device_models["llama"], device_models["bert"]
    with pytest.raises(BundleError, match="holds no second embedder vectors"):
        export_bundle(llm, bert, device_models["kb"], "sm8650", tmp_path / "none", second_embedder=bert)
    kb2 = tmp_path / "kb2"
    shutil.copytree(device_models["kb"], kb2)
    with KnowledgeBase.open(kb2, Embedder(bert), second_embedder=Embedder(bert)) as kb:
        assert kb.embed_second() == kb.stats()["chunks"]
    with pytest.raises(BundleError, match="pass that embedder's build with --second-embedder"):
        export_bundle(llm, bert, kb2, "sm8650", tmp_path / "without")
    assert not (tmp_path / "without").exists()
    spec = export_bundle(llm, bert, kb2, "sm8650", tmp_path / "b", cpu_fallback=True, second_embedder=bert)
    assert spec.second_embedder == "models/second-embedder"
    load_manifest(tmp_path / "b/models/second-embedder")  # a verified model directory
    settings, _ = bundle_settings(tmp_path / "b", Settings(backend="cpu"))
    assert settings.second_embedder == (tmp_path / "b").resolve() / "models/second-embedder"
    engine = Engine.load(settings)
    assert engine.kb.second_embedder is not None and engine.kb.second_model_id == Embedder(bert).model_id
    engine.kb.close()


def test_a_newer_bundle_copied_over_an_older_one_does_not_serve_the_old_kb(bundle, device_models, tmp_path):
    from knowledge import KnowledgeBase
    from runtime.embedder import Embedder

    work = tmp_path / "device"
    shutil.copytree(bundle, work)
    settings, _ = bundle_settings(work, Settings(backend="cpu"))  # first start: data/kb copied from kb/
    assert settings.kb == work.resolve() / "data/kb" and (work / "data/kb/kb.sqlite").is_file()
    # the next export has one more document; copied over the old folder the way rsync or adb push does
    kb2 = tmp_path / "kb2"
    shutil.copytree(device_models["kb"], kb2)
    (tmp_path / "wipers.md").write_text("# Wipers\n\nThe wipers park when the car is switched off.\n")
    kb = KnowledgeBase.open(kb2, Embedder(device_models["bert"]))
    kb.ingest([tmp_path / "wipers.md"], progress=False)
    kb.close()
    newer = tmp_path / "newer"
    export_bundle(device_models["llama"], device_models["bert"], kb2, "sm8650", newer, cpu_fallback=True)
    shutil.copytree(newer, work, dirs_exist_ok=True)
    with pytest.raises(BundleError, match="copied from another knowledge base"):
        bundle_settings(work, Settings(backend="cpu"))
    proc = _cli("serve", "--bundle", work, "--backend", "cpu")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert "copied from another knowledge base than this bundle's kb/" in proc.stderr and "move" in proc.stderr
    # moved aside: the next start copies the newer KB
    (work / "data").rename(tmp_path / "old-data")
    settings, _ = bundle_settings(work, Settings(backend="cpu"))
    kb = KnowledgeBase.open(settings.kb, Embedder(device_models["bert"]))
    assert any(d.source.endswith("wipers.md") for d in kb.list_documents())
    kb.close()
