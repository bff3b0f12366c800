"""One benchmark run of one system, inside its own process: `python -m app.bench.runners SPEC_JSON`.

A process per run keeps each system's peak RSS its own (getrusage of this process only) and stops
one system's allocator or thread pool from warming up another. Every system gets the same work:
runtime.bench's real text, tokenized by the system's own tokenizer, repeated and cut to N tokens;
greedy; exactly `gen` new tokens (end of sequence ignored); one short warm-up generation first.

The last stdout line is the result as JSON: per prompt length TTFT, prefill and decode tok/s, a
hash of the prompt ids (so the table can say whether the systems saw identical ids), peak RSS.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from importlib import metadata

from runtime.bench import BENCH_TEXT, peak_rss_mb, repeat_to
from runtime.options import SPIN_US

# the warm-up prompt spans one full 128-token chunk and a remainder, so every graph or kernel
# the measured prompts use has run once before the clock starts
WARMUP_TOKENS, WARMUP_GEN = 129, 4


@dataclass
class RunSpec:
    system: str  # "hexrag" | "llama.cpp" | "genai"
    model: str  # hexrag model directory (hexrag) / GGUF file (llama.cpp) / GenAI folder (genai)
    lengths: list[int]
    gen: int
    threads: int
    backend: str = "cpu"  # hexrag only: "htp" measures the NPU (on a device; on x86 the simulator)
    spin_us: int = SPIN_US  # hexrag only: RuntimeOptions.spin_us


def warmup_length(spec: RunSpec) -> int:
    return min(WARMUP_TOKENS, max(spec.lengths))


def ids_hash(ids: list[int]) -> str:
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:12]


def _row(n: int, ids: list[int], start: float, first: float, end: float, generated: int) -> dict:
    """Times as runtime.llm reports them: TTFT = prompt until the first token, decode = the rest;
    prefill tok/s = prompt tokens / TTFT for every system (one definition, whatever each reports)."""
    ttft, decode = first - start, end - first
    return {"prompt": n, "ttft_ms": ttft * 1000, "prefill_tok_s": n / ttft if ttft > 0 else 0.0,
            "decode_tok_s": (generated - 1) / decode if decode > 0 else 0.0, "generated": generated,
            "ids": ids_hash(ids)}


def measure(spec: RunSpec, text_ids: list[int], generate) -> list[dict]:
    """A peer's rows: warm up, then every prompt length once; `generate(prompt, gen)` returns
    (start, first token, end) times."""
    generate(repeat_to(text_ids, warmup_length(spec)), WARMUP_GEN)
    rows = []
    for n in spec.lengths:
        prompt = repeat_to(text_ids, n)
        rows.append(_row(n, prompt, *generate(prompt, spec.gen), spec.gen))
    return rows


def _version(package: str) -> str:
    # not models.manifest.package_versions: its pydantic import would count in a peer's peak RSS
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


# ---- hexrag: runtime.bench's own loop ------------------------------------------------------------
def run_hexrag(spec: RunSpec) -> dict:
    from runtime.bench import prompt_of, run_lengths
    from runtime.llm import LLM
    from runtime.options import RuntimeOptions

    llm = LLM(spec.model, RuntimeOptions(backend=spec.backend, threads=spec.threads, spin_us=spec.spin_us))
    llm.stop_ids = set()  # exactly `gen` tokens
    llm.generate(prompt_of(llm, warmup_length(spec)), max_new_tokens=WARMUP_GEN).run()
    rows = run_lengths(llm, spec.lengths, spec.gen, runs=1)
    for r in rows:
        r["ids"] = ids_hash(prompt_of(llm, r["prompt"]))
        r["prefill_tok_s"] = r["prompt"] / (r["ttft_ms"] / 1000)
    return {"rows": rows, "version": _version("hexrag")}


# ---- llama.cpp through llama-cpp-python ----------------------------------------------------------
def run_llama_cpp(spec: RunSpec) -> dict:
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=spec.model, n_ctx=max(spec.lengths) + spec.gen + WARMUP_GEN, n_threads=spec.threads,
                n_threads_batch=spec.threads, n_batch=512, logits_all=False, verbose=False, seed=0)
    text_ids = llm.tokenize(BENCH_TEXT.encode(), add_bos=False, special=False)
    vocab = llm.n_vocab()

    def greedy() -> int:
        # the last position's logits straight from the context (with logits_all off, eval() keeps none)
        return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(vocab,))))

    def generate(prompt: list[int], gen: int) -> tuple[float, float, float]:
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        token = greedy()
        first = time.perf_counter()
        for _ in range(gen - 1):
            llm.eval([token])
            token = greedy()
        return start, first, time.perf_counter()

    return {"rows": measure(spec, text_ids, generate), "version": _version("llama_cpp_python")}


# ---- ONNX Runtime GenAI ------------------------------------------------------------------------------
def run_genai(spec: RunSpec) -> dict:
    import onnxruntime_genai as og

    config = og.Config(spec.model)
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": spec.threads, "inter_op_num_threads": 1}}}}))
    model = og.Model(config)
    text_ids = [int(t) for t in og.Tokenizer(model).encode(BENCH_TEXT)]

    def generate(prompt: list[int], gen: int) -> tuple[float, float, float]:
        params = og.GeneratorParams(model)
        # min_length = max_length: the end-of-sequence token cannot stop the run early
        total = len(prompt) + gen
        params.set_search_options(do_sample=False, max_length=total, min_length=total)
        generator = og.Generator(model, params)
        start = time.perf_counter()
        generator.append_tokens(prompt)  # the prefill
        generator.generate_next_token()
        first = time.perf_counter()
        for _ in range(gen - 1):
            generator.generate_next_token()
        return start, first, time.perf_counter()

    return {"rows": measure(spec, text_ids, generate), "version": _version("onnxruntime-genai")}


RUNNERS = {"hexrag": run_hexrag, "llama.cpp": run_llama_cpp, "genai": run_genai}


def main(argv: list[str]) -> int:
    spec = RunSpec(**json.loads(argv[0]))
    result = RUNNERS[spec.system](spec)
    result["peak_rss_mb"] = peak_rss_mb()
    sys.stdout.flush()
    print("\n" + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

