"""`hexrag bench llm --plot FILE.png`: the medians as a picture, TTFT and decode speed per prompt length.

matplotlib is optional and kept out of the `peers` extra: installed next to hexrag it also switches
on build_scripts' quantization-report plot, which today fails on LLM reports (it reads the
"widest tensor" column as a number).
"""

from __future__ import annotations

from pathlib import Path

from app.bench.errors import BenchError


def plot_comparison(c, path: Path, title: str) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: write the file only
        import matplotlib.pyplot as plt
    except ImportError:
        raise BenchError("--plot needs matplotlib (pip install matplotlib)") from None
    medians = {name: m for name, m in c.summary().items() if "ttft_ms" in m}
    fig, (ttft, decode) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(medians)
    xs = range(len(c.lengths))
    for i, (name, m) in enumerate(medians.items()):
        ttft.bar([x + i * width for x in xs], [m["ttft_ms"][n] for n in c.lengths], width, label=name)
        decode.plot([str(n) for n in c.lengths], [m["decode_tok_s_by_prompt"][n] for n in c.lengths], marker="o",
                    label=name)
    ttft.set_xticks([x + width * (len(medians) - 1) / 2 for x in xs], [str(n) for n in c.lengths])
    ttft.set(xlabel="prompt tokens", ylabel="time to first token, ms (lower is better)")
    decode.set(xlabel="prompt tokens", ylabel="decode tok/s (higher is better)", ylim=(0, None))
    for ax in (ttft, decode):
        ax.grid(axis="y", alpha=0.3)
        ax.legend()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
