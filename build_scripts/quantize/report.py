"""Accuracy of quantized graphs against float ones on held-out text, and activation-range tables.

LLM metrics (`compare_llms`), teacher-forced over held-out token sequences so both models always
see the same context: the prompt goes through the prefill graphs, the continuation one token at a
time through the decode graph, and at every step the two models' logits are compared:
  logits_cosine   mean (and min) cosine of the float and quantized logits vectors
  greedy_agreement fraction of steps where both pick the same argmax token
  perplexity      exp(mean NLL of the true next token), float and quantized, over the continuation
Embedder metrics (`compare_embedders`): cosine of float vs quantized sentence embeddings.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    den = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / den) if den > 0 else 1.0


def _nll(logits: np.ndarray, target: int) -> float:
    x = logits.astype(np.float64)
    m = x.max()
    return float(m + math.log(np.exp(x - m).sum()) - x[target])


def compare_llms(float_dec, quant_dec, sequences, progress: bool = False) -> dict[str, Any]:
    """Teacher-forced comparison of two runtime Decoders over TokenSequences."""
    from tqdm import tqdm

    cosines, agree, nll_f, nll_q = [], [], [], []
    first_cos = []  # the logits right after a prefill (prefill graphs only)
    for seq in tqdm(sequences, desc="accuracy", unit="seq", disable=not progress, leave=False):
        float_dec.reset()
        quant_dec.reset()
        lf, lq = float_dec.feed(seq.prompt), quant_dec.feed(seq.prompt)
        first_cos.append(_cos(lf, lq))
        targets = seq.continuation
        for i, tok in enumerate(targets or [None]):
            cosines.append(_cos(lf, lq))
            agree.append(int(np.argmax(lf)) == int(np.argmax(lq)))
            if tok is None:
                break
            nll_f.append(_nll(lf, tok))
            nll_q.append(_nll(lq, tok))
            if i < len(targets) - 1:
                lf, lq = float_dec.feed([tok]), quant_dec.feed([tok])
    ppl_f = math.exp(float(np.mean(nll_f))) if nll_f else float("nan")
    ppl_q = math.exp(float(np.mean(nll_q))) if nll_q else float("nan")
    return {
        "sequences": len(sequences), "steps": len(cosines), "scored_tokens": len(nll_f),
        "logits_cosine": round(float(np.mean(cosines)), 6), "logits_cosine_min": round(float(np.min(cosines)), 6),
        "prefill_logits_cosine": round(float(np.mean(first_cos)), 6),
        "greedy_agreement": round(float(np.mean(agree)), 6),
        "perplexity_float": round(ppl_f, 4), "perplexity_quantized": round(ppl_q, 4),
        "perplexity_change": round(ppl_q / ppl_f - 1.0, 6) if nll_f else None,
    }


def compare_embedders(float_emb, quant_emb, texts: list[str]) -> dict[str, Any]:
    a, b = float_emb.embed(texts).vectors, quant_emb.embed(texts).vectors
    cos = [_cos(x, y) for x, y in zip(a, b)]
    return {"texts": len(texts), "embedding_cosine": round(float(np.mean(cos)), 6),
            "embedding_cosine_min": round(float(np.min(cos)), 6),
            # retrieval takes inner products of supposedly unit vectors: the norm must survive too
            "embedding_norm_error_max": round(float(np.abs(np.linalg.norm(b, axis=1) - 1.0).max()), 6)}


# ------------------------------------------------------------------------------------------------
# Activation ranges
# ------------------------------------------------------------------------------------------------

# (column, pattern on the tensor name); the first match wins
_COLUMNS = [
    ("attn_norm", r"/attn/rms_norm/output_0$|/attn_norm|layer_norm/output_0$"),
    ("q", r"/attn/q/output_0$"), ("k", r"/attn/k/output_0$"), ("v", r"/attn/v/output_0$"),
    ("scores", None),  # the attention scores before the mask (given by the caller)
    ("attn_out", r"/attn/o/output_0$"), ("resid_attn", r"/attn/residual/output_0$"),
    ("mlp_norm", r"/mlp/rms_norm/output_0$"), ("gate", r"/mlp/gate/output_0$"), ("up", r"/mlp/up/output_0$"),
    ("act", r"/mlp/(silu|Gelu)/output_0$"), ("down", r"/mlp/down/output_0$"), ("resid_mlp", r"/mlp/residual/output_0$"),
]
_LAYER = re.compile(r"^/layers\.(\d+)/")


def layer_table(encodings: dict[str, tuple[float, float, str]], score_tensors: set[str],
                kv: dict[str, dict] | None = None) -> tuple[list[str], list[list[str]]]:
    """Rows per layer: the largest absolute value each tensor kind reached in calibration, the
    widest tensor of the layer, and the pinned KV ranges."""
    layers: dict[int, dict[str, float]] = {}
    widest: dict[int, tuple[float, str]] = {}
    for name, (lo, hi, _) in encodings.items():
        m = _LAYER.match(name)
        if not m:
            continue
        i = int(m.group(1))
        amax = max(abs(lo), abs(hi))
        row = layers.setdefault(i, {})
        if amax > widest.get(i, (-1.0, ""))[0]:
            widest[i] = (amax, name[len(m.group(0)):])
        for col, pat in _COLUMNS:
            if col == "scores":
                if name in score_tensors:
                    row[col] = max(row.get(col, 0.0), amax)
                    break
                continue
            if re.search(pat, name):
                row[col] = max(row.get(col, 0.0), amax)
                break
    cols = [c for c, _ in _COLUMNS if any(c in r for r in layers.values())]
    header = ["layer", *cols, "widest tensor"]
    if kv:
        header += ["key range", "value range"]
    rows = []
    for i in sorted(layers):
        r = layers[i]
        row = [str(i), *[f"{r[c]:.3g}" if c in r else "" for c in cols], f"{widest[i][1]} ({widest[i][0]:.3g})"]
        if kv:
            k, v = kv.get(f"key_{i}"), kv.get(f"value_{i}")
            row += [f"[{k['rmin']:.3g}, {k['rmax']:.3g}]" if k else "", f"[{v['rmin']:.3g}, {v['rmax']:.3g}]" if v else ""]
        rows.append(row)
    return header, rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def write_report(path: Path, title: str, metrics: dict[str, Any], tables: dict[str, tuple[list[str], list[list[str]]]],
                 ranges: dict[str, dict[str, tuple[float, float, str]]], extra: dict[str, Any]) -> list[Path]:
    """`<path>.md` (metrics + per-layer tables) and `<path>_ranges.json` (every activation's range per
    graph); a PNG of the per-layer ranges too when matplotlib is installed (the `report` extra)."""
    md = [f"# {title}", "", "## Accuracy vs float (held-out text)", ""]
    md += [f"- {k}: {v}" for k, v in metrics.items()]
    md += ["", "## Build", ""] + [f"- {k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in extra.items()]
    for name, (header, rows) in tables.items():
        md += ["", f"## Activation ranges per layer: {name}", "",
               "Largest absolute value of each tensor kind over every calibration run (MinMax; the "
               "quantization grids add the recipe's activation margin). Columns: RMSNorm outputs, "
               "q/k/v/o projections, attention scores before the mask, residual stream after "
               "attention and after the MLP, MLP gate/up/activation/down.", "",
               markdown_table(header, rows)]
    out_md = path.with_suffix(".md")
    out_md.write_text("\n".join(md) + "\n")
    out_json = path.with_name(path.name + "_ranges.json")
    out_json.write_text(json.dumps({g: {t: {"min": lo, "max": hi, "type": ty} for t, (lo, hi, ty) in enc.items()}
                                    for g, enc in ranges.items()}, indent=1) + "\n")
    written = [out_md, out_json]
    png = _plot(path.with_name(path.name + "_ranges.png"), tables)
    if png:
        written.append(png)
    return written


def _plot(path: Path, tables) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    name, (header, rows) = next(iter(tables.items()))
    fig, ax = plt.subplots(figsize=(10, 5))
    for j, col in enumerate(header[1:], start=1):
        ys = [_number(r[j]) for r in rows]
        if any(y is None for y in ys):  # a text column (the widest tensor's name): not a range
            continue
        ax.plot([int(r[0]) for r in rows], ys, marker="o", label=col)
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("max |activation|")
    ax.set_title(f"activation ranges per layer ({name})")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _number(cell) -> float | None:
    """A table cell as a float (empty: NaN), None when it is text."""
    if cell in ("", None):
        return np.nan
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None
