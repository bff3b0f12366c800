"""Benchmark: ingest throughput and query latency of the knowledge base.

    python -m knowledge.bench                      # the default run (a few minutes on 2 cores)
    python -m knowledge.bench --sizes 10000 --kinds flat,hnsw,ivf --embedder models/all-minilm-l6-v2

1. Ingest throughput (chunks/s) through KnowledgeBase.ingest on generated Markdown files, with a
   synthetic embedder (hash-seeded random vectors: the pipeline's own cost: parse, chunk, SQLite +
   FTS5 writes, FAISS adds) and, when the model directory exists, the real embedder.
2. Vector-index latency (one query at a time on one thread, p50/p99), build time, recall@10
   against exact search and resident memory, for synthetic unit vectors (dim 384) at each size and
   index kind. The vectors are clustered (topics, as sentence embeddings are; uniformly random
   vectors have no near neighbours worth finding) and queries are perturbed database vectors.
3. End-to-end KnowledgeBase.search latency per mode on a synthetic KB (English + Chinese text).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from knowledge.chunking import Chunk
from knowledge.index import build_index
from knowledge.kb import KnowledgeBase
from knowledge.paths import default_embedder_dir

DIM = 384
WORDS = ("battery charge cable wallbox tyre pressure brake pedal regenerative mode driver seat belt airbag "
         "screen update software navigation route range winter heater climate window wiper light warning "
         "service centre phone key lock door boot trailer towing speed cruise lane camera sensor parking "
         "mirror seat child isofix airbag horn fuse socket port plug power motor inverter coolant fluid").split()
# Chinese text: 2,500 common-range characters drawn with Zipf-like frequencies
VOCAB = WORDS + [f"term{i}" for i in range(5000)]  # English text: Zipf-like over 5,000+ words
VOCAB_P = 1 / np.arange(1, len(VOCAB) + 1)
VOCAB_P /= VOCAB_P.sum()
HANZI = [chr(0x4E00 + i) for i in range(0, 5000, 2)]
HANZI_P = 1 / np.arange(1, len(HANZI) + 1)
HANZI_P /= HANZI_P.sum()


def rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: peak RSS instead
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def clustered(rng: np.random.Generator, n: int, dim: int = DIM, per_topic: int = 100,
              spread: float = 1.2) -> np.ndarray:
    """Unit vectors around n / per_topic random topic centres: cosine ~0.64 to their centre, ~0.4
    between two of a topic, ~0 across topics (MiniLM neighbours sit at 0.4-0.8)."""
    centres = unit(rng, max(1, n // per_topic), dim)
    out = np.empty((n, dim), np.float32)
    for start in range(0, n, 100_000):  # bounded temporaries at 1M
        m = min(100_000, n - start)
        x = centres[rng.integers(0, len(centres), m)] + spread * unit(rng, m, dim)
        out[start:start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def percentiles(samples: list[float]) -> tuple[float, float]:
    ms = np.array(samples) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


# ---- a synthetic embedder: what KnowledgeBase needs, without a model ----------------------
class SyntheticEmbedder:
    """Deterministic random unit vectors (seeded by the text's hash); a word-level tokenizer."""

    def __init__(self, dim: int = DIM, seq: int = 128):
        vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}
        for w in WORDS + HANZI[:500] + [str(i) for i in range(1000)]:
            vocab.setdefault(w, len(vocab))
        tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        self.tokenizer, self.dim, self.seq, self.model_id = tok, dim, seq, f"synthetic:{dim}"
        self.passage_tokens, self.unk_id = seq, 0  # no passage marker; [UNK]

    def unknown_share(self, text: str) -> float:
        from runtime.embedder import unknown_share

        return unknown_share(self.tokenizer, self.unk_id, text)

    def embed(self, texts: list[str], buckets: bool = True, kind: str = "passage"):
        from runtime.embedder import Embeddings

        out = np.empty((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
            out[i] = unit(np.random.default_rng(seed), 1, self.dim)[0]
        return Embeddings(out, [False] * len(texts))


def sentence(rng: np.random.Generator, chinese: bool) -> str:
    if chinese:
        return "".join(rng.choice(HANZI, 18, p=HANZI_P)) + "。"
    return " ".join(rng.choice(VOCAB, 14, p=VOCAB_P)).capitalize() + "."


def write_corpus(root: Path, files: int, seed: int = 0, prefix: str = "chapter") -> list[Path]:
    """`files` generated Markdown chapters (<prefix>NNNN.md), every fifth in Chinese; the same seed
    writes the same text."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        parts = [f"# Chapter {i}"]
        for s in range(4):
            parts.append(f"## Section {s}")
            parts += [" ".join(sentence(rng, i % 5 == 0) for _ in range(4)) for _ in range(3)]
        (root / f"{prefix}{i:04d}.md").write_text("\n\n".join(parts) + "\n")
    return sorted(root.glob(f"{prefix}*.md"))


# ---- 1. ingest throughput ----------------------------------------------------------------------
def bench_ingest(embedder, label: str, files: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="hexrag-bench-"))
    try:
        write_corpus(tmp / "docs", files)
        with KnowledgeBase.open(tmp / "kb", embedder) as kb:
            started = time.perf_counter()
            report = kb.ingest(tmp / "docs", progress=False)
            seconds = time.perf_counter() - started
        return {"embedder": label, "files": files, "chunks": report.chunks, "seconds": seconds,
                "chunks_per_s": report.chunks / seconds}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- 2. vector-index latency ------------------------------------------------------------
def bench_index(n: int, kinds: list[str], queries: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    data = clustered(rng, n)
    ids = np.arange(1, n + 1, dtype=np.int64)
    picks = rng.choice(n, queries, replace=False)
    q = data[picks] + 0.5 * unit(rng, queries)  # a near neighbour exists, not an exact copy
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    truth = None
    rows = []
    for kind in kinds:
        gc.collect()
        started = time.perf_counter()
        index = build_index(kind, DIM, ids, data)
        build_s = time.perf_counter() - started
        rss = rss_mb()
        with tempfile.TemporaryDirectory() as tmp:  # the serialised index ~ its memory footprint
            index.write(Path(tmp) / "i")
            mem = (Path(tmp) / "i").stat().st_size / 2**20
        times = []
        found = np.empty((queries, 10), np.int64)
        for i in range(queries):  # one query at a time (the backends then use one thread)
            t = time.perf_counter()
            found[i] = index.search(q[i:i + 1], 10)[1][0]
            times.append(time.perf_counter() - t)
        if kind == "flat":
            truth = found.copy()
        recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth)])) if truth is not None else None
        p50, p99 = percentiles(times)
        rows.append({"n": n, "kind": kind, "build_s": build_s, "p50_ms": p50, "p99_ms": p99, "recall@10": recall,
                     "index_mb": mem, "rss_mb": rss})
        print(f"  {n:>9,} {kind:5} build {build_s:7.1f} s  p50 {p50:8.2f} ms  p99 {p99:8.2f} ms  "
              f"recall@10 {recall:.3f}  index {mem:,.0f} MB  process RSS {rss:,.0f} MB", flush=True)
        del index
    del data
    gc.collect()
    return rows


# ---- 3. end-to-end search ---------------------------------------------------------------
def bench_kb_search(n: int, queries: int, seed: int = 0) -> list[dict]:
    """A KB of n synthetic chunks written straight through the store (no files), then timed searches."""
    tmp = Path(tempfile.mkdtemp(prefix="hexrag-bench-kb-"))
    rng = np.random.default_rng(seed)
    embedder = SyntheticEmbedder()
    try:
        kb = KnowledgeBase.open(tmp, embedder)
        kb.store.set_meta(model_id=embedder.model_id, dim=DIM)
        started = time.perf_counter()
        per_doc = 100
        for d in range(n // per_doc):
            texts = [sentence(rng, c % 5 == 0) + " " + sentence(rng, c % 5 == 0) for c in range(per_doc)]
            chunks = [Chunk(c, ("Section",), t, 0, len(t), None, t, 30) for c, t in enumerate(texts)]
            fields = {"source": f"/synthetic/{d}.md", "name": f"{d}.md", "kind": "markdown", "title": None,
                      "content_hash": str(d), "chunker": "synthetic", "size": 0, "mtime": None, "text": ""}
            kb.commit_document(fields, chunks, unit(rng, per_doc))
        kb.save_index()
        write_s = time.perf_counter() - started
        out = []
        english = lambda: [" ".join(rng.choice(VOCAB, 5, p=VOCAB_P)) for _ in range(queries)]  # noqa: E731
        chinese = lambda: ["".join(rng.choice(HANZI, 8, p=HANZI_P)) for _ in range(queries)]  # noqa: E731
        en, zh = english(), chinese()
        # a process's first searches read the posting lists of their words from SQLite
        # (knowledge/postings.py): timed apart, on queries of their own, before the timed ones
        for label, mode, qs, warm in [("bm25 en", "bm25", en, english()), ("bm25 zh", "bm25", zh, chinese()),
                                      ("dense", "dense", en, []), ("hybrid", "hybrid", en, english())]:
            cold = percentiles(_timed(kb, warm, mode)) if warm else None
            p50, p99 = percentiles(_timed(kb, qs, mode))
            out.append({"n": n, "mode": label, "p50_ms": p50, "p99_ms": p99,
                        "first_p50_ms": cold and cold[0], "first_p99_ms": cold and cold[1]})
            first_line = f"  (first {len(warm)} searches: p50 {cold[0]:.2f} ms  p99 {cold[1]:.2f} ms)" if cold else ""
            print(f"  {n:>9,} {label:8} p50 {p50:8.2f} ms  p99 {p99:8.2f} ms{first_line}", flush=True)
        out.append({"n": n, "mode": "(write)", "chunks_per_s": n / write_s})
        print(f"  {n:>9,} written at {n / write_s:,.0f} chunks/s (SQLite + 3 FTS5 + FAISS, no embedding); "
              f"kb.sqlite {(tmp / 'kb.sqlite').stat().st_size / 2**20:,.0f} MB", flush=True)
        kb.close()
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _timed(kb: KnowledgeBase, queries: list[str], mode: str) -> list[float]:
    times = []
    for query in queries:
        t = time.perf_counter()
        kb.search(query, k=5, mode=mode, min_score=-1.0)
        times.append(time.perf_counter() - t)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="vector counts for the index benchmark")
    parser.add_argument("--kinds", default="flat,hnsw,ivf")
    parser.add_argument("--hnsw-max", type=int, default=100_000,
                        help="largest size to build HNSW for (~130 s per 100k vectors on 2 cores)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--kb-sizes", default="10000,100000", help="chunk counts for end-to-end search")
    parser.add_argument("--files", type=int, default=100, help="generated files for the ingest benchmark")
    parser.add_argument("--embedder", type=Path, default=default_embedder_dir(),
                        help="real embedder for the ingest benchmark (skipped when missing)")
    args = parser.parse_args()
    print(f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} threads, dim {DIM}")

    print("\n1. ingest throughput (KnowledgeBase.ingest on generated Markdown)")
    for label, make in [("synthetic", SyntheticEmbedder), ("real", None)]:
        if make is None:
            if not (args.embedder / "manifest.json").is_file():
                print(f"  real embedder: skipped (no model at {args.embedder})")
                continue
            from runtime.embedder import Embedder

            emb = Embedder(args.embedder)
            label = f"{emb.manifest.name} B={emb.batch} L={emb.seq}"
            files = max(10, args.files // 5)
        else:
            emb, files = make(), args.files
        r = bench_ingest(emb, label, files)
        print(f"  {label}: {r['chunks']} chunks from {r['files']} files in {r['seconds']:.1f} s = "
              f"{r['chunks_per_s']:,.0f} chunks/s", flush=True)

    print("\n2. vector index: one query at a time, k=10")
    kinds = args.kinds.split(",")
    for n in (int(s) for s in args.sizes.split(",")):
        use = [k for k in kinds if k != "hnsw" or n <= args.hnsw_max]
        if "flat" not in use:
            use.insert(0, "flat")  # the exact reference for recall
        if len(use) < len(kinds):
            print(f"  {n:>9,} hnsw  skipped (build time; raise --hnsw-max)")
        bench_index(n, use, args.queries if n < 1_000_000 else max(20, args.queries // 4))

    print("\n3. KnowledgeBase.search end to end (synthetic embedder, k=5)")
    for n in (int(s) for s in args.kb_sizes.split(",") if s):
        bench_kb_search(n, max(20, args.queries // 4))


if __name__ == "__main__":
    main()
