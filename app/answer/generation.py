"""The model's answer, sentence by sentence, and the decision on it.

    LLM tokens ─► sentences ─► fact check per sentence (verify.py)
    ├─ supported   ─► released (held back for a quantity question until a number comes)
    ├─ "I don't know" ─► refuse (unless every part asked has its passage sentence, or a yes-or-no
    │                   question's one entry answers it)
    └─ unsupported / empty ─► stop the model, then the extractive answer (unless the question
       names what the KB lacks) or "I don't know"

Only verified sentences are ever released, streamed or not, so the two are the same text.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain

from app.answer.across import CrossLingualVerifier
from app.answer.facts import QUANTITY_KINDS, asked_units, dimension, extract_facts, states_quantity
from app.answer.judge import answers_probability
from app.answer.passage_kv import PassageKV
from app.answer.plan import AnswerPlan, names
from app.answer.question import answers_kind, asks_number, asks_quantity, on_topic, topic, unit_of, wanted_units
from app.answer.relevance import content_words, terms
from app.answer.sentences import SentenceStream, ends_clause, is_lead_in, is_list_marker, split_sentences
from app.answer.translation import to_english
from app.answer.verify import Check, Verifier, is_bare_reply, refers_back
from app.answer.types import Grounding
from app.voice import speakable
from knowledge.prompts import without_passage_mentions
from runtime.llm import LLM
from runtime.sampling import SamplingParams


class _Stop:
    """Set to stop one generation early (its answer failed a check); the caller's cancel stops it too."""

    def __init__(self, cancel: threading.Event):
        self._cancel, self._own = cancel, threading.Event()

    def set(self) -> None:
        self._own.set()

    def is_set(self) -> bool:
        return self._own.is_set() or self._cancel.is_set()


_Checks = Verifier | CrossLingualVerifier  # what checks the model's sentences
MAX_DROPPED = 2  # unsupported sentences after which the model is stopped: it is not answering from the passages


@dataclass
class _Draft:
    """One generation's outcome: the sentences released, those held back, what failed and why it stopped."""

    released: list[Check] = field(default_factory=list)
    held: list[Check] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    verdict: str | None = None  # "model_refused" | "off_topic" | "unsupported" | None: it ran to its end
    dropped: int = 0  # sentences left out: the passages did not support them
    quoted: int = 0  # sentences said in the passage's own words in place of the model's (Verifier.source_of)
    off_topic: list[str] = field(default_factory=list)  # the question's words the KB lacks that the model used


@dataclass
class AnswerResult:
    text: str
    finish_reason: str  # "stop" | "length" | "cancelled"
    prompt_tokens: int
    completion_tokens: int
    grounding: Grounding | None
    timings: dict[str, float] = field(default_factory=dict)


class GroundedGeneration:
    """Iterate for the answer's text pieces (verified sentences); `result` is set at the end."""

    def __init__(self, llm: LLM, plan: AnswerPlan, sampling: SamplingParams, stop: list[str] | None = None,
                 cancel: threading.Event | None = None, passage_kv: PassageKV | None = None,
                 prompt_lookup: str = "off"):
        """`passage_kv`: place the instructions' (and its passages') kept KV rows instead of prefilling them.
        `prompt_lookup`: which answers draft from their context, "voice", "all" or "off" (Settings)."""
        self.llm, self.plan, self.sampling, self.stop = llm, plan, sampling, stop or []
        self.passage_kv = passage_kv
        self.draft = prompt_lookup == "all" or (prompt_lookup == "voice" and plan.voice)
        self.cancel = cancel or threading.Event()
        self.result: AnswerResult | None = None
        self._pieces: list[str] = []
        self._sep = ""  # whitespace owed before the next piece
        self._start = time.perf_counter()
        self._timings = dict(plan.timings)
        self._verify_s = 0.0  # spent checking sentences before the first one was said
        self.refusal_probability: float | None = None  # the model's, at its first step (refusal_probability)
        self.answers_probability: float | None = None  # the model's judgement of a doubted quote (_judged)

    def __iter__(self) -> Iterator[str]:
        self.result = yield from self._run()

    # ---- output
    def _emit(self, sentence: str) -> Iterator[str]:
        core = sentence.rstrip()
        # a spoken first clause's sentence goes on in the next piece: no capital, no space after "，"
        going_on = bool(self._pieces) and ends_clause(self._pieces[-1])
        text = speakable(core, sentence_start=not going_on) if self.plan.voice else core
        if not text:
            return
        space = "" if going_on and not self._pieces[-1][-1].isascii() else " "
        piece = (space if self.plan.voice and self._pieces else self._sep) + text
        self._sep = "" if self.plan.voice else sentence[len(core):]
        if not self._pieces:  # from the question's arrival: retrieval and the prompt included
            elapsed = (time.perf_counter() - self._start) * 1000
            self._timings["first_sentence_ms"] = round(self._timings.get("plan_ms", 0.0) + elapsed, 1)
            self._timings["verify_ms"] = round(self._verify_s * 1000, 1)
        self._pieces.append(piece)
        yield piece

    def _finish(self, finish: str, tokens: int, grounding: Grounding | None) -> AnswerResult:
        # from the question's arrival, like first_sentence_ms: retrieval and the prompt included
        elapsed = (time.perf_counter() - self._start) * 1000
        self._timings["total_ms"] = round(self._timings.get("plan_ms", 0.0) + elapsed, 1)
        return AnswerResult("".join(self._pieces), finish, len(self.plan.prompt_ids), tokens, grounding,
                            self._timings)

    def _grounding(self, decision: str, reason: str, checks: list[Check], unsupported: list[str]) -> Grounding:
        c = self.plan.confidence
        doubt = None if self.refusal_probability is None else round(self.refusal_probability, 4)
        return Grounding(decision=decision, reason=reason, confidence=c.to_dict() if c else None,
                         refusal_probability=doubt,
                         passages=[p.index for p in self.plan.passages],
                         supported=[f.text for ch in checks for f in ch.facts],
                         unsupported=unsupported,
                         translation=self.plan.translation or None)

    # ---- the decision
    def _run(self):
        plan = self.plan
        if not plan.grounded:
            return (yield from self._plain())
        if plan.refusal is not None:
            yield from self._emit(plan.dont_know())
            return self._finish("stop", 0, self._grounding("refused", plan.refusal, [], []))
        verifier = self._verifier()
        if plan.direct:
            for sentence in split_sentences(plan.direct):
                yield from self._emit(sentence)
            return self._finish("stop", 0, self._grounding(
                "extractive", "the passages' bound on the amount the question states answers it: their reply and "
                "sentence are said as they are", [verifier.check(plan.direct)], []))
        # an amount is answered by an amount: "it depends on MAX_CONTENT_LENGTH", "几个小时" say none
        need_number = functools.cache(lambda: asks_number(plan.question) or (
            asks_quantity(plan.question) and states_quantity(extract_facts(plan.quotes().extractive))))
        gen, stop = self._generate(placed=self._placed(), draft=self.draft)
        draft = yield from self._checked(gen, stop, verifier, need_number)
        result = gen.result
        self.refusal_probability = refusal_probability(self.llm, result.first_top)
        tokens = result.completion_tokens
        self._timings["prefill_ms"] = round(result.prefill_s * 1000, 1)
        self._timings["first_token_ms"] = round(result.ttft_s * 1000, 1)
        if self.passage_kv is not None:  # prompt tokens whose kept rows were placed, not prefilled
            self._timings["placed_tokens"] = result.placed_tokens
        if result.drafted_tokens:  # prompt lookup: tokens guessed from the context, and those kept
            self._timings["drafted_tokens"] = result.drafted_tokens
            self._timings["accepted_tokens"] = result.accepted_tokens
        repaired = False
        if draft.verdict == "model_refused" and not draft.released and self._repairable():
            # its best answer other than "I don't know": the prompt is in the cache, so this costs only
            # the answer's tokens; it stands only if every sentence is the passages' own (Verifier.grounded)
            again, stop = self._generate(ban_first=refusal_starts(self.llm), draft=self.draft)
            second = yield from self._checked(again, stop, verifier, need_number, grounded=True)
            tokens += again.result.completion_tokens
            if second.released:
                draft, result, repaired = second, again.result, True
        released, held, unsupported, verdict = draft.released, draft.held, draft.unsupported, draft.verdict
        finish = "stop" if verdict else result.finish_reason
        if released:
            released += yield from self._complete(released, verifier)
            reason = "every stated fact is in the passages" + (
                "; the answer was cut before a sentence the passages do not support" if verdict else
                f"; {draft.dropped} sentence(s) the passages do not support were left out" if draft.dropped else "") + (
                f"; {draft.quoted} sentence(s) said in the passages' own words" if draft.quoted else "") + (
                "; the model's first reply was \"I don't know\", its next best is the passages' own words"
                if repaired else "")
            return self._finish(finish, tokens, self._grounding("answered", reason, released, unsupported))
        # the model's "I don't know" stands unless the passages state what each part asks for, or the
        # one entry a yes-or-no question found does (AnswerPlan.refusal_quote); a word the KB lacks is
        # refused whatever the passages say, so no quote is looked for (nor judged by the model) then
        judged = ""  # the quote said because the model judges it an answer (_judged)
        quote = "" if verdict == "off_topic" else plan.refusal_quote if verdict == "model_refused" else (
            plan.limit_answer or plan.quotes().extractive or plan.part_quote or (judged := self._judged())
            or plan.bound_quote)
        if verdict == "off_topic" or (verdict == "model_refused" and not quote):
            words = content_words(plan.question)
            why = ("the model found no answer in the passages" if verdict == "model_refused" else
                   f"the knowledge base never mentions {', '.join(words.get(t, t) for t in draft.off_topic)}, "
                   "which the question asks about")
            yield from self._emit(plan.dont_know())
            return self._finish("stop", tokens, self._grounding("refused", why, [], unsupported + draft.off_topic))
        why = ("the model found no answer, but the passages state what the question asks for"
               if verdict == "model_refused" else
               "the model stated facts the passages do not support" if verdict == "unsupported" else
               "the model's answer stated no number for a quantity question" if held else
               "the model gave no answer")
        # a limit's answer holds the user's own amount against the bound: no variant of it
        wrong = verifier.quote_fails(quote) if quote and quote != plan.limit_answer else []
        if wrong:  # the passages' own words, but about another variant or someone else's number
            why = f"{why}; the passages' sentences for it are about something else ({', '.join(f.text for f in wrong)})"
            quote = ""
        if quote:
            if quote == judged:
                why += f"; the model judges them an answer ({self.answers_probability:.2f})"
            for sentence in split_sentences(quote):
                yield from self._emit(sentence)
            return self._finish("stop", tokens, self._grounding(
                "extractive", f"{why}: the passages are quoted instead", [verifier.check(quote)], unsupported))
        yield from self._emit(plan.dont_know())
        return self._finish("stop", tokens, self._grounding("refused", why, [], unsupported))

    def _judged(self) -> str:
        """The quote the question's words put in doubt (AnswerPlan.doubted), when the model judges that it
        answers the question as asked (judge.py); else ""."""
        plan = self.plan
        if not plan.doubted:
            return ""
        self.answers_probability = answers_probability(self.llm, plan.question, plan.doubted)
        p = self.answers_probability
        return plan.doubted if p is not None and p >= plan.min_answers else ""

    def _verifier(self) -> _Checks:
        """The checks for the model's answer: of the question, or for a translated question (answered in
        another language than its passages) of its values as written and its words in English."""
        plan = self.plan
        of = functools.partial(Verifier, [p.body for p in plan.passages] + [p.title for p in plan.passages],
                               unknown=plan.missing_topic, unnamed=plan.unnamed,
                               documents=[p.text for p in plan.passages],
                               expected_reply=plan.limit.reply if plan.limit else None, known_name=plan.known_name)
        if not plan.translation:
            return of(plan.question)
        return CrossLingualVerifier(of(plan.question, across=True), of(plan.translation),
                                    functools.partial(to_english, self.llm, whole=True, kept=self.passage_kv))

    def _generate(self, **options):
        """The model's answer to the plan's prompt, stoppable by the caller's cancel and by `_checked`."""
        stop = _Stop(self.cancel)
        gen = self.llm.generate(self.plan.prompt_ids, max_new_tokens=self.plan.max_tokens, sampling=self.sampling,
                                stop=self.stop, cancel=stop, **options)
        return gen, stop

    def _checked(self, gen, stop, verifier: _Checks, need_number: Callable[[], bool], grounded: bool = False):
        """Release the model's sentences as they pass the checks (held back for a quantity question until
        one states a number). A sentence the passages do not support is left out, and so is one after it
        that speaks of it ("This method ..."); the sentences after a left-out one, and every sentence
        with `grounded` (a repaired answer), must be made of the passages' words too. The model is
        stopped at a refusal, a word the KB lacks, or its second unsupported sentence. Returns the `_Draft`."""
        draft = _Draft()
        marker = ""
        # a check that needs the model waits for it to finish (CrossLingualVerifier), early clauses gain nothing
        waits = isinstance(verifier, CrossLingualVerifier)
        # what the model says of the prompt's passages ("as shown in Passage 2") is left out: the user never
        # sees them (a plain chat, with no passages, is said as written)
        sentences = map(without_passage_mentions, _sentences(gen, first_clause=self.plan.voice and not waits))
        if waits:
            sentences = iter(list(sentences))
        for sentence in chain(sentences, [None]):  # None: the end, where a reply still held is checked alone
            if sentence is None and (not marker or is_lead_in(marker)):
                break  # an announcement whose sentences were all left out is left out too
            if sentence is not None and (is_list_marker(sentence) or is_bare_reply(sentence) or is_lead_in(sentence)
                                         or verifier.leans_on_next(sentence)):
                marker += sentence  # "1. ", "Yes. ", "Yes, you can.", "Do this:" belong to the sentence after them
                continue
            if (self.plan.voice and sentence is not None and ends_clause(sentence)
                    and not self._grounded(verifier, marker + sentence)):
                marker += sentence  # a clause said early is the passages' words; another waits for its sentence
                continue
            check = self._check(verifier, marker + (sentence or ""))
            marker = ""
            if check.refusal:
                draft.verdict = "model_refused"
                break
            if check.empty:
                continue
            if check.off_topic:
                draft.off_topic = check.off_topic
                draft.verdict = "off_topic"
                break
            if not check.ok:
                check = self._in_passage_words(verifier, check, draft)
            strict = grounded or draft.dropped > 0
            if (not check.ok or (strict and not self._grounded(verifier, check.text))
                    or (draft.dropped and refers_back(check.text))):
                draft.unsupported += [f.text for f in check.unsupported] or [check.text]
                draft.dropped += 1
                if draft.dropped >= MAX_DROPPED:
                    draft.verdict = "unsupported"
                    break
                continue
            draft.held.append(check)
            # (asked second: whether the question needs a number looks at the quote, computed on first need)
            held = [f for h in draft.held for f in h.facts]
            said = [f for h in draft.released for f in h.facts] + held
            if not (states_quantity(held) and self._in_asked_unit(said)) and need_number():
                continue  # a quantity question: hold back until the answer states one
            for h in draft.held:
                yield from self._emit(h.text)
            draft.released += draft.held
            draft.held = []
        if draft.verdict:  # left early: the model stops at its next step and reports
            stop.set()
            for _ in sentences:
                pass
        elif draft.dropped and not draft.released:
            draft.verdict = "unsupported"
        return draft

    def _in_asked_unit(self, facts: list) -> bool:
        """Whether an answer's facts state an amount of what the question asks it in, when it names a unit
        there ("多少公里" is answered by a distance, not by an interval in years: facts.asked_units)."""
        asked = asked_units(self.plan.question)
        return not asked or any(f.kind == "number" and dimension(unit_of(f)) in asked for f in facts)

    def _in_passage_words(self, verifier: _Checks, check: Check, draft: _Draft) -> Check:
        """A failed sentence's check, or that of the passage sentence it was drawn from said in its
        place (Verifier.source_of), when that states the kind of value asked for, passes alone, is the
        passages' words and, like any quote, gives no other variant's value (the drive battery's
        warranty for "the 12-volt battery"). What the model said wrong is kept in `draft`."""
        source = verifier.source_of(check)
        if not source or not answers_kind(self.plan.question, source) or source in [
                c.text.strip() for c in draft.released + draft.held]:
            return check
        # with the model's spacing after it
        repaired = self._check(verifier, source + check.text[len(check.text.rstrip()):])
        if not repaired.ok or not verifier.grounded(source) or verifier.quote_fails(source):
            return check
        draft.unsupported += [f.text for f in check.unsupported]
        draft.quoted += 1
        return repaired

    def _check(self, verifier: _Checks, sentence: str) -> Check:
        """Verifier.check, timed until the first sentence is said (a part of the time to it)."""
        started = time.perf_counter()
        check = verifier.check(sentence)
        if not self._pieces:
            self._verify_s += time.perf_counter() - started
        return check

    def _grounded(self, verifier: _Checks, sentence: str) -> bool:
        """A sentence made of the passages' words (Verifier.grounded) that names what the question is most
        specifically about: a repaired answer about the climate's preheating is no answer on the warranty."""
        return verifier.grounded(sentence) and (not self.plan.rarest or names(self.plan.rarest, sentence))

    def _repairable(self) -> bool:
        """Whether a refusal is worth a second answer: the first passage is about the question."""
        plan = self.plan
        first = plan.passages[0] if plan.passages else None
        return (not self.cancel.is_set() and first is not None
                and on_topic(plan.question, first.text))

    def _complete(self, released: list[Check], verifier: _Checks):
        """What the model's answer left out, in the passages' words: for each part of a several-part
        question the answer states nothing of the kind it asks for, its passage sentence; for a yes or
        no about the user's amount, the sentence stating the bound, unless the answer gives its values."""
        answer = " ".join(c.text for c in released)
        added = []
        limit = self.plan.limit  # a yes or no is said with the bound it rests on
        for part, sentence in [*self.plan.quotes().supplement, *([(None, limit.bound)] if limit else [])]:
            if part is None:
                given = {f.key for f in extract_facts(answer)}
                if {f.key for f in extract_facts(sentence)} <= given:
                    continue
            elif sentence in answer or _covers(part, answer, sentence) or verifier.quote_fails(sentence):
                continue
            added.append(verifier.check(sentence))
            answer += " " + sentence
            if not self._sep and not self._pieces[-1].endswith(("。", "！", "？")):
                self._sep = " "  # the model's last sentence ended the stream without a space
            yield from self._emit(sentence)
        return added

    def _placed(self) -> dict:
        """The instructions' and the first passage's kept rows by prompt offset (computed and kept on
        first use), when the prompt starts with the instructions they were computed after: then they
        are the rows a prefill would make. Later passages are prefilled: rows kept alone never
        attended to the passages before them, and placing those gave the 1.5B an answer with an
        unsupported fact on answer_questions.jsonl (docs/benchmarks.md, "Time to the first spoken
        sentence")."""
        if self.passage_kv is None:
            return {}
        self.passage_kv.answered(self.plan.voice)
        started = time.perf_counter()
        ids, prefix = self.plan.prompt_ids, self.plan.kv_prefix
        if not prefix or ids[:len(prefix)] != prefix:
            return {}
        # the instructions' rows too: every answer starts with them, and a new conversation (or one
        # after a text answer, whose instructions differ) would otherwise prefill them again
        placed = {0: self.passage_kv.rows([], prefix)}
        if self.passage_kv.passages:
            placed |= {offset: self.passage_kv.rows(prefix, ids[offset:offset + n])
                       for offset, n in self.plan.passage_spans[:1] if offset == len(prefix)}
        self._timings["passage_kv_ms"] = round((time.perf_counter() - started) * 1000, 1)
        return placed

    def _plain(self):
        """No knowledge base: the model's text as it comes (voice still sentence by sentence)."""
        gen = self.llm.generate(self.plan.prompt_ids, max_new_tokens=self.plan.max_tokens, sampling=self.sampling,
                                stop=self.stop, cancel=self.cancel, draft=self.draft)
        if self.plan.voice:
            for sentence in _sentences(gen, first_clause=True):
                if not is_list_marker(sentence):
                    yield from self._emit(sentence)
        else:
            for delta in gen:
                if delta.text:
                    self._pieces.append(delta.text)
                    yield delta.text
        r = gen.result
        return self._finish(r.finish_reason, r.completion_tokens, None)


# how the instructed refusal begins, in the languages answers are given in
_REFUSAL_OPENINGS = ("I don't know", "I'm sorry", "Sorry", "Unfortunately", "我不知道", "抱歉", "对不起", "很抱歉")


@functools.cache
def refusal_starts(llm: LLM) -> frozenset[int]:
    """The tokens an answer of this model begins a refusal with."""
    return frozenset(llm.encode(text, bos=False)[0] for text in _REFUSAL_OPENINGS)


def refusal_probability(llm: LLM, first_top: tuple[tuple[int, float], ...]) -> float | None:
    """The probability the model gave to beginning with a refusal, after the passages: its own judgement
    of whether they answer the question (from the first step's most likely tokens). None: not known."""
    if not first_top:
        return None
    starts = refusal_starts(llm)
    return sum(math.exp(lp) for token, lp in first_top if token in starts)


def _covers(part: str, answer: str, sentence: str) -> bool:
    """Whether the answer already says what `sentence` adds for `part`: the kind of value the part
    asks for and, of the sentence's values of that kind, every one ("按一下加多少？按住不放又是加多少？"
    answered with the 1 km/h step alone lacks the 5 km/h one), unless it gave one the sentence does
    not state (it answered the part from another sentence). A part asking no kind of value is
    covered when the answer names a word of the part that its sentence names."""
    if answers_kind(part, ""):
        return bool(topic(part) & terms(sentence) & terms(answer))
    if not answers_kind(part, answer):
        return False
    units = wanted_units(part)

    def values(text: str) -> set[str]:
        return {f.key for f in extract_facts(text) if f.kind in QUANTITY_KINDS and (not units or unit_of(f) in units)}

    said, adds = values(answer), values(sentence)
    return adds <= said or bool(said - adds)


def _sentences(gen, first_clause: bool = False) -> Iterator[str]:
    """The units of the model's answer: sentences, and with `first_clause` (spoken) a long first clause."""
    stream = SentenceStream(first_clause)
    for delta in gen:
        yield from stream.push(delta.text)
    yield from stream.flush()

