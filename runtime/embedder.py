"""Sentence embeddings through a model directory's static [B, L] graph."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from models.manifest import load_manifest
from runtime.errors import RuntimeModelError
from runtime.graphs import graph_paths
from runtime.session import open_graph


@dataclass
class Embeddings:
    vectors: np.ndarray  # [N, H] float32, L2-normalised
    truncated: list[bool]  # text i was longer than the graph's L tokens and was cut


class Embedder:
    def __init__(self, model_dir: str | Path, backend: str = "cpu", threads: int | None = None,
                 verify: bool = True, target: str | None = None):
        self.dir = Path(model_dir)
        self.manifest = m = load_manifest(self.dir, verify=verify)
        if m.kind != "embedder":
            raise RuntimeModelError(f"{self.dir} holds an {m.kind} model, not an embedder")
        graph = m.graph("embed")
        self.batch, self.seq = graph.batch, graph.seq
        self.dim = m.architecture["hidden"]
        self.session = open_graph(graph_paths(self.dir, m, backend, target)[graph.name], backend, threads)
        self.tokenizer = Tokenizer.from_file(str(self.dir / m.tokenizer.file))
        # the graph has a fixed length: we pad and truncate ourselves and report truncation
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        # identity of the vectors: the source weights, not this build's batch/length or backend
        weights_sha = "".join(sorted(m.source.files.values()))
        self.model_id = f"{m.architecture['arch']}:{hashlib.sha256(weights_sha.encode()).hexdigest()[:16]}"

    def encode_ids(self, texts: list[str]) -> tuple[list[list[int]], list[bool]]:
        encodings = self.tokenizer.encode_batch(texts)
        ids, truncated = [], []
        for enc in encodings:
            toks = enc.ids
            cut = len(toks) > self.seq
            if cut:  # keep the closing special token ([SEP]) where the template added one
                toks = toks[: self.seq - 1] + toks[-1:] if enc.special_tokens_mask[-1] else toks[: self.seq]
            ids.append(toks)
            truncated.append(cut)
        return ids, truncated

    def embed(self, texts: list[str]) -> Embeddings:
        ids, truncated = self.encode_ids(texts)
        out = np.zeros((len(texts), self.dim), np.float32)
        for start in range(0, len(ids), self.batch):
            chunk = ids[start:start + self.batch]
            input_ids = np.zeros((self.batch, self.seq), np.int32)
            mask = np.zeros((self.batch, self.seq), np.int32)
            for row, toks in enumerate(chunk):
                input_ids[row, :len(toks)] = toks
                mask[row, :len(toks)] = 1
            vectors = self.session.run({"input_ids": input_ids, "attention_mask": mask})["embeddings"]
            out[start:start + len(chunk)] = vectors[:len(chunk)]
        return Embeddings(out, truncated)
