"""Chinese and Japanese text as BM25 sees it: overlapping character bigrams.

unicode61 sees a whole CJK run as one token and trigram MATCH cannot look up the two-character
words Chinese is mostly made of, so a query's CJK runs are cut into overlapping bigrams and chunks
are ranked by BM25 over bigram occurrences (sample KB, 23 Chinese questions, recall@5: unicode61
words 0.00, trigram OR 0.65, bigram BM25 0.96). The bigram index (store.BIGRAM_TABLE) holds the
same view of every chunk with CJK text: `bigram_text` is what it tokenizes.
"""

from __future__ import annotations

import re

# Han, kana, CJK punctuation-free ranges; Hangul is spaced text and suits the word index
_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK = re.compile(f"[{_CJK_CHARS}]")
_CJK_RUN = re.compile(f"[{_CJK_CHARS}]+")
_RUN_OR_WORD = re.compile(f"[{_CJK_CHARS}]+|[^\\W{_CJK_CHARS}]+")
# question words, and the grams of "要多长时间 / 多久 / 多少": an entry titled "在家充电要多长时间？" is
# not the answer to every how-long question ("软件升级安装要多长时间？" found it before the update entry)
STOP_GRAMS = frozenset("什么 怎么 如何 为什 么会 哪些 可以 是否 我的 我们 一个 这个 那个 "
                       "多长 长时 多久 多少 要多 得多 多大 多远 多快".split())


def has_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


def cjk_share(text: str) -> float:
    """Share of the text's words written in CJK, a CJK character counting as a word (most Chinese words
    are one or two characters, an English one a run of letters)."""
    cjk = len(_CJK.findall(text))
    words = cjk + len(re.findall(r"\w+", _CJK.sub(" ", text)))
    return cjk / words if words else 0.0


def query_grams(query: str) -> list[str]:
    """The query's CJK runs as overlapping bigrams (a one-character run as itself), without the
    grams of question words unless nothing else is left."""
    grams = []
    for run in _CJK_RUN.findall(query):
        grams += [run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)]
    return list(dict.fromkeys([g for g in grams if g not in STOP_GRAMS] or grams))


def bigram_text(text: str) -> str:
    """What the bigram index tokenizes: each CJK run as its overlapping bigrams and then its last
    character, so every character occurrence starts exactly one token (a one-character query
    gram is a prefix query: its count is that of the character); other words as they are, cut
    from any CJK they are glued to ("OTA更新" -> ota 更新 新)."""
    out = []
    for piece in _RUN_OR_WORD.findall(text):
        if _CJK.match(piece):
            out += [piece[i:i + 2] for i in range(len(piece) - 1)]
        out.append(piece[-1] if _CJK.match(piece) else piece)
    return " ".join(out)
