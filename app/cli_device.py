"""`hexrag device` (what this machine offers hexrag) and `hexrag export bundle` (a folder to run on one)."""

from __future__ import annotations

from pathlib import Path

import click

from app.cli_common import dir_options, friendly


@click.command()
@click.option("--model", "model_dirs", multiple=True, type=click.Path(path_type=Path),
              help="A model directory whose HTP builds to match against this SoC. Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@friendly
def device(model_dirs: tuple[Path, ...], as_json: bool) -> None:
    """What hexrag sees here: CPU, SoC, the QNN HTP backend, the models' builds, and `--backend auto`'s pick."""
    from app.device import device_report

    report = device_report(list(model_dirs))
    if as_json:
        click.echo(report.model_dump_json(indent=2))
        return
    soc, htp = report.soc, report.htp
    click.echo(f"cpu        {report.machine} ({report.system})")
    kernels = f"{report.cpu_kernels} path" if report.cpu_kernels else "not built (int4 uses ONNX Runtime's kernels)"
    click.echo(f"kquant     hexrag's K-quant kernels: {kernels}")
    if soc is None:
        click.echo("soc        none (/sys/devices/soc0 is absent)")
    else:
        known = f" -> {soc.target}: {soc.chip}, QNN soc_model {soc.soc_model}, HTP v{soc.htp_arch}" if soc.target \
            else " (not an HTP target hexrag builds for)"
        click.echo(f"soc        {soc.vendor or '?'} {soc.machine or '?'} soc_id {soc.soc_id}{known}")
    kind = "x86 simulator" if htp.simulator else report.machine
    if htp.loads:
        reported = f", backend reports {htp.reported_soc or '?'} / v{htp.reported_arch or '?'}"
        click.echo(f"htp        loads ({kind}; QNN device type {htp.device_type}{reported})")
    else:
        click.echo(f"htp        does not load ({kind}): {htp.error}")
    if htp.versions:
        click.echo(f"versions   {', '.join(f'{k} {v}' for k, v in htp.versions.items())}")
    click.echo(f"fastrpc    {', '.join(htp.fastrpc) or 'none'}")
    for m in report.models:
        if m.error:
            click.echo(f"model      {m.path}: {m.error}")
            continue
        match = f"match {m.match}" if m.match else ("no build for this SoC" if soc and soc.target else "no SoC to match")
        click.echo(f"model      {m.name} ({m.path}): HTP builds {', '.join(m.builds) or 'none'}; {match}")
    click.echo(f"auto       {report.auto.backend}: {report.auto.reason}")


@click.group()
def export() -> None:
    """Package built models for another machine."""


@export.command("bundle")
@dir_options("llm", "embedder", "kb", required=True, llm="LLM model directory, compiled for --target.",
             embedder="Embedder model directory, compiled for --target.",
             kb="Knowledge-base directory (embedded with --embedder).")
@click.option("--target", required=True, help="The device's SoC: sm8650, 8gen3, 57, ...")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Bundle directory to write (new).")
@click.option("--cpu-fallback", is_flag=True, help="Also bundle the ONNX graphs and weights the CPU backend runs.")
@click.option("--second-embedder", type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="The KB's second embedder, compiled for --target (for a KB holding its vectors).")
@friendly
def export_bundle_cmd(llm: Path, embedder: Path, kb: Path, target: str, out: Path, cpu_fallback: bool,
                      second_embedder: Path | None) -> None:
    """A self-contained folder for one Snapdragon SoC: its HTP builds, tokenizer, KB, code, pinned
    requirements, start script, README and a sha256 of every file."""
    from app.bundle import export_bundle

    spec = export_bundle(llm, embedder, kb, target, out, cpu_fallback=cpu_fallback,
                         second_embedder=second_embedder)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    click.echo(f"bundle for {spec.chip} ({spec.target}, {spec.variant} HTP build"
               f"{', CPU fallback' if spec.cpu_fallback else ''}): {out} ({size / 1e6:.1f} MB)")


DEVICE_COMMANDS = [device, export]
