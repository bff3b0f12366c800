"""`hexrag device` (what this machine offers hexrag)."""

from __future__ import annotations

from pathlib import Path

import click

from app.cli_common import friendly


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
    if soc is None:
        click.echo("soc        none (/sys/devices/soc0 is absent)")
    else:
        known = f" -> {soc.target}: {soc.chip}, QNN soc_model {soc.soc_model}, HTP v{soc.htp_arch}" if soc.target \
            else " (not an HTP target hexrag builds for)"
        click.echo(f"soc        {soc.vendor or '?'} {soc.machine or '?'} soc_id {soc.soc_id}{known}")
    kind = "x86 simulator" if htp.simulator else "device"
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


DEVICE_COMMANDS = [device]
