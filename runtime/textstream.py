"""Turning a stream of token ids into text deltas: UTF-8 safe, with stop strings held back."""

from __future__ import annotations

from tokenizers import Tokenizer

_INCOMPLETE = "\ufffd"  # what byte-level decoding yields for a cut multi-byte character


class IncrementalDetokenizer:
    """Emits only text that later tokens cannot change.

    Byte-level BPE splits multi-byte characters (CJK, emoji) across tokens; decoding a window
    that starts a few tokens back and holding text that ends in U+FFFD keeps every delta valid.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._prefix = 0  # start of the decode window
        self._read = 0  # tokens already turned into emitted text

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=self._skip)

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix:self._read])
        text = self._decode(self._ids[self._prefix:])
        if len(text) > len(before) and not text.endswith(_INCOMPLETE):
            self._prefix, self._read = self._read, len(self._ids)
            return text[len(before):]
        return ""

    def flush(self) -> str:
        """Whatever is left at the end of generation (may hold a replacement character)."""
        before = self._decode(self._ids[self._prefix:self._read])
        text = self._decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        return text[len(before):]


class StopStringFilter:
    """Holds back text that may be the start of a stop string; stops at the first full match.

    Stop strings can span token boundaries, so matching runs on text, never on tokens, and the
    stop string itself is never emitted.
    """

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self._pending = ""
        self.stopped = False

    def push(self, text: str) -> str:
        if self.stopped:
            return ""
        buf = self._pending + text
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            self._pending = ""
            return buf[: min(hits)]
        hold = self._partial_suffix(buf)
        self._pending = buf[len(buf) - hold:] if hold else ""
        return buf[: len(buf) - hold]

    def flush(self) -> str:
        out, self._pending = ("" if self.stopped else self._pending), ""
        return out

    def _partial_suffix(self, buf: str) -> int:
        """Length of the longest suffix of buf that is a proper prefix of some stop string."""
        best = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(buf)), best, -1):
                if buf.endswith(s[:n]):
                    best = n
                    break
        return best
