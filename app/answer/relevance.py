"""How well a passage matches the question: the answer layer's own ranking and its answerability signal.

The KB's hybrid ranking (knowledge/fusion.py) orders sections for any caller, the heading path's
cosine included. For an answer only the first few passages matter, and they are re-ranked on the
passage's own signals: cosine plus a little BM25 where the embedder reads the question, BM25 alone
where it cannot (Chinese with an English embedder). On knowledge/samples/eval_questions.jsonl this
moved English recall@1 over FAQ entries from 0.69 (the rank fusion hybrid search used then) to 0.80.

Answerability adds what cosine cannot see: whether the question's own words occur in the passage.
"How do I open the sunroof?" scores a cosine of 0.4 against the tyre entries, like answerable
questions do, but "sunroof" is in none of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import rjieba

from app.answer.facts import normalize, without_facts
from knowledge.retrieval import Hit

BM25_WEIGHT = 0.02  # cosine + 0.02 x BM25: the best of 0, 0.01 ... 0.08 on the sample eval
_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")
_STOP = set("""a an the and or but if of to in on at by for with from into onto about as is are was were be been being
do does did done doing have has had having i me my mine we our you your yours it its this that these those there
here what which who whom whose when where why how can could should would will shall may might must not no yes
up down out off over under again then than so too very just also any all some much many more most other such
only own same few each both get got gets go goes going make made let lets please tell know need want like
i'm i've it's what's how's there's don't doesn't can't isn't won't aren't he's she's they're we're you're
i'll he'll she'll we'll they'll you'll okay instead
whenever wherever however whatever whichever whoever anywhere anything anyone anybody anyway somewhere something
someone somebody sometimes everywhere everything everyone everybody nowhere nothing nobody always never ever still
already even though although because while whilst unless whether either neither nor else every really maybe
perhaps probably quite rather almost yet etc via now soon later once ago say says said saying
according regarding concerning despite toward towards among amongst upon per""".split())
# Chinese function words and question particles: no evidence of a topic
_ZH_STOP = set("什么 怎么 怎样 多少 多久 多长 几个 哪个 哪里 为什么 是不是 可以 能不能 应该 需要 一下 时候 我的 这个 那个 "
               "的是 了吗 是多 么办 怎么办 吗 呢 吧 啊".split())


def score(hit: Hit, query_readable: bool) -> float:
    if query_readable:
        return hit.scores.get("dense", 0.0) + BM25_WEIGHT * hit.scores.get("bm25", 0.0)
    return hit.scores.get("bm25", 0.0)


def rerank(hits: list[Hit], query_readable: bool) -> list[Hit]:
    return sorted(hits, key=lambda h: score(h, query_readable), reverse=True)


_SUFFIX = re.compile(r"(?<=[a-z]{3})ing$|(?<=[a-z]{4})ed$|(?<=[a-z]{3})(?<!s)s$")
_FINAL_E = re.compile(r"(?<=[a-z]{3})e$")
_POSSESSIVE = re.compile(r"['’]s$")


def _stem(word: str) -> str:
    """The first five letters after a possessive, an inflection and a final e: "loaded" is "load",
    "brakes" and "braked" "brak", "charging" "charg", "towing" "tow", "car's" "car"."""
    return _FINAL_E.sub("", _SUFFIX.sub("", _POSSESSIVE.sub("", word)))[:5]


def _english_terms(text: str) -> dict[str, str]:
    """English word stems (`_stem`) and a word each stands for; `text` is normalized. A function word
    inflected ("tells", "needs", "others") says as little as the word itself."""
    return {_stem(w): w for w in _WORD.findall(text) if w not in _STOP and _SUFFIX.sub("", w) not in _STOP
            and len(w) > 2}


def term_words(text: str) -> dict[str, str]:
    """Content terms and a word each stands for: English word stems and Chinese character bigrams
    (their own word)."""
    text = normalize(text).lower()
    out = _english_terms(text)
    for run in _CJK_RUN.findall(text):
        grams = {run[i:i + 2] for i in range(len(run) - 1)} or {run}
        out.update({g: g for g in grams if g not in _ZH_STOP and not any(s in g for s in ("什么", "怎么", "多少"))})
    return out


def terms(text: str) -> set[str]:
    return set(term_words(text))


# a line saying hardly anything of its own: a label and a value ("Default: timedelta(days=31)", "Defaults to
# 4093.", "Max load: 75 kg")
FRAGMENT_TERMS = 2
_ENTRY_END = re.compile(r"\n\s*\n\s*$")  # a blank line ends a reference entry, a spec sheet's block
ENTRY_SENTENCES = 4  # of a long entry: its first sentence (the name) and the fragment with the two before it


def in_context(sentences: list[str]) -> list[str]:
    """What each of a passage's sentences (split_sentences) is about, as text: the sentence, or for a
    fragment of FRAGMENT_TERMS terms or fewer, its entry up to it: the sentences before it back to the
    last blank line (a reference entry's name and description, a block's heading). "Default:
    timedelta(days=31)" says what PERMANENT_SESSION_LIFETIME's entry is about, not nothing."""
    out, start = [], 0
    for i, s in enumerate(sentences):
        if len(terms(without_facts(s))) <= FRAGMENT_TERMS and i > start:
            entry = [sentences[start], *sentences[max(start + 1, i - ENTRY_SENTENCES + 1):i + 1]]
            out.append("".join(entry).strip())
        else:
            out.append(s)
        if _ENTRY_END.search(s):
            start = i + 1
    return out


# Chinese question words a segmenter keeps whole: no evidence of a topic
_ZH_ASKING = set("怎么 怎样 怎么办 多少 多久 多长 多长时间 多大 多远 多快 什么 为什么 哪个 哪里 哪儿 是不是 可以 能不能 能否 "
                 "应该 需要 一下 时候 这个 那个 来着 的话 还是 一共".split())


def _zh_topic(tag: str) -> bool:
    """Nouns, verbal nouns and abbreviations name what a question is about (座椅, 通风, 质保); verbs and
    particles say what is done with it or how it is asked (能调, 开着, 离开), and a KB that never uses
    a driver's verb still answers the question."""
    return tag.startswith("n") or tag in ("vn", "j", "eng")


def content_words(text: str, topic_only: bool = False) -> dict[str, str]:
    """The question's words as a reader splits them: English term stems (as `term_words`) and
    Chinese words from a segmenter (only the nouns with `topic_only`). Bigrams suit matching, but as
    *words* they are wrong half the time ("车在路上" gives "车在" and "在路"), so what a KB lacks is
    asked of whole words."""
    text = normalize(text).lower()
    out = _english_terms(text)
    for run in _CJK_RUN.findall(text):
        out.update({w: w for w, tag in rjieba.tag(run)
                    if len(w) >= 2 and w not in _ZH_ASKING and (_zh_topic(tag) or not topic_only)})
    return out


def coverage(question: str, passage: str, ignore: set[str] = frozenset()) -> float:
    """Share of the question's content terms found in the passage (1.0 for a question without any);
    `ignore`: terms that say nothing in this KB (its profile's stop words)."""
    wanted = terms(question) - ignore
    if not wanted:
        return 1.0
    found = terms(passage)
    return sum(t in found for t in wanted) / len(wanted)


@dataclass(frozen=True)
class Confidence:
    """Retrieval's side of the answerability decision, for the best passage."""

    dense: float | None  # cosine, when the embedder reads the question
    coverage: float  # question terms found in the passage
    value: float  # the combined score the thresholds apply to

    def to_dict(self) -> dict:
        return {"dense": None if self.dense is None else round(self.dense, 4), "coverage": round(self.coverage, 4),
                "value": round(self.value, 4)}
