"""`hexrag bench build`: what an HTP build costs, measured from the model directory alone.

Per compiled target and variant (the manifest's `target.builds`, written by build_scripts.compile):
  on HTP          share of graph nodes QNN placed on HTP: from the compile record, else counted in
                  the EPContext models (an EPContext node stands for every node compiled into it)
  binaries        context binaries (unshared: one per graph and part; shared: one per part)
  binary/weights  context-binary bytes ÷ weights-file bytes (shared: prefill + decode ≈ 1× the weights)
  parts           pieces each graph is split into by layers (build_scripts/split.py)
  compile s       QNN compile time, all graphs
Per chip (chips.py): decode ceiling = DRAM bandwidth ÷ bytes read per generated token, i.e. the
weights as the HTP holds them plus the whole static KV cache (every decode step reads all C slots).
A device reaches a fraction of it: AI Hub's published results sit beside it for scale.
"""

from __future__ import annotations

from pathlib import Path

from app.bench.chips import AI_HUB, CHIPS
from models.manifest import DecoderArchitecture, TargetBuild, build_files

FP16_BYTES = 2  # float graphs run in fp16 on HTP; quantized KV caches are uint16


def _ctx_node_share(model_dir: Path, graphs: dict[str, str | list[str]]) -> float | None:
    import onnx

    ctx = other = 0
    for rel in (f for entry in graphs.values() for f in build_files(entry)):
        path = model_dir / rel
        if not path.is_file():
            return None
        for node in onnx.load(str(path), load_external_data=False).graph.node:
            ctx += node.op_type == "EPContext"
            other += node.op_type != "EPContext"
    return ctx / (ctx + other) if ctx + other else None


def _build_row(model_dir: Path, build: TargetBuild, weights_bytes: int) -> dict:
    htp = sum(p.get("htp", 0) for p in build.placement.values())
    cpu = sum(p.get("cpu", 0) for p in build.placement.values())
    share = htp / (htp + cpu) if htp + cpu else _ctx_node_share(model_dir, build.graphs)
    binary_bytes = sum(build.binaries.values())
    return {"target": build.target, "chip": build.chip, "variant": build.variant,
            "shared_weights": build.shared_weights, "graphs": len(build.graphs),
            "htp_node_share": share, "htp_nodes": htp or None, "binaries": len(build.binaries), "binary_bytes": binary_bytes,
            "weights_bytes": weights_bytes, "binary_to_weights": binary_bytes / weights_bytes if weights_bytes else None,
            "parts": build.parts, "compile_seconds": round(sum(build.compile_seconds.values()), 2)}


def kv_bytes(arch: DecoderArchitecture, context: int) -> int:
    return 2 * arch.n_layers * arch.n_kv_heads * arch.head_dim * context * FP16_BYTES


def device_weight_bytes(m, model_dir: Path, builds: list[TargetBuild]) -> tuple[int, str]:
    """Bytes of weights the HTP reads per token, and where the number comes from."""
    shared = [b for b in builds if b.shared_weights and b.binaries]
    if shared:  # what a device really loads: one binary for prefill and decode
        return min(sum(b.binaries.values()) for b in shared), f"shared context binary ({shared[0].target})"
    weights = (model_dir / m.weights_file).stat().st_size
    if m.quantization.recipe == "none":
        return weights // 2, "fp32 weights file ÷ 2 (HTP runs float graphs in fp16)"
    if m.quantization.cpu_blocks:  # hexrag's CPU target: its bytes, as if an HTP build matched them
        return weights, "CPU-target int4/int8 weights file (HTP builds start from the float graphs: w4a16 is the match)"
    return weights, "quantized weights file"


def build_metrics(model_dir: Path) -> dict:
    from models.manifest import load_manifest

    m = load_manifest(model_dir, verify=False)
    weights_file = (model_dir / m.weights_file).stat().st_size
    builds = m.target.htp_builds
    rows = [_build_row(model_dir, b, m.target.weights_bytes or weights_file) for b in builds]
    out = {"model": m.name, "kind": m.kind, "quantization": m.quantization.recipe,
           "weights_bytes": weights_file, "builds": rows,
           "note": None if builds else "no HTP build in the manifest: run `hexrag compile DIR --target T` "
                                       "for per-target metrics; the ceilings below need none"}
    if m.kind != "llm":
        return out
    weights, basis = device_weight_bytes(m, model_dir, builds)
    kv = kv_bytes(m.architecture, m.context)
    per_token = weights + kv
    out["decode_ceiling"] = {
        "bytes_per_token": per_token, "weights_bytes": weights, "weights_basis": basis, "kv_bytes": kv,
        "context": m.context,
        "chips": [{"target": c.target, "memory": c.memory, "bandwidth_gbs": c.bandwidth_gbs,
                   "tok_s": round(c.bandwidth_gbs * 1e9 / per_token, 1), "source": c.source} for c in CHIPS.values()],
    }
    out["published"] = [{"model": r.model, "precision": r.precision, "target": r.target, "tok_s": r.tok_s,
                         "ttft_ms": list(r.ttft_ms), "context": r.context,
                         "share_of_weights_ceiling": round(r.tok_s / r.weights_ceiling(CHIPS[r.target].bandwidth_gbs), 2),
                         "source": r.source} for r in AI_HUB]
    return out


def _mb(n: int | None) -> str:
    return f"{n / 1e6:.1f}" if n else "-"


def format_build_metrics(r: dict) -> str:
    from runtime.qnn_targets import TARGETS

    lines = [f"model {r['model']} ({r['kind']}, quantization {r['quantization']}), weights file {_mb(r['weights_bytes'])} MB"]
    if r["builds"]:
        lines += ["", "| target | variant | graphs | on HTP | context binaries | MB | ÷ weights | parts | compile s |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for b in r["builds"]:
            share = f"{b['htp_node_share']:.0%}" if b["htp_node_share"] is not None else "?"
            ratio = f"{b['binary_to_weights']:.2f}" if b["binary_to_weights"] else "-"
            lines.append(f"| {b['target']} | {b['variant']} | {b['graphs']} | {share} | {b['binaries']} | {_mb(b['binary_bytes'])} | "
                         f"{ratio} | {b['parts']} | {b['compile_seconds']} |")
    if r.get("note"):
        lines += ["", r["note"]]
    ceiling = r.get("decode_ceiling")
    if ceiling:
        lines += ["", f"decode ceiling = bandwidth ÷ {_mb(ceiling['bytes_per_token'])} MB per token "
                      f"(weights {_mb(ceiling['weights_bytes'])} MB: {ceiling['weights_basis']}; "
                      f"KV cache {_mb(ceiling['kv_bytes'])} MB at context {ceiling['context']})", "",
                  "| chip | memory | GB/s | ceiling tok/s |", "|---|---|---|---|"]
        for c in ceiling["chips"]:
            t = TARGETS[c["target"]]
            caveat = " (float graphs do not compile here: quantize first)" if not t.float_ok and r["quantization"] == "none" else ""
            lines.append(f"| {t.chip} ({c['target']}) | {c['memory']} | {c['bandwidth_gbs']} | {c['tok_s']}{caveat} |")
        lines += ["", "Published device results (Qualcomm AI Hub); share = tok/s ÷ (bandwidth ÷ 4-bit weights):", "",
                  "| model | precision | chip | tok/s | TTFT ms | share of ceiling |", "|---|---|---|---|---|---|"]
        for p in r["published"]:
            lines.append(f"| {p['model']} | {p['precision']} | {TARGETS[p['target']].chip} | {p['tok_s']} | "
                         f"{p['ttft_ms'][0]:.0f}–{p['ttft_ms'][1]:.0f} | {p['share_of_weights_ceiling']:.0%} |")
    return "\n".join(lines)
