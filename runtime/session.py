"""One ONNX Runtime session per graph, on the CPU EP (the baseline) or QNN HTP."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort

from runtime.errors import RuntimeModelError

BACKENDS = ("cpu", "htp")


class GraphSession:
    """Runs one graph file; inputs/outputs are numpy arrays keyed by graph I/O name."""

    def __init__(self, path: Path, backend: str = "cpu", threads: int | None = None):
        if backend not in BACKENDS:
            raise RuntimeModelError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
        if backend == "htp":
            raise RuntimeModelError("the htp backend is not available in this build yet")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or int(os.environ.get("HEXRAG_THREADS", "0"))
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = path
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self._session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.output_names, self._session.run(self.output_names, feeds)))
