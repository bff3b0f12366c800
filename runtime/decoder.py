"""Run a model directory's prefill/decode graphs over a static KV cache.

`Decoder.feed(ids)` appends tokens to the cache through the graphs and returns the logits of
the last one; `Decoder.score(ids)` appends them in one step and returns every one's logits (the
check of drafted tokens in prompt-lookup decoding, runtime/lookup.py). Prompts go through the
largest prefill bucket in chunks; the rest goes through the smallest bucket that holds it (the
decode graph for a single token), left-padded: the NPU graphs' "rows" KV contract, where the host
masks the padding and stores the new rows. The CPU target ("inplace": the graph writes its rows
into the cache) takes any S, so its chunks run at their exact length. See models/contract.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from models.contract import contract_mismatch, is_inplace, rotary_tables
from models.manifest import Manifest, load_manifest
from runtime.errors import ContextOverflowError, Interrupted, RuntimeModelError
from runtime.graphs import graph_paths
from runtime.kv_cache import KVRows, StaticKVCache, rerotate
from runtime.options import RuntimeOptions
from runtime.session import open_graph


START_GRAPH = "start"  # graph name of the position-0 graph of quantized models


class Decoder:
    def __init__(self, model_dir: str | Path, options: RuntimeOptions = RuntimeOptions(), verify: bool = True,
                 prepack: bool | None = None, manifest: Manifest | None = None):
        """`prepack=False`: no session packs a copy of its weights (slower on the CPU, but a float
        1.5B model's decode graph would copy 6 GB); None: the rule below. `manifest`: the directory's
        manifest as a build holds it before writing it (taken as it is, not read nor verified)."""
        self.dir = Path(model_dir)
        self.manifest = m = manifest or load_manifest(self.dir, verify=verify)
        if m.kind != "llm":
            raise RuntimeModelError(f"{self.dir} holds an {m.kind} model, not an LLM")
        stale = contract_mismatch(m)
        if stale:
            raise RuntimeModelError(f"{m.name}: {stale} (built by an older hexrag): rebuild it with `hexrag build llm`")
        arch = m.architecture
        self.context: int = m.context
        self.mask_value = np.float32(m.mask_value)
        paths = graph_paths(self.dir, m, options.backend, options.target)
        # float graphs on the CPU: only the decode graph gets packed weights: it runs every token
        # (packing bought 25% there), while prefill barely gains from it and each packed copy costs a
        # full set of weights. MatMulNBits graphs always pack: their integer kernels need it
        blocks = m.quantization.cpu_blocks
        opened = {}  # the CPU target lists one file for every step size

        def session(g):
            key = str(paths[g.name])
            if key not in opened:
                pack = (blocks or g.kind == "decode") if prepack is None else prepack
                opened[key] = open_graph(paths[g.name], options, prepack=pack)
            return opened[key]

        self.sessions = {g.seq: session(g) for g in m.graphs if g.name != START_GRAPH}
        self.start_session = next((open_graph(paths[g.name], options, prepack=False)
                                   for g in m.graphs if g.name == START_GRAPH), None)
        self.buckets = sorted(self.sessions, reverse=True)  # includes 1: the decode graph
        self.n_layers = arch.n_layers
        self.kv_dtype, fill = _kv_layout(m, self.n_layers)
        self.inplace = is_inplace(m.graphs[0].inputs)
        self.cache = StaticKVCache(self.n_layers, arch.n_kv_heads, arch.head_dim, self.context,
                                   dtype=self.kv_dtype, fill=fill, keys_transposed=not self.inplace)
        self._rope = (arch.head_dim, arch.rope_theta)
        if not self.inplace:  # the rows contract takes each step's rotary rows from the host
            self._cos, self._sin = rotary_tables(np.arange(self.context), *self._rope)
        self.tokens: list[int] = []  # what the cache holds, in order
        # every graph's inputs and outputs, allocated once; the KV I/O is the cache itself
        self.io = {(g.seq, 1): _StepBuffers(g, self.cache) for g in m.graphs if g.name != START_GRAPH}
        self._bindings: dict[tuple, tuple] = {}  # (id(session), seq, rows) -> (session, its binding)
        self._run_options = ort.RunOptions()  # its terminate flag stops a run from another thread (interrupt)
        # graphs built since 2026-12-03 take a vector of positions to score (`last_index` [R]);
        # earlier ones score one, and decode without drafts
        self.scores_every_position = self.inplace and all(
            isinstance(s.input_shapes.get("last_index", [1])[0], str) for s in opened.values())

    @property
    def vocab(self) -> int:
        return self.manifest.architecture.vocab

    def reset(self) -> None:
        self.rewind(0)

    def interrupt(self) -> None:
        """Stop the graph run in progress, from any thread, and every run after it until `resume`: the
        run raises Interrupted at its next operator (ONNX Runtime's terminate flag; a context binary on
        the HTP is one operator, and finishes first), leaving the cache as it was before that step."""
        self._run_options.terminate = True

    def resume(self) -> None:
        self._run_options.terminate = False

    def rewind(self, length: int) -> None:
        """Keep only the first `length` cached tokens (for prefix reuse)."""
        self.cache.truncate(length)
        del self.tokens[length:]

    @contextmanager
    def replaced_sessions(self, replace: Callable[[int, Any], Any]) -> Iterator[None]:
        """Inside the block every step size's graph runs through `replace(seq, session)`, whose
        stand-in needs only `run(feeds) -> outputs`; the cache and the rest work as always
        (calibration records each graph's tensors this way)."""
        original = self.sessions
        self.sessions = {seq: replace(seq, s) for seq, s in original.items()}
        try:
            yield
        finally:
            self.sessions = original

    def rows(self, start: int) -> KVRows:
        """The cache rows of the tokens from `start` to the end, as float32 copies."""
        self.check_placeable()
        keys, values = self.cache.read(start, self.cache.length)
        return KVRows(self.tokens[start:], start, keys, values)

    def place(self, rows: KVRows) -> None:
        """Append rows kept from an earlier run (`rows`) as if their tokens had been fed here: keys
        are re-rotated from their old positions to these, so no graph runs. Exact when the tokens
        before them are the same as when they were computed; otherwise their rows never saw the new
        context (the passage-KV approximation)."""
        self.check_placeable()
        n = len(rows.tokens)
        if self.cache.length + n > self.context:
            raise ContextOverflowError(n, self.context, cached=self.cache.length)
        cos, sin = rotary_tables([self.cache.length - rows.start], *self._rope)
        for layer in range(self.n_layers):
            self.cache.put(layer, rerotate(rows.keys[layer], cos[0], sin[0]), rows.values[layer])
        self.cache.advance(n)
        self.tokens.extend(rows.tokens)

    @property
    def placeable(self) -> bool:
        """Kept rows can be read and placed only in a float cache (the CPU target's builds)."""
        return self.kv_dtype == np.float32

    def check_placeable(self) -> None:
        """RuntimeModelError unless kept rows can be placed."""
        if not self.placeable:
            raise RuntimeModelError(f"{self.manifest.name} keeps its KV cache as {self.kv_dtype}; passage KV "
                                    "needs a float cache (the CPU target's builds)")

    def feed(self, ids: list[int]) -> np.ndarray:
        """Append tokens; returns float32 logits [vocab] for the last one."""
        if not ids:
            raise ValueError("feed() needs at least one token")
        if len(self.tokens) + len(ids) > self.context:
            raise ContextOverflowError(len(ids), self.context, cached=len(self.tokens))
        logits = None
        rest = list(ids)
        if self.start_session is not None and self.cache.length == 0:
            logits = self._run(rest[:1], 1, self.start_session)[0]
            rest = rest[1:]
        while rest:
            seq = self._bucket(len(rest))
            chunk, rest = rest[:seq], rest[seq:]
            logits = self._run(chunk, seq)[0]
        return logits

    def score(self, ids: list[int]) -> np.ndarray:
        """Append tokens in one step; returns float32 logits [len(ids), vocab], one row per token:
        what a prefill of them computes (one-token steps round a little differently)."""
        if not self.scores_every_position:
            fix = ("it was built before 2026-12-03: rebuild it with `hexrag build llm`" if self.inplace else
                   "only the CPU target's graphs do (`hexrag build llm --quant int4`)")
            raise RuntimeModelError(f"{self.manifest.name}'s graphs score only their last position; {fix}")
        if not 0 < len(ids) <= self.buckets[0]:
            raise ValueError(f"score() takes 1 to {self.buckets[0]} tokens, got {len(ids)}")
        if len(self.tokens) + len(ids) > self.context:
            raise ContextOverflowError(len(ids), self.context, cached=len(self.tokens))
        return self._run(list(ids), len(ids), rows=len(ids))

    def _bucket(self, remaining: int) -> int:
        """Full chunks of the largest bucket, then one run of the smallest bucket holding the rest.

        One padded run beats several smaller ones: a graph's cost is mostly reading its weights,
        so 20 tokens go through the 32-bucket once, never through the decode graph 20 times.
        In-place graphs (the CPU target's one graph) take any S: their chunks run at their exact
        length, never padded.
        """
        if self.inplace:
            return min(remaining, self.buckets[0])
        if remaining >= self.buckets[0]:
            return self.buckets[0]
        return min(b for b in self.buckets if b >= remaining)

    def _run(self, chunk: list[int], seq: int, session=None, rows: int = 1) -> np.ndarray:
        """One graph run; the logits of its last `rows` positions, [rows, vocab]."""
        n = len(chunk)
        if (seq, rows) not in self.io:  # an exact-length chunk of the in-place graph: its buffers, made once
            g = self.manifest.graph("prefill", self.buckets[0])
            shapes = {"input_ids": [1, seq], "last_index": [rows], "logits": [1, rows, self.vocab]}
            exact = lambda specs: [t.model_copy(update={"shape": shapes[t.name]}) if t.name in shapes else t
                                   for t in specs]
            self.io[seq, rows] = _StepBuffers(g.model_copy(update={
                "seq": seq, "inputs": exact(g.inputs), "outputs": exact(g.outputs)}), self.cache)
        io = self.io[seq, rows]
        (self._inplace_inputs if self.inplace else self._rows_inputs)(io.inputs, chunk, seq)
        session = session or self.sessions.get(seq) or self.sessions[self.buckets[0]]
        out = self._execute(session, (seq, rows), io.inputs, io.outputs)
        if not self.inplace:
            for i in range(self.n_layers):
                self.cache.write(i, out[f"new_key_{i}"], out[f"new_value_{i}"], n)
        self.cache.advance(n)
        self.tokens.extend(chunk)
        return out["logits"][0].copy()  # the buffer is overwritten by the next step

    def _rows_inputs(self, inputs: dict, chunk: list[int], seq: int) -> None:
        """Left-padded ids, their rotary rows and the additive mask (padding and future masked)."""
        n, pos, c = len(chunk), self.cache.length, self.context
        pad = seq - n
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        ids[0, :pad] = 0
        ids[0, pad:] = chunk
        positions = np.full(seq, pos, np.int64)
        positions[pad:] = np.arange(pos, pos + n)
        np.take(self._cos, positions, axis=0, out=inputs["rope_cos"][0, 0])
        np.take(self._sin, positions, axis=0, out=inputs["rope_sin"][0, 0])
        mask.fill(self.mask_value)
        mask[..., :pos] = 0.0  # every row sees the filled cache slots
        causal = np.tril(np.ones((n, n), bool))
        mask[0, 0, pad:, c + pad:][causal] = 0.0  # real rows see real new tokens up to themselves

    def _inplace_inputs(self, inputs: dict, chunk: list[int], seq: int) -> None:
        """The ids and the lengths GroupQueryAttention derives positions and masks from."""
        pos = self.cache.length
        inputs["input_ids"][0] = chunk  # exactly seq tokens: see _bucket
        inputs["seqlens_k"][0] = pos + seq - 1
        inputs["total_sequence_length"][...] = pos + seq
        rows = inputs["last_index"]
        rows[:] = np.arange(seq - len(rows), seq)  # the last len(rows) positions

    def _execute(self, session, shape: tuple[int, int], inputs: dict, outputs: dict) -> dict[str, np.ndarray]:
        """Run through the session's I/O binding (made on first use, then reused: a step creates no
        tensors); a stand-in without `bind` (calibration, tests) gets plain feeds, its results
        copied into the same output buffers (for in-place graphs: the cache)."""
        if not hasattr(session, "bind"):
            for name, value in session.run(inputs).items():
                outputs[name][...] = value
            return outputs
        key = (id(session), *shape)  # one session runs several step sizes, each bound to its own buffers
        entry = self._bindings.get(key)
        if entry is None or entry[0] is not session:
            entry = self._bindings[key] = (session, session.bind(inputs, outputs))
        try:
            session.run_bound(entry[1], self._run_options)
        except Exception:
            if self._run_options.terminate:
                raise Interrupted("the step was stopped for another request") from None
            raise
        return outputs


class _StepBuffers:
    """One graph's inputs and outputs as host arrays, allocated once at load and filled in place
    every step. The KV inputs are the cache's own buffers, and so are an in-place graph's KV
    outputs (present_key_i/present_value_i)."""

    def __init__(self, graph, cache: StaticKVCache):
        def own_or_cache(t):
            kind, _, layer = t.name.rpartition("_")
            if kind in ("past_key", "present_key"):
                return cache.keys[int(layer)]
            if kind in ("past_value", "present_value"):
                return cache.values[int(layer)]
            return np.zeros(t.shape, t.dtype)

        self.inputs = {t.name: own_or_cache(t) for t in graph.inputs}
        self.outputs = {t.name: own_or_cache(t) for t in graph.outputs}


def _kv_layout(m, n_layers: int) -> tuple[np.dtype, list[tuple[int, int]] | None]:
    """The cache's element type from the graphs' KV I/O and, for a quantized cache, the zero point of
    each layer's key and value (what an empty slot holds). The manifest has checked that every graph
    agrees on both (models/manifest.py)."""
    kv = m.quantization.kv_cache
    dtype = next((t.dtype for g in m.graphs for t in g.inputs if t.name.startswith(("past_key_", "past_value_"))),
                 "float32")
    if dtype == "float32":
        return np.dtype(np.float32), None
    fill = [(kv.tensors[f"key_{i}"].zero_point, kv.tensors[f"value_{i}"].zero_point) for i in range(n_layers)]
    return np.dtype(dtype), fill
