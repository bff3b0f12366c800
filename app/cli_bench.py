"""Measurement commands: `hexrag bench llm|build|genai-model|lookup|soak` and `hexrag eval --all` (+ `eval retrieval`).

Each command calls one function of app.bench and prints its result; typed errors become
`error: ...` and exit code 1 (app.cli_common). app/cli.py registers BENCH_COMMANDS on `main`.
`hexrag eval` owns the `eval` group; `eval retrieval` is the knowledge command, added to it here.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import click

from app.bench.domains import SPLITS
from app.cli_common import dir_options, friendly as _friendly, given_settings
from app.cli_knowledge import eval_retrieval
from runtime.options import MAX_SPIN_US, SPIN_US

_model = click.option("--model", "model_dir", required=True, type=click.Path(path_type=Path, exists=True, file_okay=False),
                      help="hexrag model directory (hexrag build llm ...).")
_json = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _ints(value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not out or min(out) < 1:
        raise click.BadParameter("expected at least one positive integer")
    return out


def _echo_json(value) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


# ---- bench ------------------------------------------------------------------------------
@click.group()
def bench() -> None:
    """Speed side by side with llama.cpp and ONNX Runtime GenAI; NPU build metrics; soak and faults."""


@bench.command("llm")
@_model
@click.option("--vs", "peers", default="llama.cpp,genai", show_default=True,
              help="Peers to run next to hexrag (comma-separated: llama.cpp, genai; empty: hexrag only).")
@click.option("--gguf", type=click.Path(path_type=Path, dir_okay=False),
              help="GGUF for llama.cpp (default: the one the model was built from).")
@click.option("--genai-model", type=click.Path(path_type=Path, file_okay=False),
              help="GenAI model folder (make one with `hexrag bench genai-model`).")
@click.option("--lengths", default="32,128,512,1024", show_default=True, help="Prompt lengths in tokens.")
@click.option("--gen", default=128, show_default=True, help="Tokens generated per run (end of sequence ignored).")
@click.option("--runs", default=3, show_default=True, help="Interleaved runs per system (medians are printed).")
@click.option("--threads", default=2, show_default=True, help="CPU threads for every system.")
@click.option("--backend", type=click.Choice(["cpu", "htp"]), default="cpu", show_default=True,
              help="hexrag's backend (htp: the NPU on a Snapdragon device; on x86 the slow simulator).")
@click.option("--spin-us", type=click.IntRange(0, MAX_SPIN_US), default=SPIN_US,
              show_default=True, help="How long hexrag's idle CPU workers spin before they sleep (0: never).")
@click.option("--background-load", default=0, show_default=True, type=click.IntRange(min=0),
              help="Busy-looping processes run beside every system's run (started before, stopped after it): "
                   "speed on a shared CPU. 0: none.")
@click.option("--plot", type=click.Path(path_type=Path, dir_okay=False),
              help="Also draw TTFT and decode speed per prompt length into this PNG (needs matplotlib).")
@_json
@_friendly
def bench_llm(model_dir, peers, gguf, genai_model, lengths, gen, runs, threads, backend, spin_us, background_load,
              plot, as_json) -> None:
    """hexrag's CPU backend vs its peers: TTFT, prefill and decode tok/s, peak RSS, with ratios."""
    from app.bench.llm_speed import compare, format_table, parse_peers

    result = compare(model_dir, parse_peers(peers), _ints(lengths), gen, runs, threads, gguf=gguf,
                     genai_model=genai_model, backend=backend, progress=not as_json, background_load=background_load,
                     spin_us=spin_us)
    if plot:
        from app.bench.plots import plot_comparison
        from app.bench.report import commit

        plot_comparison(result, plot, f"{Path(result.model).name}: {result.gen} tokens, {threads} threads, "
                                      f"medians of {runs} runs (hexrag {commit() or '?'})")
    if as_json:
        _echo_json(result.to_dict())
    else:
        click.echo(format_table(result))


@bench.command("build")
@_model
@_json
@_friendly
def bench_build(model_dir, as_json) -> None:
    """HTP build metrics (nodes on HTP, binary vs weight bytes, parts, compile time) and decode ceilings per chip."""
    from app.bench.build_metrics import build_metrics, format_build_metrics

    result = build_metrics(model_dir)
    click.echo(json.dumps(result, indent=2) if as_json else format_build_metrics(result))


@bench.command("genai-model")
@_model
@click.option("--out", required=True, type=click.Path(path_type=Path, file_okay=False), help="GenAI folder to write.")
@click.option("--python", "python", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Python of a venv with torch, transformers and onnxruntime-genai (GenAI's builder needs them).")
@click.option("--precision", type=click.Choice(["int4", "int8", "fp32"]), default="int4", show_default=True)
@_friendly
def bench_genai_model(model_dir, out, python, precision) -> None:
    """Build the GenAI (CPU) model of the weights MODEL was built from, for `bench llm --vs genai`."""
    from app.bench.genai_export import build_genai_model

    click.echo(f"built {build_genai_model(model_dir, out, python, precision)}")


@bench.command("lookup")
@dir_options("llm", "embedder", "kb")
@click.option("--questions", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="Question file (JSONL with `question`); default: knowledge/samples/answer_questions.jsonl.")
@click.option("--limit", default=25, show_default=True, type=click.IntRange(min=1), help="Questions to answer.")
@click.option("--widths", default="1,2,4,6,8", show_default=True, help="Check widths to time, in tokens.")
@_json
@_friendly
def bench_lookup(llm, embedder, kb, questions, limit, widths, as_json) -> None:
    """Prompt lookup on one LLM build: what a check costs beside a one-token step, and how far its
    rounding moves greedy's lead over real answers."""
    from app.assistant import Assistant
    from app.bench.answers import load_answer_questions
    from app.bench.lookup import format_lookup, measure
    from knowledge.sample_kb import SAMPLES

    sizes = _ints(widths)
    items = load_answer_questions(questions or SAMPLES / "answer_questions.jsonl")[:limit]
    assistant = Assistant(given_settings(llm=llm, embedder=embedder, kb=kb))
    result = measure(assistant, [q.question for q in items], sizes)
    _echo_json(result) if as_json else click.echo(format_lookup(result))


@bench.command("ingest-load")
@dir_options("llm", "embedder", "kb", required=True, llm="LLM model directory the server loads.",
             kb="Knowledge base to start from (copied; never written).")
@click.option("--megabytes", default=5.0, show_default=True, help="Size of the markdown file uploaded.")
@click.option("--idle-s", default=30.0, show_default=True, help="Seconds measured on the idle server first.")
@click.option("--question", help="What the searches and chats ask (default: a heading of the KB's own).")
@click.option("--threads", type=int, help="The server's CPU threads (default: its own).")
@click.option("--work-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Keep the KB copy and the server log here (default: a temp folder, removed).")
@_json
@_friendly
def bench_ingest_load(as_json, **options) -> None:
    """Search latency, a RAG chat's TTFT and /health while a large upload is ingested, beside idle."""
    from app.bench.ingest_load import IngestLoadOptions, format_report, run_ingest_load

    report = run_ingest_load(IngestLoadOptions(**options), progress=lambda line: click.echo(line, err=True))
    click.echo(report.model_dump_json(indent=2) if as_json else format_report(report))


@bench.command("soak")
@dir_options("llm", "embedder", "kb", required=True, llm="LLM model directory the server loads.",
             kb="Knowledge base to start from (copied; never written).")
@click.option("--clients", default=8, show_default=True, help="Concurrent streaming chat clients.")
@click.option("--minutes", default=10.0, show_default=True, help="How long the clients run.")
@click.option("--max-tokens", type=int, help="max_tokens of the clients' requests (default: the server's).")
@click.option("--questions", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="The clients' questions: one a line, or JSONL with `question` (default: the sample questions).")
@click.option("--rag/--no-rag", default=True, show_default=True,
              help="The clients' answers come from the KB (--no-rag: plain chat; every request runs the model).")
@click.option("--max-queue", type=int, help="The server's --max-queue (default: its own).")
@click.option("--upload-files", default=100, show_default=True,
              help="Files in the upload during which /health is probed.")
@click.option("--kill-trials", default=20, show_default=True, help="SIGKILL trials of each kind (0: none).")
@click.option("--kill-files", default=8, show_default=True, help="Files each killed ingest or upload works on.")
@click.option("--nice", default=5, show_default=True, help="Niceness of the server process.")
@click.option("--threads", type=int, help="The server's CPU threads (default: its own).")
@click.option("--seed", default=0, show_default=True, help="Seed of the generated files and the kill moments.")
@click.option("--work-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Keep the KB copies, generated files and server log here (default: a temp folder, removed).")
@click.option("--fuzz", is_flag=True, help="Also run the schemathesis API test (source checkout) and report its line.")
@_json
@_friendly
def bench_soak(as_json, **options) -> None:
    """Soak and faults on a real server: streaming clients, /health under a large upload, SIGKILL trials."""
    from app.bench.soak import SoakOptions, format_report, run_soak

    report = run_soak(SoakOptions(**options), progress=lambda line: click.echo(line, err=True))
    click.echo(report.model_dump_json(indent=2) if as_json else format_report(report))


# ---- eval -------------------------------------------------------------------------------
@click.group("eval", invoke_without_command=True)
@click.option("--all", "run_all", is_flag=True, help="Run the whole accuracy + speed report.")
@click.option("--quick", is_flag=True, help="Tiny models built into a temp dir (CI; no downloads).")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), help="Write the JSON report here.")
@click.option("--baseline", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="Compare with this report; exit code 1 when a metric regressed.")
@click.option("--report", "report_file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="Compare this saved report with --baseline instead of running a new one.")
@click.option("--tolerance", "tolerances", multiple=True,
              help="Accuracy tolerance (absolute, default 0.01); speed=N: speed-ratio tolerance (relative, "
                   "default 0.5); METRIC=N for one metric. Repeatable.")
@dir_options("llm", "embedder", llm="Full mode: LLM model directory.", embedder="Full mode: embedder directory.")
@click.option("--quantized-llm", type=click.Path(path_type=Path, file_okay=False),
              help="Full mode: a quantized build of --llm to compare with it.")
@click.option("--quantized-embedder", type=click.Path(path_type=Path, file_okay=False),
              help="Full mode: a quantized build of --embedder to compare with it.")
@click.pass_context
@_friendly
def eval_group(ctx, run_all, quick, out, baseline, report_file, tolerances, llm, embedder, quantized_llm,
               quantized_embedder) -> None:
    """Measure quality: `eval --all` for the whole report, `eval retrieval` for the KB alone."""
    if ctx.invoked_subcommand is not None:
        return
    from app.bench.baseline import load_baseline, load_report, parse_tolerances

    if report_file:
        if run_all or not baseline:
            raise click.UsageError("--report compares a saved report: give --baseline, and no --all")
        report = load_report(report_file)
    elif not run_all:
        raise click.UsageError("give --all (the whole report) or a subcommand, e.g. `hexrag eval retrieval`")
    if quick and any((llm, embedder, quantized_llm, quantized_embedder)):
        raise click.UsageError("--quick builds its own tiny models: --llm/--embedder/--quantized-* are for full mode")
    accuracy, speed, per_metric = parse_tolerances(tolerances)
    mode = report.get("mode") if report_file else "quick" if quick else "full"
    base = load_baseline(baseline, mode) if baseline else None  # a bad baseline fails before the long run
    if not report_file:
        from app.bench.report import run_report

        report = run_report(quick, llm, embedder, quantized_llm, quantized_embedder)
        if out:
            out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
            click.echo(f"wrote {out}", err=True)
        else:
            _echo_json(report)
    if base is not None:
        _gate(report, base, baseline, accuracy, speed, per_metric)


def _gate(report: dict, base: dict, baseline: Path, accuracy: float, speed: float, per_metric: dict) -> None:
    """One line per gated metric on stderr; exit code 1 naming every metric that regressed."""
    from app.bench.baseline import compare

    checks = compare(report, base, accuracy, speed, per_metric)
    for check in checks:
        click.echo(check.line(), err=True)
    failed = [c.metric for c in checks if not c.ok]
    if failed:
        click.echo(f"error: {len(failed)} metric(s) regressed against {baseline}: {', '.join(failed)}", err=True)
        sys.exit(1)
    click.echo(f"all {len(checks)} metrics within tolerance of {baseline}", err=True)


@eval_group.command("answers")
@click.option("--questions", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="Question file (JSONL: question, lang, answerable, expected, facts, wrong, reply); default: the "
                   "sample KB's knowledge/samples/answer_questions.jsonl.")
@click.option("--domain", help="An answer-eval domain (a folder name under knowledge/samples/evals, or any folder with a "
                               "domain.json): its documents are the KB and --split its questions.")
@click.option("--split", type=click.Choice(SPLITS), default="dev", show_default=True,
              help="With --domain: the question split. Held-out answers are summarised, never listed.")
@dir_options("llm", "embedder", "kb")
@click.option("--backend", type=click.Choice(["cpu", "htp"]), help="Inference backend.  [env HEXRAG_BACKEND]")
@click.option("--voice", is_flag=True, help="Grade the voice-mode answers.")
@click.option("--passage-kv/--no-passage-kv", default=None,
              help="Place the passages' kept KV rows instead of prefilling them (default: as the server does, "
                   "wherever the LLM's cache takes them).")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), help="Also write the JSON result here.")
@_json
@_friendly
def eval_answers(questions, domain, split, llm, embedder, kb, backend, voice, passage_kv, out, as_json) -> None:
    """Strict answer grading: correct / partial / wrong, unsupported facts, refusals, per language."""
    from app.assistant import Assistant
    from app.bench.answers import evaluate_answers, format_summary, load_answer_questions
    from app.bench.domains import domain_kb, find_domain, questions_file
    from knowledge.sample_kb import SAMPLES

    if domain and (questions or kb):
        raise click.UsageError("--domain names the questions and the knowledge base: drop --questions and --kb")
    copy = None
    try:
        if domain:
            from runtime.embedder import Embedder

            folder = find_domain(domain)
            settings = given_settings(embedder=embedder)
            second = settings.second_embedder
            copy = kb = domain_kb(folder, Embedder(settings.embedder, settings.runtime("cpu")),
                                  progress=not as_json,
                                  second=Embedder(second, settings.runtime("cpu")) if second else None)
            questions = questions_file(folder, split)
        items = load_answer_questions(questions or SAMPLES / "answer_questions.jsonl")
        assistant = Assistant(given_settings(passage_kv=passage_kv, llm=llm, embedder=embedder, kb=kb,
                                             backend=backend))
        result = evaluate_answers(assistant, items, voice=voice, progress=not as_json)
    finally:
        if copy is not None:
            shutil.rmtree(copy, ignore_errors=True)
    held_out = bool(domain) and split == "holdout"
    if held_out:  # measured, never read: only the counts leave the run
        result = {k: v for k, v in result.items() if k not in ("failing", "rows")}
    if out:
        out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n")
    if as_json:
        _echo_json(result)
    else:
        click.echo(format_summary(result))


eval_group.add_command(eval_retrieval)
BENCH_COMMANDS = [bench, eval_group]
