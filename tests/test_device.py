"""`hexrag device` and the backend choice: the SoC read from a sysfs tree, the rule `--backend auto`
follows on a device (with the probe's outcome given), and the real report on this host."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from app.device import HtpStatus, choose_backend, read_soc, require_htp, resolve_backend
from runtime import kquant
from runtime.errors import RuntimeModelError
from runtime.qnn_targets import TARGETS


def _soc0(root, **fields):
    d = root / "soc0"
    d.mkdir(parents=True)
    for k, v in fields.items():
        (d / k).write_text(f"{v}\n")
    return d


def _model_with_builds(src, dst, builds):
    """A copy of a built model's manifest whose `target` records the given (target, variant) builds."""
    dst.mkdir()
    m = json.loads((src / "manifest.json").read_text())
    m["target"] = {"backend": "htp", "builds": [{"target": t, "variant": v, "chip": TARGETS[t].chip, "graphs": {},
                                                 "soc_model": TARGETS[t].soc_model, "htp_arch": TARGETS[t].htp_arch}
                                                for t, v in builds]}
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


def _no_probe():
    raise AssertionError("the HTP backend must not be probed for this choice")


def test_read_soc_maps_kernel_ids_to_targets(tmp_path):
    sm8650 = read_soc(_soc0(tmp_path / "a", vendor="Qualcomm", family="Snapdragon", machine="SM8650", soc_id=557))
    assert (sm8650.target, sm8650.soc_model, sm8650.htp_arch, sm8650.chip) == ("sm8650", 57, 75, "Snapdragon 8 Gen 3")
    x_elite = read_soc(_soc0(tmp_path / "b", vendor="Qualcomm", family="Snapdragon", machine="X1E80100", soc_id=555))
    assert (x_elite.target, x_elite.soc_model, x_elite.htp_arch) == ("sc8380xp", 60, 73)
    # an Android kernel: a codename, an id the table does not hold
    android = read_soc(_soc0(tmp_path / "c", family="Snapdragon", machine="Pineapple", soc_id=12345))
    assert android.target == "sm8650"
    other = read_soc(_soc0(tmp_path / "d", vendor="Qualcomm", family="Snapdragon", machine="SM6115", soc_id=444))
    assert other.soc_id == 444 and other.target is None and other.soc_model is None
    assert read_soc(tmp_path / "missing") is None


def test_auto_picks_htp_only_on_a_device_with_matching_builds(tiny_builds, tmp_path):
    soc = read_soc(_soc0(tmp_path / "sys", vendor="Qualcomm", family="Snapdragon", machine="SM8650", soc_id=557))
    both = _model_with_builds(tiny_builds["llama"], tmp_path / "both", [("sm8650", "shared"), ("sm8750", "shared")])
    other = _model_with_builds(tiny_builds["bert"], tmp_path / "other", [("sm8750", "sim")])
    loads = HtpStatus(installed=True, loads=True, simulator=False, device_type="NPU")

    choice = choose_backend([both], machine="aarch64", soc=soc, probe=lambda: loads)
    assert (choice.backend, choice.target) == ("htp", "sm8650") and "Snapdragon 8 Gen 3" in choice.reason
    # one model without a build for this SoC sends everything to the CPU, naming it (before any probe)
    choice = choose_backend([both, other], machine="aarch64", soc=soc, probe=_no_probe)
    assert choice.backend == "cpu" and str(other) in choice.reason and "sm8750/sim" in choice.reason
    # the backend does not load: CPU, with the backend's own message
    broken = HtpStatus(installed=True, simulator=False, error="Failed to open libcdsprpc.so")
    choice = choose_backend([both], machine="aarch64", soc=soc, probe=lambda: broken)
    assert choice.backend == "cpu" and "libcdsprpc.so" in choice.reason
    # the x86 simulator never counts as an NPU, whatever the builds
    choice = choose_backend([both], machine="x86_64", soc=None, probe=_no_probe)
    assert choice.backend == "cpu" and "simulator" in choice.reason
    # aarch64 without a Qualcomm SoC (a Raspberry Pi, qemu)
    choice = choose_backend([both], machine="aarch64", soc=None, probe=_no_probe)
    assert choice.backend == "cpu" and "soc0" in choice.reason


def test_backend_htp_without_npu_or_simulator_is_one_line(tmp_path, monkeypatch):
    with pytest.raises(RuntimeModelError, match="no Qualcomm SoC") as info:
        require_htp(machine="aarch64", soc=None)
    assert "\n" not in str(info.value) and "/sys/devices/soc0" in str(info.value)
    with pytest.raises(RuntimeModelError, match="no Snapdragon NPU and no HTP simulator"):
        require_htp(machine="riscv64", soc=None)
    assert require_htp(machine="x86_64", soc=None).backend == "htp"  # the simulator, as asked
    assert resolve_backend("cpu", [], machine="aarch64").reason == "asked for"
    monkeypatch.setitem(sys.modules, "onnxruntime_qnn", None)
    with pytest.raises(RuntimeModelError, match="onnxruntime-qnn"):
        require_htp(machine="x86_64", soc=None)


def test_cli_device_json_on_this_host(tiny_builds, tmp_path):
    pytest.importorskip("onnxruntime_qnn")
    model = _model_with_builds(tiny_builds["llama"], tmp_path / "m", [("sm8650", "shared")])
    proc = subprocess.run([sys.executable, "-m", "app.cli", "device", "--json", "--model", str(model)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # stdout is pure JSON although QNN logs verbosely in the probe
    assert report["machine"] == platform.machine()
    assert report["cpu_kernels"] == kquant.kernel_path()  # what pip install -e . built, or None
    assert report["models"][0]["builds"] == ["sm8650/shared"]
    if platform.machine() == "x86_64":
        assert report["soc"] is None and report["models"][0]["match"] is None
        htp = report["htp"]
        # the probe really ran a graph on the simulator, whose log names its default SoC
        assert htp["loads"] and htp["simulator"] and htp["device_type"] == "CPU"
        assert htp["reported_soc"] == "SM8350" and htp["reported_arch"] == 68
        assert report["auto"]["backend"] == "cpu" and "simulator" in report["auto"]["reason"]
    text = subprocess.run([sys.executable, "-m", "app.cli", "device", "--model", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and "not a hexrag model directory" in text.stdout
    assert text.stdout.splitlines()[-1].startswith("auto ")


def test_ask_with_backend_auto_says_what_it_picked(tiny_builds):
    proc = subprocess.run([sys.executable, "-m", "app.cli", "ask", "hello", "--json", "--no-rag", "--backend", "auto",
                           "--llm", str(tiny_builds["llama"])], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["completion_tokens"] > 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("hexrag: backend")]
    expected = "cpu: x86_64 host" if platform.machine() == "x86_64" else "cpu"
    assert len(lines) == 1 and lines[0].startswith(f"hexrag: backend {expected}"), proc.stderr
