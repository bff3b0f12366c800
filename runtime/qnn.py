"""QNN HTP through ONNX Runtime's `onnxruntime-qnn` plugin execution provider.

Everything QNN-specific the runtime needs lives here: registering the plugin EP library (once per
process), picking the QNN device, turning keyword arguments into provider options, reading the
versions the installed wheel ships, and inspecting EPContext models (`*_ctx.onnx` + `*.bin`)
before handing them to ONNX Runtime. `build_scripts/compile.py` sets up its compile sessions with
these same functions.

On x86_64 the HTP backend of the wheel is the HTP *simulator*: functionally real, very slow,
and unable to load context binaries built with shared weights (it crashes the process; we
refuse them before ONNX Runtime sees them).
"""

from __future__ import annotations

import platform
import re
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import onnxruntime as ort

from models.manifest import TargetBuild, TargetSpec
from runtime.errors import RuntimeModelError
from runtime.options import log_severity, thread_options

EP_NAME = "QNNExecutionProvider"

_lock = threading.Lock()
_registered = False


def is_simulator(machine: str | None = None) -> bool:
    """True where the wheel's HTP backend is the x86_64 simulator rather than a real NPU; `machine`:
    another host's platform.machine() (default this one's)."""
    return (machine or platform.machine()).lower() in ("x86_64", "amd64")


def _qnn_module():
    try:
        import onnxruntime_qnn
    except ImportError:
        raise RuntimeModelError(
            "the htp backend needs the onnxruntime-qnn package (pip install onnxruntime-qnn)") from None
    return onnxruntime_qnn


def installed() -> bool:
    """Whether the onnxruntime-qnn package is there (nothing is registered)."""
    try:
        _qnn_module()
    except RuntimeModelError:
        return False
    return True


def register() -> None:
    """Register the QNN plugin EP library with ONNX Runtime once per process."""
    global _registered
    with _lock:
        if _registered:
            return
        qnn = _qnn_module()
        if not any(d.ep_name == EP_NAME for d in ort.get_ep_devices()):
            library = qnn.get_library_path()
            try:
                ort.register_execution_provider_library(EP_NAME, library)
            except Exception as e:  # noqa: BLE001 - ORT raises its own Fail type
                if "already registered" not in str(e).lower():
                    raise RuntimeModelError(f"cannot load the QNN execution provider {library}: "
                                            f"{ort_message(e)}") from None
        _registered = True


def devices() -> list:
    """The QNN EP devices to run on: the NPU if ONNX Runtime reports one (on a Snapdragon device),
    else the single device the x86 simulator build reports."""
    register()
    found = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not found:
        raise RuntimeModelError("the QNN execution provider found no device (no Snapdragon NPU or HTP "
                                "simulator available); use --backend cpu")
    npu = [d for d in found if d.device.type == ort.OrtHardwareDeviceType.NPU]
    return npu or found[:1]


def htp_backend_path() -> str:
    path = _qnn_module().get_qnn_htp_path()
    if not Path(path).is_file():
        raise RuntimeModelError(f"the onnxruntime-qnn install has no HTP backend library ({path})")
    return path


def versions() -> dict[str, str]:
    """Versions that decide whether a context binary loads: ORT, the wheel, the QNN SDK in it."""
    qnn = _qnn_module()
    out = {"onnxruntime": ort.__version__}
    try:
        out["onnxruntime_qnn"] = metadata.version("onnxruntime-qnn")
    except metadata.PackageNotFoundError:
        out["onnxruntime_qnn"] = getattr(qnn, "__version__", "unknown")
    info = getattr(qnn, "build_and_package_info", None)
    if info is not None and getattr(info, "qnn_version", None):
        out["qnn_sdk"] = str(info.qnn_version)
    return out


def provider_options(*, soc_model: int | None = None, htp_arch: int | None = None,
                     performance_mode: str = "burst", fp16: bool = False,
                     extra: dict[str, str] | None = None) -> dict[str, str]:
    options = {"backend_path": htp_backend_path(), "htp_performance_mode": performance_mode}
    if soc_model is not None:
        options["soc_model"] = str(int(soc_model))
    if htp_arch is not None:
        options["htp_arch"] = str(int(htp_arch))
    if fp16:
        if soc_model is None:
            raise RuntimeModelError("running a float graph on HTP needs the SoC model: set HEXRAG_QNN_SOC_MODEL "
                                    "(e.g. 57 for SM8650), or load an EPContext build")
        options["enable_htp_fp16_precision"] = "1"
    for k, v in (extra or {}).items():
        options[k] = str(v)
    return options


def session_options(provider_opts: dict[str, str], *, log_level: str | int = "error",
                    threads: int | None = None, config: dict[str, str] | None = None) -> ort.SessionOptions:
    """SessionOptions with the QNN EP added for its device(s) and CPU fallback disabled; the host
    thread pool as runtime.options.thread_options sets it (no spinning: it idles while HTP runs)."""
    so = ort.SessionOptions()
    so.log_severity_level = log_severity(log_level)
    thread_options(so, threads)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, str(v))
    so.add_provider_for_devices(devices(), provider_opts)
    return so


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------

_ORT_PREFIX = re.compile(r"\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")
_SOURCE_LOC = re.compile(r"/\S+\.(?:cc|h|cpp):\d+\s+[^\[]*")


def ort_message(e: BaseException | str) -> str:
    """The innermost ORT message of an exception (or its text), on one line, without source locations."""
    text = str(e)
    parts = _ORT_PREFIX.split(text)
    msg = parts[-1] if parts else text
    msg = _SOURCE_LOC.sub("", msg)
    return " ".join(msg.split()) or (type(e).__name__ if isinstance(e, BaseException) else "")


# ------------------------------------------------------------------------------------------------
# EPContext models
# ------------------------------------------------------------------------------------------------

_GRAPH_NAME = re.compile(rb"QNNExecutionProvider_[A-Za-z0-9_]*_\d+_\d+")


@dataclass(frozen=True)
class GraphKind:
    ep_context: bool  # an EPContext model (precompiled) rather than a plain ONNX graph
    quantized: bool  # plain graph with QDQ nodes (so no fp16 precision flag is needed)
    binaries: tuple[Path, ...]  # external context binaries an EPContext model references
    embedded: bool = False  # EPContext with the binary inside the ONNX file
    sdk_version: str | None = None  # `ep_sdk_version` of an EPContext model, e.g. 'v2.51.0.260929181845'


def inspect_graph(path: Path) -> GraphKind:
    """Classify a graph file without loading its weights."""
    import onnx  # the runtime already depends on it through the model format

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf/IO errors
        raise RuntimeModelError(f"cannot read graph {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    ops = {n.op_type for n in model.graph.node}
    if "EPContext" in ops:
        bins, embedded, sdk = [], False, None
        for node in model.graph.node:
            if node.op_type != "EPContext":
                continue
            attrs = {a.name: a for a in node.attribute}
            if "ep_sdk_version" in attrs:
                sdk = attrs["ep_sdk_version"].s.decode()
            if "embed_mode" in attrs and attrs["embed_mode"].i == 1:
                embedded = True
            elif "ep_cache_context" in attrs:
                bins.append(path.parent / attrs["ep_cache_context"].s.decode())
        return GraphKind(True, False, tuple(dict.fromkeys(bins)), embedded, sdk)
    return GraphKind(False, bool(ops & {"QuantizeLinear", "DequantizeLinear"}), ())


def binary_graph_count(path: Path, head: int = 1 << 16) -> int:
    """Distinct QNN graphs named in the header of a context binary (>1: built with shared weights)."""
    with open(path, "rb") as f:
        data = f.read(head)
    return len(set(_GRAPH_NAME.findall(data)))


# ------------------------------------------------------------------------------------------------
# The builds a manifest's `target` section lists (build_scripts/compile.py writes them)
# ------------------------------------------------------------------------------------------------

def select_build(spec: TargetSpec, target: str | None = None, variant: str | None = None) -> TargetBuild:
    """Pick the HTP build to load from a manifest's `target` section.

    target: a build's target name (sm8650 …); default the only one built.
    variant: "sim" (unshared binaries) on the x86 simulator, "shared" on a device; falls back
    to "sim" on a device when no shared build exists (unshared binaries load everywhere).
    """
    builds = spec.htp_builds
    if not builds:
        raise RuntimeModelError("this model has no HTP build; compile it for a target first, or use --backend cpu")
    names = sorted({b.target for b in builds})
    if target is None:
        if len(names) > 1:
            raise RuntimeModelError(f"this model has HTP builds for {', '.join(names)}: choose one with "
                                    "HEXRAG_QNN_TARGET")
        target = names[0]
    candidates = [b for b in builds if b.target == target]
    if not candidates:
        raise RuntimeModelError(f"this model has no HTP build for {target} (built: {', '.join(names)})")
    order = [variant] if variant else (["sim"] if is_simulator() else ["shared", "sim"])
    for v in order:
        for b in candidates:
            if b.variant == v:
                return b
    have = ", ".join(b.variant for b in candidates)
    raise RuntimeModelError(f"this model's {target} HTP build has no {'/'.join(order)} variant (built: {have})"
                            + ("; the x86 simulator needs the unshared 'sim' build" if is_simulator() else ""))
