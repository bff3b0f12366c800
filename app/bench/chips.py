"""Published numbers the NPU estimates stand on: each chip's DRAM bandwidth and Qualcomm AI Hub's
measured LLM results on devices. Every entry names its source; docs/benchmarks.md cites them.

Bandwidth = transfer rate × bus width. Phone chips (8-series) have a 64-bit (4 × 16-bit) LPDDR bus;
their product pages give the memory clock (MHz, double data rate), so MT/s = 2 × MHz.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chip:
    target: str  # build_scripts.compile target name
    memory: str
    bandwidth_gbs: float
    source: str


def _gbs(mhz: float, bus_bits: int) -> float:
    return round(2 * mhz * bus_bits / 8 / 1000, 1)


def _phone(target: str, memory: str, mhz: float, source: str) -> Chip:
    return Chip(target, f"{memory} {mhz:g} MHz, 64-bit", _gbs(mhz, 64), source)


_SD8GEN1 = "https://tipsclear.com/qualcomm-snapdragon-8-gen-1-deep-dive-specs-features-and-more/"  # 888 too
_SD8GEN3 = "https://droidholic.com/snapdragon-8-gen-3-launched/"  # 8 Gen 2 too
CHIPS: dict[str, Chip] = {c.target: c for c in (
    _phone("sm8350", "LPDDR5", 3200, _SD8GEN1),
    _phone("sm8450", "LPDDR5", 3200, _SD8GEN1),
    _phone("sm8550", "LPDDR5X", 4200, _SD8GEN3),
    _phone("sm8650", "LPDDR5X", 4800, _SD8GEN3),
    _phone("sm8750", "LPDDR5X", 5300,
           "https://hi-tech.ua/en/qualcomm-snapdragon-8-elite-or-8-gen-4-is-the-new-top-processor-for-smartphones/"),
    _phone("sm8850", "LPDDR5X", 5300, "https://www.lowyat.net/2025/366994/qualcomm-snapdragon-8-elite-gen-5"),
    Chip("sc8380xp", "LPDDR5X 8533 MT/s, 8 × 16-bit (stated 136 GB/s)", 136.0,
         "https://mspoweruser.com/qualcomm-snapdragon-x-elite-soc-windows-pcs"),
    Chip("sa8295p", "LPDDR4X 2092.8 MHz, 8 × 16-bit", _gbs(2092.8, 128),
         "https://e-com-net.com/article/1714844676231606272.htm"),
)}

_AIHUB = "https://github.com/quic/ai-hub-models/blob/33c3d0323591a9165457ff564b0a0ec8ef09fccb/qai_hub_models/models/{}/perf.yaml"


@dataclass(frozen=True)
class DeviceResult:
    """One published AI Hub result (Genie or QNN context-binary runtime, context 4096 unless said;
    TTFT from a 128-token prompt to a full context)."""

    model: str
    params_b: float  # parameters, billions
    precision: str
    target: str
    tok_s: float
    ttft_ms: tuple[float, float]
    source: str
    context: int = 4096

    def weights_ceiling(self, bandwidth_gbs: float) -> float:
        """tok/s if every step read 4-bit weights at full bandwidth (KV and the w8 layers left out)."""
        return bandwidth_gbs * 1e9 / (self.params_b * 1e9 * 0.5)


def _results(model: str, params_b: float, aihub_id: str, rows) -> list[DeviceResult]:
    """rows: (precision, target, tok/s, (TTFT min, max) ms[, context])"""
    return [DeviceResult(model, params_b, r[0], r[1], r[2], r[3], _AIHUB.format(aihub_id), *r[4:]) for r in rows]


AI_HUB: list[DeviceResult] = [
    *_results("Llama-3.2-1B-Instruct", 1.24, "llama_v3_2_1b_instruct", [
        ("w4a16", "sm8750", 53.64, (37.1, 1186.1)), ("w4a16", "sm8850", 64.04, (30.9, 990.0)),
        ("w4", "sm8750", 33.74, (81.2, 2599.8)), ("w4", "sa8295p", 11.0, (225.0, 7200.0))]),
    *_results("Llama-3.2-3B-Instruct", 3.21, "llama_v3_2_3b_instruct", [
        ("w4a16", "sm8750", 23.47, (88.2, 2822.3)), ("w4a16", "sm8850", 29.48, (58.0, 1856.5)),
        ("w4a16", "sc8380xp", 18.42, (125.9, 4030.0)), ("w4", "sa8295p", 3.52, (373.1, 2984.9), 1024)]),
    *_results("Qwen2.5-1.5B-Instruct", 1.54, "qwen2_5_1_5b_instruct", [("w4", "sm8750", 23.49, (95.4, 3051.9))]),
    *_results("Qwen2.5-7B-Instruct", 7.62, "qwen2_5_7b_instruct", [("w4a16", "sm8750", 15.40, (135.7, 4340.9))]),
]
