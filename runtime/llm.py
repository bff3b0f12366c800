"""The LLM engine: chat prompts, prefix reuse, sampling, stop handling and streaming.

    prompt ids ─► reuse cached prefix ─► Decoder.feed(suffix) ─► sample ─┬─► detokenize ─► stop filter ─► deltas
                                             ▲                            │
                                             └──── Decoder.feed([token]) ◄┘  until stop / length / cancel
                                                or Decoder.score([token, *draft]): greedy answers, when
                                                   the context ends with an n-gram seen before in it
                                                   (prompt lookup, runtime/lookup.py)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from models.manifest import Manifest
from runtime.chat_template import ChatTemplate
from runtime.decoder import Decoder
from runtime.errors import ContextOverflowError, Interrupted, RuntimeModelError
from runtime.kv_cache import KVRows
from runtime.lookup import PromptLookup
from runtime.options import RuntimeOptions
from runtime.sampling import SamplingParams, sample_next
from runtime.textstream import IncrementalDetokenizer, StopStringFilter


@dataclass
class Delta:
    """One step of a streamed generation: the token sampled and the text it released (may be empty)."""

    token_id: int
    text: str


@dataclass
class GenerationResult:
    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" | "length" | "cancelled"
    prompt_tokens: int
    cached_tokens: int  # prompt tokens reused from the previous request's cache
    ttft_s: float
    prefill_s: float
    decode_s: float
    timings: dict = field(default_factory=dict)
    placed_tokens: int = 0  # prompt tokens whose kept KV rows were placed rather than prefilled
    drafted_tokens: int = 0  # tokens prompt lookup guessed (runtime/lookup.py) ...
    accepted_tokens: int = 0  # ... and those greedy decoding picked, each saving a graph step
    # the first step's most likely tokens and their log-probabilities (before any ban and penalty): how
    # sure the model was of how to begin, read by callers that judge an answer by its start
    first_top: tuple[tuple[int, float], ...] = ()

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def prefill_tok_s(self) -> float:
        fed = self.prompt_tokens - self.cached_tokens - self.placed_tokens
        return fed / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        steps = max(self.completion_tokens - 1, 0)
        return steps / self.decode_s if self.decode_s > 0 else 0.0


class Generation:
    """Iterate for `Delta`s; `result` is set once the iteration ends."""

    def __init__(self, steps: Iterator[Delta]):
        self._steps = steps
        self.result: GenerationResult | None = None

    def __iter__(self) -> Iterator[Delta]:
        self.result = yield from self._steps

    def run(self) -> GenerationResult:
        for _ in self:
            pass
        return self.result


def top_logprobs(logits: np.ndarray, k: int = 16) -> tuple[tuple[int, float], ...]:
    """The `k` most likely tokens of a step and their log-probabilities, most likely first."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - np.max(x)
    log_total = np.log(np.sum(np.exp(x)))
    best = np.argpartition(-x, k)[:k]
    return tuple((int(t), float(x[t] - log_total)) for t in best[np.argsort(-x[best])])


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class LLM:
    def __init__(self, model_dir: str | Path, options: RuntimeOptions = RuntimeOptions(), prepack: bool | None = None,
                 manifest: Manifest | None = None):
        self.decoder = Decoder(model_dir, options, prepack=prepack, manifest=manifest)
        self.draft_tokens = options.draft_tokens
        m = self.decoder.manifest
        self.name = m.name
        # identity of what the graphs compute: this build's weights (KV rows kept from it are its own)
        self.model_id = f"{m.name}:{m.files.get(m.weights_file, '')[:16]}"
        self.context = self.decoder.context
        self.tokenizer = Tokenizer.from_file(str(self.decoder.dir / m.tokenizer.file))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.add_bos = m.tokenizer.add_bos
        self.bos_id = m.tokenizer.bos_id
        self.stop_ids = set(m.tokenizer.stop_ids)
        template = m.tokenizer.chat_template
        self.template = ChatTemplate((self.decoder.dir / template).read_text(), m.tokenizer.bos_token,
                                     m.tokenizer.eos_token) if template else None
        self._busy = threading.Lock()  # one generation at a time owns the KV cache
        self._flags = threading.Lock()  # guards the two below
        self._waiting = 0  # requests waiting for the cache
        self._background = False  # the cache's owner is background work, which a request interrupts

    # ---- prompts ----------------------------------------------------------------------
    def chat_prompt(self, messages: list[dict]) -> str:
        if self.template is None:
            raise RuntimeModelError(f"model {self.name} has no chat template; use a plain prompt")
        return self.template.render(messages, add_generation_prompt=True)

    def encode(self, text: str, bos: bool = True) -> list[int]:
        """Token ids of a prompt; special tokens written in the text (from a chat template) are kept.
        `bos=False`: a piece of a prompt, never its start."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if bos and self.add_bos and self.bos_id is not None and (not ids or ids[0] != self.bos_id):
            ids.insert(0, self.bos_id)
        return ids

    def encode_chat(self, messages: list[dict]) -> list[int]:
        return self.encode(self.chat_prompt(messages))

    # ---- generation -------------------------------------------------------------------
    @contextmanager
    def _owning(self, background: bool = False):
        """Own the KV cache. A request (background=False) interrupts background work that owns it
        (Decoder.interrupt): the user's question waits for the operator in progress, not for a whole
        passage's prefill. Background work raises Interrupted at once while a request is waiting."""
        if not background:
            with self._flags:
                self._waiting += 1
                if self._background:
                    self.decoder.interrupt()
            try:
                self._busy.acquire()
            finally:
                with self._flags:
                    self._waiting -= 1
            try:
                yield
            finally:
                self._busy.release()
            return
        with self._busy:
            with self._flags:
                if self._waiting:
                    raise Interrupted("a request is waiting for the model")
                self._background = True
            try:
                yield
            finally:
                with self._flags:
                    self._background = False
                    self.decoder.resume()

    def kv_rows(self, prefix: list[int], ids: list[int], background: bool = False) -> KVRows:
        """The KV rows `ids` leave in the cache right after `prefix`, to be placed into later prompts
        (`generate(placed=...)`); the cache keeps the prefix. `background`: work no one waits on,
        which a request interrupts (Interrupted)."""
        with self._owning(background):
            dec = self.decoder
            dec.rewind(min(common_prefix(dec.tokens, prefix), len(prefix)))
            if len(dec.tokens) < len(prefix):
                dec.feed(prefix[len(dec.tokens):])
            dec.feed(ids)
            rows = dec.rows(len(prefix))
            dec.rewind(len(prefix))
            return rows

    def generate(self, prompt_ids: list[int], max_new_tokens: int = 256, sampling: SamplingParams | None = None,
                 stop: list[str] | None = None, cancel: threading.Event | None = None,
                 placed: dict[int, KVRows] | None = None, draft: bool = False,
                 ban_first: frozenset[int] = frozenset(), ban: frozenset[int] = frozenset()) -> Generation:
        """`placed`: prompt offset -> kept rows of the tokens starting there (`kv_rows`), placed into
        the cache instead of prefilled (re-rotated to their new positions). `draft`: prompt lookup
        (runtime/lookup.py) for a greedy generation on graphs that score every position. `ban_first`:
        tokens the answer may not begin with (a reply the caller has already had). `ban`: tokens it may not
        use at all (a translation into English writes no Chinese)."""
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        if len(prompt_ids) >= self.context:  # at least one slot must stay free for the answer
            raise ContextOverflowError(len(prompt_ids), self.context)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        end = 0
        for offset, rows in sorted((placed or {}).items()):
            if offset < end or prompt_ids[offset:offset + len(rows.tokens)] != rows.tokens:
                raise ValueError(f"the rows placed at {offset} are not of the prompt's tokens there")
            end = offset + len(rows.tokens)
        return Generation(self._steps(list(prompt_ids), max_new_tokens, sampling or SamplingParams(),
                                      stop or [], cancel or threading.Event(), placed or {}, draft, ban_first, ban))

    def _prefill(self, prompt: list[int], cached: int, placed: dict[int, KVRows]):
        """Feed the prompt from `cached` on, placing kept rows where they start at or after it (the
        last token is always fed: its logits start the answer). Returns (logits, tokens placed)."""
        dec, pos, count, logits = self.decoder, cached, 0, None
        starts = sorted(o for o in placed if o >= cached and o + len(placed[o].tokens) < len(prompt))
        for offset in [*starts, len(prompt)]:
            if offset > pos:
                logits = dec.feed(prompt[pos:offset])
                pos = offset
            if offset < len(prompt):
                dec.place(placed[offset])
                pos += len(placed[offset].tokens)
                count += len(placed[offset].tokens)
        return logits, count

    def _steps(self, prompt: list[int], max_new: int, sampling: SamplingParams, stops: list[str],
               cancel: threading.Event, placed: dict[int, KVRows], draft: bool, ban_first: frozenset[int],
               ban: frozenset[int]):
        with self._owning():
            start = time.perf_counter()
            dec = self.decoder
            # prefix reuse: keep what the cache already holds of this prompt, feed only the rest
            cached = min(common_prefix(dec.tokens, prompt), len(prompt) - 1)
            # kept rows that the reused prefix covers only in part are placed whole: cheaper than
            # feeding their rest ("Passage 1 (FAQ: " is common to many prompts)
            cached = min([cached] + [o for o, rows in placed.items() if o < cached < o + len(rows.tokens)])
            dec.rewind(cached)
            logits, placed_count = self._prefill(prompt, cached, placed)
            prefill_s = time.perf_counter() - start
            first_top = top_logprobs(logits)
            if ban_first:
                logits = logits.copy()
                logits[list(ban_first)] = -np.inf
            banned = np.fromiter(ban, dtype=np.int64, count=len(ban))

            rng = sampling.rng()
            detok = IncrementalDetokenizer(self.tokenizer)
            stop_filter = StopStringFilter(stops)
            history = list(prompt)
            # drafts are checked against greedy picks: sampled answers decode a token per step
            lookup = (PromptLookup(prompt, self.draft_tokens) if draft and not ban and self.draft_tokens
                      and sampling.greedy and dec.scores_every_position else None)
            picked: list[int] = []  # tokens a checking step has already chosen, in order
            drafted = accepted = 0
            out_ids: list[int] = []
            text: list[str] = []
            finish, ttft = "length", None
            decode_start = time.perf_counter()
            while True:
                if cancel.is_set():
                    finish = "cancelled"
                    break
                if ban:
                    logits = logits.copy()
                    logits[banned] = -np.inf
                token = picked.pop(0) if picked else sample_next(logits, sampling, rng, history)
                if ttft is None:
                    ttft = time.perf_counter() - start
                    decode_start = time.perf_counter()
                if token in self.stop_ids:
                    finish = "stop"
                    break
                out_ids.append(token)
                history.append(token)
                if lookup:
                    lookup.extend([token])
                delta = stop_filter.push(detok.push(token))
                text.append(delta)
                yield Delta(token, delta)
                if stop_filter.stopped:
                    finish = "stop"
                    break
                if len(out_ids) >= max_new or len(history) > self.context:  # the cache holds all but `token`
                    break
                if picked:  # chosen already, and (but the last) already in the cache
                    continue
                # the cache lacks only `token`: feed it, with a draft of its followers when there is one
                room = min(max_new - len(out_ids), self.context - len(dec.tokens) - 1, dec.buckets[0] - 1)
                draft = lookup.draft(room) if lookup else []
                if not draft:
                    logits = dec.feed([token])
                    continue
                picked = self._check(token, draft, sampling, rng, history)
                drafted += len(draft)
                accepted += len(picked) - 1
            if finish != "stop":
                tail = stop_filter.push(detok.flush()) + stop_filter.flush()
                if tail:
                    text.append(tail)
                    yield Delta(-1, tail)
            return GenerationResult(
                token_ids=out_ids, text="".join(text), finish_reason=finish, prompt_tokens=len(prompt),
                cached_tokens=cached, ttft_s=ttft or (time.perf_counter() - start), prefill_s=prefill_s,
                decode_s=time.perf_counter() - decode_start, placed_tokens=placed_count,
                drafted_tokens=drafted, accepted_tokens=accepted, first_top=first_top,
            )

    def _check(self, token: int, draft: list[int], sampling: SamplingParams, rng, history: list[int]) -> list[int]:
        """Score `token` and its draft in one step; returns what greedy decoding picks after
        `token`: the drafted tokens up to the first it would not have picked, then its own pick
        there (or after the whole draft). The cache keeps `token` and the accepted drafts."""
        dec = self.decoder
        start = len(dec.tokens)
        scores = dec.score([token, *draft])
        picks: list[int] = []
        for row, guess in zip(scores, [*draft, None]):
            picks.append(sample_next(row, sampling, rng, history + picks))
            if picks[-1] != guess:
                break
        dec.rewind(start + len(picks))  # the rows of rejected drafts are overwritten later
        return picks
