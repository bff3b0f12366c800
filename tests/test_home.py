"""One home for models, KB and weights: after a build into $HEXRAG_HOME every command finds them
from any directory, and the explicit variables still win.

The commands run as the `hexrag` entry point does (`python -m app.cli`), in a directory that holds
nothing of hexrag's, with the tiny random-weight models copied where `hexrag quickstart` builds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from build_scripts.build import build_llm
from models import home
from tests.api_server import Server

ROOT = Path(__file__).resolve().parents[1]
LOCATION_VARS = ("HEXRAG_HOME", "HEXRAG_KB", "HEXRAG_LLM", "HEXRAG_EMBEDDER", "HEXRAG_CACHE")
TINY_LLM = home.DEFAULT_LLMS[1]  # the name the tiny preset is built under


@pytest.fixture(scope="module")
def tiny_llm(tiny_sources, tmp_path_factory) -> Path:
    """The tiny llama with all of its 128 positions: a question and its passages fit."""
    out = tmp_path_factory.mktemp("home_llm") / "llama"
    build_llm(tiny_sources["llama"], out, context=128, prefill=(16,), progress=False)
    return out


@pytest.fixture()
def install(tiny_llm, tiny_builds):
    def copy(models: Path) -> None:
        """The tiny models where quickstart puts its builds (the default LLM and embedder names)."""
        shutil.copytree(tiny_llm, models / TINY_LLM)
        shutil.copytree(tiny_builds["bert"], models / home.DEFAULT_EMBEDDER)

    return copy


@pytest.fixture()
def env(monkeypatch, tmp_path):
    """This checkout importable from anywhere, and no location variable of the caller's."""
    for name in LOCATION_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("HEXRAG_HOME", str(tmp_path / "home"))
    return os.environ


@pytest.fixture()
def elsewhere(tmp_path) -> Path:
    path = tmp_path / "elsewhere"
    path.mkdir()
    return path


def hexrag(cwd: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, **extra_env})


def search_sources(cwd: Path, query: str, **extra_env: str) -> set[str]:
    proc = hexrag(cwd, "search", query, "--mode", "bm25", "--json", **extra_env)
    assert proc.returncode == 0, proc.stderr
    return {Path(hit["source"]).name for hit in json.loads(proc.stdout)}


def test_commands_find_the_home_from_any_directory(env, tmp_path, elsewhere, docs, install, tiny_llm, tiny_builds):
    homedir = tmp_path / "home"
    install(homedir / "models")

    proc = hexrag(elsewhere, "ingest", str(docs), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert (homedir / "kb" / "kb.sqlite").is_file()
    assert search_sources(elsewhere, "wallbox overnight") == {"manual.md"}
    proc = hexrag(elsewhere, "search", "wiper blades", "--mode", "dense", "--json", "--min-score", "none")
    assert proc.returncode == 0 and json.loads(proc.stdout), proc.stderr  # the home's embedder

    proc = hexrag(elsewhere, "ask", "How do I change the wiper blades?", "--json")
    assert proc.returncode == 0, proc.stderr
    grounding = json.loads(proc.stdout)["grounding"]
    # the home's KB was searched: its best passage holds every word of the question (an empty KB
    # gives no grounding at all)
    assert grounding is not None and grounding["confidence"]["coverage"] == 1.0, grounding

    srv = Server(None, None, None, tmp_path / "serve.log", command=[sys.executable, "-m", "app.cli", "serve"],
                 cwd=elsewhere, threads=1)
    try:
        health = srv.wait_ready()
        assert health["model"] == tiny_llm.name and health["embedder"] == tiny_builds["bert"].name
        assert health["knowledge"]["documents"] == 2
        r = httpx.post(srv.url + "/v1/knowledge/search", json={"query": "wallbox overnight", "mode": "bm25"},
                       timeout=60)
        assert r.status_code == 200 and {Path(h["source"]).name for h in r.json()["data"]} == {"manual.md"}, r.text
        # the score says what it is: BM25 in bm25 mode, the same number as its signal
        assert all(h["score_kind"] == "bm25" and h["score"] == h["scores"]["bm25"] > 0 for h in r.json()["data"])
    finally:
        srv.stop()
    assert list(elsewhere.iterdir()) == []  # nothing of hexrag's was written where the commands ran


def test_explicit_variables_win_over_the_home(env, tmp_path, elsewhere, docs, install):
    install(tmp_path / "home" / "models")
    other_kb = tmp_path / "other-kb"

    proc = hexrag(elsewhere, "ingest", str(docs / "manual.md"), "--quiet", HEXRAG_KB=str(other_kb))
    assert proc.returncode == 0, proc.stderr
    assert (other_kb / "kb.sqlite").is_file() and not (tmp_path / "home" / "kb").exists()
    assert search_sources(elsewhere, "wallbox overnight", HEXRAG_KB=str(other_kb)) == {"manual.md"}
    assert search_sources(elsewhere, "wallbox overnight") == set()  # the home's own KB is another one

    # an embedder named outright is used even though the home has one
    proc = hexrag(elsewhere, "search", "wallbox", "--mode", "dense", HEXRAG_KB=str(other_kb),
                  HEXRAG_EMBEDDER=str(tmp_path / "missing"))
    assert proc.returncode == 1 and f"no embedder at {tmp_path / 'missing'}" in proc.stderr
    # and so is an LLM
    proc = hexrag(elsewhere, "ask", "hi", "--no-rag", HEXRAG_LLM=str(tmp_path / "missing"))
    assert proc.returncode == 1 and f"{tmp_path / 'missing'} is not a hexrag model directory" in proc.stderr


def test_an_earlier_build_in_the_checkout_is_used_and_named_once(env, tmp_path, docs, install, tiny_builds):
    checkout = tmp_path / "checkout"
    install(checkout / "models")  # where versions before the home built them

    proc = hexrag(checkout, "ingest", str(docs), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("built by an earlier version") == 1
    assert f"mv {checkout / 'models' / home.DEFAULT_EMBEDDER} {tmp_path / 'home' / 'models'}/" in proc.stderr
    proc = hexrag(checkout, "ask", "How do I change the wiper blades?", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(f"using {checkout / 'models' / TINY_LLM},") == 1

    # a build in the home is preferred to it
    shutil.copytree(tiny_builds["bert"], tmp_path / "home" / "models" / home.DEFAULT_EMBEDDER)
    proc = hexrag(checkout, "search", "wallbox", "--mode", "dense", "--json", "--min-score", "none")
    assert proc.returncode == 0 and "earlier version" not in proc.stderr, proc.stderr


def test_locations_follow_the_home_and_the_explicit_variables(tmp_path):
    env = {"HEXRAG_HOME": str(tmp_path / "h")}
    assert (home.kb_dir(env), home.weights_dir(env)) == (tmp_path / "h/kb", tmp_path / "h/cache/weights")
    assert home.llm_dir(env) == tmp_path / "h/models" / home.DEFAULT_LLMS[0]  # what quickstart builds first
    assert home.earlier_weights_dir(env) is not None
    env |= {"HEXRAG_KB": str(tmp_path / "kb"), "HEXRAG_CACHE": str(tmp_path / "c"), "HEXRAG_LLM": "~/llm"}
    assert (home.kb_dir(env), home.weights_dir(env)) == (tmp_path / "kb", tmp_path / "c/weights")
    assert home.llm_dir(env) == Path("~/llm").expanduser() and home.earlier_weights_dir(env) is None
    # the 1.5B where it was built, else the tiny preset
    (tmp_path / "h/models" / home.DEFAULT_LLMS[1]).mkdir(parents=True)
    (tmp_path / "h/models" / home.DEFAULT_LLMS[1] / "manifest.json").write_text("{}")
    assert home.model_dir(*home.DEFAULT_LLMS, env=env) == tmp_path / "h/models" / home.DEFAULT_LLMS[1]


def test_quickstart_reuses_the_home_or_an_earlier_checkout_build(env, monkeypatch, tmp_path, tiny_builds):
    import app.quickstart as qs

    def no_build(*args, **kwargs):
        raise AssertionError("quickstart rebuilt a model it should have reused")

    monkeypatch.setattr(qs, "build_model", no_build)
    # the HTP flavour is the float build, which the tiny models are
    names = (f"{TINY_LLM}-float", home.DEFAULT_EMBEDDER)
    checkout = tmp_path / "checkout"
    for name, build in zip(names, (tiny_builds["llama"], tiny_builds["bert"])):
        shutil.copytree(build, checkout / "models" / name)
    monkeypatch.chdir(checkout)
    assert qs.ensure_default_models(None, "htp", TINY_LLM) == tuple(checkout / "models" / n for n in names)
    (tmp_path / "home" / "models").mkdir(parents=True)
    for name in names:
        shutil.move(checkout / "models" / name, tmp_path / "home" / "models" / name)
    assert qs.ensure_default_models(None, "htp", TINY_LLM) == tuple(tmp_path / "home" / "models" / n for n in names)


def test_quickstart_builds_the_multilingual_embedder_for_documents_in_chinese(tmp_path):
    from app.quickstart import choose_embedders

    english, chinese = tmp_path / "manual.md", tmp_path / "faq.md"
    english.write_text("# Charging\n\nPlug the cable in and charging starts by itself.\n", encoding="utf-8")
    chinese.write_text("# 充电\n\n插上充电枪后会自动开始充电。充满后充电口的灯变成绿色。\n", encoding="utf-8")
    assert choose_embedders([english])[:2] == ("all-minilm-l6-v2", None)
    # mostly Chinese: the multilingual one alone; some Chinese: it reads what MiniLM cannot
    assert choose_embedders([english, chinese])[:2] == ("multilingual-e5-small", None)
    assert "Chinese" in choose_embedders([chinese])[2]
    english.write_text("# Charging\n\n" + "Plug the cable in and charging starts by itself. " * 20, encoding="utf-8")
    assert choose_embedders([english, chinese])[:2] == ("all-minilm-l6-v2", "multilingual-e5-small")
