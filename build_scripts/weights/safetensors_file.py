"""Minimal safetensors reader on numpy, with BF16 support (numpy has no bfloat16 and
`safetensors.numpy` refuses it, while most Hugging Face LLM checkpoints are BF16)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from build_scripts.errors import BuildError, UnsupportedModelError

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64,
           "I64": np.int64, "I32": np.int32}


class SafetensorsFile:
    def __init__(self, path: Path):
        self.path = path
        try:
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
        except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BuildError(f"{path} is not a readable safetensors file ({e})") from None
        header.pop("__metadata__", None)
        self._header = header
        self._data_start = 8 + n
        self._mm = np.memmap(path, dtype=np.uint8, mode="r")
        for name, info in header.items():
            end = self._data_start + info["data_offsets"][1]
            if end > len(self._mm):
                raise BuildError(f"truncated safetensors file {path.name}: tensor {name} ends past the file")

    @property
    def names(self) -> list[str]:
        return list(self._header)

    def tensor(self, name: str) -> np.ndarray:
        info = self._header[name]
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise UnsupportedModelError(f"tensor {name} has dtype {info['dtype']}, which hexrag cannot read")
        start, end = (self._data_start + o for o in info["data_offsets"])
        raw = np.frombuffer(self._mm[start:end], dtype=dtype).reshape(info["shape"])
        if info["dtype"] == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(np.float32)


def open_safetensors_dir(directory: Path) -> dict[str, SafetensorsFile]:
    """Tensor name -> the file holding it, for single-file and sharded (index.json) checkpoints."""
    index = directory / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = {f: SafetensorsFile(directory / f) for f in sorted(set(weight_map.values()))}
        return {name: files[f] for name, f in weight_map.items()}
    paths = sorted(directory.glob("*.safetensors"))
    if not paths:
        raise BuildError(f"{directory} has no *.safetensors weights")
    out: dict[str, SafetensorsFile] = {}
    for p in paths:
        st = SafetensorsFile(p)
        out.update({n: st for n in st.names})
    return out
