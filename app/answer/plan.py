"""Before the model runs: retrieval, the refusal gate, the passages, the prompt and the quotes.

    retrieval query ─► search ─► re-rank ─► confidence low? ─► refuse
    ─► passages (one FAQ entry, or a budget) ─► prompt ids
    ─► the extractive answer (the best passage's sentences) and, for a question asking several
       things, a passage sentence for each part

Needs no accelerator: the LLM is used for its tokenizer and context size only.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from typing import TYPE_CHECKING

from app.answer.extractive import best_sentence, extract_answer
from app.answer.facts import extract_facts, states_phone
from app.answer.identifiers import identifiers, stated
from app.answer.judge import MIN_ANSWERS
from app.answer.passages import (BUDGET_MARGIN, COVERAGE_WEIGHT, Passage, confidence, confident, language,
                                 passage_prompt, select)
from app.answer.limits import Limit, bound_sentence, comparison_note, judge_limit
from app.answer.question import (ASKING, answers_kind, asks_phone, asks_quantity, asks_yes_no, asks_yes_no_somewhere,
                                 incidental, meant, on_topic, parts, topic)
from app.answer.relevance import Confidence, content_words, coverage, terms
from app.answer.sentences import join_sentences, split_sentences, strip_markdown
from app.answer.translation import to_english
from app.answer.types import AnswerRequest, Citation
from app.voice import VOICE_MAX_TOKENS
from knowledge.prompts import answer_instructions, voice_instructions, with_system
from knowledge.profile import AnswerProfile
from knowledge.retrieval import Hit, section_key
from models.manifest import TextKind
from runtime.errors import ContextOverflowError
from runtime.llm import LLM

if TYPE_CHECKING:
    from app.answer.passage_kv import PassageKV

DONT_KNOW = {"en": "I'm sorry, I don't know: the knowledge base has no information about that.",
             "zh": "抱歉，我不知道：知识库里没有这方面的信息。"}
ANSWER_IN = {"en": "Answer in English.", "zh": "请用中文回答。"}
DONT_KNOW_VOICE = {"en": "Sorry, I don't have any information about that.", "zh": "抱歉，我没有这方面的信息。"}
CANDIDATES = 8  # hits re-ranked before the passages are chosen
_FEW = 8  # lexical hits looked at: the places of a word (_quotable), where a compound is written
_COMPOUND = re.compile(r"\b[a-z]{2,}(?:-[a-z]{2,})+\b", re.I)  # "head-up", "rear-facing", not "12-volt"
_MARGIN = 8  # tokens kept free for template differences
_SNIPPET = 240
WINDOW_TOKENS = 360  # of a section shown as one passage (`_window`): about three chunks of the embedder's
SECTION_MAX_TOKENS = 400  # a whole section shown for a value its window lacks (_fit): no longer
# a section this short is written as one answer (an FAQ answer is 2-5 sentences): quotable (_answer_sized)
ANSWER_SENTENCES = 10
WHOLE_SENTENCES = 4  # an FAQ answer said whole (a judged quote): about 20 seconds read aloud


@dataclass
class AnswerPlan:
    """Everything decided before the model runs."""

    question: str
    lang: str
    voice: bool
    grounded: bool  # False: a plain chat (RAG off or no knowledge base)
    prompt_ids: list[int] = field(default_factory=list)
    passage_spans: list[tuple[int, int]] = field(default_factory=list)  # (offset, length) in prompt_ids
    kv_prefix: list[int] = field(default_factory=list)  # what passage KV rows are computed after
    max_tokens: int = 0
    passages: list[Passage] = field(default_factory=list)
    confidence: Confidence | None = None
    extractive: str = ""  # the quoted fallback: the best passage's sentences for the question
    # the same, when the question's words put it in doubt (words the KB never writes, the rarest it writes
    # not named): said only if the model judges that it answers the question (judge.py), at least this likely
    doubted: str = ""
    min_answers: float = MIN_ANSWERS
    refusal: str | None = None  # set when the answer is "I don't know" without asking the model
    direct: str = ""  # set when the passages' own words answer without asking the model (limits.Limit.alone)
    missing_topic: set[str] = field(default_factory=set)  # the question's topic, when the whole KB never names it
    unnamed: set[str] = field(default_factory=set)  # every topic word of the question the whole KB never names
    # for a question asking several things: (part, a passage sentence answering it), said after the
    # model's answer when that states nothing of the kind the part asks for ("how far and how fast?"
    # answered with the distance only)
    supplement: list[tuple[str, str]] = field(default_factory=list)
    # the supplement's sentences when they answer every part that asks for a kind of value: what is
    # said when the model finds no answer ("how fast and how far?" has its sentence for each)
    part_quote: str = ""
    note: str = ""  # what the prompt tells the model beside the question (limits.comparison_note)
    limit: Limit | None = None  # the reply the passages' bound gives a question about the user's amount
    # for a yes-or-no question about the user's amount: the sentence stating a value of its kind, said
    # when the model's answer fails and nothing else does (limits.bound_sentence)
    bound_quote: str = ""
    known_name: Callable[[str], bool] = lambda name: False  # whether the KB writes a name anywhere
    rarest: set[str] = field(default_factory=set)  # what the question is most specifically about (_rarest)
    translation: str = ""  # the question in English, searched and compared with the passages in its place
    timings: dict[str, float] = field(default_factory=dict)
    # what fills `extractive`, `supplement` and `part_quote`, run by `quotes()` when one is first needed:
    # ranking a passage's sentences embeds every one of them (50-300 ms on two cores), and the quotes are
    # said only after the model's answer, so the first word never waits for them
    pending: Callable[[], None] | None = None

    def quotes(self) -> AnswerPlan:
        """The plan with its quotes filled in (computed once, on first need)."""
        if self.pending is not None:
            fill, self.pending = self.pending, None
            fill()
        return self

    @property
    def citations(self) -> list[Citation]:
        return [Citation(index=p.index, source=p.hit.name, title=p.title, heading=p.hit.heading or None,
                         entry_id=p.hit.entry_id, snippet=p.body[:_SNIPPET], score=float(p.hit.score))
                for p in self.passages]

    def dont_know(self) -> str:
        return (DONT_KNOW_VOICE if self.voice else DONT_KNOW)[self.lang]

    @property
    def needs_model(self) -> bool:
        return self.refusal is None and not self.direct

    @property
    def limit_answer(self) -> str:
        """The reply the passages' bound gives, with their sentence stating it ("" when none does)."""
        return self.limit.answer(self.question, self.lang) if self.limit else ""

    @property
    def refusal_quote(self) -> str:
        """What is said when the model finds no answer: the sentence for each part of the question, or
        for a yes-or-no question with one entry leading clearly, that entry's quote: "between 60 and
        180 km/h" answers "does lane keep assist work at 50 km/h?", though a small model does not see
        it as an answer because the driver's 50 is not in it; last, for a question about the user's
        amount, the sentence stating a value of its kind (bound_quote). Only where the embedder reads
        the question: on BM25 alone the airbag entry's "一直亮着" led "刹车警告灯一直亮着还能继续开吗？"."""
        read = self.confidence is not None and self.confidence.dense is not None
        one_entry = read and len(self.passages) == 1 and asks_yes_no(self.question)
        self.quotes()
        return self.limit_answer or self.part_quote or (self.extractive if one_entry else "") or (
            self.bound_quote if read else "")


@dataclass
class _Found:
    chosen: list  # the hits an answer may use (passages.select)
    reader: object  # the embedder whose cosines ranked them (None: words alone)
    confidence: Confidence | None


def _retrieved(kb, query: str, question: str, opts, k: int, default_min_score: float | None,
               ignore: set[str]) -> _Found:
    """The hits for a query, those an answer may use and the confidence of the best."""
    hits = kb.search(query, k=max(CANDIDATES, k), mode=opts.mode,
                     min_score=opts.min_score if opts.min_score is not None else default_min_score,
                     sources=opts.sources)
    # the embedder whose cosines ranked the hits: the KB's own (the thresholds' scale), a second one
    # (Chinese with an English first: the KB's order is kept, gates stay on BM25), or none
    reader = kb.read_by(query) if hits and kb.embedder is not None else None
    readable = reader is not None and reader is kb.embedder
    by_kb = reader is not None and not readable
    chosen = select(hits, readable, limit=min(k, CANDIDATES),
                    states_wanted=_states_phone if asks_phone(question) else None, ranked_by_kb=by_kb)
    best = confidence(query, chosen[0], readable, ignore, chosen[1:] if by_kb else []) if chosen else None
    return _Found(chosen, reader, best)


def _found_too(kb, translated: list[Hit], found: Hit, lang: str) -> bool:
    """Whether the translation's search found what `found` (the best passage of the search in the question's
    language) says: its twin, the place nearest it in the other language by the second embedder's meaning
    whose own nearest in the question's language is `found` again (a bilingual KB's twin entries, translated
    pages' sections), is among the passages the translation would show. Both ways: an entry with no
    translation has a nearest one in the other language all the same."""
    shown = {section_key(h) for h in translated}
    if section_key(found) in shown:
        return True
    other = {language(h.text) for h in translated} - {lang}
    if len(other) != 1:
        return False
    back = kb.nearest_in_meaning(found, lambda h: language(h.text) in other)
    if back is None or section_key(back) not in shown:
        return False
    there = kb.nearest_in_meaning(back, lambda h: language(h.text) == lang)
    return there is not None and section_key(there) == section_key(found)


def retrieval_query(messages: list[dict]) -> str:
    users = [m["content"] for m in messages if m["role"] == "user" and m["content"].strip()]
    if not users:
        return ""
    # follow-ups like "and in winter?" need the previous question to mean anything
    if len(users) > 1 and len(users[-1].split()) < 6:
        return f"{meant(users[-2])} {meant(users[-1])}"
    return meant(users[-1])


def _fit(llm: LLM, kb, question: str, asked: list[str], hits, budget: int,
         window: int = WINDOW_TOKENS) -> list[Passage]:
    """The chosen hits as numbered passages, as many as fit the token budget, best first: each its
    section's window for the question (`_window`), else the chunk alone. A window that states
    nothing of a kind a part of the question asks for ("what's the fastest I should go?" matched
    the towing weights) gives way to its whole section when that is short: the value may sit in
    a chunk the question's words do not match. `asked`: the question's parts."""
    passages, used = [], 0
    for hit in hits:
        n = len(passages) + 1
        shown = _window(llm, kb, question, hit, window)
        options = [(Passage.of(n, hit, shown), budget)]
        if shown != hit.text:
            options.append((Passage.of(n, hit), budget))
        if not all(answers_kind(part, shown) for part in asked):
            options.insert(0, (Passage.of(n, hit, kb.section_text(hit)), SECTION_MAX_TOKENS))
        for p, cap in options:
            cost = len(llm.encode(p.render())) + 2
            if cost <= cap and used + cost <= budget:  # a shorter passage further down may still fit
                passages.append(p)
                used += cost
                break
    return passages


def _window(llm: LLM, kb, question: str, hit, cap: int) -> str:
    """The part of the hit's section an answer is shown: the hit's chunk and, best first, the section's
    other chunks about as relevant as the best of them (BUDGET_MARGIN, the rule passages are chosen
    by) while the text stays within `cap` tokens, in document order. A long section is searched as
    windows and only its best one stands for it in a search, while the sentence that answers may sit
    in another: a reference page's neighbouring entry, the step after the one that matched. Chunks
    are scored as the best passage's confidence is: cosine with the question (stored vectors) plus
    term coverage. Where the embedder cannot read the question (Chinese with an English model) nothing
    ranks them by meaning, and the chunk is shown alone: ranked on words alone, Chinese questions of a
    development split were shown a table's other rows and answered from them."""
    chunks = kb.section_chunks(hit, question)
    if len(chunks) == 1 or not all("dense" in c.scores for c in chunks):
        return hit.text
    scores = {c.chunk_id: c.scores["dense"] + COVERAGE_WEIGHT * coverage(question, c.text) for c in chunks}
    top = max(scores.values())
    shown = [next(c for c in chunks if c.chunk_id == hit.chunk_id)]
    for chunk in sorted(chunks, key=lambda c: -scores[c.chunk_id]):
        if chunk.chunk_id == hit.chunk_id or scores[chunk.chunk_id] < top - BUDGET_MARGIN:
            continue
        if len(llm.encode(_joined(sorted([*shown, chunk], key=lambda c: c.start)))) <= cap:
            shown.append(chunk)
    return _joined(sorted(shown, key=lambda c: c.start))


def _joined(chunks) -> str:
    """Chunks of one section in document order as one text: overlapping ones merged at their
    character offsets, apart ones as paragraphs."""
    text, end = "", None
    for c in chunks:
        if end is not None and c.start < end:
            text += c.text[end - c.start:] if c.end > end else ""
        else:
            text += ("\n\n" if text else "") + c.text
        end = c.end if end is None else max(end, c.end)
    return text


def plan_answer(req: AnswerRequest, llm: LLM, kb, default_max_tokens: int, default_k: int,
                default_min_score: float | None, kept: PassageKV | None = None) -> AnswerPlan:
    """Retrieval, the refusal gate and the prompt. `kb` is a KnowledgeBase (or None: a plain chat); `kept`:
    where a question's translation (translation.py) finds its instructions' rows."""
    started = time.perf_counter()
    messages = [{"role": t.role, "content": t.content} for t in req.turns]
    question = meant(next((m["content"] for m in reversed(messages) if m["role"] == "user"), ""))
    max_tokens = req.max_tokens or default_max_tokens
    if req.voice:
        max_tokens = min(max_tokens, VOICE_MAX_TOKENS)
    profile = kb.profile if kb is not None else AnswerProfile()
    voice = [voice_instructions(profile)] if req.voice else []
    plan = AnswerPlan(question, language(question), req.voice, grounded=bool(req.rag and kb is not None))

    def done() -> AnswerPlan:
        plan.timings["plan_ms"] = round((time.perf_counter() - started) * 1000, 1)
        return plan

    base_ids = llm.encode_chat(with_system(messages, voice))
    if len(base_ids) >= llm.context:
        raise ContextOverflowError(len(base_ids), llm.context)
    if not plan.grounded:
        plan.prompt_ids, plan.max_tokens = base_ids, min(max_tokens, llm.context - len(base_ids))
        return done()

    opts = req.retrieval
    k = opts.k or default_k
    query = retrieval_query(messages)
    ignore = terms(" ".join(profile.stop_words))  # words every question of this KB may use
    found = _retrieved(kb, query, question, opts, k, default_min_score, ignore)
    # a question the first embedder cannot read that the KB does not answer in its own language (no second
    # embedder reads it, its best passage is in another language, or retrieval would refuse it) is
    # searched again in English (translation.py): its words are then the translation's
    @cache
    def looked_up(text: str) -> tuple[dict[str, str], dict[str, int]]:
        """The topic words of `text` and how many places of the KB use each (`_places`), looked up once."""
        topic = _topic_words(text, ignore)
        return topic, _places(kb, topic)

    if found.reader is not kb.embedder and kb.embedder is not None:
        # searched in its own language by the second embedder, whose ranking favours passages in the
        # question's language even when only a passage in the first's says what it asks: the translation
        # is searched too, and its passages stand unless they hold the twin of the first search's best
        # (_found_too): then that passage, in the question's language, is the answer's
        doubtful = (found.reader is None or not found.chosen or language(found.chosen[0].text) != plan.lang
                    or not confident(found.confidence, profile)
                    or _lacks_topic(question, *looked_up(question), found.chosen))
        translating = time.perf_counter()
        # translated piece by piece only when its own search found nothing to answer from: a piece is
        # translated without the rest of the question, which a word may need to be read right
        english = to_english(llm, query, kept=kept, pieces=found.reader is None or not found.chosen
                             or not confident(found.confidence, profile))
        plan.timings["translation_ms"] = round((time.perf_counter() - translating) * 1000, 1)
        if english and kb.read_by(english) is kb.embedder:
            translated = _retrieved(kb, english, english, opts, k, default_min_score, ignore)
            if doubtful or (translated.chosen and confident(translated.confidence, profile)
                            and not _found_too(kb, translated.chosen, found.chosen[0], plan.lang)):
                plan.translation, found = english, translated
    words = plan.translation or question  # the question as the passages' words are compared with it
    chosen, reader = found.chosen, found.reader
    plan.timings["retrieval_ms"] = round((time.perf_counter() - started) * 1000, 1)
    if not chosen:
        plan.refusal = "no passage passed the relevance threshold"
        return done()
    plan.confidence = found.confidence
    plan.known_name = partial(_written_in_kb, kb)
    if not confident(plan.confidence, profile):
        plan.refusal = f"retrieval confidence {plan.confidence.value:.3f} is below the answerability threshold"
        return done()

    room = min(max_tokens, llm.context // 4)  # the answer's share of the context
    told = answer_instructions(profile, req.voice)
    budget = llm.context - len(base_ids) - room - _MARGIN - len(llm.encode(told[0]))
    asked = parts(words)
    plan.passages = _fit(llm, kb, plan.translation or query, asked, chosen, budget)
    if not plan.passages:
        plan.refusal = "no passage fits the context"
        return done()
    topic, places = looked_up(words)
    unknown = (_unknown_words(topic, places, plan.passages) | _unknown_compounds(kb, words)
               | _unknown_names(kb, words))
    plan.unnamed = set(unknown)
    plan.rarest = _rarest(places)
    if _is_topic(unknown, words):
        plan.missing_topic = set(unknown)
        if plan.translation:  # an answer in another language than the passages' cannot be checked for them
            plan.refusal = (f"the knowledge base never mentions {', '.join(sorted(unknown.values()))}, which the "
                            "question asks about")
            return done()
    # a quote speaks the KB's own words with its authority. When the question names anything the KB never
    # does, none where it asks for a value, a place or a yes or no: the passage's value or place may be
    # another thing's (the load of a part the KB names is no load of a part it never does) and its reply
    # undecided; a passage about the rest of its words may still say what something means or how it is
    # done (a light described in the user's words, its entry found by the rest of them). The model may
    # answer around it either way.
    kind_asked = asks_quantity(question) or not answers_kind(words, "") or asks_yes_no_somewhere(question)
    quotable = not plan.missing_topic and not (unknown and (kind_asked or not _about_the_rest(
        places, unknown, plan.passages[0])))
    plan.min_answers = MIN_ANSWERS if profile.min_answers is None else profile.min_answers
    similarity = _similarity(reader) if reader is not None else None

    def quotes() -> None:
        # a translated question's quote is chosen by its translation, in the passages' language
        if not plan.missing_topic and _answer_sized(kb, plan.passages[0]):
            best = plan.passages[0]
            quote = extract_answer(words, best.body, similarity)
            # quoted only from a passage about what the question asks, and only if it states the kind of
            # value asked for, as asked and as translated (a translation may lose the unit: "多少升" is
            # litres): a faithful quote of the wrong entry is still a wrong answer. Whether the passage is
            # about it by the question's words (those the KB never writes, the one it writes least) is a
            # doubt the model's judgement may settle: most such words are the user's way of putting it
            if on_topic(words, best.text) and all(answers_kind(q, quote) for q in {question, words}):
                if quotable and _quotable(plan.rarest, words, plan.passages):
                    plan.extractive = quote
                else:  # an FAQ entry the model judges an answer is said whole: its sentences are one answer
                    plan.doubted = (best.body.strip() if best.faq and _sentence_count(best.body) <= WHOLE_SENTENCES
                                    else quote)
        if len(asked) > 1 and not plan.translation:
            plan.supplement = _supplement(question, asked, plan.passages, similarity)
            kinds = [part for part in asked if not answers_kind(part, "")]
            said = [s for part, s in plan.supplement if part in kinds]
            if kinds and len(said) == len(kinds) and not plan.missing_topic:
                plan.part_quote = join_sentences(list(dict.fromkeys(said)))

    plan.pending = quotes
    # a yes-or-no question stating the user's own quantity: the numbers compared for the model and,
    # where the passages bound it, the reply they give
    if asks_yes_no_somewhere(question):
        bodies = [p.body for p in plan.passages]
        # the passages' sentences ranked by the question's words in their language, the amount its own
        about = plan.translation
        plan.note = comparison_note(question, bodies, plan.lang, about)
        plan.limit = judge_limit(question, bodies, about, [p.title for p in plan.passages])
        # a translated question's only from a passage naming what it is most specifically about: the search by
        # its translation may find a passage about something else, whose one bound sentence answers nothing
        plan.bound_quote = bound_sentence(question, [p.body for p in plan.passages
                                                     if not plan.translation or names(plan.rarest, p.text)], about)
        # "can I tow 1,800 kg?": the bound's reply and sentence, as they are (the model says them in the
        # question's language when the passages are in another)
        if plan.limit and plan.limit.alone and not plan.translation:
            plan.direct = plan.limit_answer
    if plan.translation:  # passages in another language pull a small model's answer into it
        plan.note = " ".join(filter(None, [plan.note, ANSWER_IN[plan.lang]]))
    built = passage_prompt(llm, with_system(messages, told), plan.passages, plan.note)
    plan.prompt_ids, plan.passage_spans, plan.kv_prefix = built.ids, built.spans, built.prefix
    if len(plan.prompt_ids) >= llm.context:
        raise ContextOverflowError(len(plan.prompt_ids), llm.context)
    plan.max_tokens = min(max_tokens, llm.context - len(plan.prompt_ids))
    return done()


def _lacks_topic(question: str, topic: dict[str, str], places: dict[str, int], hits) -> bool:
    """Whether the KB never writes a third or more of the question's words (`_topic_words`, `_places` of
    them), as `plan_answer` decides the question's topic is missing: in a KB of two languages, a question
    whose topic is written only in the other (its words are not, and a second embedder ranks passages of
    the question's language first)."""
    return _is_topic(_unknown_words(topic, places, [Passage.of(i + 1, h) for i, h in enumerate(hits)]), question)


def _is_topic(unknown: dict[str, str], question: str) -> bool:
    """Whether the words the KB lacks are the question's topic: a third of its words or more ("open the
    sunroof"); one word among many is incidental ("pressed it by mistake")."""
    return len(unknown) * 3 >= len(content_words(question))


def _supplement(question: str, asked: list[str], passages: list[Passage], similarity) -> list[tuple[str, str]]:
    """For each part that asks for a kind of value (a number in km/h, a phone number, an amount),
    the best of the sentences that state one, from the first passage about the question that has
    one; for a part that asks for none and no yes or no ("and what exception does it raise?"), the
    best of those naming the words of the part that no other part uses (`_names_part`). No gate on
    words the KB lacks here: these are said only after the model's own verified answer drew on the
    passages."""
    out = []
    about = [p for p in passages if on_topic(question, p.text)]
    for part in asked:
        if answers_kind(part, ""):
            own = topic(part) - set().union(*(topic(other) for other in asked if other != part))
            if not own or asks_yes_no_somewhere(part):  # "does it ever give up on its own?": its reply answers it
                continue
            states = partial(_names_part, own)
        else:
            states = partial(answers_kind, part)
        sentence = next((s for s in (best_sentence(part, p.body, similarity, keep=states) for p in about) if s), "")
        if sentence:
            out.append((part, strip_markdown(sentence).strip()))
    return out


def _names_part(own: set[str], sentence: str) -> bool:
    """Whether a passage sentence answers a part by its own words: two of them (all of one), and not as
    a question of its own ("So how does it handle uploads?" asks, it does not answer)."""
    return len(own & terms(sentence)) >= min(2, len(own)) and not sentence.rstrip().endswith(("?", "？"))


def _answer_sized(kb, passage: Passage) -> bool:
    """Whether a passage was written as one answer, which its best sentences may stand in for: an FAQ
    entry, or a section of at most ANSWER_SENTENCES sentences. The best-matching sentences of a long
    documentation section are no answer as often as not (a config reference, a page of parameters)."""
    if passage.faq:
        return True
    return _sentence_count(kb.section_text(passage.hit)) <= ANSWER_SENTENCES


def _sentence_count(text: str) -> int:
    return len([s for s in split_sentences(text) if s.strip()])


def _written_in_kb(kb, name: str, written: Callable[[str], bool] | None = None) -> bool:
    """Whether any chunk of the KB writes `name` (its best lexical hits are read): as `written(text)`
    says, else anywhere in the text, in any case."""
    written = written or (lambda text: name.lower() in text.lower())
    return any(written(h.text) for h in kb.search(name, k=_FEW, mode="bm25"))


def _states_phone(hit) -> bool:
    return states_phone(extract_facts(hit.text))


def _topic_words(question: str, ignore: set[str] = frozenset()) -> dict[str, str]:
    """The question's topic words (term -> word; Chinese nouns only), less the driver's own numbers ("can I
    tow 2000 kg?" asks about towing), words that say what kind of answer is wanted ("the lowest charge
    limit") and the driver's chatter (`incidental`)."""
    return {t: word for t, word in content_words(question, topic_only=True).items()
            if t not in ASKING and t not in ignore and not incidental(word) and not t.isdigit()}


def _places(kb, words: dict[str, str]) -> dict[str, int]:
    """How many places of the KB use each word (its lexical hits, up to _FEW): none for a word it lacks,
    few for what a question is most specifically about (`_quotable`). An English word the KB never
    writes counts the places of the word it is derived from (`base_forms`): "unreadable" is named by a
    KB that writes "read"."""
    def count(word: str) -> int:
        return len(kb.search(word, k=_FEW, mode="bm25"))

    return {t: count(word) or next(filter(None, map(count, base_forms(word))), 0) for t, word in words.items()}


# English derivation: a negative prefix and a suffix that makes a quality or a state of a word, or
# compares it ("darker", "easiest")
_NEGATIVE = re.compile(r"^(?:un|non|dis|mis)(?=[a-z]{4})")
_DERIVED = re.compile(r"(?<=[a-z]{3})(?:ability|ibility|able|ible|ness|ment|ful|less)$")
_COMPARED = re.compile(r"(?<=[a-z]{4})(?:er|est)$")


def base_forms(word: str) -> list[str]:
    """The words an English word is derived from: "unreadable" -> "readable", "read"; "misconfigured" ->
    "configured"; "darker" -> "dark", "larger" -> "large", "bigger" -> "big", "easiest" -> "easy".
    Empty for a word with no such affix (and for Chinese)."""
    form = _NEGATIVE.sub("", word.lower())
    forms = [form, _DERIVED.sub("", form)]
    if _COMPARED.search(form):
        stem = _COMPARED.sub("", form)  # the spelling the ending changed, undone: easi-, bigg-, larg-
        forms += ([stem[:-1] + "y"] if stem.endswith("i") else [stem[:-1]] if stem[-1] == stem[-2]
                  else [stem, stem + "e"])
    return [f for f in dict.fromkeys(forms) if f != word.lower()]


def _unknown_words(words: dict[str, str], places: dict[str, int], passages: list[Passage]) -> dict[str, str]:
    """The topic words (English words of four letters or more, Chinese nouns) that no passage and no
    chunk of the KB contains (`places`: `_places` of them): what the KB cannot speak about."""
    seen = set().union(*(terms(p.hit.text) for p in passages))
    return {t: word for t, word in words.items()
            if t not in seen and (len(word) >= 4 or not t.isascii()) and not places[t]}


def _unknown_compounds(kb, question: str) -> dict[str, str]:
    """The question's hyphenated names the KB never writes, though it has their words: a "head-up display"
    is not the driver attention camera's "head position". Matched, with its hyphen or a space, in the
    best lexical hits for its words."""
    out = {}
    for m in _COMPOUND.finditer(question):
        compound = m.group(0).lower()
        spaced = compound.replace("-", " ")
        hits = kb.search(spaced, k=_FEW, mode="bm25")
        if not any(written in h.text.lower() for h in hits for written in (compound, spaced)):
            out[compound] = compound
    return out


def _unknown_names(kb, question: str) -> dict[str, str]:
    """The question's identifiers (config keys, calls, flags, paths: identifiers.py) the KB never writes,
    looked up in the best lexical hits for each: "the default WTF_CSRF_TIME_LIMIT" in a KB without it is
    not answered by another key's default, though the KB has "CSRF", "time" and "limit"."""
    return {f.key: f.text for f in identifiers(question)
            if f.kind == "identifier" and not _written_in_kb(kb, f.text, partial(stated, f))}


def _about_the_rest(places: dict[str, int], unknown: dict[str, str], passage: Passage) -> bool:
    """Whether a passage is about what a question describes with its topic words other than those the KB
    never writes: it names most of them, one of them a word the KB uses in few places ("a red light on the
    panel shaped like a drop": an entry naming the red light and the drop, though not the panel). Words the
    whole KB uses ("how do I replace it?") find any entry. `places`: `_places` of the question's topic words."""
    text = passage.text
    known = [t for t in places if t not in unknown]
    named = [t for t in known if names({t}, text)]
    return 2 * len(named) > len(known) and any(places[t] < _FEW for t in named)


def _rarest(places: dict[str, int]) -> set[str]:
    """What the question is most specifically about: of its topic words the KB uses, those it uses in the
    fewest places. `places`: `_places` of the topic words."""
    used = {t: n for t, n in places.items() if n}
    return {t for t, n in used.items() if n == min(used.values())} if used else set()


def names(words: set[str], text: str) -> bool:
    """Whether a text names one of the terms `words` (an English stem as a term, Chinese as written)."""
    return bool(words & terms(text)) or any(t in text for t in words)


def _quotable(rarest: set[str], question: str, passages: list[Passage]) -> bool:
    """Whether the first passage may be quoted as the answer: it names what the question is most
    specifically about (`_rarest`), or no passage does and the question asks more than yes or no (a
    paraphrase: "the orange tyre light" is the entry's amber symbol). "Does the car have a spare wheel?" is
    not answered by the lane-keeping entry's "steering wheel", nor "what pressure should the spare wheel
    be?" by the tyre pressures when the repair kit's "no spare wheel" is among the passages."""
    if not rarest:
        return True
    named = [names(rarest, p.text) for p in passages]
    return named[0] or not (asks_yes_no(question) or any(named))


def _similarity(embedder):
    def cosines(question: str, sentences: list[str]) -> list[float]:
        kinds: list[TextKind] = ["query", *["passage"] * len(sentences)]
        vectors = embedder.embed([question, *sentences], kind=kinds).vectors  # L2-normalised
        return (vectors[1:] @ vectors[0]).tolist()

    return cosines
