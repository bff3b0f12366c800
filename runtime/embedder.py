"""Sentence embeddings through a model directory's static [B, L] graphs.

A model has its main graph (the build's --batch × --seq: ingest's batches of passages) and, when
built with one, a small query bucket (e.g. 1 × 32: one spoken question). Each batch of texts runs
on whichever graph computes the fewest padded tokens for it, so a 12-token question pays for 32
tokens instead of 8 × 128. Every graph has the same weights and pools only the real tokens, so the
vectors do not depend on which one ran. A model built without a bucket runs everything on the main
graph.

Texts are queries or passages: a model trained with a marker before each (e5's "query: " and
"passage: ", recorded in its manifest) gets it here, so callers only say which kind they embed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from models.manifest import EmbeddingSpec, GraphSpec, Manifest, TextKind, load_manifest
from runtime.errors import RuntimeModelError
from runtime.graphs import graph_paths
from runtime.options import RuntimeOptions
from runtime.session import open_graph


@dataclass
class Embeddings:
    vectors: np.ndarray  # [N, H] float32, L2-normalised
    truncated: list[bool]  # text i was longer than the graph's L tokens and was cut


def unknown_share(tokenizer: Tokenizer, unk_id: int | None, text: str) -> float:
    """Share of the text's tokens that are `unk_id` (none for a vocabulary without one)."""
    if unk_id is None:
        return 0.0
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return sum(i == unk_id for i in ids) / len(ids) if ids else 0.0


def pick_graph(graphs: list[GraphSpec], rows: int, longest: int) -> GraphSpec:
    """The graph that embeds `rows` texts of at most `longest` tokens with the fewest padded
    tokens (runs × B × L); ties go to the fewest runs. `graphs[0]` (the main graph) always fits."""
    fitting = [g for g in graphs if g.seq >= longest] or graphs[:1]
    return min(fitting, key=lambda g: (math.ceil(rows / g.batch) * g.batch * g.seq, math.ceil(rows / g.batch)))


class Embedder:
    def __init__(self, model_dir: str | Path, options: RuntimeOptions = RuntimeOptions(), verify: bool = True,
                 manifest: Manifest | None = None):
        """`manifest`: the directory's manifest as a build holds it before writing it (taken as it is)."""
        self.dir = Path(model_dir)
        self.manifest = m = manifest or load_manifest(self.dir, verify=verify)
        if m.kind != "embedder":
            raise RuntimeModelError(f"{self.dir} holds an {m.kind} model, not an embedder")
        graph = m.graph("embed")  # the main graph is listed first
        self.batch, self.seq = graph.batch, graph.seq
        self.dim = m.architecture.hidden
        paths = graph_paths(self.dir, m, options.backend, options.target)
        self.session = open_graph(paths[graph.name], options)
        # the query buckets: smaller graphs of the same weights (none in a model built before them,
        # or wrapped without them); texts are cut at the main graph's L whichever graph runs them
        self.graphs = [graph] + [g for g in m.graphs if g.kind == "embed" and g.name != graph.name
                                 and g.seq <= graph.seq and g.name in paths]
        self.bucket_sessions = {g.name: open_graph(paths[g.name], options) for g in self.graphs[1:]}
        self.tokenizer = Tokenizer.from_file(str(self.dir / m.tokenizer.file))
        # the graph has a fixed length: we pad and truncate ourselves and report truncation
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.texts = m.embedding or EmbeddingSpec()
        self.unk_id = m.tokenizer.unk_id if m.tokenizer.unk_id is not None else self._wordpiece_unk()
        # tokens a passage may have: the graph's L less the passage marker (chunks are cut to this)
        self.passage_tokens = self.seq - len(self._prefix_ids("passage"))
        # identity of the vectors: the source weights, not this build's batch/length or backend
        weights_sha = "".join(sorted(m.source.files.values()))
        self.model_id = f"{m.architecture.arch}:{hashlib.sha256(weights_sha.encode()).hexdigest()[:16]}"

    def _wordpiece_unk(self) -> int | None:
        # builds before the manifest recorded unk_id: WordPiece names its unknown token, byte-level
        # BPE has none
        unk = getattr(self.tokenizer.model, "unk_token", None)
        return self.tokenizer.token_to_id(unk) if unk else None

    def _prefix_ids(self, kind: TextKind) -> list[int]:
        prefix = self.texts.prefix(kind)
        return self.tokenizer.encode(prefix, add_special_tokens=False).ids if prefix else []

    def unknown_share(self, text: str) -> float:
        """Share of the text's tokens this model only knows as its unknown token: above a third it
        cannot read the text (all-MiniLM-L6-v2 on Chinese: 40-90% [UNK])."""
        return unknown_share(self.tokenizer, self.unk_id, text)

    @contextmanager
    def replaced_session(self, stand_in: Any) -> Iterator[None]:
        """Inside the block the main graph runs through `stand_in` (`run(feeds) -> outputs`): how
        calibration records its tensors."""
        original, self.session = self.session, stand_in
        try:
            yield
        finally:
            self.session = original

    def encode_ids(self, texts: list[str], kind: TextKind | list[TextKind] = "passage"
                   ) -> tuple[list[list[int]], list[bool]]:
        """`kind`: of every text, or of each (a question beside passage sentences: one run)."""
        kinds = [kind] * len(texts) if isinstance(kind, str) else kind
        encodings = self.tokenizer.encode_batch([self.texts.prefix(k) + t for k, t in zip(kinds, texts)])
        ids, truncated = [], []
        for enc in encodings:
            toks = enc.ids
            cut = len(toks) > self.seq
            if cut:  # keep the closing special token ([SEP]) where the template added one
                toks = toks[: self.seq - 1] + toks[-1:] if enc.special_tokens_mask[-1] else toks[: self.seq]
            ids.append(toks)
            truncated.append(cut)
        return ids, truncated

    def _session(self, graph: GraphSpec):
        return self.session if graph.name == self.graphs[0].name else self.bucket_sessions[graph.name]

    def embed(self, texts: list[str], buckets: bool = True, kind: TextKind | list[TextKind] = "passage") -> Embeddings:
        """`kind`: what the texts are, for a model with query and passage markers (the same vectors
        otherwise); `buckets=False` runs every text on the main graph (what calibration captures)."""
        ids, truncated = self.encode_ids(texts, kind)
        out = np.zeros((len(texts), self.dim), np.float32)
        graphs = self.graphs if buckets else self.graphs[:1]
        for start in range(0, len(ids), self.batch):
            group = ids[start:start + self.batch]
            graph = pick_graph(graphs, len(group), max(len(t) for t in group))
            session = self._session(graph)
            for sub in range(0, len(group), graph.batch):
                chunk = group[sub:sub + graph.batch]
                input_ids = np.zeros((graph.batch, graph.seq), np.int32)
                mask = np.zeros((graph.batch, graph.seq), np.int32)
                for row, toks in enumerate(chunk):
                    input_ids[row, :len(toks)] = toks
                    mask[row, :len(toks)] = 1
                vectors = session.run({"input_ids": input_ids, "attention_mask": mask})["embeddings"]
                out[start + sub:start + sub + len(chunk)] = vectors[:len(chunk)]
        return Embeddings(out, truncated)
