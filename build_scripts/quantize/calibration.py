"""Calibration from real text, through the FLOAT graphs as the runtime runs them.

    text sources (FAQ .jsonl, manuals .md/.txt, a directory of them)
        │  split into samples; every HOLDOUT_EVERY-th sample is held out for the accuracy report
        ▼
    LLM: chat samples (question → answer, some as the app's answer prompt) rendered with the
         model's chat template; prose samples cut into a prompt and a continuation
        │  tokenized with the model's tokenizer.json
        ▼
    runtime Decoder over the prepared float graphs: the prompt through the prefill buckets (in
    chunks, the rest through the smallest bucket that holds it), then the continuation
    teacher-forced one token at a time through the decode graph, so every graph sees real inputs
    and real KV contents (input_ids, rope tables, masks, caches exactly as the runtime builds them)
        │  each graph's session is a RangeCollector: the same graph plus ReduceMin/ReduceMax on
        ▼  every float tensor, so every run of every token contributes to the ranges
    per graph: calibrated (min, max) of every activation · per layer: KV cache ranges

Embedders: the same texts (and short queries) through the runtime Embedder, the same way.

build_scripts normally stays away from the runtime; calibration is the exception on purpose: the
inputs must be exactly what the runtime will feed (bucketing, padding, masks, rope tables, cache
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

from build_scripts.errors import BuildError
from knowledge.profile import AnswerProfile
from knowledge.sample_kb import sample_kb
from knowledge.prompts import answer_instructions, passage_text, passage_turn, with_system

log = logging.getLogger(__name__)

TEXT_SUFFIXES = (".jsonl", ".json", ".md", ".txt")
HOLDOUT_EVERY = 5  # sample i is held out when i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1

# retrieval samples are the app's own answer prompts (knowledge/prompts.py), with the profile every KB
# starts from: the instructions as the system turn, the passage beside the question
RAG_PROFILE = AnswerProfile()

# chat-style prompts that are not about the knowledge base, so calibration also sees small talk
GENERIC_CHAT = [
    ("Hi! Who are you?", "Hello! I am a local assistant. I answer questions from the documents in my "
                         "knowledge base and help you find what they say."),
    ("Can you tell me a short joke?", "Why did the battery feel so calm? Because it never lost its charge."),
    ("What is 17 times 3?", "17 times 3 is 51."),
    ("Write one sentence about the sea.", "The sea rolled in slow grey waves under a quiet morning sky."),
    ("Translate 'good morning' into French.", "'Good morning' in French is 'bonjour'."),
    ("List three colours.", "Red, green and blue."),
    ("Thanks, that was helpful.", "You're welcome! Ask again any time."),
    ("What's the weather like today?", "I'm sorry, I don't know: I have no access to weather information."),
]


@dataclass
class TextSample:
    """One calibration/evaluation unit: a chat turn (prompt messages + assistant answer) or prose."""

    source: str
    text: str = ""  # prose
    messages: list[dict] = field(default_factory=list)  # chat: system?/user messages
    answer: str = ""  # chat: the assistant reply (teacher-forced continuation)
    question: str = ""  # chat: the question alone (a retrieval sample's user turn shows a passage too)

    @property
    def is_chat(self) -> bool:
        return bool(self.messages)

    @property
    def questions(self) -> list[str]:
        return [self.question] if self.question else [m["content"] for m in self.messages if m["role"] == "user"]

    def plain(self) -> str:
        """The sample as one string (embedders, and a chat-less LLM)."""
        if not self.is_chat:
            return self.text
        return "\n".join([*self.questions, self.answer])


# ------------------------------------------------------------------------------------------------
# Text sources
# ------------------------------------------------------------------------------------------------

def resolve_sources(calib: str | Path | Sequence[str | Path] | None) -> list[Path]:
    """`--calib` as given (files, directories, comma-separated) or the sample KB's calibration text."""
    if calib is None:
        return sample_kb().calibration_paths()
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

    .jsonl/.json: objects with question+answer become chat turns (every `rag_every`-th one as the
    app's answer prompt, the entry shown as its passage); objects with
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
                    if n_chat % rag_every == rag_every - 1:  # the entry shown as the app shows an FAQ passage
                        turn = passage_turn([passage_text(1, f"FAQ: {q}", a)], q)
                        messages = with_system([{"role": "user", "content": turn}], answer_instructions(RAG_PROFILE))
                    out.append(TextSample(name, messages=messages, answer=a, question=q))
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
    """The chat prompt's ids within `budget` tokens: drop the system turn (instructions) first, then
    cut the longest message at a word boundary (the template's structure stays intact)."""
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
# Collecting activation ranges
# ------------------------------------------------------------------------------------------------

class RangeCollector:
    """Stands in for a runtime GraphSession of one prepared float graph: runs an augmented copy
    (ReduceMin/ReduceMax on every float tensor) and folds each run's ranges into `ranges[key]`.

    Every run of the calibration text contributes: a subsample of captured feeds misses the rare
    token whose MLP product is twice anything else (measured on SmolLM2: a 96-feed sample left a
    tensor at [-3.7, 4.3] that reached 6.9 on held-out text, cos 0.98 right after it). The
    augmented model references the prepared graph's weights file, and the session keeps them
    memory-mapped, so several collectors cost one copy of the weights."""

    def __init__(self, prepared: Path, threads: int | None = None, hessians=None,
                 hessian_inputs: Sequence[str] = ()):
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper

        model = onnx.load(str(prepared), load_external_data=False)
        g = model.graph
        inits = {t.name for t in g.initializer}
        types = {v.name: v.type.tensor_type.elem_type for v in (*g.value_info, *g.input, *g.output)}
        self.output_names = [o.name for o in g.output]
        self.input_names = [i.name for i in g.input]
        tensors = []
        for n in g.node:
            for t in (*n.input, *n.output):
                if t and t not in inits and types.get(t) == TensorProto.FLOAT and t not in tensors:
                    tensors.append(t)
        self.tensors = tensors
        # GPTQ: the inputs of the linear layers come out as they are, for Xᵀ X (positions >= 1 only:
        # the start graph's massive-activation token would dominate a Hessian shared by all graphs)
        self.hessians = hessians
        self.hessian_inputs = [t for t in hessian_inputs if t in set(tensors)] if hessians is not None else []
        for t in self.hessian_inputs:
            g.output.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, None))
        for i, t in enumerate(tensors):
            for op in ("ReduceMin", "ReduceMax"):
                out = f"{t}__{op}"
                g.node.append(helper.make_node(op, [t], [out], name=f"hexrag_calib_{op}_{i}", keepdims=0))
                g.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, []))
        path = prepared.with_name(prepared.stem + ".augmented.onnx")
        onnx.save(model, str(path))  # same directory: the weights stay in the prepared data file
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.add_session_config_entry("session.disable_prepacking", "1")
        so.intra_op_num_threads = threads or 0
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self._names = [o.name for o in self.session.get_outputs()]
        self.ranges: dict[str, dict[str, list[float]]] = {}
        self.runs: dict[str, int] = {}

    def run(self, feeds: dict[str, np.ndarray], key: str = "main") -> dict[str, np.ndarray]:
        values = self.session.run(None, feeds)
        n = len(self.output_names)
        if self.hessian_inputs and key == "main":
            real = _real_rows(feeds)
            for j, t in enumerate(self.hessian_inputs):
                self.hessians.add(t, values[n + j], real)
        first = n + len(self.hessian_inputs)
        acc = self.ranges.setdefault(key, {})
        for i in range(first, len(values), 2):
            t = self.tensors[(i - first) // 2]
            lo, hi = float(values[i]), float(values[i + 1])
            r = acc.get(t)
            if r is None:
                acc[t] = [lo, hi]
            else:
                r[0], r[1] = min(r[0], lo), max(r[1], hi)
        self.runs[key] = self.runs.get(key, 0) + 1
        return dict(zip(self.output_names, values[:n]))


def _real_rows(feeds: dict[str, np.ndarray]) -> np.ndarray | None:
    """Which flattened token rows are real: decoder prefill chunks are left-padded (a padded row
    sees none of the new tokens), embedder batches are right-padded (attention_mask 0)."""
    mask = feeds.get("attention_mask")
    if mask is None:
        return None
    if mask.ndim == 4:  # decoder [1, 1, S, C+S], additive
        s = mask.shape[2]
        return (mask[0, 0, :, -s:] == 0).any(axis=1)
    return mask.reshape(-1) != 0


class _Adapter:
    """What the runtime's Decoder/Embedder call `.run(feeds)` on: a RangeCollector, with runs at
    position 0 of a decode graph filed under "start" when the model gets a start graph."""

    def __init__(self, collector: RangeCollector, position=None):
        self.collector = collector
        self.position = position
        self.output_names = collector.output_names
        self.input_names = collector.input_names

    def run(self, feeds):
        key = "start" if self.position is not None and self.position() == 0 else "main"
        return self.collector.run(feeds, key)


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
    ranges: dict[str, dict[str, tuple[float, float]]]  # graph name -> tensor -> calibrated (min, max)
    runs: dict[str, int]  # graph name -> runs over the calibration text
    key_ranges: list[KVRange]  # per layer, over every cached key row of every sequence
    value_ranges: list[KVRange]
    sequences: int
    tokens: int  # tokens fed in total
    sources: list[str]

    def summary(self) -> dict:
        return {"sequences": self.sequences, "tokens": self.tokens, "sources": self.sources, "runs": self.runs}


def capture_llm(llm, sequences: list[TokenSequence], collectors: dict[str, RangeCollector],
                progress: bool = False, start_graph: str | None = None) -> LLMCalibration:
    """Run `sequences` through `llm`'s Decoder (a runtime.llm.LLM on the CPU) with each graph's
    session replaced by its RangeCollector (keyed by graph name), and track per-layer KV ranges.

    `start_graph`: the name under which to file the position-0 runs, as the runtime runs them on a
    quantized model with a start graph: the first token alone through the decode graph, so no
    other graph ever sees position 0."""
    from tqdm import tqdm

    dec = llm.decoder
    names = {g.seq: g.name for g in dec.manifest.graphs}

    def adapter(seq: int, _session) -> _Adapter:
        return _Adapter(collectors[names[seq]], (lambda: dec.cache.length) if start_graph and seq == 1 else None)

    keys = [KVRange() for _ in range(dec.n_layers)]
    values = [KVRange() for _ in range(dec.n_layers)]
    tokens = 0
    try:
        with dec.replaced_sessions(adapter):
            for seq in tqdm(sequences, desc="calibration", unit="seq", disable=not progress, leave=False):
                dec.reset()
                if start_graph:
                    # what a quantized Decoder does: the first token alone (one token runs the decode
                    # graph; the float model calibrated here has no start graph of its own)
                    dec.feed(seq.prompt[:1])
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
        dec.reset()
    ranges, runs = {}, {}
    for seq, name in names.items():
        c = collectors[name]
        for key, graph in (("main", name), ("start", start_graph)):
            if key in c.ranges and graph:
                ranges[graph] = {t: (lo, hi) for t, (lo, hi) in c.ranges[key].items()}
                runs[graph] = c.runs[key]
    wanted = [*names.values(), *([start_graph] if start_graph else [])]
    missing = [g for g in wanted if not runs.get(g)]
    if missing:
        raise BuildError(f"calibration never ran graph(s) {', '.join(missing)}: give more or longer calibration "
                         f"text (--calib) or a larger sample count")
    return LLMCalibration(ranges, runs, keys, values, len(sequences), tokens, sorted({s.source for s in sequences}))


def capture_embedder(embedder, texts: list[str], collector: RangeCollector) -> dict[str, tuple[float, float]]:
    """Run `texts` through a runtime Embedder's main graph with its session replaced by `collector`."""
    with embedder.replaced_session(_Adapter(collector)):
        embedder.embed(texts, buckets=False)
    return {t: (lo, hi) for t, (lo, hi) in collector.ranges["main"].items()}
