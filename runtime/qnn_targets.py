"""The Snapdragon HTP targets hexrag builds for and loads on: QNN SoC id, HTP architecture, chip.

Pure data, read by the build (which SoC to compile for), the runtime (which build to load), the
device probe and bundles: one table for all of them.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from runtime.errors import RuntimeModelError


class UnknownTargetError(RuntimeModelError, ValueError):
    """A target name, alias or SoC id that is not in the table."""



class Target(NamedTuple):
    soc_model: int  # QNN SoC id (provider option soc_model)
    htp_arch: int  # HTP architecture (v75 -> 75; provider option htp_arch)
    name: str  # canonical key, also the directory name under htp/
    chip: str
    float_ok: bool = True  # the HTP runs float graphs (fp16); False: quantize first


_TARGET_LIST = [
    # float_ok=False measured with QNN 2.51: every float graph fails to finalize with
    # QNN_COMMON_ERROR_MEM_ALLOC (1002) on SM8350's v68 HTP, which has no fp16 unit.
    (Target(30, 68, "sm8350", "Snapdragon 888", float_ok=False), ("888", "sd888", "snapdragon888")),
    (Target(36, 69, "sm8450", "Snapdragon 8 Gen 1"), ("8gen1",)),
    (Target(43, 73, "sm8550", "Snapdragon 8 Gen 2"), ("8gen2",)),
    (Target(57, 75, "sm8650", "Snapdragon 8 Gen 3"), ("8gen3",)),
    (Target(60, 73, "sc8380xp", "Snapdragon X Elite"), ("xelite", "x-elite")),
    (Target(69, 79, "sm8750", "Snapdragon 8 Elite"), ("8elite",)),
    (Target(87, 81, "sm8850", "Snapdragon 8 Elite Gen 5"), ("8elite-gen5", "8elitegen5")),
    # SA8295P: soc id 39 is QNN's SA8295 (ExecuTorch's QcomChipset.SA8295 = 39, v68); QNN 2.51
    # compiles float graphs for it (unlike SM8350). Not verified against a device.
    (Target(39, 68, "sa8295p", "Snapdragon SA8295P (automotive)"), ("sa8295",)),
]

TARGETS: dict[str | int, Target] = {}
for _t, _aliases in _TARGET_LIST:
    TARGETS[_t.name] = _t
    TARGETS[_t.soc_model] = _t
    for _a in _aliases:
        TARGETS[_a] = _t


def resolve_target(spec: str | int | Target) -> Target:
    """A Target from its name (sm8650), alias (8gen3), or QNN soc id (57 / "57")."""
    if isinstance(spec, Target):
        return spec
    if isinstance(spec, int) or (str(spec).strip().isdigit() and int(spec) in TARGETS):
        key: str | int = int(spec)
    else:
        key = re.sub(r"^snapdragon[\s_-]*", "", str(spec).strip().lower()).replace(" ", "").replace("_", "-")
        key = key if key in TARGETS else key.replace("-", "")
    if key not in TARGETS:
        names = ", ".join(sorted(t.name for t, _ in _TARGET_LIST))
        raise UnknownTargetError(f"unknown HTP target {spec!r} (choose from {names}, or a QNN soc_model number)")
    return TARGETS[key]
