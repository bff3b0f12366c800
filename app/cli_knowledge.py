"""Knowledge-base commands: `hexrag ingest`, `hexrag kb ...`, `hexrag search`, `hexrag eval retrieval`.

Each command opens a knowledge.KnowledgeBase, calls one method and prints the result; typed errors
become `error: ...` and exit code 1 (app.cli_common). app/cli.py registers them on its `main` group:

    from app.cli_knowledge import KNOWLEDGE_COMMANDS
    for command in KNOWLEDGE_COMMANDS: main.add_command(command)

The KB location is --kb, else $HEXRAG_KB, else $HEXRAG_HOME/kb; the embedder is --embedder, else
$HEXRAG_EMBEDDER, else $HEXRAG_HOME/models/all-minilm-l6-v2 (built by `hexrag quickstart`); the
environment is read by models.home, through knowledge.paths.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import get_args

import click

from app.cli_common import dir_options, friendly as _friendly, given
from app.settings import PassageKVPrecision
from knowledge.errors import KnowledgeError
from knowledge.ingest import MAX_FILE_BYTES


_kb = dir_options("kb", dest="{}_dir", kb="Knowledge-base directory [env HEXRAG_KB; default: $HEXRAG_HOME/kb].")
_embedder = dir_options("embedder", dest="{}_dir", embedder="Embedder model directory [env HEXRAG_EMBEDDER; default: "
                                                            "$HEXRAG_HOME/models/all-minilm-l6-v2].")
_second = click.option("--second-embedder", "second_dir", type=click.Path(path_type=Path, file_okay=False),
                       help="A second (multilingual) embedder, for the queries --embedder cannot read (Chinese with "
                            "an English model); ingest gives every chunk its vector too [env HEXRAG_SECOND_EMBEDDER; "
                            "default: $HEXRAG_HOME/models/multilingual-e5-small where built, for a KB holding its "
                            "vectors].")
_backend = click.option("--backend", type=click.Choice(["cpu", "htp"]), default="cpu", show_default=True,
                        help="Where the embedder runs.")
_json = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _open(kb_dir: Path | None, embedder_dir: Path | None = None, backend: str = "cpu", embedder: bool = True,
          second_dir: Path | None = None, **options):
    """The KB with its embedder (`embedder`) and its second embedder: `second_dir`, else for a KB holding
    a second embedder's vectors the one the home has built, when it is that model."""
    from knowledge import KnowledgeBase
    from knowledge.paths import default_embedder_dir, default_second_embedder_dir

    if not embedder:
        return KnowledgeBase.open(kb_dir, **options)
    model = _embedder_at(embedder_dir or default_embedder_dir(), backend, "--embedder")
    kb = KnowledgeBase.open(kb_dir, model, **options)
    if second_dir is not None:  # asked for: its vectors replace another model's
        kb.use_second(_embedder_at(second_dir, backend, "--second-embedder"), replace=True)
    elif kb.second_model_id and (default := default_second_embedder_dir()) is not None:
        kb.use_second(_embedder_at(default, backend, "--second-embedder"))
    return kb


def _embedder_at(path: Path, backend: str, option: str):
    if not (path / "manifest.json").is_file():
        raise KnowledgeError(f"no embedder at {path}: run `hexrag quickstart` (or `hexrag build embedder`) "
                             f"or pass {option} DIR")
    from app.settings import RuntimeSettings
    from runtime.embedder import Embedder

    return Embedder(path, RuntimeSettings().runtime(backend))


def _echo_json(value) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


# ---- ingest -----------------------------------------------------------------------------
@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@_kb
@_embedder
@_second
@_backend
@click.option("--index", type=click.Choice(["auto", "flat", "hnsw", "ivf"]), default=None,
              help="Vector index kind, remembered by the KB (default: auto = flat, HNSW past 100k chunks).")
@click.option("--max-tokens", type=int, default=None, help="Chunk size in tokens (default: the embedder's length).")
@click.option("--no-prune", is_flag=True, help="Keep documents whose files disappeared from an ingested folder.")
@click.option("--max-file-mb", type=click.FloatRange(min=0, min_open=True), default=None,
              help=f"Larger files are refused (each is read whole) [default {MAX_FILE_BYTES / 2**20:g}; "
                   "env HEXRAG_MAX_FILE_MB].")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--strict", is_flag=True, help="Exit with 2 when any file failed or had no text to index.")
@_json
@_friendly
def ingest(paths, kb_dir, embedder_dir, second_dir, backend, index, max_tokens, no_prune, max_file_mb, quiet,
           strict, as_json) -> None:
    """Add files and folders (Markdown, text, HTML, FAQ JSON/JSONL/CSV, PDF with pypdf) to the KB.

    Unchanged files are skipped, changed ones replaced. Files that cannot be read, are not regular
    files (FIFOs, devices) or are over --max-file-mb are reported and skipped, as are files with no
    text to index (a page of links). The exit code is 2 when no file given could be indexed (or,
    with --strict, when any was skipped), 1 for errors that stop the whole command."""
    from app.settings import IngestSettings

    limit = IngestSettings(**given(max_file_mb=max_file_mb)).max_file_mb  # the flag, else HEXRAG_MAX_FILE_MB
    with _open(kb_dir, embedder_dir, backend, second_dir=second_dir, index=index, max_tokens=max_tokens) as kb:
        report = kb.ingest(list(paths), progress=not quiet and not as_json, prune=not no_prune,
                           max_file_bytes=int(limit * 2**20))
    if as_json:
        _echo_json(report.to_dict())
    else:
        for path, reason in report.failed:
            click.echo(f"failed: {path}: {reason}", err=True)
        for path in report.empty:
            click.echo(f"skipped: {path}: no text to index", err=True)
        click.echo(report.summary())
    skipped = report.failed or report.empty
    if skipped and (strict or not report.indexed_any):
        sys.exit(2)


# ---- kb ---------------------------------------------------------------------------------
@click.group()
def kb() -> None:
    """Inspect and maintain the knowledge base."""


@kb.command("list")
@_kb
@_json
@_friendly
def kb_list(kb_dir, as_json) -> None:
    """Documents in the KB."""
    with _open(kb_dir, embedder=False) as base:
        docs = base.list_documents()
    if as_json:
        _echo_json([{"id": d.id, "source": d.source, "name": d.name, "kind": d.kind, "title": d.title,
                     "chunks": d.chunk_count, "size": d.size, "ingested_at": d.ingested_at} for d in docs])
        return
    for d in docs:
        click.echo(f"{d.name}\t{d.kind}\t{d.chunk_count} chunks\t{d.ingested_at}\t{d.source}")


@kb.command("delete")
@click.argument("source")
@_kb
@_friendly
def kb_delete(source, kb_dir) -> None:
    """Remove a document (its path, its name as listed, or a folder of documents)."""
    with _open(kb_dir, embedder=False) as base:
        for d in base.delete(source):
            click.echo(f"deleted {d.name} ({d.chunk_count} chunks)")


@kb.command("stats")
@_kb
@_json
@_friendly
def kb_stats(kb_dir, as_json) -> None:
    """Counts, sizes, embedding model and index kind."""
    with _open(kb_dir, embedder=False) as base:
        stats = base.stats()
    if as_json:
        _echo_json(stats)
    else:
        for key, value in stats.items():
            click.echo(f"{key}\t{value}")


@kb.command("rebuild")
@_kb
@_embedder
@click.option("--second-embedder", "second_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Give every chunk this second embedder's vector (replacing another model's), then rebuild.")
@_backend
@click.option("--reembed", is_flag=True, help="Recompute every vector with --embedder (after changing models).")
@click.option("--index", type=click.Choice(["auto", "flat", "hnsw", "ivf"]), default=None,
              help="Switch the vector index kind.")
@_friendly
def kb_rebuild(kb_dir, embedder_dir, second_dir, backend, reembed, index) -> None:
    """Rebuild the FTS and vector indexes from SQLite (no re-embedding unless --reembed or --second-embedder)."""
    with _open(kb_dir, embedder_dir, backend, embedder=reembed or second_dir is not None, second_dir=second_dir,
               index=index) as base:
        if second_dir is not None:
            base.embed_second(progress=True)
        stats = base.rebuild_index(reembed=reembed, progress=True)
    second = f", second model {stats['second_model_id']}" if stats["second_model_id"] else ""
    click.echo(f"rebuilt: {stats['chunks']} chunks, {stats['index_kind']} index, model {stats['model_id']}{second}")


@kb.command("passage-kv")
@_kb
@dir_options("llm", dest="{}_dir",
             llm="The LLM the server answers with [env HEXRAG_LLM; default: the one quickstart built].")
@click.option("--voice/--no-voice", default=True, show_default=True,
              help="Also for voice answers (their instructions differ, so their rows do too).")
@click.option("--max-mb", type=click.IntRange(min=1),
              help="Disk budget (default 2048): beyond it the least recently used rows go (the server keeps to "
                   "its own, --passage-kv-max-mb).")
@click.option("--precision", type=click.Choice(get_args(PassageKVPrecision)), default="k6v8", show_default=True,
              help="How rows are stored; the server uses the rows of its own --passage-kv-precision.")
@_friendly
def kb_passage_kv(kb_dir, llm_dir, voice, max_mb, precision) -> None:
    """Compute and keep every passage's KV rows ahead (one prefill of each chunk), which the server
    otherwise keeps on first use: the first question about any entry then waits only for its own
    tokens. Rows are kept per LLM build under the KB directory."""
    from app.answer.passage_kv import PASSAGE_KV_DIR, PassageKV, prepare
    from app.settings import RuntimeSettings
    from models.home import llm_dir as default_llm_dir
    from runtime.llm import LLM

    llm = LLM(llm_dir or default_llm_dir(), RuntimeSettings().runtime("cpu"))
    with _open(kb_dir, embedder=False) as base:
        store = PassageKV(llm, base.dir / PASSAGE_KV_DIR, disk_bytes=max_mb << 20 if max_mb else None,
                          precision=precision)
        for spoken in ([False, True] if voice else [False]):
            computed, kept = prepare(base, store, voice=spoken)
            click.echo(f"{'voice' if spoken else 'text'} answers: {computed} passages computed, {kept} already kept")
            if store.full:
                click.echo(f"the disk budget ({store.disk_bytes / 2**20:.0f} MB) is used up: the other passages are "
                           "computed on first use (--max-mb raises it)")
                break
    size = sum(p.stat().st_size for p in (base.dir / PASSAGE_KV_DIR).rglob("*.npz"))
    click.echo(f"{base.dir / PASSAGE_KV_DIR}: {size / 2**20:.1f} MB for {llm.name}")


@kb.command("profile")
@_kb
@click.option("--set", "profile_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Store this answer profile (JSON; fields left out keep their defaults).")
@click.option("--reset", is_flag=True, help="Back to the defaults (a neutral assistant).")
@_friendly
def kb_profile(kb_dir, profile_file, reset) -> None:
    """The KB's answer profile: who the assistant is and whom it answers, how a spoken answer reaches
    them, and the words that say nothing about a question of this KB. Prints the one in use."""
    from pydantic import ValidationError

    from app.cli_common import invalid
    from knowledge.profile import AnswerProfile

    if profile_file and reset:
        raise click.UsageError("--set and --reset exclude each other")
    with _open(kb_dir, embedder=False) as base:
        if profile_file:
            try:
                base.set_profile(AnswerProfile.model_validate_json(profile_file.read_text(encoding="utf-8")))
            except ValidationError as e:
                raise KnowledgeError(f"{profile_file} is no answer profile: {invalid(e)}") from None
            except UnicodeDecodeError:
                raise KnowledgeError(f"{profile_file} is no answer profile: not UTF-8 text") from None
        elif reset:
            base.set_profile(None)
        click.echo(base.profile.model_dump_json(indent=2))


@kb.command("check")
@_kb
@_friendly
def kb_check(kb_dir) -> None:
    """Consistency of SQLite, the FTS indexes and the vector index; exit code 1 on problems."""
    with _open(kb_dir, embedder=False) as base:
        report = base.check()
    click.echo(str(report))
    if not report.ok:
        sys.exit(1)


# ---- search -----------------------------------------------------------------------------
def _min_score(value: str | None) -> float | None:
    if value is None:
        return None  # the KB's calibrated default
    if value.lower() in ("none", "off"):
        return -1.0  # every cosine passes
    try:
        return float(value)
    except ValueError:
        raise click.BadParameter(f"expected a number or 'none', got {value!r}") from None


@click.command()
@click.argument("query")
@click.option("--k", "k", default=5, show_default=True, help="Number of results.")
@click.option("--mode", type=click.Choice(["dense", "bm25", "hybrid"]), default="hybrid", show_default=True,
              help="dense: cosine of embeddings; bm25: FTS5 BM25; hybrid: both fused on their scores.")
@click.option("--source", "sources", multiple=True, help="Only these documents (path, name or glob; repeatable).")
@click.option("--min-score", help="Answerability threshold on the cosine similarity (-1..1), also in hybrid mode, "
                                  "where it is compared with the best cosine and not with the printed fused score "
                                  "(default: the KB's calibrated one, 0.25 for all-MiniLM-L6-v2; 'none' disables "
                                  "it); in bm25 mode a BM25 score, no default.")
@_kb
@_embedder
@_second
@_backend
@_json
@_friendly
def search(query, k, mode, sources, min_score, kb_dir, embedder_dir, second_dir, backend, as_json) -> None:
    """Search the KB; prints the best places (one chunk per section or FAQ entry) with their source and heading.

    The score printed (and `score` in --json, named by `score_kind`) is the mode's: dense the cosine
    similarity (-1..1), bm25 the BM25 score (higher is better, unbounded), hybrid the fused score (the
    cosine plus 0.1 x the BM25 over the query's best and 0.2 x the place cosine: about -1..1.3).
    `scores` in --json holds every signal known for a hit (dense, bm25, place: the cosine with the
    section's title, hybrid)."""
    threshold = _min_score(min_score)
    with _open(kb_dir, embedder_dir, backend, embedder=mode != "bm25", second_dir=second_dir) as base:
        hits = base.search(query, k=k, mode=mode, sources=list(sources) or None, min_score=threshold)
    if as_json:
        _echo_json([h.to_dict() for h in hits])
        return
    if not hits:
        click.echo("no relevant passages", err=True)
    for n, h in enumerate(hits, 1):
        where = f"{h.name}" + (f" > {h.heading}" if h.heading else "") + (f" [{h.entry_id}]" if h.entry_id else "")
        click.echo(f"{n}. {h.score:.4f}  {where}")
        click.echo("   " + " ".join(h.text.split())[:300])


# ---- eval -------------------------------------------------------------------------------
@click.group("eval")
def eval_group() -> None:
    """Measure quality on question sets."""


@eval_group.command("retrieval")
@_kb
@click.option("--questions", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help='JSONL lines {"question", "expected": [faq id | "file.md#A > B"], "lang"}.')
@click.option("--mode", "modes", multiple=True, type=click.Choice(["dense", "bm25", "hybrid"]),
              help="Modes to evaluate (repeatable; default: all three).")
@_embedder
@_second
@_backend
@_json
@_friendly
def eval_retrieval(kb_dir, questions, modes, embedder_dir, second_dir, backend, as_json) -> None:
    """Recall@1, recall@5 and MRR per search mode (and language) on the KB."""
    from knowledge.evaluation import evaluate, load_questions

    modes = modes or ("dense", "bm25", "hybrid")
    with _open(kb_dir, embedder_dir, backend, embedder=modes != ("bm25",), second_dir=second_dir) as base:
        result = evaluate(base, load_questions(questions), modes=modes)
    if as_json:
        _echo_json(result.to_dict())
        return
    click.echo(f"{'mode':8}{'lang':6}{'n':>5}{'R@1':>8}{'R@5':>8}{'MRR':>8}")
    for r in result.rows:
        click.echo(f"{r.mode:8}{r.lang:6}{r.n:>5}{r.recall[1]:>8.3f}{r.recall[5]:>8.3f}{r.mrr:>8.3f}")
    if result.unanswerable_top:
        click.echo(f"\nanswerability threshold (best cosine; {len(result.answerable_top)} answerable, "
                   f"{len(result.unanswerable_top)} unanswerable questions the embedder can read, "
                   f"{result.unreadable} it cannot):")
        click.echo(f"{'min_score':>10}{'kept':>8}{'rejected':>10}")
        for t, kept, rejected in result.threshold_table():
            click.echo(f"{t:>10.2f}{kept:>8.3f}{rejected:>10.3f}")


# `hexrag eval` itself is app/cli_bench.py's group (it adds `eval retrieval`); this module's
# eval group serves the standalone knowledge CLI only
KNOWLEDGE_COMMANDS = [ingest, kb, search]


@click.group()
def knowledge_cli() -> None:
    """The knowledge-base commands on their own (`python -m app.cli_knowledge`)."""


for _command in [*KNOWLEDGE_COMMANDS, eval_group]:
    knowledge_cli.add_command(_command)

if __name__ == "__main__":
    knowledge_cli()
