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

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.answer.facts import QUANTITY_KINDS, extract_facts, states_quantity
from app.answer.passage_kv import PassageKV
from app.answer.plan import AnswerPlan
from app.answer.question import answers_kind, asks_quantity, unit_of, wanted_units
from app.answer.relevance import content_words
from app.answer.sentences import SentenceStream, is_list_marker, split_sentences
from app.answer.verify import Check, Verifier, is_bare_reply
from app.schemas import Grounding
from app.voice import speakable
from runtime.llm import LLM
from runtime.sampling import SamplingParams


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

    def __iter__(self) -> Iterator[str]:
        self.result = yield from self._run()

    # ---- output
    def _emit(self, sentence: str) -> Iterator[str]:
        core = sentence.rstrip()
        text = speakable(core) if self.plan.voice else core
        if not text:
            return
        piece = (" " if self.plan.voice and self._pieces else self._sep) + text
        self._sep = "" if self.plan.voice else sentence[len(core):]
        if not self._pieces:  # from the question's arrival: retrieval and the prompt included
            elapsed = (time.perf_counter() - self._start) * 1000
            self._timings["first_sentence_ms"] = round(self._timings.get("plan_ms", 0.0) + elapsed, 1)
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
        return Grounding(decision=decision, reason=reason, confidence=c.to_dict() if c else None,
                         passages=[p.index for p in self.plan.passages],
                         supported=[f.text for ch in checks for f in ch.facts],
                         unsupported=unsupported)

    # ---- the decision
    def _run(self):
        plan = self.plan
        if not plan.grounded:
            return (yield from self._plain())
        if plan.refusal is not None:
            yield from self._emit(plan.dont_know())
            return self._finish("stop", 0, self._grounding("refused", plan.refusal, [], []))
        verifier = Verifier([p.body for p in plan.passages] + [p.title for p in plan.passages], plan.question,
                            plan.missing_topic, plan.unnamed, [f"{p.title}\n{p.body}" for p in plan.passages])
        need_number = asks_quantity(plan.question) and states_quantity(extract_facts(plan.extractive))
        gen = self.llm.generate(plan.prompt_ids, max_new_tokens=plan.max_tokens, sampling=self.sampling,
                                stop=self.stop, cancel=self.cancel, placed=self._placed(), draft=self.draft)
        held, released, unsupported = [], [], []
        verdict, marker = None, ""
        sentences = _sentences(gen)
        for sentence in sentences:
            if is_list_marker(sentence) or is_bare_reply(sentence):
                marker += sentence  # "1. " or "Yes. " belongs to the sentence after it
                continue
            check = verifier.check(marker + sentence)
            marker = ""
            if check.refusal:
                verdict = "model_refused"
                break
            if check.empty:
                continue
            if check.off_topic:
                unsupported += check.off_topic
                verdict = "off_topic"
                break
            if not check.ok:
                unsupported += [f.text for f in check.unsupported]
                verdict = "unsupported"
                break
            held.append(check)
            if need_number and not states_quantity([f for h in held for f in h.facts]):
                continue  # a quantity question: hold back until the answer states one
            for h in held:
                yield from self._emit(h.text)
            released += held
            held = []
        if verdict:  # left early: the model stops at its next step and reports
            self.cancel.set()
            for _ in sentences:
                pass
        result = gen.result
        tokens = result.completion_tokens
        finish = "stop" if verdict else result.finish_reason
        self._timings["prefill_ms"] = round(result.prefill_s * 1000, 1)
        self._timings["first_token_ms"] = round(result.ttft_s * 1000, 1)
        if self.passage_kv is not None:  # prompt tokens whose kept rows were placed, not prefilled
            self._timings["placed_tokens"] = result.placed_tokens
        if result.drafted_tokens:  # prompt lookup: tokens guessed from the context, and those kept
            self._timings["drafted_tokens"] = result.drafted_tokens
            self._timings["accepted_tokens"] = result.accepted_tokens
        if released:
            released += yield from self._complete(released, verifier)
            reason = "every stated fact is in the passages" + (
                "; the answer was cut before a sentence the passages do not support" if verdict else "")
            return self._finish(finish, tokens, self._grounding("answered", reason, released, unsupported))
        # the model's "I don't know" stands unless the passages state what each part asks for, or the
        # one entry a yes-or-no question found does (AnswerPlan.refusal_quote)
        quote = plan.refusal_quote if verdict == "model_refused" else plan.extractive or plan.part_quote
        if verdict == "off_topic" or (verdict == "model_refused" and not quote):
            words = content_words(plan.question)
            why = ("the model found no answer in the passages" if verdict == "model_refused" else
                   f"the knowledge base never mentions {', '.join(words.get(t, t) for t in unsupported)}, "
                   "which the question asks about")
            yield from self._emit(plan.dont_know())
            return self._finish("stop", tokens, self._grounding("refused", why, [], unsupported))
        why = ("the model found no answer, but the passages state what the question asks for"
               if verdict == "model_refused" else
               "the model stated facts the passages do not support" if verdict == "unsupported" else
               "the model's answer stated no number for a quantity question" if held else
               "the model gave no answer")
        wrong = verifier.quote_fails(quote) if quote else []
        if wrong:  # the passages' own words, but about another variant or someone else's number
            why = f"{why}; the passages' sentences for it are about something else ({', '.join(f.text for f in wrong)})"
            quote = ""
        if quote:
            for sentence in split_sentences(quote):
                yield from self._emit(sentence)
            return self._finish("stop", tokens, self._grounding(
                "extractive", f"{why}: the passages are quoted instead", [verifier.check(quote)], unsupported))
        yield from self._emit(plan.dont_know())
        return self._finish("stop", tokens, self._grounding("refused", why, [], unsupported))

    def _complete(self, released: list[Check], verifier: Verifier):
        """The parts of a several-part question the model's answer left out, in the passages' words:
        for each part the answer states nothing of the kind it asks for, its passage sentence."""
        answer = " ".join(c.text for c in released)
        added = []
        for part, sentence in self.plan.supplement:
            if sentence in answer or _covers(part, answer, sentence) or verifier.quote_fails(sentence):
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
            for sentence in _sentences(gen):
                if not is_list_marker(sentence):
                    yield from self._emit(sentence)
        else:
            for delta in gen:
                if delta.text:
                    self._pieces.append(delta.text)
                    yield delta.text
        r = gen.result
        return self._finish(r.finish_reason, r.completion_tokens, None)


def _covers(part: str, answer: str, sentence: str) -> bool:
    """Whether the answer already says what `sentence` adds for `part`: the kind of value the part
    asks for and, of the sentence's values of that kind, every one ("按一下加多少？按住不放又是加多少？"
    answered with the 1 km/h step alone lacks the 5 km/h one), unless it gave one the sentence does
    not state (it answered the part from another sentence)."""
    if not answers_kind(part, answer):
        return False
    units = wanted_units(part)

    def values(text: str) -> set[str]:
        return {f.key for f in extract_facts(text) if f.kind in QUANTITY_KINDS and (not units or unit_of(f) in units)}

    said, adds = values(answer), values(sentence)
    return adds <= said or bool(said - adds)


def _sentences(gen) -> Iterator[str]:
    stream = SentenceStream()
    for delta in gen:
        yield from stream.push(delta.text)
    yield from stream.flush()

