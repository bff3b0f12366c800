"""`manifest.json`: the self-description of a model directory, and its load/verify helpers."""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from models.ptq import CpuBlocksRecord, PtqRecord, QualityMetrics, lift_flat_record

# 2: typed sections (architecture, quantization, target, metrics). A schema-1 manifest has the same
# JSON layout, so one that passes schema 2's checks loads as it is; one that does not is named as an
# earlier build to rebuild. 3: the quantization step's record typed, in `quantization.ptq` or
# `.blocks` (schemas 1-2 kept it flat beside `recipe`: read through models.ptq.lift_flat_record)
SCHEMA_VERSION = 3
READS = (1, 2, 3)
MANIFEST = "manifest.json"


class ManifestError(Exception):
    """A model directory that is missing, altered or incompatible; the message says what to rebuild."""


class TensorSpec(BaseModel):
    name: str
    dtype: Literal["float32", "int32", "int64", "uint16", "uint8"]
    shape: list[int]


class GraphSpec(BaseModel):
    name: str
    kind: Literal["prefill", "decode", "embed"]
    file: str
    seq: int  # new tokens per run (S) or tokens per text (L)
    batch: int = 1
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


class SourceSpec(BaseModel):
    path: str
    format: Literal["gguf", "hf", "e5"]
    files: dict[str, str]  # file name -> sha256 of the source weights


class TokenizerSpec(BaseModel):
    file: str = "tokenizer.json"
    chat_template: str | None = None  # file name of the Jinja chat template, if the model has one
    bos_id: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None
    stop_ids: list[int] = Field(default_factory=list)
    add_bos: bool = False
    add_eos: bool = False
    unk_id: int | None = None  # what text outside the vocabulary becomes; unset by builds before it
    bos_token: str | None = None  # chat templates refer to these by text ({{ bos_token }})
    eos_token: str | None = None


TextKind = Literal["query", "passage"]


class EmbeddingSpec(BaseModel):
    """How an embedder wants its texts: models trained with a marker before each query and each
    passage (e5's "query: " / "passage: ") need the same marker at run time, or their vectors drift."""

    model_config = ConfigDict(extra="forbid")

    query_prefix: str = ""
    passage_prefix: str = ""

    def prefix(self, kind: TextKind) -> str:
        return self.query_prefix if kind == "query" else self.passage_prefix


class DecoderArchitecture(BaseModel):
    """A Llama/Qwen2-style decoder, as build_scripts/config.py normalizes it."""

    model_config = ConfigDict(extra="forbid")

    arch: Literal["llama", "qwen2"]
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_theta: float
    rms_eps: float
    tied_embeddings: bool
    qkv_bias: bool
    max_positions: int


class EncoderArchitecture(BaseModel):
    """A BERT sentence embedder."""

    model_config = ConfigDict(extra="forbid")

    arch: Literal["bert"]
    n_layers: int
    hidden: int
    n_heads: int
    ffn: int
    vocab: int
    max_positions: int
    type_vocab: int
    ln_eps: float


Architecture = Annotated[Union[DecoderArchitecture, EncoderArchitecture], Field(discriminator="arch")]


class TargetBuild(BaseModel):
    """One compiled HTP build of a model directory: its SoC, variant and files (build_scripts/compile.py
    writes it, or build_scripts/wrap_context.py for binaries made with the QAIRT SDK)."""

    target: str  # runtime/qnn_targets.py's name: sm8650 ...
    chip: str
    soc_model: int
    htp_arch: int
    variant: Literal["sim", "shared"]  # unshared binaries (the simulator, devices) or one shared (devices)
    shared_weights: bool = False
    parts: int = 1  # an LLM split by layers (build_scripts/split.py)
    part_layers: list[list[int]] = Field(default_factory=list)
    provider_options: dict[str, str] = Field(default_factory=dict)
    graphs: dict[str, str | list[str]]  # graph name -> its context model, or its parts in order
    binaries: dict[str, int] = Field(default_factory=dict)  # context binary -> bytes
    compile_seconds: dict[str, float] = Field(default_factory=dict)
    placement: dict[str, dict[str, int]] = Field(default_factory=dict)  # graph -> {"htp": n, "cpu": n}
    wrapped: dict[str, str] = Field(default_factory=dict)  # graph -> the QNN graph it was wrapped from


class TargetSpec(BaseModel):
    """Where the model runs: the CPU from its ONNX graphs, or HTP from the builds listed."""

    backend: Literal["cpu", "htp"] = "cpu"
    precision: Literal["fp16", "fp32", "external"] | None = None  # external: QNN binaries only (wrapped)
    weights_bytes: int | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    builds: list[TargetBuild] = Field(default_factory=list)

    @property
    def htp_builds(self) -> list[TargetBuild]:
        return self.builds if self.backend == "htp" else []


class KVEncoding(BaseModel):
    """How one KV tensor (key_3, value_3 ...) is stored in a quantized cache: one encoding for every graph."""

    scale: float
    zero_point: int
    rmin: float | None = None  # the calibrated range, widened by the margin, that the scale encodes
    rmax: float | None = None


class IOEncoding(BaseModel):
    """A graph input or output as the quantized graph sees it: a fixed-point encoding, or a float
    tensor the graph quantizes inside (rotary tables, the attention mask)."""

    dtype: str | None = None
    scale: float | None = None
    zero_point: int | None = None
    quantized_inside: IOEncoding | None = None


class KVCacheSpec(BaseModel):
    dtype: Literal["uint16", "uint8"]
    tensors: dict[str, KVEncoding]  # key_<layer> / value_<layer>
    graphs: list[str] = Field(default_factory=list)  # the graphs that share these encodings
    margin: float | None = None  # the recipe's kv_margin


class QuantizationSpec(BaseModel):
    """What quantized the graphs: the recipe's name, a quantized KV cache's encodings, the graphs'
    I/O encodings, and the record of the step that did it (`ptq` or `blocks`, models/ptq.py)."""

    recipe: str = "none"  # none | int4 | int8 (CPU blocks) | a PTQ recipe (w8a16 ...) | external (QAIRT binaries)
    format: str | None = None  # the CPU target's graphs: MatMulNBits, or KQuantMatMul (needs runtime/kquant)
    kv_cache: KVCacheSpec | None = None
    io: dict[str, dict[str, IOEncoding]] = Field(default_factory=dict)  # graph -> I/O tensor -> encoding
    ptq: PtqRecord | None = None  # build_scripts/quantize
    blocks: CpuBlocksRecord | None = None  # the CPU target

    @model_validator(mode="before")
    @classmethod
    def _flat_record(cls, data):
        return lift_flat_record(data) if isinstance(data, dict) else data  # as schemas 1-2 wrote it

    @property
    def cpu_blocks(self) -> bool:
        return self.format in ("MatMulNBits", "KQuantMatMul")


class ManifestMetrics(BaseModel):
    quantization: QualityMetrics | None = None


_KV_NAMES = ("past_key_", "past_value_", "new_key_", "new_value_", "present_")


class Manifest(BaseModel):
    schema_version: int = SCHEMA_VERSION
    name: str
    kind: Literal["llm", "embedder"]
    created: str
    source: SourceSpec
    architecture: Architecture
    context: int | None = None  # cache slots C of the LLM graphs
    prefill_buckets: list[int] = Field(default_factory=list)
    mask_value: float = -100.0
    graphs: list[GraphSpec]
    weights_file: str
    tokenizer: TokenizerSpec
    embedding: EmbeddingSpec | None = None  # an embedder's text prefixes; unset: none (and in builds before it)
    quantization: QuantizationSpec = Field(default_factory=QuantizationSpec)
    target: TargetSpec = Field(default_factory=TargetSpec)
    versions: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)  # every file in the directory -> sha256
    metrics: ManifestMetrics = Field(default_factory=ManifestMetrics)

    @model_validator(mode="after")
    def _kv_encodings(self) -> Manifest:
        """A quantized KV cache needs one encoding per tensor that every graph uses: a graph that
        quantized differently would read the others' rows wrongly."""
        dtypes = {t.dtype for g in self.graphs for t in (*g.inputs, *g.outputs) if t.name.startswith(_KV_NAMES)}
        if len(dtypes) > 1:
            raise ValueError(f"the graphs disagree on the KV cache type ({', '.join(sorted(dtypes))})")
        if not dtypes or dtypes == {"float32"}:
            return self
        kv = self.quantization.kv_cache
        if kv is None or kv.dtype not in dtypes or len(kv.tensors) != 2 * self.architecture.n_layers:
            raise ValueError(f"the graphs take a {dtypes.pop()} KV cache but quantization.kv_cache has no "
                             "matching encodings")
        for graph, params in self.quantization.io.items():
            for name, p in params.items():
                if not name.startswith(("past_", "new_")):
                    continue
                want = kv.tensors.get(name.split("_", 1)[1])
                if want is None or (p.scale, p.zero_point) != (want.scale, want.zero_point):
                    raise ValueError(f"graph {graph} encodes {name} differently from the shared KV cache encoding")
        return self

    def graph(self, kind: str, seq: int | None = None) -> GraphSpec:
        for g in self.graphs:
            if g.kind == kind and (seq is None or g.seq == seq):
                return g
        raise ManifestError(f"model {self.name} has no {kind} graph" + (f" for S={seq}" if seq else ""))

    def save(self, directory: Path) -> None:
        """Checked like a loaded manifest, then written whole: a builder never leaves one the runtime refuses."""
        checked = Manifest.model_validate({**self.model_dump(), "schema_version": SCHEMA_VERSION})
        tmp = directory / (MANIFEST + ".tmp")
        tmp.write_text(checked.model_dump_json(indent=2, exclude_none=True) + "\n")  # unset is absent, as built
        os.replace(tmp, directory / MANIFEST)


def seal(directory: Path, manifest: Manifest) -> Manifest:
    """A build's last step: hash every file of `directory` (each once) into `manifest.files` and
    write the manifest. Every step before it hands the Manifest on in memory, so a build hashes
    its directory and writes its manifest once."""
    manifest.files = hash_directory(directory)
    manifest.save(directory)
    return manifest


def build_files(entry: str | list[str]) -> list[str]:
    """One graph's files in an HTP build (`target.builds[i].graphs[name]`): a context model, or
    the parts of a graph split by layers, in the order they run (build_scripts/split.py)."""
    return [entry] if isinstance(entry, str) else list(entry)


def package_versions(*packages: str) -> dict[str, str]:
    """Installed versions of `packages` (absent ones left out), as manifests and reports record them."""
    out = {}
    for pkg in packages:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def directory_files(directory: Path) -> list[str]:
    """Every file except the manifest itself, by path relative to the directory."""
    return [p.relative_to(directory).as_posix() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != MANIFEST]


def hash_directory(directory: Path) -> dict[str, str]:
    """sha256 of every file except the manifest itself, by path relative to the directory."""
    return {rel: sha256_file(directory / rel) for rel in directory_files(directory)}


def load_manifest(directory: str | Path, verify: bool = True) -> Manifest:
    """Read a model directory's manifest; with `verify`, refuse missing or altered files."""
    directory = Path(directory)
    path = directory / MANIFEST
    if not path.is_file():
        raise ManifestError(f"{directory} is not a hexrag model directory (no {MANIFEST}); build it with "
                             "`hexrag build` (`hexrag quickstart` builds the default models)")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path} is not a valid manifest ({e})") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version not in READS:
        raise ManifestError(f"{directory} was built with manifest schema {version}, this hexrag reads "
                            f"{', '.join(map(str, READS))}: rebuild it with `hexrag build`")
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        why = f"{where + ': ' if where else ''}{first['msg'].removeprefix('Value error, ')}"
        if version < SCHEMA_VERSION:
            raise ManifestError(f"{directory} was built by an earlier hexrag (manifest schema {version}) and fails "
                                f"this version's checks ({why}): rebuild it with `hexrag build`") from None
        raise ManifestError(f"{path} is not a valid manifest ({why}); rebuild the model") from None
    if verify:
        verify_files(directory, manifest)
    return manifest


def verify_files(directory: Path, manifest: Manifest) -> None:
    """Every file on disk is listed with its sha256, and every listed file is there unaltered.

    Builders hash the whole directory (reports included), so a file without an entry was added or
    had its entry removed after the build: either way its bytes are unchecked and it is refused."""
    if unlisted := sorted(set(directory_files(directory)) - manifest.files.keys()):
        raise ManifestError(f"{directory}: {', '.join(unlisted)} not listed in the manifest (added or its entry "
                            "removed after the build); rebuild the model")
    if bad := first_mismatch(directory, manifest.files):
        rel, missing = bad
        why = "listed in the manifest is missing" if missing else "was altered since the build (sha256 mismatch)"
        raise ManifestError(f"{directory}: file {rel} {why}; rebuild the model")


def first_mismatch(directory: Path, sums: dict[str, str]) -> tuple[str, bool] | None:
    """The first file of `sums` (path relative to `directory` -> sha256) that is not as listed, as
    (path, whether it is missing rather than altered); None when every one is. Model directories
    and device bundles (app/bundle.py) are checked with this one loop."""
    for rel, expected in sums.items():
        path = directory / rel
        if not path.is_file():
            return rel, True
        if sha256_file(path) != expected:
            return rel, False
    return None
