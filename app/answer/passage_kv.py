"""Kept KV rows: the rows of the answer instructions (always, in memory) and, with passage KV, of a
passage (kept on disk), computed once (by the server in the background, `fill`, or on first use)
and placed into every later prompt that starts with the same
instructions or shows the same passage first, so prefill covers only the question (runtime
Decoder.place re-rotates keys to where the rows land).

A passage's rows are computed right after the instructions' system turn and the user turn's
opening, so they are exactly what prefill makes for the first passage of a one-turn question; the
answer layer places only that one (GroundedGeneration._placed says why), after the instructions'
own rows. Rows are kept in memory as float32 and, with a directory, on disk as .npz files named by a
hash of the model, the stored precision, the preceding tokens and the tokens themselves: another
model, precision or other instructions simply miss. On disk a row (one KV head's values for one
token) of a passage is stored at `precision` (PRECISIONS): float32 as computed (57 KB a token for
the 1.5B, ~6 MB a passage), float16, int8 (codes between each KV head and channel's least and
greatest value over the passage's tokens; 14 KB a token, ~1.5 MB a passage) or k6v8 (keys at 6
bits, values at 8: 12.5 KB a token, ~1.35 MB a passage); loaded rows are float32 again. The
instructions' rows stay float32.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from app.answer.passages import Passage, passage_prompt
from knowledge.profile import AnswerProfile
from knowledge.prompts import answer_instructions, with_system
from runtime.errors import Interrupted
from runtime.kv_cache import KVRows
from runtime.llm import LLM

PASSAGE_KV_DIR = "passage_kv"  # where a KB directory keeps them
Precision = Literal["float32", "float16", "int8", "k6v8"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
MEMORY_BYTES = 256 << 20  # float32 rows of the 1.5B: 57 KB a token, so ~4,500 passage tokens
# on disk, the rows least recently used go first beyond this: for the 1.5B (~1.35 MB a passage at
# k6v8) the first passages of ~1,500 questions, a head unit's share of flash
DISK_BYTES = 2 << 30
# in the rows' directory: text answers have been asked of this KB, so the fill keeps their rows too
TEXT_MARK = "text-answers"


def _one_question(profile: AnswerProfile, voice: bool) -> list[dict]:
    """A one-question conversation with the answer instructions of text or of voice answers."""
    return with_system([{"role": "user", "content": "?"}], answer_instructions(profile, voice))


class PassageKV:
    """The kept rows of one LLM's instructions and, with `passages`, of the passages answers show first."""

    def __init__(self, llm: LLM, directory: str | Path | None = None, memory_bytes: int = MEMORY_BYTES,
                 passages: bool = True, disk_bytes: int | None = None, precision: Precision = "float32"):
        """`disk_bytes`: the rows kept on disk at most (None: DISK_BYTES); `precision`: how they are stored."""
        llm.decoder.check_placeable()  # refused at start-up, never in the middle of an answer
        if precision not in PRECISIONS:
            raise ValueError(f"passage KV precision is one of {', '.join(PRECISIONS)}, not {precision!r}")
        self.llm, self.passages, self.precision = llm, passages, precision
        self.dir = Path(directory) if directory is not None else None
        self.memory_bytes = memory_bytes
        self.disk_bytes = DISK_BYTES if disk_bytes is None else disk_bytes
        self._memory: OrderedDict[str, KVRows] = OrderedDict()
        self._lock = threading.Lock()
        # bytes of rows on disk after the last save, and that save's size (`full`)
        self._disk_used = sum(f.stat().st_size for f in self.dir.glob("*/*.npz")) if self.dir is not None else 0
        self._last_saved = 0
        self.computed = self.loaded = self.hits = 0  # where rows came from, for reports
        self._text = self.dir is not None and (self.dir / TEXT_MARK).exists()
        self.on_new_style: Callable[[], None] | None = None  # the server's fill, to run again (`answered`)

    def _key(self, prefix: list[int], ids: list[int]) -> str:
        return hashlib.sha256(f"{self.llm.model_id}|{self.precision}|{prefix}|{ids}".encode()).hexdigest()

    def kept(self, prefix: list[int], ids: list[int]) -> bool:
        """Whether the rows of `ids` after `prefix` are kept (in memory or on disk), without reading them."""
        key = self._key(prefix, ids)
        with self._lock:
            if key in self._memory:
                return True
        path = self._path(key)
        return path is not None and path.is_file()

    @property
    def full(self) -> bool:
        """Whether the disk budget is used up: another passage's rows would push older ones out."""
        return self.dir is not None and self._disk_used + self._last_saved > self.disk_bytes

    def rows(self, prefix: list[int], ids: list[int], background: bool = False) -> KVRows:
        """The rows of `ids` after `prefix`: from memory, else from disk, else computed (and kept).
        `background`: computed as work a request interrupts (LLM.kv_rows)."""
        key = self._key(prefix, ids)
        with self._lock:
            if key in self._memory:
                self._memory.move_to_end(key)
                self.hits += 1
                return self._memory[key]
        rows = self._load(key, ids, len(prefix))
        if rows is None:
            rows = self.llm.kv_rows(prefix, ids, background=background)
            self.computed += 1
            # what is placed is what a later load gives: the first answer is the same as every other
            rows = self._save(key, rows)
        else:
            self.loaded += 1
        with self._lock:
            self._memory[key] = rows
            while sum(r.nbytes for r in self._memory.values()) > self.memory_bytes and len(self._memory) > 1:
                self._memory.popitem(last=False)
        return rows

    def answered(self, voice: bool) -> None:
        """Note an answer's style: the first text answer asked of this KB makes the fill keep text
        answers' rows too (`styles`, remembered under the rows' directory) and calls `on_new_style`."""
        if voice or self._text or self.dir is None:
            return
        self._text = True
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / TEXT_MARK).touch()
        except OSError:  # a read-only KB: remembered until the server stops
            pass
        if self.on_new_style is not None:
            self.on_new_style()

    def styles(self) -> tuple[bool, ...]:
        """The answer styles (voice: True) whose passages' rows the fill keeps: voice answers' always,
        as their first words wait on them; text answers' once text answers are asked of this KB. A
        head unit that only speaks keeps twice the passages within the disk budget."""
        return (True, False) if self._text else (True,)

    def warm(self, profile: AnswerProfile, styles: tuple[bool, ...] = (False, True)) -> None:
        """Compute (or load) the instructions' rows of text (False) and voice (True) answers for a KB's
        profile now, at start-up, so the first question does not pay for them."""
        for voice in styles:
            prefix = passage_prompt(self.llm, _one_question(profile, voice), []).prefix
            if len(prefix) < self.llm.context:  # a model too small for grounded answers has none to keep
                self.rows([], prefix)

    def _path(self, key: str) -> Path | None:
        return self.dir / key[:2] / f"{key}.npz" if self.dir is not None else None

    def _load(self, key: str, ids: list[int], start: int) -> KVRows | None:
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        try:
            with np.load(path) as f:
                layers = int(f["layers"])
                keys = [_unpack(f, f"k{i}") for i in range(layers)]
                values = [_unpack(f, f"v{i}") for i in range(layers)]
        except (OSError, ValueError, KeyError):  # a damaged file is a miss; the next save replaces it
            return None
        try:
            os.utime(path)  # used now: the last to be evicted
        except OSError:  # evicted by another process meanwhile: the rows are read already
            pass
        return KVRows(list(ids), start, keys, values)

    def _save(self, key: str, rows: KVRows) -> KVRows:
        """Keep rows on disk at the store's precision; returns them as a load will give them back
        (without a directory, as computed)."""
        path = self._path(key)
        if path is None:
            return rows
        # the instructions' rows (from position 0: the first token, which every later one attends to
        # most) are shared by every answer and few: kept exact
        precision = "float32" if rows.start == 0 else self.precision
        arrays = {}
        for name, layers in (("k", rows.keys), ("v", rows.values)):
            for i, a in enumerate(layers):
                arrays |= _pack(a, precision, f"{name}{i}")
        stored = rows if precision == "float32" else KVRows(
            rows.tokens, rows.start, [_unpack(arrays, f"k{i}") for i in range(len(rows.keys))],
            [_unpack(arrays, f"v{i}") for i in range(len(rows.values))])
        path.parent.mkdir(parents=True, exist_ok=True)
        # written whole, then renamed: a reader never sees half a file
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            np.savez(out, layers=np.int64(len(rows.keys)), **arrays)
        os.replace(tmp, path)
        self._last_saved = path.stat().st_size
        self._evict(keep=path)
        return stored

    def _evict(self, keep: Path) -> None:
        """Remove the least recently used rows (by modification time: saved or loaded) until the
        directory is within `disk_bytes`; never the rows just saved. Another process may remove a
        file first, or read one being removed: either is a miss, recomputed."""
        files = []
        for f in self.dir.glob("*/*.npz"):
            try:
                st = f.stat()
            except OSError:
                continue
            files.append((st.st_mtime, st.st_size, f))
        total = sum(size for _, size, _ in files)
        for _, size, f in sorted(files):
            if total <= self.disk_bytes:
                break
            if f != keep:
                f.unlink(missing_ok=True)
                total -= size
        self._disk_used = total


def _pack(a: np.ndarray, precision: Precision, name: str) -> dict[str, np.ndarray]:
    """One layer's keys (`name` "k…") or values [KV, n, d] as stored: at an integer precision as codes
    with a float16 scale (`name` + "s") and offset (`name` + "z"); 6-bit codes four to three bytes
    (`name` + "n": the rows' shape)."""
    if precision not in ("int8", "k6v8"):
        return {name: a.astype(precision, copy=False)}
    bits = 6 if precision == "k6v8" and name.startswith("k") else 8
    # 2**bits codes between each KV head and channel's least and greatest value over the passage's tokens:
    # keys have outlier channels (a scale per token spread over them: 1.24% error against 0.45% per
    # channel), and an offset per channel (a key bias) a scale around 0 spends half its codes on (the
    # 1.5B's keys 0.24% -> 0.04%, values 0.75% -> 0.63%, relative L2 over ten passages; the same in
    # float16). Keys take fewer bits than values: at 6 bits their error (0.16%) is still a quarter of
    # the values' at 8, and the model's next tokens move no more than under float16 rows or a
    # millionth's noise (docs/benchmarks.md, "Keys at 6 bits, values at 8")
    top = 2 ** bits - 1
    low = a.min(axis=-2, keepdims=True).astype(np.float16)
    scale = ((a.max(axis=-2, keepdims=True) - low.astype(np.float32)) / top).astype(np.float16)
    step = np.where(scale > 0, scale, 1).astype(np.float32)
    codes = np.clip(np.round((a - low.astype(np.float32)) / step), 0, top).astype(np.uint8)
    if bits == 8:
        return {name: codes, name + "s": scale, name + "z": low}
    four = np.zeros(-(-codes.size // 4) * 4, np.uint32)
    four[:codes.size] = codes.ravel()
    four = four.reshape(-1, 4)
    word = four[:, 0] << 18 | four[:, 1] << 12 | four[:, 2] << 6 | four[:, 3]
    packed = np.stack([word >> 16, word >> 8 & 255, word & 255], axis=1).astype(np.uint8).ravel()
    return {name: packed, name + "s": scale, name + "z": low, name + "n": np.array(a.shape, np.int32)}


def _unpack(arrays, name: str) -> np.ndarray:
    """The float32 rows `_pack` stored under `name` (any precision: the file says which)."""
    a = arrays[name]
    if name + "n" in arrays:  # 6-bit codes, four in three bytes
        shape = tuple(int(x) for x in arrays[name + "n"])
        three = a.reshape(-1, 3).astype(np.uint32)
        word = three[:, 0] << 16 | three[:, 1] << 8 | three[:, 2]
        four = np.stack([word >> 18, word >> 12 & 63, word >> 6 & 63, word & 63], axis=1).astype(np.uint8)
        a = four.ravel()[:int(np.prod(shape))].reshape(shape)
    if a.dtype == np.uint8:
        return a.astype(np.float32) * arrays[name + "s"].astype(np.float32) + arrays[name + "z"].astype(np.float32)
    if a.dtype == np.int8:  # a scale per channel around 0, as stored before 2026-12-05
        return a.astype(np.float32) * arrays[name + "s"]
    return a.astype(np.float32)


def kept_rows(llm: LLM, kb_dir: Path | None, passages: bool | None = None,
              disk_bytes: int | None = None, precision: Precision = "float32") -> PassageKV | None:
    """What an answer places instead of prefilling. Always the instructions' rows, kept in memory
    (about 130 tokens, 7 MB for the 1.5B): a new conversation, or one after an answer in the other
    style, then prefills only its question and passages. With `passages` (None: wherever the cache
    can take them) every first passage's rows too, kept under the KB (stored at `precision`: ~1.35 MB a
    passage of the 1.5B at k6v8; at most `disk_bytes`, DISK_BYTES by default). None for a quantized KV
    cache, which kept rows cannot go into; asking for passages there is refused."""
    if not llm.decoder.placeable and not passages:
        return None
    passages = llm.decoder.placeable if passages is None else passages
    return PassageKV(llm, kb_dir / PASSAGE_KV_DIR if passages and kb_dir is not None else None, passages=passages,
                     disk_bytes=disk_bytes, precision=precision)


def prepare(kb, store: PassageKV, voice: bool, progress: bool = True,
            checkpoint: Callable[[], None] | None = None) -> tuple[int, int]:
    """Keep the rows of the instructions of text answers or of voice answers, and of every chunk
    of the KB as an answer shows it first (its FAQ entry, or its chunk of a section when nothing
    else of the section is shown with it) after them: what a question about any entry then places
    instead of prefilling. Stops when the disk budget is used up (`PassageKV.full`): beyond it each
    passage would push out another. `checkpoint`: called before each passage (the server's
    background fill yields to questions there, and stops by raising); with it a passage is computed
    as background work, which a question interrupts: after the next checkpoint it is computed
    again. Returns the passages computed and the passages already kept."""
    from tqdm import tqdm

    messages = _one_question(kb.profile, voice)
    llm = store.llm
    store.warm(kb.profile, (voice,))
    computed = kept = 0
    for hit in tqdm(kb.all_hits(), unit="passage", disable=not progress, desc="passage KV", leave=False):
        if checkpoint is not None:
            checkpoint()
        built = passage_prompt(llm, messages, [Passage.of(1, hit)])
        if len(built.ids) >= llm.context:  # no answer shows it: no room for the question
            continue
        for offset, n in built.spans:
            ids = built.ids[offset:offset + n]
            if store.kept(built.prefix, ids):
                kept += 1
            elif store.full:
                return computed, kept
            else:
                while True:
                    try:
                        store.rows(built.prefix, ids, background=checkpoint is not None)
                        break
                    except Interrupted:
                        checkpoint()
                computed += 1
    return computed, kept


def fill(kb, store: PassageKV, checkpoint: Callable[[], None]) -> tuple[int, int]:
    """The server's background fill after start-up, after each ingest and when text answers are first
    asked: `prepare` for voice answers, whose first words wait on these rows, then for text answers
    once they are in use (`PassageKV.styles`)."""
    counts = [prepare(kb, store, voice, progress=False, checkpoint=checkpoint) for voice in store.styles()]
    return sum(c for c, _ in counts), sum(k for _, k in counts)
