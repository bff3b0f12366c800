"""`hexrag` command line: a thin twin of the library.

Each command calls one library function; typed errors become a one-line message and exit 1.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import get_args

import click

from app.cli_bench import BENCH_COMMANDS
from app.cli_build import BUILD_COMMANDS
from app.cli_chat import CHAT_COMMANDS, stream_answer
from app.cli_common import dir_options, friendly as _friendly, given_settings, invalid
from app.cli_device import DEVICE_COMMANDS
from app.cli_knowledge import KNOWLEDGE_COMMANDS
from app.settings import PassageKVPrecision

@contextlib.contextmanager
def _native_stdout_to_stderr():
    """QNN's native libraries print banners to fd 1; keep stdout clean for --json consumers."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """hexrag: on-device retrieval-augmented chat for Snapdragon NPUs.

    A setting read from the environment has one name, shown as [env ...] in the --help of the
    commands that use it (HEXRAG_LLM, HEXRAG_KB, HEXRAG_BACKEND, HEXRAG_HOST, ...).

    \b
    Files live in one home, $HEXRAG_HOME (default: the per-user data directory,
    e.g. ~/.local/share/hexrag on Linux):
      models/<name>/   the models `hexrag quickstart` builds, used by serve, ask, chat,
                       search, ingest and eval unless --llm/--embedder say otherwise
      kb/              the default knowledge base
      cache/weights/   downloaded weight packages
    HEXRAG_LLM, HEXRAG_EMBEDDER, HEXRAG_SECOND_EMBEDDER, HEXRAG_KB (directories) and
    HEXRAG_CACHE (the cache, weights under it) override one place each.
    """
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s", stream=sys.stderr)


# ---- models -----------------------------------------------------------------------------
@main.group()
def models() -> None:
    """Packaged default weights."""


@models.command("fetch")
@click.argument("keys", nargs=-1)
@_friendly
def models_fetch(keys: tuple[str, ...]) -> None:
    """Download packaged weights (default: the embedded LLM and embedder) into the cache."""
    from build_scripts.fetch import fetch

    for key in keys or ("qwen2.5-coder-1.5b-instruct", "all-minilm-l6-v2"):
        click.echo(f"{key}\t{fetch(key)}")


@models.command("list")
def models_list() -> None:
    """Packaged models that `fetch` and `build --weights KEY` know."""
    from build_scripts.fetch import PACKAGED

    for m in PACKAGED.values():
        click.echo(f"{m.key}\t{m.description}")


# ---- build ------------------------------------------------------------------------------
# ---- runtime ----------------------------------------------------------------------------
_backend = click.option("--backend", type=click.Choice(["cpu", "htp"]), default="cpu", show_default=True,
                        help="cpu: ONNX Runtime CPU EP (baseline); htp: Hexagon NPU through QNN.")
_threads = click.option("--threads", type=int, default=None, help="CPU threads (default: all cores).  [env HEXRAG_THREADS]")


def _runtime(backend: str, threads: int | None):
    """The flags over the settings (HEXRAG_THREADS, HEXRAG_QNN_*). For --backend htp: refuse a
    machine with neither NPU nor simulator (one line), else load the build its SoC takes (on the
    simulator: HEXRAG_QNN_TARGET, or the model's only build)."""
    from app.device import resolve_backend
    from app.settings import RuntimeSettings

    options = RuntimeSettings(**({"threads": threads} if threads else {})).runtime(backend)
    target = resolve_backend(backend, []).target if backend == "htp" else None
    return options.model_copy(update={"target": target}) if target else options


@main.command()
@click.option("--model", "model_dir", required=True, type=click.Path(path_type=Path), help="LLM model directory.")
@click.option("--prompt", required=True, help="Prompt text (with --chat: the user message).")
@click.option("--chat", is_flag=True, help="Render the prompt with the model's chat template.")
@click.option("--system", help="System message for --chat (default: the template's own).")
@click.option("--max-tokens", default=256, show_default=True)
@click.option("--temperature", default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-p", default=1.0, show_default=True)
@click.option("--top-k", default=0, show_default=True)
@click.option("--repetition-penalty", default=1.0, show_default=True)
@click.option("--seed", type=int, default=None)
@click.option("--stop", multiple=True, help="Stop string (repeatable); never part of the output.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming text.")
@_backend
@_threads
@_friendly
def generate(model_dir, prompt, chat, system, max_tokens, temperature, top_p, top_k, repetition_penalty, seed,
             stop, as_json, backend, threads) -> None:
    """Generate text from a prompt (streams to stdout)."""
    from runtime.llm import LLM
    from runtime.sampling import SamplingParams

    try:
        sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p,
                                  repetition_penalty=repetition_penalty, seed=seed)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    with _native_stdout_to_stderr() if as_json else contextlib.nullcontext():
        llm = LLM(model_dir, _runtime(backend, threads))
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        ids = llm.encode_chat(messages) if chat else llm.encode(prompt)
        gen = llm.generate(ids, max_new_tokens=max_tokens, sampling=sampling, stop=list(stop))
        for delta in gen:
            if not as_json:
                click.echo(delta.text, nl=False)
    r = gen.result
    if as_json:
        click.echo(json.dumps({
            "token_ids": r.token_ids, "text": r.text, "finish_reason": r.finish_reason,
            "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
            "cached_tokens": r.cached_tokens,
            "timings": {"ttft_s": round(r.ttft_s, 4), "prefill_tok_s": round(r.prefill_tok_s, 1),
                        "decode_tok_s": round(r.decode_tok_s, 1)},
        }, ensure_ascii=False))
    else:
        click.echo()
        logging.getLogger(__name__).info(
            "[%s, %d prompt + %d tokens, TTFT %.0f ms, decode %.1f tok/s]", r.finish_reason, r.prompt_tokens,
            r.completion_tokens, r.ttft_s * 1000, r.decode_tok_s)


@main.command()
@click.option("--model", "model_dir", required=True, type=click.Path(path_type=Path), help="Embedder model directory.")
@click.argument("texts", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (vectors, dimension, truncation flags).")
@_backend
@_threads
@_friendly
def embed(model_dir, texts, as_json, backend, threads) -> None:
    """Embed texts into L2-normalised vectors."""
    from runtime.embedder import Embedder

    with _native_stdout_to_stderr() if as_json else contextlib.nullcontext():
        out = Embedder(model_dir, _runtime(backend, threads)).embed(list(texts))
    if as_json:
        click.echo(json.dumps({"dim": out.vectors.shape[1], "truncated": out.truncated,
                               "embeddings": [[round(float(x), 6) for x in v] for v in out.vectors]}))
    else:
        for text, v, cut in zip(texts, out.vectors, out.truncated):
            click.echo(f"{text[:40]!r}{' (truncated)' if cut else ''}: [{', '.join(f'{x:.4f}' for x in v[:6])}, ...]")


# ---- server -----------------------------------------------------------------------------
@main.command()
@click.option("--host", help="Address to bind (default 127.0.0.1; others need --api-key).  [env HEXRAG_HOST]")
@click.option("--port", type=int, help="Port (default 8000).  [env HEXRAG_PORT]")
@dir_options("llm", "embedder", "kb")
@click.option("--backend", type=click.Choice(["cpu", "htp", "auto"]),
              help="cpu | htp | auto (the NPU on a Snapdragon device with matching builds).  [env HEXRAG_BACKEND]")
@click.option("--bundle", type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="Serve from a device bundle (hexrag export bundle); backend auto by default.  [env HEXRAG_BUNDLE]")
@click.option("--api-key", help="Require this bearer key on /v1.  [env HEXRAG_API_KEY]")
@click.option("--threads", type=int, help="CPU threads.  [env HEXRAG_THREADS]")
@click.option("--max-queue", type=int, help="Requests allowed to wait for the accelerator.  [env HEXRAG_MAX_QUEUE]")
@click.option("--passage-kv/--no-passage-kv", default=None,
              help="Keep each passage's KV rows (in the KB directory, per LLM build, the least recently used "
                   "going beyond the budget) and place them into later prompts instead of prefilling the passage "
                   "again: a shorter wait for the first words, the same answers (docs/benchmarks.md). Default: on "
                   "wherever the LLM's cache takes them.  [env HEXRAG_PASSAGE_KV]")
@click.option("--passage-kv-max-mb", type=click.IntRange(min=1),
              help="Disk budget of the kept rows (default 2048).  [env HEXRAG_PASSAGE_KV_MAX_MB]")
@click.option("--passage-kv-precision", type=click.Choice(get_args(PassageKVPrecision)),
              help="How kept passage rows are stored: k6v8 (default: keys at 6 bits, values at 8, ~1.35 MB a "
                   "passage of the 1.5B), int8, float16 or float32 (exact; ~6 MB).  [env HEXRAG_PASSAGE_KV_PRECISION]")
@_friendly
def serve(**options) -> None:
    """Start the OpenAI-compatible chat server (models load in the background; /health says when ready)."""
    from pydantic import ValidationError

    from app.bundle import bundle_settings
    from app.device import settle

    try:
        settings = given_settings(**options)
        settings.check()
    except ValidationError as e:
        raise click.UsageError(invalid(e)) from None
    except ValueError as e:
        raise click.UsageError(str(e).splitlines()[0]) from None
    if settings.bundle and {"llm", "embedder", "kb"} & settings.model_fields_set:
        raise click.UsageError("--bundle brings its own models and knowledge base: drop --llm/--embedder/--kb")
    settings, choice = bundle_settings(settings.bundle, settings) if settings.bundle else settle(settings)
    click.echo(choice.line(), err=True)
    click.echo(f"hexrag: serving on http://{settings.host}:{settings.port}/ (OpenAI API under /v1)", err=True)
    _run_server(settings, "info")


def _run_server(settings, log_level: str) -> None:
    """Serve until stopped. A model or KB that fails its check at start-up ends the process with a
    one-line error and exit 1, so a supervisor sees it; on SIGTERM, open streams get a few seconds to
    end and a running ingest stops at its next step."""
    import uvicorn

    from app.main import create_app

    failure: list[str] = []
    server: uvicorn.Server | None = None

    def stop(why: str) -> None:
        failure.append(why)
        server.should_exit = True

    server = uvicorn.Server(uvicorn.Config(create_app(settings, on_failure=stop), host=settings.host,
                                           port=settings.port, log_level=log_level, timeout_graceful_shutdown=3))
    server.run()
    if failure:
        raise click.ClickException(f"start-up failed: {failure[0]}")


# ---- quick start ------------------------------------------------------------------------
@main.command()
@click.option("--models-dir", type=click.Path(path_type=Path),
              help="Where to build the model directories (default: $HEXRAG_HOME/models, where every command "
                   "looks for them).")
@dir_options("kb", kb="Knowledge-base directory (default: $HEXRAG_HOME/kb).  [env HEXRAG_KB]")
@click.option("--question", default="The tyre pressure warning light is on. What should I do?", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--no-serve", is_flag=True, help="Answer the sample question and exit instead of serving.")
@click.option("--tiny", is_flag=True, help="Use SmolLM2-135M instead of the 1.5B model (fast, but its answers "
                                           "lean on the extractive fallback).")
@click.option("--embedder", "embedder_key", default="auto", show_default=True,
              type=click.Choice(["auto", "all-minilm-l6-v2", "multilingual-e5-small"]),
              help="The packaged embedder to build; auto: multilingual-e5-small when the sample documents are "
                   "mostly Chinese, else all-MiniLM-L6-v2 (English only), with multilingual-e5-small as its "
                   "second embedder (for questions MiniLM cannot read) when they hold any Chinese.")
@_backend
@_friendly
def quickstart(models_dir: Path | None, kb: Path | None, question: str, port: int, no_serve: bool, tiny: bool,
               embedder_key: str, backend: str) -> None:
    """Fetch + build the default models, ingest the sample KB (each once), answer, then serve."""
    from app.assistant import Assistant, citation_lines
    from app.quickstart import (DEFAULT_EMBEDDER, choose_embedders, choose_llm, ensure_default_models,
                                ensure_embedder, ensure_sample_kb)
    from app.settings import Settings
    from knowledge.sample_kb import sample_kb

    key, why = choose_llm(backend, tiny)
    click.echo(f"hexrag: answer model {key} ({why})", err=True)
    first, second, why = choose_embedders(sample_kb().document_paths())
    if embedder_key != "auto":
        first, second, why = embedder_key, second if embedder_key == DEFAULT_EMBEDDER else None, "asked for"
    click.echo(f"hexrag: embedder {first}{f' and {second}' if second else ''} ({why})", err=True)
    llm_dir, embedder_dir = ensure_default_models(models_dir, backend, key, first)
    second_dir = ensure_embedder(second, models_dir) if second else None
    click.echo(f"hexrag: models {llm_dir} and {embedder_dir}{f' and {second_dir}' if second_dir else ''}", err=True)
    settings = Settings(llm=llm_dir, embedder=embedder_dir, second_embedder=second_dir, backend=backend, port=port,
                        **({"kb": kb} if kb else {}))
    assistant = Assistant(settings)
    ensure_sample_kb(assistant.kb, second_dir)
    click.echo(f"> {question}")
    answer = stream_answer(assistant, question)
    click.echo()
    for line in citation_lines(answer.citations):
        click.echo(f"  {line}")
    click.echo(f"[first sentence after {answer.first_sentence_s * 1000:.0f} ms on {backend}]", err=True)
    if no_serve:
        return
    del assistant  # the server loads its own copies
    click.echo(f"\nhexrag is serving: open http://127.0.0.1:{port}/ in a browser, or point an OpenAI client at "
               f"http://127.0.0.1:{port}/v1 (Ctrl-C stops)", err=True)
    _run_server(settings, "warning")


for _command in [*BUILD_COMMANDS, *KNOWLEDGE_COMMANDS, *CHAT_COMMANDS, *BENCH_COMMANDS, *DEVICE_COMMANDS]:
    main.add_command(_command)

if __name__ == "__main__":
    main()
