"""Which file to load for each graph of a model directory, per backend."""

from __future__ import annotations

from pathlib import Path

from models.manifest import Manifest, build_files
from runtime.errors import RuntimeModelError


def graph_paths(model_dir: Path, manifest: Manifest, backend: str,
                target: str | None = None) -> dict[str, Path | list[Path]]:
    """Graph name -> file: the ONNX graph on the CPU, the compiled context model on HTP (a list of
    context models, run in order, for a model compiled in parts: see runtime.session.open_graph).

    A model without an HTP build still opens on `htp` from its ONNX graphs, compiled when the
    session is created (slow; `hexrag compile` makes context binaries that load in milliseconds).
    `target`: which HTP build to load (runtime.qnn.select_build picks when None).
    """
    if backend != "htp" and manifest.target.precision == "external":
        raise RuntimeModelError(f"{manifest.name} holds only QNN context binaries (a wrapped QAIRT build): "
                                f"run it with --backend htp")
    if backend == "htp" and manifest.target.backend == "htp":
        from runtime import qnn  # imports onnxruntime-qnn only when HTP is asked for

        build = qnn.select_build(manifest.target, target)
        paths = {g.name: [model_dir / f for f in build_files(build.graphs[g.name])] for g in manifest.graphs}
        return {name: files[0] if len(files) == 1 else files for name, files in paths.items()}
    return {g.name: model_dir / g.file for g in manifest.graphs}
