"""Kept KV rows: the rows of the answer instructions (always, in memory) and, with passage KV, of a
passage (kept on disk), computed once and placed into every later prompt that starts with the same
instructions or shows the same passage first, so prefill covers only the question (runtime
Decoder.place re-rotates keys to where the rows land).

A passage's rows are computed right after the instructions' system turn and the user turn's
opening, so they are exactly what prefill makes for the first passage of a one-turn question; the
answer layer places only that one (GroundedGeneration._placed says why), after the instructions'
own rows. Rows are kept in memory and, with a directory, on disk as float32 .npz files (57 KB a
token for the 1.5B, ~6 MB a passage) named by a hash of the model, the preceding tokens and the
tokens themselves: another model or other instructions simply miss.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from app.answer.passages import Passage, passage_prompt
from knowledge.profile import AnswerProfile
from knowledge.prompts import answer_instructions, with_system
from runtime.kv_cache import KVRows
from runtime.llm import LLM

PASSAGE_KV_DIR = "passage_kv"  # where a KB directory keeps them
MEMORY_BYTES = 256 << 20  # float32 rows of the 1.5B: 57 KB a token, so ~4,500 passage tokens
# on disk, the rows least recently used go first beyond this: for the 1.5B (~6 MB a passage) the
# first passages of ~350 questions, a head unit's share of flash
DISK_BYTES = 2 << 30


def _one_question(profile: AnswerProfile, voice: bool) -> list[dict]:
    """A one-question conversation with the answer instructions of text or of voice answers."""
    return with_system([{"role": "user", "content": "?"}], answer_instructions(profile, voice))


class PassageKV:
    """The kept rows of one LLM's instructions and, with `passages`, of the passages answers show first."""

    def __init__(self, llm: LLM, directory: str | Path | None = None, memory_bytes: int = MEMORY_BYTES,
                 passages: bool = True, disk_bytes: int | None = None):
        """`disk_bytes`: the rows kept on disk at most (None: DISK_BYTES)."""
        llm.decoder.check_placeable()  # refused at start-up, never in the middle of an answer
        self.llm, self.passages = llm, passages
        self.dir = Path(directory) if directory is not None else None
        self.memory_bytes = memory_bytes
        self.disk_bytes = DISK_BYTES if disk_bytes is None else disk_bytes
        self._memory: OrderedDict[str, KVRows] = OrderedDict()
        self._lock = threading.Lock()
        self.computed = self.loaded = self.hits = 0  # where rows came from, for reports

    def rows(self, prefix: list[int], ids: list[int]) -> KVRows:
        """The rows of `ids` after `prefix`: from memory, else from disk, else computed (and kept)."""
        key = hashlib.sha256(f"{self.llm.model_id}|{prefix}|{ids}".encode()).hexdigest()
        with self._lock:
            if key in self._memory:
                self._memory.move_to_end(key)
                self.hits += 1
                return self._memory[key]
        rows = self._load(key, ids, len(prefix))
        if rows is None:
            rows = self.llm.kv_rows(prefix, ids)
            self.computed += 1
            self._save(key, rows)
        else:
            self.loaded += 1
        with self._lock:
            self._memory[key] = rows
            while sum(r.nbytes for r in self._memory.values()) > self.memory_bytes and len(self._memory) > 1:
                self._memory.popitem(last=False)
        return rows

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
                keys = [f[f"k{i}"] for i in range(layers)]
                values = [f[f"v{i}"] for i in range(layers)]
        except (OSError, ValueError, KeyError):  # a damaged file is a miss; the next save replaces it
            return None
        try:
            os.utime(path)  # used now: the last to be evicted
        except OSError:  # evicted by another process meanwhile: the rows are read already
            pass
        return KVRows(list(ids), start, keys, values)

    def _save(self, key: str, rows: KVRows) -> None:
        path = self._path(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        # float32, as computed: rows rounded to float16 changed a greedy answer of the 1.5B (the
        # baby-seat question of answer_questions.jsonl lost its steps); with float32 it is the same
        arrays = {f"k{i}": k for i, k in enumerate(rows.keys)} | {f"v{i}": v for i, v in enumerate(rows.values)}
        # written whole, then renamed: a reader never sees half a file
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            np.savez(out, layers=np.int64(len(rows.keys)), **arrays)
        os.replace(tmp, path)
        self._evict(keep=path)

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


def kept_rows(llm: LLM, kb_dir: Path | None, passages: bool | None = None,
              disk_bytes: int | None = None) -> PassageKV | None:
    """What an answer places instead of prefilling. Always the instructions' rows, kept in memory
    (about 130 tokens, 7 MB for the 1.5B): a new conversation, or one after an answer in the other
    style, then prefills only its question and passages. With `passages` (None: wherever the cache
    can take them) every first passage's rows too, kept under the KB (~6 MB a passage for the 1.5B,
    at most `disk_bytes`, DISK_BYTES by default). None for a quantized KV cache, which kept rows
    cannot go into; asking for passages there is refused."""
    if not llm.decoder.placeable and not passages:
        return None
    passages = llm.decoder.placeable if passages is None else passages
    return PassageKV(llm, kb_dir / PASSAGE_KV_DIR if passages and kb_dir is not None else None, passages=passages,
                     disk_bytes=disk_bytes)


def prepare(kb, store: PassageKV, voice: bool, progress: bool = True) -> tuple[int, int]:
    """Keep the rows of the instructions of text answers or of voice answers, and of every chunk
    of the KB as an answer shows it first (its FAQ entry, or its chunk of a section) after them:
    what a question about any entry then places instead of prefilling. Returns the passages
    computed and the passages already kept."""
    from tqdm import tqdm

    messages = _one_question(kb.profile, voice)
    llm = store.llm
    store.warm(kb.profile, (voice,))
    before = store.computed, store.loaded
    for hit in tqdm(kb.all_hits(), unit="passage", disable=not progress, desc="passage KV", leave=False):
        built = passage_prompt(llm, messages, [Passage.of(1, hit)])
        for offset, n in built.spans:
            store.rows(built.prefix, built.ids[offset:offset + n])
    return store.computed - before[0], store.loaded - before[1]
