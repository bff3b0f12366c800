"""`quantize_model_dir`: a float model directory in, a quantized model directory out.

    float dir ─► source grids (int8 blocks the GGUF already has, min terms split out) ─► prepare
              ─► activation ranges (real text through the prepared float graphs, run by the runtime)
              ─► linear layers whose outputs reach the recipe's float_range stay float ─► GPTQ
              ─► per graph: prepare ─► plan (recipe + pinned KV ranges) ─► QDQ quantize ─► blocks ─► KV I/O uint16
              ─► one shared weights file ─► manifest (graphs' I/O, quantization) ─► accuracy on held-out text
              ─► report (metrics + activation ranges per layer)

The result is written into a staging directory next to the destination and renamed into place
only when complete (build_scripts.staging, as the builder), so a failed run never leaves a
half-quantized directory. With `out=None` the float directory is replaced by the quantized one
(what `hexrag build llm --quant` wants: one directory per model); with `out=DIR` the float
directory stays untouched (tests and side-by-side comparisons). Either way the float graphs are
read from the source directory until the end, because the accuracy report needs them.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from build_scripts.errors import BuildError
from build_scripts.quantize import calibration as cal_mod
from build_scripts.quantize import qdq, source_grid
from build_scripts.quantize.gptq import HessianStore
from build_scripts.quantize.recipes import Recipe, resolve_recipe
from build_scripts.quantize.report import compare_embedders, compare_llms, layer_table, write_report
from build_scripts.staging import staged_directory
from models.manifest import (GraphSpec, KVCacheSpec, KVEncoding, Manifest, QuantizationSpec, TargetSpec, TensorSpec,
                             directory_files, load_manifest, package_versions, seal)
from models.ptq import CalibrationRecord, GptqSummary, PtqRecord, PtqWeights, QualityMetrics, RecipeSpec
from runtime.decoder import START_GRAPH

log = logging.getLogger(__name__)

WEIGHTS_FILE = "weights.data"
REPORT = "quantization"  # quantization.md, quantization_ranges.json (+ .png)
_DTYPES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.INT32: "int32", onnx.TensorProto.INT64: "int64",
           onnx.TensorProto.UINT16: "uint16", onnx.TensorProto.UINT8: "uint8"}


def _graph_spec(model: onnx.ModelProto, old: GraphSpec) -> GraphSpec:
    def specs(values) -> list[TensorSpec]:
        out = []
        for v in values:
            t = v.type.tensor_type
            if t.elem_type not in _DTYPES:
                raise BuildError(f"graph {old.name}: I/O {v.name} has a type the manifest cannot describe ({t.elem_type})")
            out.append(TensorSpec(name=v.name, dtype=_DTYPES[t.elem_type], shape=[d.dim_value for d in t.shape.dim]))
        return out

    return old.model_copy(update={"inputs": specs(model.graph.input), "outputs": specs(model.graph.output)})


PREPARED_DATA = "prepared.data"


def _copy_support_files(src: Path, m: Manifest, dest: Path) -> None:
    """Everything but the graphs, the weights and HTP builds (both are rebuilt from the new graphs)."""
    skip = {g.file for g in m.graphs} | {m.weights_file}
    for rel in directory_files(src):
        if rel in skip or rel.startswith("htp/") or rel.startswith(REPORT):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, target)


def _kv_ranges(calib: cal_mod.LLMCalibration, margin: float) -> dict[str, tuple[float, float]]:
    out = {}
    for kind, ranges in (("key", calib.key_ranges), ("value", calib.value_ranges)):
        for i, r in enumerate(ranges):
            if not np.isfinite(r.lo):
                raise BuildError(f"calibration produced no {kind} rows for layer {i}")
            span = max(r.hi - r.lo, 1e-6)
            out[f"{kind}_{i}"] = (float(np.float32(r.lo - margin * span)), float(np.float32(r.hi + margin * span)))
    return out


def _source_grids(src: Path, m: Manifest, recipe: Recipe) -> dict[str, source_grid.SourceGrid]:
    """The int8 (int4) grids of the linear weights the recipe quantizes, where the GGUF source has them."""
    if not recipe.source_grid or recipe.linear_weights not in ("int8", "int4") or m.source.format != "gguf":
        return {}
    source = Path(m.source.path)
    if not source.is_file():
        log.warning("the source %s is gone: int8 linear weights are quantized per channel instead of on its "
                    "blocks (rebuild the float model to use them)", source)
        return {}
    graph = src / m.graphs[0].file
    model = onnx.load(str(graph), load_external_data=False)
    names = [w for w, (role, _) in qdq.weight_roles(model).items() if role == "linear" and recipe.matching(w) is None]
    grids = source_grid.source_grids(source, names, lambda w: qdq.read_initializers(graph, [w])[w])
    bits = 4 if recipe.linear_weights == "int4" else 8
    return {w: g for w, g in grids.items() if g.fits(bits)}  # int4: Q4_0/Q4_1/Q4_K, not Q6_K/Q8_0


def prepare_graphs(src: Path, graphs: list[GraphSpec], work: Path,
                   grids: dict[str, source_grid.SourceGrid] | None = None) -> dict[str, Path]:
    """Prepared float graphs in `work`, all referencing one weights file; graph name -> path
    (graphs built from the same source file share one prepared graph).

    The graphs are loaded without their weights and pointed at a copy of the source's weights
    file (GPTQ rewrites weights in that copy, in place), so no graph's weights are ever held in
    memory here: a 1.5B model's float graphs are 6 GB each. Weights with a source grid are
    rewritten as its codes × scales, their min terms split out (source_grid.split_mins)."""
    data = work / PREPARED_DATA
    copied: set[str] = set()
    by_file: dict[str, onnx.ModelProto] = {}
    for g in graphs:
        if g.file not in by_file:
            model = onnx.load(str(src / g.file), load_external_data=False)
            for location in qdq.point_external_data(model, data.name):
                if copied and location not in copied:
                    raise BuildError(f"{g.file}: weights in several files ({', '.join(sorted(copied | {location}))}); "
                                     f"rebuild the model")
                if location not in copied:
                    shutil.copyfile(src / location, data)
                    copied.add(location)
            source_grid.split_mins(model, grids or {})
            by_file[g.file] = qdq.prepare(model, work)
    paths = {}
    for file, model in by_file.items():
        paths[file] = work / f"{Path(file).stem}.prep.onnx"
        onnx.save(model, str(paths[file]))
    for w, grid in (grids or {}).items():  # one weights file: writing through the first graph serves all
        qdq.write_initializer(next(iter(paths.values())), w, grid.dequantize(mins=False))
    return {g.name: paths[g.file] for g in graphs}


def _wide_linears(prepared: Path, ranges: dict[str, dict[str, tuple[float, float]]], recipe: Recipe,
                  skip: str | None) -> tuple[str, ...]:
    """The MatMul nodes with linear weights whose calibrated output reaches `recipe.float_range`
    in any graph but `skip` (the start graph: position 0 has massive activations of its own)."""
    if not recipe.float_range:
        return ()
    model = onnx.load(str(prepared), load_external_data=False)
    roles = qdq.weight_roles(model)
    reach = {}
    for graph, tensors in ranges.items():
        if graph != skip:
            for t, (lo, hi) in tensors.items():
                reach[t] = max(reach.get(t, 0.0), abs(lo), abs(hi))
    # a linear layer's output is "<node>/output_0" (graph/builder.py), also once its min term is split out
    return tuple(n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in roles
                 and roles[n.input[1]][0] == "linear" and not n.name.endswith(source_grid.FLOAT_NODES)  # float already
                 and reach.get(f"{n.name}/output_0", 0.0) >= recipe.float_range)


def _gptq_targets(prepared: Path, recipe: Recipe, exact=()) -> dict[str, tuple[str, int, int | None]]:
    """Linear weights GPTQ rounds: weight -> (its input tensor, bits, block size or None); not the
    `exact` ones (source grids, their min terms), nor those of nodes the recipe keeps float."""
    if recipe.rounding != "gptq" or recipe.linear_weights not in ("int8", "int4"):
        return {}
    model = onnx.load(str(prepared), load_external_data=False)
    inits = {t.name: t for t in model.graph.initializer}
    roles = qdq.weight_roles(model)
    bits = 8 if recipe.linear_weights == "int8" else 4
    floats = set(recipe.float_nodes(n.name for n in model.graph.node))
    out = {}
    for n in model.graph.node:
        w = n.input[1] if n.op_type == "MatMul" and len(n.input) > 1 else None
        if (w in roles and roles[w][0] == "linear" and recipe.matching(w) is None and w not in exact
                and n.name not in floats):
            k = inits[w].dims[0]
            block = recipe.block_size if recipe.block_size and k % recipe.block_size == 0 else None
            out[w] = (n.input[0], bits, block)
    return out


def _apply_gptq(prepared: Path, targets: dict, hessians, progress: bool) -> dict[str, Any]:
    """GPTQ every target weight. Per-channel results are written back into the prepared weights
    file (the quantizer then rounds them onto the same grid exactly, given the scales); block
    results are kept as (q, scale) for apply_blocks."""
    from tqdm import tqdm

    from build_scripts.quantize.gptq import gptq

    model = onnx.load(str(prepared), load_external_data=False)
    where = {t.name: tuple(sorted((e.key, e.value) for e in t.external_data)) if
             t.data_location == onnx.TensorProto.EXTERNAL else None for t in model.graph.initializer}
    readers = Counter(where.values())  # initializers per stored byte range
    out: dict[str, Any] = {"per_channel": {}, "blocks": {}, "skipped": []}
    start = time.perf_counter()
    for w, (x, bits, block) in tqdm(targets.items(), desc="gptq", unit="weight", disable=not progress, leave=False):
        if x not in hessians.h:
            out["skipped"].append(w)
            continue
        weight = qdq.read_initializers(prepared, [w])[w]
        q, scale = gptq(weight, hessians.h[x] / max(hessians.rows[x], 1), bits=bits, group=block)
        if block:
            out["blocks"][w] = (q, scale)
            continue
        if where[w] is None or readers[where[w]] > 1:
            out["skipped"].append(w)  # inline or shared bytes: leave it to round-to-nearest
            continue
        qdq.write_initializer(prepared, w, q.astype(np.float32) * scale[None, :].astype(np.float32))
        out["per_channel"][w] = scale.astype(np.float32)
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def _quantize_graphs(graphs: list[GraphSpec], prepared: dict[str, Path], ranges: dict[str, dict], recipe: Recipe,
                     kv_ranges: dict, work: Path, progress: bool, rounded: dict[str, Any] | None = None,
                     grids: dict[str, source_grid.SourceGrid] | None = None) -> tuple[dict[str, onnx.ModelProto], dict[str, Any]]:
    """Quantize each prepared graph with its calibrated ranges (`rounded`: GPTQ results; `grids`:
    weights whose int8 blocks come from the source as they are)."""
    grids = grids or {}
    blocks = {**(rounded or {}).get("blocks", {}), **{w: (g.codes, g.scales) for w, g in grids.items()}}
    from tqdm import tqdm

    models, info = {}, {"io": {}, "weights": {}, "overrides": {}, "blocked": {}, "kv_pinned": {}, "ranges": {},
                        "score_tensors": set(), "quantize_seconds": {}}
    for g in tqdm(graphs, desc="quantize", unit="graph", disable=not progress, leave=False):
        start = time.perf_counter()
        model = onnx.load(str(prepared[g.name]), load_external_data=False)
        plan = qdq.build_plan(model, recipe, kv_ranges, grids)
        for w, scale in (rounded or {}).get("per_channel", {}).items():
            if w in plan.overrides:  # the GPTQ grid: the quantizer must not recompute the scales
                qt = plan.overrides[w][0]["quant_type"]
                plan.overrides[w] = [{"quant_type": qt, "axis": 1, "scale": np.float32(sc), "zero_point": 0}
                                     for sc in scale]
                plan.weights[w]["rounding"] = "gptq"
        for w in (rounded or {}).get("blocks", {}):
            if w in plan.weights:
                plan.weights[w]["rounding"] = "gptq"
        producers = {o: n for n in model.graph.node for o in n.output}
        for n in model.graph.node:  # attention scores: the Softmax input before the additive mask
            if n.op_type == "Softmax":
                p = producers.get(n.input[0])
                info["score_tensors"].add(p.input[0] if p is not None and p.op_type == "Add" else n.input[0])
        del model
        out = work / f"{g.name}.q.onnx"
        qdq.quantize_graph(prepared[g.name], out, ranges[g.name], plan, recipe, work)
        q = onnx.load(str(out))
        if plan.blocked:
            qdq.apply_blocks(q, qdq.read_initializers(prepared[g.name], set(plan.blocked) - set(blocks)),
                             plan.blocked, blocks)
        io = qdq.boundary_params(q)
        io.update(qdq.kv_io_to_uint16(q))
        encoded = qdq.activation_encodings(q)
        info["ranges"][g.name] = {t: (*ranges[g.name][t], encoded[t][2]) for t in encoded if t in ranges[g.name]}
        del q.graph.value_info[:]  # stale float types of renamed tensors; ONNX Runtime re-infers
        models[g.name] = q
        info["io"][g.name] = io
        info["weights"].update(plan.weights)
        info["blocked"].update(plan.blocked)
        info["kv_pinned"][g.name] = plan.kv_pinned
        info["overrides"].update(plan.user)
        info["quantize_seconds"][g.name] = round(time.perf_counter() - start, 2)
        for p in work.glob(f"{g.name}.q.onnx*"):
            p.unlink()
    return models, info


def _gptq_summary(rounded: dict | None) -> GptqSummary | None:
    if not rounded:
        return None
    return GptqSummary(weights=len(rounded["per_channel"]) + len(rounded["blocks"]), skipped=rounded["skipped"],
                       seconds=rounded["seconds"])


def _kv_record(info: dict, kv_ranges: dict, recipe: Recipe) -> KVCacheSpec:
    """The one KV encoding per tensor, checked identical across every graph."""
    tensors: dict[str, KVEncoding] = {}
    for graph, io in info["io"].items():
        for name, p in io.items():
            if not name.startswith(("past_", "new_")):
                continue
            key = name.split("_", 1)[1]
            if key not in tensors:
                lo, hi = kv_ranges[key]
                tensors[key] = KVEncoding(scale=p["scale"], zero_point=p["zero_point"], rmin=lo, rmax=hi)
            elif (tensors[key].scale, tensors[key].zero_point) != (p["scale"], p["zero_point"]):
                raise BuildError(f"graph {graph} quantized {name} with scale {p['scale']}, zero point "
                                 f"{p['zero_point']}, another graph with {tensors[key].scale}, "
                                 f"{tensors[key].zero_point}: the KV encodings are not shared")
    order = sorted(tensors, key=lambda key: (key.split("_")[0], int(key.split("_")[1])))  # key_0 .. value_N
    return KVCacheSpec(dtype=recipe.kv_cache, margin=recipe.kv_margin, graphs=sorted(info["io"]),
                       tensors={key: tensors[key] for key in order})


def _ptq_record(recipe: Recipe, info: dict, weights_bytes: int, float_bytes: int,
                calibration: CalibrationRecord) -> PtqRecord:
    """The record both model kinds write: the recipe run, each weight's encoding, the overrides taken."""
    return PtqRecord(recipe=RecipeSpec.model_validate(recipe.model_dump()), calibration=calibration,
                     weights=PtqWeights(file=WEIGHTS_FILE, bytes=weights_bytes, float_bytes=float_bytes,
                                        tensors=info["weights"], blocked=info["blocked"]),
                     overrides=info["overrides"], quantize_seconds=info["quantize_seconds"])


def quantize_model_dir(model_dir: str | Path, recipe: str | Path | Recipe | dict = "w8a16",
                       calib: str | Path | list | None = None, samples: int | None = 64,
                       out: str | Path | None = None, progress: bool = True, decode_steps: int | None = None,
                       evaluate: bool = True, eval_samples: int | None = None,
                       eval_tokens: int | None = None) -> dict[str, Any]:
    """Quantize a float model directory (LLM or embedder) with real calibration text.

    model_dir     a float build (`hexrag build llm|embedder`), not yet quantized
    recipe        "w8a16" | "w4a16" | a JSON recipe file (see recipes.py) | a Recipe
    calib         calibration text: files/directories (.jsonl/.json/.md/.txt), default the
                  knowledge-base samples (+ built-in chat prompts); every 5th sample is held out
    samples       calibration samples (texts) to use (None: all)
    out           None: replace `model_dir` by the quantized build; a path: write it there
    decode_steps  teacher-forced decode steps per calibration sample (default min(32, context/4))
    evaluate      measure accuracy vs float on the held-out samples (eval_samples of them,
                  eval_tokens continuation tokens each, default up to the context)
    Returns a summary (also recorded in the manifest's `quantization` field).
    """
    src = Path(model_dir).resolve()
    dest = Path(out).resolve() if out else src
    m = load_manifest(src)
    with staged_directory(dest) as tmp:
        new, result = quantize_into(src, m, tmp, recipe, calib, samples, progress, decode_steps, evaluate,
                                    eval_samples, eval_tokens)
        seal(tmp, new)
    result["model_dir"] = str(dest)
    if progress:
        print(format_summary(result), file=sys.stderr)
    return result


def quantize_into(src: Path, m: Manifest, tmp: Path, recipe: str | Path | Recipe | dict = "w8a16",
                  calib: str | Path | list | None = None, samples: int | None = 64, progress: bool = True,
                  decode_steps: int | None = None, evaluate: bool = True, eval_samples: int | None = None,
                  eval_tokens: int | None = None) -> tuple[Manifest, dict[str, Any]]:
    """The quantized build of the float directory `src` (its manifest `m`, as read or as a build
    holds it) written into `tmp`; returns its manifest, unsaved for the build's next step, and a
    summary. Options as quantize_model_dir's."""
    start = time.perf_counter()
    if m.quantization.recipe != "none":
        raise BuildError(f"{src} is already quantized ({m.quantization.recipe}): quantize its float build")
    recipe = resolve_recipe(recipe)
    with tempfile.TemporaryDirectory(prefix="hexrag-quant-") as work_dir:
        work = Path(work_dir)
        _copy_support_files(src, m, tmp)
        if m.kind == "llm":
            new, result = _quantize_llm(src, m, recipe, calib, samples, tmp, work, progress, decode_steps,
                                        evaluate, eval_samples, eval_tokens)
        else:
            new, result = _quantize_embedder(src, m, recipe, calib, samples, tmp, work, progress,
                                             evaluate, eval_samples)
    new.quantization.ptq.seconds = result["seconds"] = round(time.perf_counter() - start, 1)
    return new, result


def _finish_manifest(tmp: Path, m: Manifest, graphs: list[GraphSpec], models: dict[str, onnx.ModelProto],
                     quantization: QuantizationSpec) -> Manifest:
    new = m.model_copy(deep=True)
    new.graphs = [_graph_spec(models[g.name], g).model_copy(update={"file": f"{g.name}.onnx"}) for g in graphs]
    new.weights_file = WEIGHTS_FILE
    new.quantization = quantization
    new.target = TargetSpec()  # HTP builds of the float graphs do not apply: compile again
    new.versions = {**m.versions, **package_versions("onnxruntime", "onnx")}
    for g in new.graphs:
        onnx.save(models[g.name], str(tmp / g.file))
    return new


def _record_metrics(tmp: Path, new: Manifest, metrics: dict, tables: dict, ranges: dict, extra: dict) -> list[str]:
    new.metrics = new.metrics.model_copy(update={"quantization": QualityMetrics.model_validate(metrics)})
    written = write_report(tmp / REPORT, f"{new.name}: {new.quantization.recipe} quantization", metrics,
                           tables, ranges, extra)
    new.quantization.ptq.report = [p.name for p in written]
    return [p.name for p in written]


def _quantize_llm(src, m, recipe, calib, samples, tmp, work, progress, decode_steps, evaluate,
                  eval_samples, eval_tokens) -> tuple[Manifest, dict[str, Any]]:
    from runtime.decoder import Decoder
    from runtime.llm import LLM

    # no packed weight copies: calibration swaps the sessions out, and a 1.5B float decode graph
    # would pack 6 GB; only the accuracy pass runs these sessions (somewhat slower unpacked)
    llm = LLM(src, prepack=False, manifest=m)
    context = llm.context
    steps = decode_steps or max(4, min(32, context // 4))
    cal_samples, held, paths = cal_mod.calibration_texts(calib, samples)
    seqs = cal_mod.tokenize_samples(llm, cal_samples, context, steps, buckets=llm.decoder.buckets)
    if not seqs:
        raise BuildError("no calibration sequences: the calibration text is empty")
    start = START_GRAPH if recipe.start_graph else None
    graphs = list(m.graphs)
    if start:  # the decode graph once more, calibrated on position 0 only (see runtime/decoder.py)
        decode = next(g for g in m.graphs if g.kind == "decode")
        graphs.append(decode.model_copy(update={"name": start}))
    grids = _source_grids(src, m, recipe)
    prepared = prepare_graphs(src, graphs, work, grids)
    t0 = time.perf_counter()
    exact = {*grids, *(w[: -len(source_grid.WEIGHT_SUFFIX)] + source_grid.MINS_SUFFIX for w in grids)}
    targets = _gptq_targets(prepared[m.graphs[0].name], recipe, exact)
    hessians = HessianStore() if targets else None
    inputs = sorted({x for x, _, _ in targets.values()})
    collectors = {g.name: cal_mod.RangeCollector(prepared[g.name], hessians=hessians, hessian_inputs=inputs)
                  for g in m.graphs}
    calib_data = cal_mod.capture_llm(llm, seqs, collectors, progress=progress, start_graph=start)
    del collectors
    capture_s = time.perf_counter() - t0
    wide = _wide_linears(prepared[m.graphs[0].name], calib_data.ranges, recipe, start)
    if wide:
        log.info("%d linear layer(s) stay float, their outputs reaching %g: %s", len(wide), recipe.float_range,
                 ", ".join(wide))
        recipe = recipe.model_copy(update={"keep_float": recipe.keep_float + wide})
        targets = _gptq_targets(prepared[m.graphs[0].name], recipe, exact)  # GPTQ now skips them
    rounded = _apply_gptq(prepared[m.graphs[0].name], targets, hessians, progress) if targets else None
    del hessians
    kv_ranges = _kv_ranges(calib_data, recipe.kv_margin)
    models, info = _quantize_graphs(graphs, prepared, calib_data.ranges, recipe, kv_ranges, work, progress, rounded,
                                    grids)
    weights = qdq.externalize(models, tmp / WEIGHTS_FILE)
    float_bytes = (src / m.weights_file).stat().st_size
    calibration = CalibrationRecord(**calib_data.summary(), files=[str(p) for p in paths], samples=len(cal_samples),
                                    decode_steps=steps, capture_seconds=round(capture_s, 2),
                                    gptq=_gptq_summary(rounded), held_out_every=cal_mod.HOLDOUT_EVERY)
    kv = _kv_record(info, kv_ranges, recipe)
    quantization = QuantizationSpec(recipe=recipe.name, kv_cache=kv, io=info["io"],
                                    ptq=_ptq_record(recipe, info, weights["bytes"], float_bytes, calibration))
    new = _finish_manifest(tmp, m, graphs, models, quantization)
    del models
    metrics: dict[str, Any] = {}
    if evaluate and held:
        eval_seqs = cal_mod.tokenize_samples(llm, cal_mod.pick(held, eval_samples), context,
                                             eval_tokens or context, prompt_max=context // 2)
        metrics = compare_llms(llm.decoder, Decoder(tmp, manifest=new), eval_seqs, progress=progress)
        metrics["held_out_sources"] = sorted({s.source for s in eval_seqs})
    decode = next(g.name for g in m.graphs if g.kind == "decode")
    tables = {decode: layer_table(info["ranges"][decode], info["score_tensors"], kv.model_dump()["tensors"])}
    extra = {"weights_bytes": weights["bytes"], "float_weights_bytes": float_bytes,
             "calibration": calibration.model_dump(exclude={"files"}, exclude_none=True)}
    report = _record_metrics(tmp, new, metrics, tables, info["ranges"], extra)
    return new, {"kind": "llm", "recipe": recipe.name, "metrics": metrics, "kv_cache": kv.model_dump(exclude_none=True),
            "weights_bytes": weights["bytes"], "float_weights_bytes": float_bytes,
            "calibration": calibration.model_dump(exclude_none=True), "report": report}


def _quantize_embedder(src, m, recipe, calib, samples, tmp, work, progress, evaluate,
                       eval_samples) -> tuple[Manifest, dict[str, Any]]:
    from runtime.embedder import Embedder

    emb = Embedder(src, manifest=m)
    cal_samples, held, paths = cal_mod.calibration_texts(calib, samples, with_generic_chat=False)

    def texts_of(items, short: bool = False):
        out = []
        for s in items:  # retrieval embeds short queries as well as passages
            if s.is_chat:
                questions = s.questions
                out += questions
                if short:  # a word or two: the mean of very few token vectors has the largest norm
                    out += [" ".join(q.split()[:1 + len(out) % 2]) for q in questions]
            out.append(s.plain())
        return out

    texts = texts_of(cal_samples, short=True) + ["hello", "help", "thanks", "ok", "the end", "what?"]
    graphs = list(m.graphs)
    prepared = prepare_graphs(src, graphs, work)
    t0 = time.perf_counter()
    targets = _gptq_targets(prepared[graphs[0].name], recipe)
    hessians = HessianStore() if targets else None
    collector = cal_mod.RangeCollector(prepared[graphs[0].name], hessians=hessians,
                                       hessian_inputs=sorted({x for x, _, _ in targets.values()}))
    ranges = cal_mod.capture_embedder(emb, texts, collector)
    del collector
    capture_s = time.perf_counter() - t0
    rounded = _apply_gptq(prepared[graphs[0].name], targets, hessians, progress) if targets else None
    # a query bucket is the main graph at a smaller shape (same node names): it takes the main
    # graph's ranges, so both quantize every activation alike and give the same vectors
    models, info = _quantize_graphs(graphs, prepared, {g.name: ranges for g in graphs}, recipe, {}, work, progress,
                                    rounded)
    weights = qdq.externalize(models, tmp / WEIGHTS_FILE)
    float_bytes = (src / m.weights_file).stat().st_size
    calibration = CalibrationRecord(texts=len(texts), files=[str(p) for p in paths], samples=len(cal_samples),
                                    gptq=_gptq_summary(rounded), capture_seconds=round(capture_s, 2),
                                    held_out_every=cal_mod.HOLDOUT_EVERY)
    quantization = QuantizationSpec(recipe=recipe.name, io=info["io"],
                                    ptq=_ptq_record(recipe, info, weights["bytes"], float_bytes, calibration))
    new = _finish_manifest(tmp, m, list(m.graphs), models, quantization)
    metrics: dict[str, Any] = {}
    if evaluate and held:
        metrics = compare_embedders(emb, Embedder(tmp, manifest=new), texts_of(cal_mod.pick(held, eval_samples)))
    graph = m.graphs[0].name
    tables = {graph: layer_table(info["ranges"][graph], info["score_tensors"])}
    extra = {"weights_bytes": weights["bytes"], "float_weights_bytes": float_bytes}
    report = _record_metrics(tmp, new, metrics, tables, info["ranges"], extra)
    return new, {"kind": "embedder", "recipe": recipe.name, "metrics": metrics, "weights_bytes": weights["bytes"],
            "float_weights_bytes": float_bytes, "calibration": calibration.model_dump(exclude_none=True),
            "report": report}


def format_summary(result: dict[str, Any]) -> str:
    mt = result.get("metrics") or {}
    lines = [f"quantized {result['model_dir']} ({result['recipe']}) in {result.get('seconds', '?')} s: weights "
             f"{result['float_weights_bytes'] / 1e6:.1f} MB -> {result['weights_bytes'] / 1e6:.1f} MB"]
    if "greedy_agreement" in mt:
        lines.append(f"  held-out text ({mt['scored_tokens']} tokens, {mt['sequences']} sequences): greedy agreement "
                     f"{mt['greedy_agreement']:.2%}, logits cosine {mt['logits_cosine']:.5f} (min {mt['logits_cosine_min']:.4f}), "
                     f"perplexity {mt['perplexity_float']:.3f} -> {mt['perplexity_quantized']:.3f} "
                     f"({mt['perplexity_change']:+.2%})")
    if "embedding_cosine" in mt:
        lines.append(f"  held-out texts ({mt['texts']}): embedding cosine {mt['embedding_cosine']:.5f} "
                     f"(min {mt['embedding_cosine_min']:.5f})")
    if result.get("report"):
        lines.append(f"  report: {', '.join(result['report'])}")
    return "\n".join(lines)
