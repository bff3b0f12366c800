"""Reading GGUF files: metadata as plain Python values, tensors dequantized to float32.

The `gguf` package does the parsing; this module adds what a build needs on top:
a metadata-only mode (the 1.5B model's first 50 MiB part holds all of its metadata),
a clear error for truncated files, and a whitelist of tensor types we can dequantize.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

from build_scripts.errors import BuildError, UnsupportedModelError

T = GGMLQuantizationType
SUPPORTED_TYPES = {T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K}


class _MetadataOnlyReader(GGUFReader):
    """Parses the header and tensor table but maps no tensor data."""

    def _build_tensors(self, start_offs: int, fields: list) -> None:  # noqa: D401 - gguf hook
        self.tensors = []


class _CheckedReader(GGUFReader):
    """Refuses a file whose tensor table points past its end (a truncated download)."""

    def _build_tensors(self, start_offs: int, fields: list) -> None:
        size = len(self.data)
        for field in fields:
            _, name, _, dims, raw_type, offset = field.parts
            name = bytes(name).decode()
            try:
                qtype = GGMLQuantizationType(int(raw_type[0]))
            except ValueError:
                raise UnsupportedModelError(f"tensor {name}: unknown GGML type id {int(raw_type[0])}") from None
            block, type_size = GGML_QUANT_SIZES[qtype]
            end = start_offs + int(offset[0]) + int(np.prod(dims)) * type_size // block
            if end > size:
                raise BuildError(
                    f"truncated GGUF: tensor {name} ends at byte {end} but the file has {size} bytes"
                )
        super()._build_tensors(start_offs, fields)


def _open(path: Path, reader_cls: type[GGUFReader]) -> GGUFReader:
    if not path.is_file():
        raise BuildError(f"no such file: {path}")
    try:
        return reader_cls(os.fspath(path))
    except BuildError:
        raise
    except (ValueError, IndexError, OverflowError, UnicodeDecodeError) as e:
        # gguf raises bare ValueError/IndexError when the header itself is cut short or not GGUF
        with open(path, "rb") as f:
            is_gguf = f.read(4) == b"GGUF"
        what = "truncated GGUF: the header ends early" if is_gguf else "not a GGUF file"
        raise BuildError(f"{path}: {what} ({e})") from None


def read_gguf_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """All key/value metadata of a GGUF file (strings decoded, arrays as lists); tensors untouched."""
    reader = _open(Path(path), _MetadataOnlyReader)
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


class GGUFFile:
    """A complete GGUF file: metadata plus lazily dequantized tensors."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._reader = _open(self.path, _CheckedReader)
        self.metadata = {k: f.contents() for k, f in self._reader.fields.items() if not k.startswith("GGUF.")}
        self._tensors = {t.name: t for t in self._reader.tensors}

    @property
    def tensor_names(self) -> list[str]:
        return list(self._tensors)

    def tensor_type(self, name: str) -> GGMLQuantizationType:
        return self._tensors[name].tensor_type

    def has(self, name: str) -> bool:
        return name in self._tensors

    def check_types(self) -> None:
        """Refuse up front a file holding a tensor type we cannot dequantize."""
        for t in self._tensors.values():
            if t.tensor_type not in SUPPORTED_TYPES:
                raise UnsupportedModelError(
                    f"tensor {t.name} uses GGML type {t.tensor_type.name}, which hexrag cannot dequantize "
                    f"(supported: {', '.join(sorted(q.name for q in SUPPORTED_TYPES))})"
                )

    def raw(self, name: str) -> tuple[str, np.ndarray]:
        """(type name, the stored bytes as uint8 rows [N, row bytes]) for quantized tensors; float
        tensors come back as their float rows."""
        t = self._tensors[name]
        return t.tensor_type.name, t.data

    def tensor(self, name: str) -> np.ndarray:
        """Dequantized float32 array in numpy (row-major, GGUF dims reversed) order."""
        t = self._tensors.get(name)
        if t is None:
            raise UnsupportedModelError(f"{self.path.name}: missing tensor {name}")
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        return np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
