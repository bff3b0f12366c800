"""What hexrag sees on this machine, and which backend `--backend auto` picks there.

A real Snapdragon NPU is recognised by three facts together, cheapest first:
1. the CPU is aarch64 (on x86_64 the QNN HTP backend of the wheel is the simulator: functionally
   real but 100-1000x slower than a device, so it never counts as an NPU for `auto`);
2. `/sys/devices/soc0` names a Qualcomm SoC whose kernel `soc_id` is one of the HTP targets hexrag
   builds for (the table below, mapped onto `build_scripts.compile`'s target table);
3. the QNN HTP backend loads and runs a one-op graph (in a child process, so a crashing driver
   cannot take the caller down).
`auto` then also needs every model to have an HTP build for that target; otherwise it is the CPU.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from runtime import kquant
from runtime.qnn_targets import TARGETS, resolve_target
from app.settings import Settings
from models.manifest import ManifestError, TargetBuild, TargetSpec, load_manifest
from runtime.errors import RuntimeModelError

SOC0 = Path("/sys/devices/soc0")

# Linux kernel soc_id (include/dt-bindings/arm/qcom,ids.h) -> hexrag target. Only the exact parts
# QNN knows by these soc_model numbers: a sibling part (SM8475, QCS8550 ...) has its own QNN id.
LINUX_SOC_IDS = {439: "sm8350", 457: "sm8450", 480: "sm8450", 482: "sm8450", 519: "sm8550", 557: "sm8650",
                 555: "sc8380xp", 618: "sm8750", 660: "sm8850", 460: "sa8295p"}
# Android (downstream) kernels may name the chip by its codename in soc0/machine
CODENAMES = {"lahaina": "sm8350", "waipio": "sm8450", "kalama": "sm8550", "pineapple": "sm8650",
             "sun": "sm8750", "canoe": "sm8850"}
ARM64 = ("aarch64", "arm64")
# where the FastRPC channel to the Hexagon DSP shows up; the HTP backend needs one of these
FASTRPC = ("/dev/fastrpc-cdsp", "/dev/fastrpc-cdsp-secure", "/dev/adsprpc-smd")
PROBE_TIMEOUT_S = 120.0


class SocInfo(BaseModel):
    vendor: str | None = None
    family: str | None = None
    machine: str | None = None  # the kernel's chip name (SM8650, or a codename on Android)
    soc_id: int | None = None  # the kernel's id, not QNN's soc_model
    target: str | None = None  # hexrag target name when the chip is one
    chip: str | None = None
    soc_model: int | None = None  # QNN's id of the chip
    htp_arch: int | None = None


class HtpStatus(BaseModel):
    installed: bool  # onnxruntime-qnn imports
    loads: bool = False  # a one-op graph ran on the HTP backend with CPU fallback disabled
    simulator: bool  # the backend is the x86_64 simulator
    device_type: str | None = None  # ONNX Runtime's type of the QNN device: NPU on a device, CPU on the simulator
    reported_soc: str | None = None  # the SoC the backend's own log names (the simulator defaults to SM8350)
    reported_arch: int | None = None  # the HTP arch the backend prepared the probe graph for
    fastrpc: list[str] = []  # FastRPC device nodes present
    versions: dict[str, str] = {}
    error: str | None = None


class ModelTargets(BaseModel):
    path: str
    name: str | None = None
    builds: list[str] = []  # "<target>/<variant>"
    match: str | None = None  # the build this machine's SoC would load
    error: str | None = None


class BackendChoice(BaseModel):
    backend: Literal["cpu", "htp"]
    target: str | None = None  # the HTP build to load (None: the only one, or $HEXRAG_QNN_TARGET)
    reason: str

    def line(self) -> str:
        """The one line a command prints about its choice."""
        where = f" ({self.target})" if self.target else ""
        return f"hexrag: backend {self.backend}{where}: {self.reason}"


class DeviceReport(BaseModel):
    machine: str
    system: str
    cpu_kernels: str | None = None  # the K-quant kernels' vector path here (runtime/kquant); None: not built
    soc: SocInfo | None
    htp: HtpStatus
    models: list[ModelTargets]
    auto: BackendChoice


# ---- facts ---------------------------------------------------------------------------------------

def read_soc(sysfs: Path = SOC0) -> SocInfo | None:
    """The SoC the kernel describes in `sysfs` (None when there is no such directory)."""
    if not sysfs.is_dir():
        return None

    def field(name: str) -> str | None:
        try:
            return (sysfs / name).read_text().strip() or None
        except OSError:
            return None

    soc_id = field("soc_id")
    info = SocInfo(vendor=field("vendor"), family=field("family"), machine=field("machine"),
                   soc_id=int(soc_id) if soc_id and soc_id.isdigit() else None)
    name = LINUX_SOC_IDS.get(info.soc_id) if info.soc_id is not None else None
    machine = (info.machine or "").lower()
    name = name or (machine if machine in TARGETS else CODENAMES.get(machine))
    if name:
        t = resolve_target(name)
        info.target, info.chip, info.soc_model, info.htp_arch = t.name, t.chip, t.soc_model, t.htp_arch
    return info


def is_qualcomm(soc: SocInfo | None) -> bool:
    return soc is not None and any("qualcomm" in (v or "").lower() or (v or "").lower() == "snapdragon"
                                   for v in (soc.vendor, soc.family))


def device_build(spec: TargetSpec, target: str) -> TargetBuild | None:
    """The build of a manifest's `target` section a device with this SoC loads: the shared one (one
    weights binary for prefill and decode), else an unshared one (runtime.qnn.select_build's order)."""
    for variant in ("shared", "sim"):
        for b in spec.htp_builds:
            if b.target == target and b.variant == variant:
                return b
    return None


def model_targets(model_dir: Path, target: str | None) -> ModelTargets:
    """The HTP builds a model directory holds, and the one `target` would load."""
    out = ModelTargets(path=str(model_dir))
    try:
        m = load_manifest(model_dir, verify=False)  # hashing is the loader's job; this only reads
    except ManifestError as e:
        out.error = str(e)
        return out
    out.name = m.name
    out.builds = [f"{b.target}/{b.variant}" for b in m.target.htp_builds]
    build = device_build(m.target, target) if target else None
    if build:
        out.match = f"{build.target}/{build.variant}"
    return out


_SOC_LINE = re.compile(r"Detected Snapdragon SOC (\S+)")
_ARCH_LINE = re.compile(r"DSP arch \(min_arch\) = (\d+)")


def probe_htp(soc: SocInfo | None = None, timeout: float = PROBE_TIMEOUT_S) -> HtpStatus:
    """Whether the QNN HTP backend loads here: a one-op graph run in a child process, whose QNN log
    says which SoC and HTP arch the backend took."""
    from runtime import qnn

    status = HtpStatus(installed=False, simulator=qnn.is_simulator(), fastrpc=[p for p in FASTRPC if Path(p).exists()])
    if not qnn.installed():
        status.error = "the onnxruntime-qnn package is not installed"
        return status
    status.installed = True
    with tempfile.TemporaryDirectory(prefix="hexrag-probe-") as tmp:
        out = Path(tmp) / "probe.json"
        args = [sys.executable, "-m", "app.device", "--probe", str(out)]
        if soc and soc.soc_model:
            args.append(str(soc.soc_model))
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            status.error = f"the HTP probe did not finish in {timeout:.0f} s"
            return status
        result = json.loads(out.read_text()) if out.is_file() else {}
    status.loads = bool(result.get("ok"))
    status.device_type, status.versions = result.get("device_type"), result.get("versions", {})
    status.error = result.get("error") or (None if status.loads else
                                           f"the HTP probe exited with code {proc.returncode}")
    log = proc.stderr
    if m := _SOC_LINE.search(log):
        status.reported_soc = m.group(1)
    if m := _ARCH_LINE.search(log):
        status.reported_arch = int(m.group(1))
    return status


def _probe_child(out: str, soc_model: str | None) -> None:
    """Runs in the child: a float Add on HTP at QNN's verbose log level (the parent reads the log)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from runtime import qnn

    result: dict = {"ok": False}
    ort.set_default_logger_severity(0)  # QNN's own log (which SoC, which arch) follows ORT's default logger
    try:
        result["versions"] = qnn.versions()
        devices = qnn.devices()
        result["device_type"] = str(devices[0].device.type).rsplit(".", 1)[-1]
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
        graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "probe", [x], [y])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        soc = int(soc_model) if soc_model else None
        options = qnn.provider_options(soc_model=soc, fp16=soc is not None)
        session = ort.InferenceSession(model.SerializeToString(), qnn.session_options(options, log_level=0))
        got = session.run(None, {"x": np.ones((1, 8), np.float32)})[0]
        result["ok"] = bool(np.allclose(got, 2.0))
        if not result["ok"]:
            result["error"] = "the HTP probe graph computed a wrong result"
    except Exception as e:  # noqa: BLE001 - any failure means "does not load", said in one line
        result["error"] = qnn.ort_message(e)
    Path(out).write_text(json.dumps(result))


# ---- the choice ----------------------------------------------------------------------------------

def choose_backend(models: list[Path], *, machine: str, soc: SocInfo | None,
                   probe: Callable[[], HtpStatus]) -> BackendChoice:
    """`--backend auto`: HTP where this is a real Snapdragon device, the HTP backend loads and every
    model has a build for its SoC; else the CPU, with the reason."""
    from runtime import qnn  # onnxruntime: imported when a backend is chosen, not by every command

    if machine.lower() not in ARM64:
        why = "the HTP backend here is the x86 simulator (far too slow)" if qnn.is_simulator(machine) \
            else "no Snapdragon NPU on this CPU"
        return BackendChoice(backend="cpu", reason=f"{machine} host: {why}")
    if not is_qualcomm(soc):
        return BackendChoice(backend="cpu", reason=f"no Qualcomm SoC in {SOC0}")
    if not soc.target:
        return BackendChoice(backend="cpu", reason=f"SoC {soc.machine or '?'} (soc_id {soc.soc_id}) is not an "
                                                   f"HTP target hexrag builds for")
    for m in models:
        t = model_targets(m, soc.target)
        if not t.match:
            built = ", ".join(t.builds) or "none"
            return BackendChoice(backend="cpu", reason=f"{m} has no {soc.target} HTP build (built: {built})")
    status = probe()
    if not status.loads:
        return BackendChoice(backend="cpu", reason=f"the QNN HTP backend did not load on {soc.chip}: {status.error}")
    return BackendChoice(backend="htp", target=soc.target,
                         reason=f"{soc.chip} NPU (HTP v{soc.htp_arch}) and every model has its build")


def require_htp(*, machine: str, soc: SocInfo | None) -> BackendChoice:
    """`--backend htp` asked for explicitly: the simulator on x86_64, the SoC's build on a device;
    elsewhere one line naming what is missing."""
    from runtime import qnn

    if not qnn.installed():
        raise RuntimeModelError("--backend htp needs the onnxruntime-qnn package (pip install onnxruntime-qnn); "
                                "use --backend cpu or auto")
    if qnn.is_simulator(machine):
        return BackendChoice(backend="htp", reason="asked for; this x86_64 host runs the HTP simulator (tiny models only)")
    if machine.lower() not in ARM64:
        raise RuntimeModelError(f"--backend htp: no Snapdragon NPU and no HTP simulator on a {machine} CPU; "
                                f"use --backend cpu or auto")
    if not is_qualcomm(soc):
        raise RuntimeModelError(f"--backend htp: this {machine} machine has no Qualcomm SoC ({SOC0} is missing or "
                                f"names another vendor) and the HTP simulator runs only on x86_64; "
                                f"use --backend cpu or auto")
    if not soc.target:
        raise RuntimeModelError(f"--backend htp: SoC {soc.machine or '?'} (soc_id {soc.soc_id}) is not an HTP target "
                                f"hexrag builds for; use --backend cpu or auto")
    return BackendChoice(backend="htp", target=soc.target, reason=f"asked for; {soc.chip} (HTP v{soc.htp_arch})")


def resolve_backend(requested: str, models: list[Path], *, machine: str | None = None,
                    sysfs: Path = SOC0) -> BackendChoice:
    """The backend a command runs on: `cpu`, `htp` (checked) or `auto` (chosen)."""
    machine = machine or platform.machine()
    if requested == "cpu":
        return BackendChoice(backend="cpu", reason="asked for")
    soc = read_soc(sysfs)
    if requested == "htp":
        return require_htp(machine=machine, soc=soc)
    return choose_backend(models, machine=machine, soc=soc, probe=lambda: probe_htp(soc))


def settle(settings: Settings, rag: bool = True) -> tuple[Settings, BackendChoice]:
    """Settings with the backend decided (`cpu` or `htp`, and the HTP build to load), and the choice
    with its reason for the command to print."""
    models = [settings.llm, settings.embedder] if rag else [settings.llm]
    choice = resolve_backend(settings.backend, models)
    target = settings.qnn_target or choice.target
    return settings.model_copy(update={"backend": choice.backend, "qnn_target": target}), choice


def device_report(models: list[Path] | None = None, sysfs: Path = SOC0) -> DeviceReport:
    """Everything hexrag sees here: CPU, SoC, the HTP backend (probed), the models' builds, `auto`'s pick."""
    machine, models = platform.machine(), [Path(m) for m in models or []]
    soc = read_soc(sysfs)
    status = probe_htp(soc)
    return DeviceReport(
        machine=machine, system=_system(), cpu_kernels=kquant.kernel_path(), soc=soc, htp=status,
        models=[model_targets(m, soc.target if soc else None) for m in models],
        auto=choose_backend(models, machine=machine, soc=soc, probe=lambda: status))


def _system() -> str:
    # Android reports itself as Linux; its property service leaves this file behind
    return "Android" if Path("/system/build.prop").is_file() else platform.system()


if __name__ == "__main__" and len(sys.argv) >= 3 and sys.argv[1] == "--probe":
    _probe_child(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
