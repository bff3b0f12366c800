"""Calibration data from real text, captured from the FLOAT graphs through the runtime.

    text sources (FAQ .jsonl, manuals .md/.txt, a directory of them)
        │  split into samples; every HOLDOUT_EVERY-th sample is held out for the accuracy report
        ▼
    LLM: chat samples (question → answer, some with a RAG context passage) rendered with the
         model's chat template; prose samples cut into a prompt and a continuation
        │  tokenized with the model's tokenizer.json
        ▼
    runtime Decoder on the float graphs: the prompt through the prefill buckets (in chunks, the
    rest through the smallest bucket that holds it), then the continuation teacher-forced one token
    at a time through the decode graph, so every graph sees real KV contents
        │  every session.run is recorded (feeds copied: the KV buffers are live)
        ▼
    FeedReader per graph (an onnxruntime CalibrationDataReader) + per-layer KV ranges

Embedders: the same texts, tokenized and batched by the runtime Embedder, recorded the same way.

build_scripts normally stays away from the runtime; calibration is the exception on purpose: the
feeds must be exactly what the runtime will feed (bucketing, padding, masks, rope tables, cache
layout), and the only way to be sure of that is to run the runtime itself.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from onnxruntime.quantization import CalibrationDataReader

from build_scripts.errors import BuildError

log = logging.getLogger(__name__)

SAMPLES_DIR = Path(__file__).resolve().parents[2] / "knowledge" / "samples"
DEFAULT_SOURCES = ("aurora_faq.jsonl", "aurora_manual.md")
TEXT_SUFFIXES = (".jsonl", ".json", ".md", ".txt")
HOLDOUT_EVERY = 5  # sample i is held out when i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1

# the app's RAG system prompt, in substance (build_scripts may not import app)
RAG_SYSTEM = ("Answer the user's question using only the numbered context passages below. Cite the passages "
              "you use as [1], [2]. If the passages do not contain the answer, say that you do not know.")

# chat-style prompts that are not about the knowledge base, so calibration also sees small talk
GENERIC_CHAT = [
    ("Hi! Who are you?", "Hello! I am the in-car assistant. I can answer questions about your car and help "
                         "you find settings on the centre screen."),
    ("Can you tell me a short joke?", "Why did the electric car feel so calm? Because it never lost its charge."),
    ("What is 17 times 3?", "17 times 3 is 51."),
    ("Write one sentence about the sea.", "The sea rolled in slow grey waves under a quiet morning sky."),
    ("Translate 'good morning' into French.", "'Good morning' in French is 'bonjour'."),
    ("List three colours.", "Red, green and blue."),
    ("Thanks, that was helpful.", "You're welcome! Drive safely."),
    ("What's the weather like today?", "I'm sorry, I don't know: I have no access to weather information."),
]


@dataclass
class TextSample:
    """One calibration/evaluation unit: a chat turn (prompt messages + assistant answer) or prose."""

    source: str
    text: str = ""  # prose
    messages: list[dict] = field(default_factory=list)  # chat: system?/user messages
    answer: str = ""  # chat: the assistant reply (teacher-forced continuation)

    @property
    def is_chat(self) -> bool:
        return bool(self.messages)

    def plain(self) -> str:
        """The sample as one string (embedders, and a chat-less LLM)."""
        if not self.is_chat:
            return self.text
        return "\n".join([*(m["content"] for m in self.messages if m["role"] == "user"), self.answer])


# ------------------------------------------------------------------------------------------------
# Text sources
# ------------------------------------------------------------------------------------------------

def resolve_sources(calib: str | Path | Sequence[str | Path] | None) -> list[Path]:
    """`--calib` as given (files, directories, comma-separated) or the knowledge-base samples."""
    if calib is None:
        return [SAMPLES_DIR / name for name in DEFAULT_SOURCES]
    specs = [calib] if isinstance(calib, (str, Path)) else list(calib)
    paths: list[Path] = []
    for spec in specs:
        for part in (str(spec).split(",") if isinstance(spec, str) else [spec]):
            p = Path(part.strip() if isinstance(part, str) else part).expanduser()
            if not str(p):
                continue
            if p.is_dir():
                found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES)
                if not found:
                    raise BuildError(f"--calib directory {p} has no {'/'.join(TEXT_SUFFIXES)} files")
                paths += found
            elif p.is_file():
                paths.append(p)
            else:
                raise BuildError(f"--calib: no such file or directory: {p}")
    if not paths:
        raise BuildError("--calib names no calibration text")
    return paths


def _paragraph_chunks(text: str, target_chars: int = 700) -> list[str]:
    """Markdown/plain text cut at headings and blank lines into chunks of about `target_chars`,
    each chunk prefixed with its heading path (as the knowledge base chunks it)."""
    chunks, current, heads = [], [], []

    def flush():
        body = "\n\n".join(current).strip()
        if body:
            chunks.append((" > ".join(heads) + "\n\n" if heads else "") + body)
        current.clear()

    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if not block:
            continue
        m = re.match(r"^(#+)\s+(.*)$", block)
        if m and "\n" not in block:
            flush()
            level = len(m.group(1))
            del heads[level - 1:]
            heads.append(m.group(2).strip())
            continue
        current.append(block)
        if sum(len(c) for c in current) >= target_chars:
            flush()
    flush()
    return chunks


def load_samples(paths: Iterable[Path], rag_every: int = 3) -> list[TextSample]:
    """Samples from files, in a deterministic order.

    .jsonl/.json: objects with question+answer become chat turns (every `rag_every`-th one with
    the app's RAG system prompt and the answer as its context passage); objects with
    text/content/answer become prose. .md/.txt: heading-aware chunks of prose.
    """
    out: list[TextSample] = []
    for path in paths:
        name = path.name
        if path.suffix.lower() in (".jsonl", ".json"):
            raw = path.read_text(encoding="utf-8")
            try:
                rows = [json.loads(line) for line in raw.splitlines() if line.strip()] \
                    if path.suffix.lower() == ".jsonl" else json.loads(raw)
            except json.JSONDecodeError as e:
                raise BuildError(f"--calib file {path} is not valid JSON ({e})") from None
            rows = rows if isinstance(rows, list) else [rows]
            n_chat = 0
            for row in rows:
                if isinstance(row, str):
                    out.append(TextSample(name, text=row))
                    continue
                if not isinstance(row, dict):
                    continue
                q, a = row.get("question"), row.get("answer")
                if isinstance(q, str) and isinstance(a, str):
                    messages = [{"role": "user", "content": q}]
                    if n_chat % rag_every == rag_every - 1:
                        ctx = f"[1] {name}: {a}"
                        messages.insert(0, {"role": "system", "content": RAG_SYSTEM + "\n\nContext:\n" + ctx})
                    out.append(TextSample(name, messages=messages, answer=a))
                    n_chat += 1
                    continue
                text = next((row[k] for k in ("text", "content", "answer", "question")
                             if isinstance(row.get(k), str)), None)
                if text:
                    out.append(TextSample(name, text=text))
        else:
            out += [TextSample(name, text=c) for c in _paragraph_chunks(path.read_text(encoding="utf-8"))]
    return out


def split_samples(samples: list[TextSample]) -> tuple[list[TextSample], list[TextSample]]:
    """(calibration, held out): every HOLDOUT_EVERY-th sample never calibrates."""
    calib = [s for i, s in enumerate(samples) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]
    held = [s for i, s in enumerate(samples) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
    return calib, held


def pick(samples: list[TextSample], count: int | None) -> list[TextSample]:
    """`count` samples spread evenly over the list (so every source is represented)."""
    if count is None or count >= len(samples):
        return list(samples)
    if count <= 0:
        return []
    idx = np.linspace(0, len(samples) - 1, count).round().astype(int)
    return [samples[i] for i in dict.fromkeys(idx.tolist())]


def calibration_texts(calib=None, samples: int | None = None, with_generic_chat: bool = True
                      ) -> tuple[list[TextSample], list[TextSample], list[Path]]:
    """(calibration samples, held-out samples, source files)."""
    paths = resolve_sources(calib)
    all_samples = load_samples(paths)
    if not all_samples:
        raise BuildError(f"no usable text in {', '.join(map(str, paths))}")
    cal, held = split_samples(all_samples)
    if with_generic_chat:
        generic = [TextSample("generic-chat", messages=[{"role": "user", "content": q}], answer=a)
                   for q, a in GENERIC_CHAT]
        # interleave so a small `samples` count still gets a few of them
        step = max(len(cal) // len(generic), 1)
        for i, g in enumerate(generic):
            cal.insert(min(i * (step + 1), len(cal)), g)
    return pick(cal, samples), held, paths


# ------------------------------------------------------------------------------------------------
# Token sequences
# ------------------------------------------------------------------------------------------------

@dataclass
class TokenSequence:
    prompt: list[int]  # goes through the prefill graphs
    continuation: list[int]  # teacher-forced through the decode graph
    source: str


def _fit_chat(llm, messages: list[dict], budget: int) -> list[int]:
    """The chat prompt's ids within `budget` tokens: drop a RAG system passage first, then cut
    the longest message at a word boundary (the template's structure stays intact)."""
    prompt = llm.encode_chat(messages)
    if len(prompt) <= budget:
        return prompt
    if messages[0]["role"] == "system" and len(messages) > 1:
        messages = messages[1:]
        prompt = llm.encode_chat(messages)
    while len(prompt) > budget:
        i = max(range(len(messages)), key=lambda j: len(messages[j]["content"]))
        words = messages[i]["content"].split()
        if len(words) <= 1:
            return prompt[:budget]
        keep = max(1, min(len(words) - 1, int(len(words) * budget / len(prompt))))
        messages = [*messages[:i], {**messages[i], "content": " ".join(words[:keep])}, *messages[i + 1:]]
        prompt = llm.encode_chat(messages)
    return prompt


def _bucket_length(length: int, buckets: Sequence[int], slot: int) -> int:
    """A prompt length <= `length` chosen round robin (by `slot`) so calibration covers every
    graph at every kind of position: for each prefill bucket, a length whose last chunk goes
    through that bucket (the runtime sends a remainder r through the smallest bucket >= r), and
    short prompts at the start of the context (1 token: the decode graph from position 0; a
    few: the smallest bucket, left-padded), whose attention over one or two tokens has larger
    outputs than attention averaged over a long context."""
    prefill = sorted((b for b in buckets if b > 1), reverse=True)
    classes = len(prefill) + 1
    j, k = slot % classes, slot // classes
    if j == len(prefill):  # a short prompt at position 0
        smallest = prefill[-1] if prefill else 1
        return min(length, [1, max(2, smallest // 2), smallest][k % 3])
    if len(prefill) < 2:
        return length
    hi = prefill[j]
    lo = prefill[j + 1] + 1 if j + 1 < len(prefill) else 2
    big = prefill[0]
    full, rest = divmod(length, big)
    if lo <= rest <= hi:
        return length
    if rest > hi:
        return full * big + hi
    if full > 0:  # take the remainder from the previous full chunk
        return (full - 1) * big + min(hi, big)
    return length  # too short to reach this bucket


def tokenize_samples(llm, samples: list[TextSample], context: int, decode_steps: int,
                     buckets: Sequence[int] = (), prompt_max: int | None = None) -> list[TokenSequence]:
    """Token sequences that fit the context: a prompt and up to `decode_steps` continuation tokens.

    `llm`: a runtime.llm.LLM (its tokenizer, BOS handling and chat template). With `buckets`
    (the model's prefill sizes) prompt lengths are trimmed so every prefill graph gets runs.
    `prompt_max`: prompt budget (default: what `decode_steps` leaves of the context)."""
    out = []
    budget = context - 1
    prompt_budget = min(prompt_max, budget - 1) if prompt_max else max(budget - decode_steps, 1)
    for i, s in enumerate(samples):
        if s.is_chat and llm.template is not None:
            prompt = _fit_chat(llm, s.messages, prompt_budget)
            cont = llm.tokenizer.encode(s.answer, add_special_tokens=False).ids
            stop = sorted(llm.stop_ids)
            if stop:
                cont = cont + [stop[0]]
        else:
            ids = llm.encode(s.plain())
            # prose: the first ~60% as the prompt (at most the prompt budget), the rest teacher-forced
            cut = max(1, min(int(len(ids) * 0.6), prompt_budget))
            prompt, cont = ids[:cut], ids[cut:]
        if buckets:
            keep = _bucket_length(len(prompt), buckets, i)
            cont = prompt[keep:] + cont  # tokens cut from the prompt are still fed, through decode
            prompt = prompt[:keep]
        cont = cont[:max(min(decode_steps, budget - len(prompt)), 0)]
        if prompt:
            out.append(TokenSequence(prompt, cont, s.source))
    return out


# ------------------------------------------------------------------------------------------------
# Capturing feeds
# ------------------------------------------------------------------------------------------------

class CompactFeed:
    """A captured decoder feed with each KV input cut to its filled slots (what a long context
    costs otherwise: 30 layers x 2 x a whole cache per run); the empty slots come back as zeros."""

    __slots__ = ("arrays", "length", "shapes")

    def __init__(self, feeds: dict[str, np.ndarray], length: int):
        self.length = length
        self.arrays: dict[str, np.ndarray] = {}
        self.shapes: dict[str, tuple] = {}
        for k, v in feeds.items():
            if k.startswith("past_key_"):
                self.arrays[k], self.shapes[k] = np.array(v[..., :length], copy=True), v.shape
            elif k.startswith("past_value_"):
                self.arrays[k], self.shapes[k] = np.array(v[:, :, :length, :], copy=True), v.shape
            else:
                self.arrays[k] = np.array(v, copy=True)

    def materialize(self) -> dict[str, np.ndarray]:
        out = {}
        for k, a in self.arrays.items():
            if k in self.shapes:
                full = np.zeros(self.shapes[k], a.dtype)
                if k.startswith("past_key_"):
                    full[..., :self.length] = a
                else:
                    full[:, :, :self.length, :] = a
                out[k] = full
            else:
                out[k] = a
        return out


class _Reservoir:
    """Keeps at most `cap` feeds of a stream, a uniform sample (seeded reservoir sampling), with a
    quarter of the places reserved for runs at the first positions of the context: they are few,
    and their activations are extreme (attention over one or two tokens)."""

    EARLY = 4  # positions < EARLY count as early

    def __init__(self, cap: int | None, seed: int = 0):
        self.cap = cap
        self.early_cap = max(cap // 4, 1) if cap else None
        self.rng = np.random.default_rng(seed)
        self.pools: dict[bool, list] = {True: [], False: []}
        self.seen = {True: 0, False: 0}
        self.runs = 0

    def offer(self, position: int, make) -> None:
        """`make()` builds the feed to keep; it is only called when the feed is kept."""
        self.runs += 1
        early = position < self.EARLY and self.cap is not None
        pool = self.pools[early]
        cap = None if self.cap is None else (self.early_cap if early else self.cap - self.early_cap)
        n = self.seen[early]
        self.seen[early] += 1
        if cap is None or len(pool) < cap:
            pool.append(make())
        else:
            j = int(self.rng.integers(0, n + 1))
            if j < cap:
                pool[j] = make()

    def items(self) -> list:
        return self.pools[True] + self.pools[False]


class _Recorder:
    """Wraps a runtime GraphSession: runs it and offers a copy of every feed to a reservoir
    (decoder: compact feeds tagged with the cache length; runs at position 0 go to `start` when
    given) or appends it to a list (embedder)."""

    def __init__(self, session, store, position=None, start=None):
        self.session = session
        self.store = store
        self.start = start
        self.position = position  # callable: the cache length at the time of the run
        self.output_names = session.output_names
        self.input_names = session.input_names

    def run(self, feeds):
        out = self.session.run(feeds)
        if self.position is not None:
            pos = self.position()
            target = self.start if (pos == 0 and self.start is not None) else self.store
            target.offer(pos, lambda: CompactFeed(feeds, pos))
        else:
            self.store.append({k: np.array(v, copy=True) for k, v in feeds.items()})
        return out


@dataclass
class KVRange:
    lo: float = np.inf
    hi: float = -np.inf

    def update(self, a: np.ndarray) -> None:
        if a.size:
            self.lo = min(self.lo, float(a.min()))
            self.hi = max(self.hi, float(a.max()))


@dataclass
class LLMCalibration:
    feeds: dict[str, list[dict[str, np.ndarray]]]  # graph name -> captured feeds
    key_ranges: list[KVRange]  # per layer, over every cached key row of every sequence
    value_ranges: list[KVRange]
    sequences: int
    tokens: int  # tokens fed in total
    sources: list[str]
    runs: dict[str, int] = field(default_factory=dict)  # graph name -> runs seen (feeds kept: a sample)

    def summary(self) -> dict:
        return {"sequences": self.sequences, "tokens": self.tokens, "sources": self.sources,
                "runs": self.runs, "feeds": {g: len(f) for g, f in self.feeds.items()}}


def _subsample(items: list, limit: int | None) -> list:
    if limit is None or len(items) <= limit:
        return items
    idx = np.linspace(0, len(items) - 1, limit).round().astype(int)
    return [items[i] for i in dict.fromkeys(idx.tolist())]


def capture_llm(llm, sequences: list[TokenSequence], max_feeds: int | None = 96,
                progress: bool = False, start_graph: str | None = None) -> LLMCalibration:
    """Run `sequences` through `llm`'s float graphs (a runtime.llm.LLM on the CPU) and record
    every graph's feeds and the per-layer KV ranges. `max_feeds` caps the feeds kept per graph
    (a seeded uniform sample, a quarter of it runs at position 0) to bound calibration time and
    memory; kept feeds store only the filled part of the KV cache.

    `start_graph`: the name under which to record the position-0 runs separately, as the runtime
    runs them on a quantized model with a start graph: the first token alone (through the decode
    graph), so no other graph ever sees position 0."""
    from tqdm import tqdm

    dec = llm.decoder
    m = dec.manifest
    by_seq = {g.seq: g.name for g in m.graphs}
    store = {name: _Reservoir(max_feeds, seed=i) for i, name in enumerate(by_seq.values())}
    if start_graph:
        store[start_graph] = _Reservoir(max_feeds, seed=len(store))
    original = dec.sessions
    dec.sessions = {seq: _Recorder(sess, store[by_seq[seq]], position=lambda: dec.cache.length,
                                   start=store[start_graph] if start_graph and seq == 1 else None)
                    for seq, sess in original.items()}
    keys = [KVRange() for _ in range(dec.n_layers)]
    values = [KVRange() for _ in range(dec.n_layers)]
    tokens = 0
    try:
        for seq in tqdm(sequences, desc="calibration", unit="seq", disable=not progress, leave=False):
            dec.reset()
            if start_graph:
                dec._run(seq.prompt[:1], 1)  # the first token alone through the decode graph
                if len(seq.prompt) > 1:
                    dec.feed(seq.prompt[1:])
            else:
                dec.feed(seq.prompt)
            for t in seq.continuation:
                dec.feed([t])
            tokens += len(seq.prompt) + len(seq.continuation)
            n = dec.cache.length
            for i in range(dec.n_layers):
                keys[i].update(dec.cache.keys[i][..., :n])
                values[i].update(dec.cache.values[i][:, :, :n, :])
    finally:
        dec.sessions = original
        dec.reset()
    missing = [name for name, r in store.items() if not r.runs]
    if missing:
        raise BuildError(f"calibration never ran graph(s) {', '.join(missing)}: give more or longer calibration "
                         f"text (--calib) or a larger sample count")
    feeds = {name: r.items() for name, r in store.items()}
    return LLMCalibration(feeds, keys, values, len(sequences), tokens, sorted({s.source for s in sequences}),
                          {name: r.runs for name, r in store.items()})


@dataclass
class EmbedderCalibration:
    feeds: dict[str, list[dict[str, np.ndarray]]]
    texts: int

    def summary(self) -> dict:
        return {"texts": self.texts, "feeds": {g: len(f) for g, f in self.feeds.items()}}


def capture_embedder(embedder, texts: list[str]) -> EmbedderCalibration:
    """Run `texts` through a runtime Embedder (float graph) and record its feeds."""
    graph = embedder.manifest.graph("embed").name
    store: list = []
    original = embedder.session
    embedder.session = _Recorder(original, store)
    try:
        embedder.embed(texts)
    finally:
        embedder.session = original
    return EmbedderCalibration({graph: store}, len(texts))


class FeedReader(CalibrationDataReader):
    """An onnxruntime CalibrationDataReader over captured feeds (restartable with `rewind`)."""

    def __init__(self, feeds: list[dict[str, np.ndarray]], input_names: Sequence[str] | None = None):
        self.feeds = feeds
        self.input_names = list(input_names) if input_names else None
        self._i = 0

    def get_next(self):
        if self._i >= len(self.feeds):
            return None
        f = self.feeds[self._i]
        self._i += 1
        if isinstance(f, CompactFeed):
            f = f.materialize()
        return {k: f[k] for k in self.input_names} if self.input_names else f

    def rewind(self) -> None:
        self._i = 0

    def __len__(self) -> int:
        return len(self.feeds)
