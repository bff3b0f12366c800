"""Block-quantized linear weights in ONNX Runtime's MatMulNBits layout (the CPU target).

MatMulNBits computes A·Bᵀ with B [N, K] stored as [N, K/block, block·bits/8] unsigned codes,
one float scale and one integer zero point per block: value = (code − zero) · scale. The GGUF
types llama.cpp models ship in map onto it bit-exactly, so a CPU build keeps the quality of
the file it came from (no float round trip, no second rounding):

    Q4_0  (code − 8)·d                 4-bit, block 32, the default zero point
    Q8_0  q·d                          8-bit, block 32, code = q + 128
    Q6_K  d·sc·(q − 32)                8-bit, block 16, code = q − 32 + 128, scale = d·sc
    Q4_1  d·q + m                      4-bit, block 32, zero 0, plus a "min" term
    Q4_K  d·sc·q − dmin·mn             4-bit, block 32 (the 8 sub-blocks of 256), plus a "min" term

The min term (Σ over a block of x) · m is a float MatMul over K/32 block sums (see
linear.block_matmul): storing m/d as a float zero point would be exact too, but MatMulNBits'
integer kernels do not take float zero points and fall back to a path measured 20x slower.
Other types (Q5_*, float) are re-quantized with round-to-nearest; the manifest records which
path every weight took.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
from gguf.quants import Q4_K

from models.manifest import QuantizationSpec
from models.ptq import CpuBlocksRecord

BLOCK = 32  # GGUF's block size


@dataclass
class RawBlocks:
    """Rows of GGUF blocks as the file stores them (the KQuantMatMul op's weight)."""

    rows: np.ndarray  # uint8 [N, K/block · block bytes]
    ggml_type: int
    n: int
    k: int
    alpha: float  # the constant folded in, applied to the output


@dataclass
class BlockWeight:
    codes: np.ndarray  # uint8 [N, K/block, block·bits/8]
    scales: np.ndarray  # float32 [N, K/block]
    bits: int
    block: int
    k: int  # the real input size (K before padding to whole blocks)
    origin: str  # "gguf Q4_0 (exact)", "re-quantized from Q5_0 ...", ...
    zero_points: np.ndarray | None = None  # uint8 [N, K/block]; None: the midpoint 2^(bits−1)
    mins: np.ndarray | None = None  # float32 [N, K/block]: added to every weight of the block

    @property
    def n(self) -> int:
        return self.codes.shape[0]

    def scaled(self, factor: float) -> "BlockWeight":
        """A constant folded into the weight exactly (scales and mins multiplied)."""
        f = np.float32(factor)
        mins = None if self.mins is None else (self.mins * f).astype(np.float32)
        return BlockWeight(self.codes, (self.scales * f).astype(np.float32), self.bits, self.block, self.k,
                           self.origin, self.zero_points, mins)

    def packed_zero_points(self) -> np.ndarray | None:
        """MatMulNBits' zero_points input: [N, ceil(K/block · bits / 8)] bytes."""
        if self.zero_points is None:
            return None
        z = self.zero_points
        if self.bits == 4 and z.shape[1] % 2:
            z = np.pad(z, ((0, 0), (0, 1)))
        return _pack(z, self.bits)

    def unpacked(self) -> np.ndarray:
        """The unsigned codes, one per weight: uint8 [N, K/block, block]."""
        return _unpack(self.codes, self.bits)

    def dequantize(self) -> np.ndarray:
        """float32 [N, K], what the graph multiplies by (for tests and reports)."""
        zero = self.zero_points[..., None] if self.zero_points is not None else 1 << (self.bits - 1)
        w = (self.unpacked().astype(np.float32) - zero) * self.scales[..., None]
        if self.mins is not None:
            w = w + self.mins[..., None]
        return w.reshape(self.n, -1)[:, :self.k]


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 codes [..., block] -> bytes; 4-bit: element 2j in the low nibble of byte j."""
    if bits == 8:
        return codes.astype(np.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    if bits == 8:
        return packed
    out = np.empty((*packed.shape[:-1], packed.shape[-1] * 2), np.uint8)
    out[..., 0::2], out[..., 1::2] = packed & 0x0F, packed >> 4
    return out


def quantize(w: np.ndarray, bits: int, block: int = BLOCK, origin: str = "float") -> BlockWeight:
    """Round-to-nearest of float [N, K] per block. 8-bit: symmetric (scale = max|w| / 127).
    4-bit: asymmetric over the block's [min, max] with an integer zero point (0.0 stays exact;
    on SmolLM2 it kept logits cosine 0.93 vs 0.88 for symmetric)."""
    n, k = w.shape
    pad = -k % block
    w = np.pad(np.asarray(w, np.float32), ((0, 0), (0, pad))).reshape(n, -1, block)
    top = (1 << bits) - 1
    if bits == 8:
        scales = np.abs(w).max(axis=-1) / 127
        zero = np.full(scales.shape, 128.0, np.float32)
    else:
        lo, hi = np.minimum(w.min(axis=-1), 0), np.maximum(w.max(axis=-1), 0)
        scales = (hi - lo) / top
        zero = np.clip(np.rint(-lo / np.where(scales == 0, 1.0, scales)), 0, top)
    safe = np.where(scales == 0, 1.0, scales)
    q = np.clip(np.rint(w / safe[..., None]) + zero[..., None], 0, top).astype(np.uint8)
    kind = "symmetric" if bits == 8 else "asymmetric"
    return BlockWeight(_pack(q, bits), scales.astype(np.float32), bits, block, k,
                       f"re-quantized from {origin} ({bits}-bit {kind}, round-to-nearest)",
                       None if bits == 8 else zero.astype(np.uint8))


# GGUF block layouts (one record per block of a row)
_LAYOUTS = {
    "Q4_0": np.dtype([("d", "<f2"), ("qs", "u1", 16)]),
    "Q4_1": np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", 16)]),
    "Q8_0": np.dtype([("d", "<f2"), ("qs", "i1", 32)]),
    "Q4_K": np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qs", "u1", 128)]),
    "Q5_K": np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qh", "u1", 32), ("qs", "u1", 128)]),
    "Q6_K": np.dtype([("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<f2")]),
}
# the MatMulNBits format each of them maps onto: (bits, block, zero points?, min term?)
EXACT_FORMATS = {"Q4_0": (4, 32, False, False), "Q4_1": (4, 32, True, True), "Q4_K": (4, 32, True, True),
                 "Q8_0": (8, 32, False, False), "Q6_K": (8, 16, False, False)}


def from_gguf(qtype: str, raw: np.ndarray) -> BlockWeight | None:
    """GGUF rows (uint8 [N, row bytes]) as MatMulNBits blocks, bit-exactly; None for a type
    without an exact mapping."""
    if qtype not in EXACT_FORMATS:  # (Q5_K's 5-bit codes fit no MatMulNBits format)
        return None
    b = np.ascontiguousarray(raw).view(_LAYOUTS[qtype])  # [N, blocks per row]
    n = b.shape[0]
    origin = _exact(qtype)
    if qtype in ("Q4_0", "Q4_1"):
        qs = b["qs"]  # element j: low nibble of qs[j]; element j + 16: its high nibble
        codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
        d = b["d"].astype(np.float32)
        if qtype == "Q4_0":
            return BlockWeight(_pack(codes, 4), d, 4, 32, codes.shape[1] * 32, origin)
        return BlockWeight(_pack(codes, 4), d, 4, 32, codes.shape[1] * 32, origin,
                           np.zeros(d.shape, np.uint8), b["m"].astype(np.float32))
    if qtype == "Q8_0":
        codes = (b["qs"].astype(np.int16) + 128).astype(np.uint8)
        return BlockWeight(codes, b["d"].astype(np.float32), 8, 32, codes.shape[1] * 32, origin)
    if qtype == "Q4_K":  # 256-element super-blocks of 8 sub-blocks of 32
        sc, mn = Q4_K.get_scale_min(b["scales"].reshape(-1, 12))
        d, dmin = b["d"].astype(np.float32).reshape(-1, 1), b["dmin"].astype(np.float32).reshape(-1, 1)
        qs = b["qs"].reshape(-1, 4, 1, 32)  # 4 chunks of 32 bytes: low nibbles = sub-block 2i, high = 2i + 1
        codes = np.concatenate([qs & 0x0F, qs >> 4], axis=2).reshape(n, -1, 32)
        scales = (d * sc).reshape(n, -1).astype(np.float32)
        mins = (-dmin * mn).reshape(n, -1).astype(np.float32)
        return BlockWeight(_pack(codes, 4), scales, 4, 32, codes.shape[1] * 32, origin,
                           np.zeros(scales.shape, np.uint8), mins)
    # Q6_K: 256-element super-blocks of 16 sub-blocks of 16, 6-bit codes split in ql (4) + qh (2)
    ql, qh = b["ql"].reshape(-1, 2, 64), b["qh"].reshape(-1, 2, 32)
    lo = np.stack([ql[..., :32] & 0x0F, ql[..., 32:] & 0x0F, ql[..., :32] >> 4, ql[..., 32:] >> 4], axis=2)
    hi = np.stack([(qh >> s) & 0x03 for s in (0, 2, 4, 6)], axis=2)
    q = (lo | (hi << 4)).astype(np.int16).reshape(n, -1, 16)  # 0..63, element order
    codes = (q - 32 + 128).astype(np.uint8)
    scales = (b["d"].astype(np.float32)[..., None] * b["scales"].astype(np.float32)).reshape(n, -1)
    return BlockWeight(codes, scales.astype(np.float32), 8, 16, codes.shape[1] * 16, origin)


CPU_RECIPES = {
    "int4": "GGUF blocks kept exactly: Q4_K/Q5_K/Q6_K/Q4_1/Q8_0 as the file stores them, multiplied by hexrag's "
            "K-quant kernels (KQuantMatMul, int8 activations per block: 256 or 32 values) where they run "
            "vectorized; Q4_0 (and the others without them) mapped onto MatMulNBits (integer kernels, accuracy "
            "level 4); anything else re-quantized to 4-bit blocks of 32 (8-bit for the LM head and Q5 types)",
    # the int4 build before hexrag had its own kernels: every layer on ONNX Runtime's MatMulNBits (a K-quant
    # block as float scales per 32 weights and a min term), kept to compare with and for machines without them
    "int4-matmulnbits": "int4 with every layer on ONNX Runtime's MatMulNBits (GGUF Q4_K/Q6_K blocks mapped "
                        "exactly, with a min term); integer kernels (accuracy level 4)",
    "int8": "8-bit blocks of 32 for every linear layer and the LM head (GGUF Q8_0/Q6_K exact); "
            "integer kernels (accuracy level 4)",
    # ONNX Runtime GenAI's int4 layout: no min term, no 8-bit blocks, the LM head 4-bit too (an 8-bit
    # head was all of SmolLM2's gap to GenAI's step). Faster, and the 1.5B answers less often correctly
    # (docs/benchmarks.md, "Speed against accuracy"), so not the default.
    "int4-requant": "every linear layer and the LM head re-quantized to 4-bit blocks of 32 with integer "
                    "zero points (round-to-nearest from the GGUF's values, Q4_0 kept); integer kernels "
                    "(accuracy level 4)",
}
# the GGUF types the K-quant kernels read -> (GGML's type number: the op's ggml_type, values per block)
KQUANT_TYPES = {"Q4_1": (3, 32), "Q8_0": (8, 32), "Q4_K": (12, 256), "Q5_K": (13, 256), "Q6_K": (14, 256)}


def _exact(qtype: str) -> str:
    """A weight's origin when its GGUF blocks were mapped onto MatMulNBits bit-exactly."""
    return f"gguf {qtype} (exact)"


def kernel_types_on_matmulnbits(origins) -> bool:
    """Whether a build's weight origins (CpuBlocksRecord.weights) hold GGUF types the K-quant kernels
    read that were mapped onto MatMulNBits instead (a build from before the kernels read them)."""
    return any(_exact(qtype) in origins for qtype in KQUANT_TYPES)
ACCURACY_LEVEL = 4  # MatMulNBits computes with int8 activations: the fast integer kernels


class BlockRecipe:
    """Makes the linear weights' blocks (bit-exact from GGUF when it can), fusing layers that
    read the same input (q/k/v, gate/up) into one weight when their formats agree, and records
    where every weight came from for the manifest."""

    def __init__(self, name: str, weights, kquant_kernels: bool = False):
        """`kquant_kernels`: hexrag's K-quant kernels run vectorized here (runtime/kquant), so int4
        keeps Q4_K/Q5_K/Q6_K blocks as the file stores them: the file's bytes are the graph's weights."""
        if name not in CPU_RECIPES:
            raise ValueError(f"unknown CPU quantization {name!r} (choose from {', '.join(CPU_RECIPES)})")
        self.name = name
        self.weights = weights
        self.kquant_kernels = kquant_kernels and name == "int4"
        self.origins: dict[str, str] = {}
        self.shapes: dict[str, tuple] = {}  # weight key -> (bits, block, N, K, zero points?, mins?), once made
        self.rows: dict[str, int] = {}  # layer name -> its N, once made
        self.bytes = 0
        self.kquant_layers = 0  # layers read by the K-quant kernels

    def _plan(self, name: str) -> tuple[tuple[int, int, bool, bool], bool]:
        """(format, exact?) of `name`, decided from how the source stores it."""
        stored = self.weights.stored_type(name)
        exact = EXACT_FORMATS.get(stored)
        head = name in ("lm_head", "embed")
        if self.name == "int4-requant":  # one layout; a GGUF type already in it is kept as it is
            if exact and exact[:2] == (4, BLOCK) and not exact[3]:
                return exact, True
            return (4, BLOCK, True, False), False
        if exact and (self.name in ("int4", "int4-matmulnbits") or exact[0] == 8):
            return exact, True
        bits = 8 if self.name == "int8" or head or stored.startswith("Q5") else 4
        return (bits, BLOCK, bits == 4, False), False

    def fusable(self, names: list[str]) -> bool:
        kinds = {self.weights.stored_type(n) if self._kquant(n) else self._plan(n)[0] for n in names}
        return len(kinds) == 1

    def _kquant(self, name: str) -> bool:
        return self.kquant_kernels and self.weights.stored_type(name) in KQUANT_TYPES

    def raw(self, parts: list[tuple[str, float]], linear: bool = True) -> RawBlocks | None:
        """The layers' K-quant blocks stacked along N, when the recipe reads them with the K-quant
        kernels: every part of one such type, one constant. None: use `make` (MatMulNBits).
        `linear=False`: a table read by row (the token embedding), not counted as a linear layer."""
        if not all(self._kquant(name) for name, _ in parts) or len({s for _, s in parts}) != 1:
            return None
        stored = [self.weights.stored(name) for name, _ in parts]
        qtype = stored[0][0]
        ggml_type, per_block = KQUANT_TYPES[qtype]
        k = stored[0][1].shape[1] // _LAYOUTS[qtype].itemsize * per_block
        if any(t != qtype for t, _ in stored):
            return None
        rows = np.concatenate([np.ascontiguousarray(r) for _, r in stored]) if len(stored) > 1 else stored[0][1]
        if linear:
            for (name, _), (_, r) in zip(parts, stored):
                self.origins[name] = f"gguf {qtype} (exact, K-quant kernels)"
                self.rows[name] = r.shape[0]
            self.bytes += rows.nbytes
        self.kquant_layers += len(parts)
        return RawBlocks(np.ascontiguousarray(rows, dtype=np.uint8), ggml_type, rows.shape[0], k,
                         parts[0][1])

    def _one(self, name: str, scale: float) -> BlockWeight:
        stored, raw = self.weights.stored(name)
        fmt, exact = self._plan(name)
        bw = from_gguf(stored, raw) if exact else quantize(self.weights[name], fmt[0], origin=stored)
        self.origins[name] = bw.origin
        self.rows[name] = bw.n
        return bw.scaled(scale)

    def make(self, parts: list[tuple[str, float]]) -> BlockWeight:
        """The blocks of one or more layers ((name, constant folded in) each), stacked along N."""
        made = [self._one(name, scale) for name, scale in parts]
        first = made[0]
        cat = lambda attr: None if getattr(first, attr) is None else np.concatenate([getattr(m, attr) for m in made])
        bw = BlockWeight(cat("codes"), cat("scales"), first.bits, first.block, first.k, first.origin,
                         cat("zero_points"), cat("mins"))
        key = "+".join(name for name, _ in parts)
        self.shapes[key] = (bw.bits, bw.block, bw.n, bw.k, bw.zero_points is not None, bw.mins is not None)
        self.bytes += bw.codes.nbytes + bw.scales.nbytes
        self.bytes += 0 if bw.zero_points is None else bw.packed_zero_points().nbytes
        self.bytes += 0 if bw.mins is None else bw.mins.nbytes
        return bw

    def summary(self) -> QuantizationSpec:
        """The manifest's record of the blocks written."""
        record = CpuBlocksRecord(accuracy_level=ACCURACY_LEVEL, description=CPU_RECIPES[self.name],
                                 weights=dict(Counter(self.origins.values())), linear_bytes=self.bytes,
                                 kquant_kernels=self.kquant_kernels)
        fmt = "KQuantMatMul" if self.kquant_layers else "MatMulNBits"  # KQuantMatMul: needs runtime/kquant
        return QuantizationSpec(recipe=self.name, format=fmt, blocks=record)
