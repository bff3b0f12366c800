"""One ONNX Runtime session per graph, on the CPU EP (the baseline) or QNN HTP.

`backend="htp"` runs through the `onnxruntime-qnn` plugin EP with CPU fallback disabled, so a
graph either runs entirely on the NPU or fails to load with a one-line `RuntimeModelError`.
It accepts both a plain ONNX graph (compiled for HTP when the session is created; float graphs
run in fp16 and need the SoC model) and an EPContext model (`*_ctx.onnx` + its `.bin`, built by
`build_scripts/compile.py`: loads in milliseconds).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from runtime import kquant, qnn
from runtime.errors import RuntimeModelError
from runtime.options import RuntimeOptions, thread_options


class GraphSession:
    """Runs one graph file; inputs/outputs are numpy arrays keyed by graph I/O name.

    `options`: backend, threads, the HTP build's SoC / performance mode / log level, profiling
    (runtime/options.py). Per-graph keyword arguments, for HTP (ignored by the CPU backend):
      htp_arch          HTP architecture number (75 …), optional.
      fp16              enable_htp_fp16_precision; default: on for plain float graphs.
      share_ep_contexts load a context binary shared by several graphs (prefill + decode) once
                        for all sessions of the process; default: on when the binary holds
                        more than one graph (devices only: the x86 simulator cannot load them).
      provider_options  extra QNN provider options, passed through.
      session_config    extra session config entries, passed through.
    CPU only: prepack=False keeps weights memory-mapped instead of packing a copy per session;
    the workers spin for `options.spin_us` (an HTP session's host threads never spin: they idle
    while the NPU runs).
    """

    def __init__(self, path: Path, options: RuntimeOptions = RuntimeOptions(), *, htp_arch: int | None = None,
                 fp16: bool | None = None, share_ep_contexts: bool | None = None,
                 provider_options: dict[str, str] | None = None, session_config: dict[str, str] | None = None,
                 prepack: bool = True):
        self.path = Path(path)
        self.backend = options.backend
        if not self.path.is_file():
            raise RuntimeModelError(f"graph file {self.path} is missing; rebuild the model")
        if self.backend == "htp":
            self._session = self._htp_session(options, htp_arch, fp16, share_ep_contexts, provider_options,
                                              session_config)
        else:
            so = ort.SessionOptions()
            thread_options(so, options.threads, options.spin_us)
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            # ONNX Runtime fuses a block-wise DequantizeLinear + MatMul (a w4a16 or block-int8 HTP
            # graph) into MatMulNBits, by default at accuracy level 4: int8 activations, not the
            # 16 bits the NPU runs. Level 1 (float32) computes what the graph says (SmolLM2 w8a16
            # on its GGUF blocks: logits cosine vs float 0.99963 -> 0.9999999 on one decode step).
            # The CPU target's own MatMulNBits nodes keep their accuracy_level attribute.
            so.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
            if not prepack:
                # weights stay memory-mapped from the shared weights file instead of being copied into
                # a packed layout per session (SmolLM2, 3 graphs: 1.95 GB -> 0.6 GB peak RSS)
                so.add_session_config_entry("session.disable_prepacking", "1")
            if options.profile_dir is not None:  # written when the session is released
                so.enable_profiling = True
                so.profile_file_prefix = str(options.profile_dir / self.path.stem)
            kquant.register(so)  # hexrag's K-quant kernels, for graphs built to use them
            try:
                self._session = ort.InferenceSession(str(self.path), so, providers=["CPUExecutionProvider"])
            except Exception as e:  # noqa: BLE001 - ORT raises Fail / InvalidGraph / NotImplemented ...
                if any(op in str(e) for op in kquant.OPS) and not kquant.available():
                    raise RuntimeModelError(f"{self.path.name} uses hexrag's K-quant kernels, which were not built "
                                            f"here (no C compiler at install): reinstall with one, or rebuild the "
                                            f"model here (hexrag build llm --quant int4)") from None
                raise
        self.output_names = [o.name for o in self._session.get_outputs()]
        self.input_names = [i.name for i in self._session.get_inputs()]
        self.input_shapes = {i.name: list(i.shape) for i in self._session.get_inputs()}  # symbolic dims as str

    def _htp_session(self, opts: RuntimeOptions, htp_arch, fp16, share, extra_options,
                     extra_config) -> ort.InferenceSession:
        kind = qnn.inspect_graph(self.path)
        config = dict(extra_config or {})
        if kind.ep_context:
            self._check_context(kind)
            multi = any(qnn.binary_graph_count(b) > 1 for b in kind.binaries)
            if multi and qnn.is_simulator():
                raise RuntimeModelError(
                    f"{self.path.name} uses a context binary with shared weights (a device build); the x86 HTP "
                    f"simulator cannot load those: use the unshared 'sim' build of this target")
            if share if share is not None else multi:
                config["ep.share_ep_contexts"] = "1"
            fp16 = False  # precision is baked into the binary
        elif fp16 is None:
            fp16 = not kind.quantized
        if opts.qnn_profile_dir is not None:
            csv = opts.qnn_profile_dir / f"{self.path.stem}.csv"
            extra_options = {"profiling_level": "detailed", "profiling_file_path": str(csv), **(extra_options or {})}
        options = qnn.provider_options(soc_model=opts.soc_model, htp_arch=htp_arch,
                                       performance_mode=opts.performance_mode, fp16=fp16, extra=extra_options)
        so = qnn.session_options(options, log_level=opts.log_level, threads=opts.threads, config=config)
        try:
            return ort.InferenceSession(str(self.path), so)
        except Exception as e:  # noqa: BLE001 - ORT raises Fail / EPFail / InvalidArgument ...
            msg = qnn.ort_message(e)
            if "MEM_ALLOC" in msg and kind.ep_context:  # measured: the simulator maps ~4 GB of binaries per process
                msg += (" (the HTP ran out of room for context binaries: one process holds about 4 GB of them; "
                        "a build with shared weights needs one copy for all graphs)")
            raise RuntimeModelError(f"cannot load {self.path.name} on QNN HTP: {msg}") from None

    def _check_context(self, kind) -> None:
        for b in kind.binaries:
            if not b.is_file():
                raise RuntimeModelError(f"{self.path.name} needs context binary {b.name}, which is missing; "
                                        f"rebuild the HTP target")
        have = qnn.versions().get("qnn_sdk")
        if kind.sdk_version and have and not kind.sdk_version.lstrip("v").startswith(have + "."):
            raise RuntimeModelError(f"{self.path.name} was compiled with QNN {kind.sdk_version.lstrip('v')}, "
                                    f"this runtime has QNN {have}: recompile the HTP target")

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.output_names, self._session.run(self.output_names, feeds)))

    def output_specs(self) -> dict[str, tuple[list[int], np.dtype]]:
        """Output name -> (shape, numpy dtype), for graphs with static output shapes."""
        return {o.name: ([int(d) for d in o.shape], np.dtype(_NUMPY[o.type])) for o in self._session.get_outputs()}

    def bind(self, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> ort.IOBinding:
        """Bind preallocated host arrays to the graph's inputs and outputs, once: `run_bound` then
        reads the inputs where they are and writes the outputs into their arrays, so a step creates
        no tensors. The arrays must stay alive (and in place) as long as the binding is used."""
        binding = self._session.io_binding()
        for name in self.input_names:
            binding.bind_input(name, "cpu", 0, *_buffer(name, inputs[name]))
        for name in self.output_names:
            binding.bind_output(name, "cpu", 0, *_buffer(name, outputs[name]))
        return binding

    def run_bound(self, binding: ort.IOBinding, options: ort.RunOptions | None = None) -> None:
        self._session.run_with_iobinding(binding, options)

    @property
    def providers(self) -> list[str]:
        return self._session.get_providers()


class PartedSession:
    """A graph compiled in parts (a model too big for one HTP context, see build_scripts/split.py),
    run part after part, each reading the boundary tensor the previous one wrote. It behaves as
    one GraphSession: the inputs and outputs are the whole graph's, the boundary tensors are
    allocated here once and bound like every other buffer."""

    def __init__(self, paths: list[Path], options: RuntimeOptions = RuntimeOptions(), **kwargs):
        self.parts = [GraphSession(p, options, **kwargs) for p in paths]
        made: dict[str, tuple[list[int], np.dtype]] = {}
        self._boundary: dict[str, np.ndarray] = {}
        for s in self.parts:
            for name in s.input_names:
                if name in made and name not in self._boundary:
                    self._boundary[name] = np.zeros(*made[name])
            made.update(s.output_specs())
        self.input_names = list(dict.fromkeys(n for s in self.parts for n in s.input_names if n not in self._boundary))
        self.output_names = [n for s in self.parts for n in s.output_names if n not in self._boundary]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = dict(feeds)
        for s in self.parts:
            values.update(s.run({n: values[n] for n in s.input_names}))
        return {n: values[n] for n in self.output_names}

    def bind(self, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> list[ort.IOBinding]:
        arrays = {**inputs, **outputs, **self._boundary}
        return [s.bind(arrays, arrays) for s in self.parts]

    def run_bound(self, bindings: list[ort.IOBinding], options: ort.RunOptions | None = None) -> None:
        for s, binding in zip(self.parts, bindings):
            s.run_bound(binding, options)

    @property
    def providers(self) -> list[str]:
        return self.parts[0].providers


def open_graph(path: Path | list[Path], options: RuntimeOptions = RuntimeOptions(),
               **kwargs) -> GraphSession | PartedSession:
    """A session for one entry of runtime.graphs.graph_paths: a file, or the parts of a split graph."""
    if isinstance(path, list):
        return PartedSession(path, options, **kwargs)
    return GraphSession(path, options, **kwargs)


_NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(uint16)": np.uint16,
          "tensor(int16)": np.int16, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8,
          "tensor(int32)": np.int32, "tensor(int64)": np.int64}


def _buffer(name: str, a: np.ndarray) -> tuple:
    if not a.flags.c_contiguous:
        raise ValueError(f"{name}: a bound array must be C-contiguous")
    return a.dtype, list(a.shape), a.ctypes.data
