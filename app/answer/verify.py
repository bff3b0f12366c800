"""Is every hard fact of a sentence stated by the passages it may rely on?

    sentence ─► extract_facts ─► each fact looked up in FactIndex(passages + the question)
             ─► Check(supported, unsupported)

A sentence that uses a word of the question no passage contains is off topic. A sentence that denies
something must have a source sentence about the same thing that denies it too: small models turn "it
switches off after 15 minutes" into "it does not switch itself off", and "has no spare wheel" into "the
spare wheel should not be inflated". A number must be said about what its source sentence is about,
not about what another sentence gives another number for. A place ("on the dashboard") must be named
by a source sentence about the same thing, and a "yes" or "no" must come with something the passages
say: "Yes, remember to switch it back on" only echoes the driver's words, and a yes must find the
question's words it repeats in one passage ("Yes, the car can park itself using the parking sensors").
A value the passages give only for a condition the question rules out ("when I'm not in Eco mode") is
no answer to it, nor one said of the variant the driver names that the passages give for another ("the
12-volt battery's warranty is 8 years"); a phone number must be the number of what the question asks
for, and does not answer a question asking one amount. The question counts as a source of numbers: an
answer may repeat the driver's own numbers ("2,000 kg is more than the limit") without inventing them,
but not of controls or menu items. A number keeps the bound its source gives it ("above 10 km/h" is
not "up to 10 km/h", bounds.py) and, from a list, its own thing (the front tyres' 240 kPa is not the
rear's, pairing.py); a menu path must take the passages' steps (Settings > Vehicle > Passenger airbag
is no path to the airbag switch); a value for a span the driver names ("from 20 to 80 percent") must
be stated for that span, and a yes or no to "can I tow 2,000 kg?" must agree with the limit it cites.
Refusals are recognised here too, so a model that says it does not know is taken at its word.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from app.answer.bounds import NEGATION, bounds
from app.answer.facts import (AMOUNT_KINDS, QUANTITY_KINDS, Fact, FactIndex, dimension, extract_facts, menu_paths,
                              without_facts)
from app.answer.identifiers import identifiers, misquoted, stated_in_parts
from app.answer.identifiers import stated as written_in
from app.answer.limits import asks_within, bounded_away, quantities
from app.answer.pairing import said_of
from app.answer.places import Place, asks_place, places
from app.answer.question import (about_ruled_out, asks_amount, asks_yes_no, main_clause, parts, phone_topic,
                                 ruled_out, unit_of)
from app.answer.relevance import in_context, term_words, terms
from app.answer.sentences import clauses, split_sentences

_REFUSAL = re.compile(
    r"\b(?:i\s+(?:do\s+not|don't|cannot|can't)\s+(?:know|find|say|tell|answer)|not\s+(?:mentioned|stated|specified|"
    r"provided|included|covered)\s+in|(?:passages?|information|text|manual|knowledge base)\s+(?:does|do)\s+not\s+"
    r"(?:say|mention|contain|include|provide|specify)|no\s+information\s+(?:about|on)|there\s+is\s+no\s+(?:mention|"
    r"information))|不知道|没有(?:提到|提及|相关信息|这方面|说明)|未(?:提及|提到|说明)|无法(?:回答|确定)", re.I)
_LETTER = re.compile(r"[^\W\d_]")
# an identifier's key (identifiers.key) rather than a word: it has an underscore, a dot, a slash or "="
# inside, or is a flag
_IDENTIFIER_KEY = re.compile(r"[\w][_./=]|^--")


@dataclass
class Check:
    text: str
    facts: list[Fact] = field(default_factory=list)
    unsupported: list[Fact] = field(default_factory=list)
    refusal: bool = False
    off_topic: list[str] = field(default_factory=list)  # question terms the passages never use

    @property
    def ok(self) -> bool:
        return not self.unsupported

    @property
    def empty(self) -> bool:
        """Nothing to say: citation markers, punctuation or a list number only ("[2]", "1.")."""
        return not _LETTER.search(re.sub(r"\[\d+\]", "", self.text))


# "No: 2,000 kg is more than ...", "The answer is yes, ...", "不用，……": the reply to a yes/no question
_REPLY = re.compile(r"^\s*(?:the\s+answer(?:\s+to\s+(?:this|your|the)\s+question)?\s+is\W*)?"
                    r"(?:(?P<en>no|yes)\b\W*|(?P<zh>是的|是|对|不是|不用|需要|不需要|可以|不可以|会|不会|能|不能|没错)"
                    r"[，,。！!]\s*)", re.I)


# the share of a sentence's own words that must be the passages' for Verifier.grounded: a lexical support
# measure (most of what it says is written there), the same for every KB
MIN_GROUNDED = 0.6
OWN_WORDS = 1  # of any sentence, as many words not the passages' are a paraphrase (Verifier.grounded)
# the words a failed sentence must share with the passage sentence said in its place (Verifier.source_of)
MIN_SHARED = 2
# English manner and degree adverbs by their endings ("approximately", "usually", "automatically"), not
# "daily" or "supply"
_MANNER = re.compile(r"(?:ately|ably|ibly|ally|ously|ively|fully|lessly|ently|antly|etely|ingly|ctly)$")
_PRONOUN = re.compile(r"\s*(?:it|its|they|their|this|these|those|he|she)\b|\s*(?:它|其|这|该)", re.I)
# "Can I tow 2,000 kg?": a yes says the driver's number is within what the passages allow
_YES = re.compile(r"yes|是的|是|对|可以|能|会|需要|没错", re.I)
# a threshold told from its other side: "up to 10 minutes before the parking brake takes over"
_OTHER_SIDE = re.compile(r"\b(?:before|until|till|then|after\s+(?:which|that)|beyond\s+that|otherwise)\b|"
                         r"之前|以前|之后|然后|否则", re.I)


@dataclass
class _Source:
    index: FactIndex
    terms: set[str]
    denied: set[str] | None  # the terms after its negation ("has no spare wheel": spare, wheel); None: no denial
    asked: bool = False  # a sentence of the question
    text: str = ""
    sides: dict = field(default_factory=dict)  # number key -> the bounds the sentence makes it (bounds.py)
    pairs: dict = field(default_factory=dict)  # number key -> what the sentence says it of, in a list (pairing.py)
    # the sentence before's terms, for one that starts with a pronoun: "It is most efficient above minus 10
    # degrees" is about the heat pump
    referred: set = field(default_factory=set)


class Verifier:
    def __init__(self, passages: list[str], question: str = "", unknown: set[str] = frozenset(),
                 unnamed: set[str] = frozenset(), documents: list[str] = (), expected_reply: str | None = None,
                 known_name: Callable[[str], bool] = lambda name: False, across: bool = False):
        """`unknown`: terms of the question the knowledge base never uses ("sunroof" in a KB without
        one) that are its topic; an answer that uses them anyway is the model bending a passage to
        the question. `unnamed`: every such term, the topic or not; a number said about one has no
        source ("the roof takes 75 kg" from the tow ball's 75 kg). `documents`: each passage whole
        (title and body), which a phone number's owner is read from. `expected_reply`: "yes" or "no" when
        the passages' bound decides a question about the user's own amount (limits.judge_limit).
        `known_name(name)`: whether the knowledge base writes a capitalised name anywhere. `across`: the
        answer is in another language than the passages (a translated question, plan.py), so what a
        sentence's words share with them measures nothing: a sentence must state a value of theirs (on
        its side of a bound; not beside the same words: _in_context, _from_another_topic and places are
        not checked), which stands for its reply and its negations, and one that states none is left out."""
        self.index = FactIndex.of([*passages, question])
        # where an identifier may come from: the passages, or the question that names it
        self.written = "\n".join([*passages, question])
        self.known_name = known_name
        self.across = across
        # a control or menu item must exist in the passages: the driver naming one does not make it real
        self.names = FactIndex.of(passages)
        self.missing = set(unknown)
        self.unnamed = set(unnamed) | self.missing
        self.users_numbers = {f.key for f in extract_facts(question)}  # may be repeated about anything
        # amounts a yes says are within the bound ("at 20 km/h, can I ...?")
        self.users_amounts = [q for q in quantities(question) if q.kind] if asks_within(question) else []
        self.question = question
        self.ruled_out = ruled_out(question)
        # "极速是多少？" asks one amount: a phone number, however well supported, does not answer it
        self.amount_only = asks_amount(question) and len(parts(question)) == 1
        # whose number is asked for, and the passages that state each number with what they are about
        self.phone_topic = phone_topic(question)
        self.documents = [(FactIndex.of([d]), d, terms(d)) for d in documents]
        # each passage's terms, title and all
        self.wholes = [said for _, _, said in self.documents] if documents else [terms(p) for p in passages]
        # the driver's numbers that name which thing they mean ("the 12-volt battery", "19-inch wheels", "from
        # 0 to 100 percent"); a 1 is a rate's "an hour", "一个小时", not a variant of anything
        self.qualifiers = {k for k in self.users_numbers if not k.startswith("1 ") and k != "1"}
        self.question_terms = terms(without_facts(question))
        source = lambda s, asked=False: _Source(FactIndex.of([s]), terms(without_facts(s)), _denied(s), asked, s,
                                                bounds(s), said_of(s))
        said = []
        for text in passages:
            sentences = split_sentences(text)
            for s, context in zip(sentences, in_context(sentences)):
                if s.strip():
                    said.append(source(s))
                    if context != s:  # "Default: timedelta(days=31)" is about its entry's name and description
                        said[-1].referred = terms(without_facts(context))
                    elif len(said) > 1 and _PRONOUN.match(s) and said[-2].text in text:
                        said[-1].referred = said[-2].terms | said[-2].referred
        asked = [source(s, True) for s in split_sentences(question) if s.strip()]
        self.sentences = said + asked
        self.passage_sentences = said
        # clauses, each with its whole passage: "with 18-inch wheels ... 480 km for the all-wheel drive
        # version; 19-inch wheels reduce it"
        self.clauses = [(FactIndex.of([c]), FactIndex.of([d])) for d in documents or passages
                        for s in split_sentences(d) for c in clauses(s)] if self.qualifiers else []
        # "from 20 to 80 percent": two of the driver's numbers in one unit name a span, which a value
        # must have been stated for ("a full charge takes 11 hours" is not 20 to 80 percent)
        units = [k.split(" ", 1)[1] for k in self.qualifiers if " " in k]
        self.spans = [{k for k in self.qualifiers if k.endswith(" " + u)} for u in set(units) if units.count(u) > 1]
        # the reply the passages' bound gives a question about the user's own amount (limits.judge_limit)
        self.expected_reply = expected_reply
        self.yes_no = asks_yes_no(question)
        self.passage_terms = set().union(*(s.terms for s in said))
        # the units the passages give numbers in (None: bare numbers)
        self.passage_units = {unit_of(f) for s in said for f in extract_facts(s.text) if f.kind == "number"}
        # each step from one menu item to the next that a passage gives
        self.steps = [(a, b) for text in passages for path in menu_paths(text) for a, b in zip(path, path[1:])]
        # the words that tell a list's numbers apart ("front", "rear"), whatever the list
        self.telling = set().union(*(w for s in said for w in s.pairs.values()))
        # where a thing is: the passages say it, or the driver does (their own situation) unless that
        # is what they ask
        self.place_sources = said if asks_place(question) else said + asked
        self.prohibitions = prohibitions([s.text for s in said])

    def check(self, sentence: str) -> Check:
        facts = extract_facts(sentence)
        said = terms(sentence)
        own = _own_terms(sentence) - {"answe"}
        off_topic = sorted(m for m in self.missing if _mentions(sentence, said, m))
        unsupported = [f for f in facts if not self._supported(f) or not (self.across or self._in_context(f, own))]
        unsupported += [f for f in self._misattributed(facts, own) if f not in unsupported]
        unsupported += [f for f in facts if f not in unsupported and self._only_when_ruled_out(f)]
        unsupported += [f for f in self._said_of_another_variant(facts) if f not in unsupported]
        unsupported += [f for f in self._outside_the_span(facts) if f not in unsupported]
        sides, pairs = bounds(sentence), said_of(sentence)
        unsupported += [f for f in facts if f not in unsupported and self._bound_reversed(f, sides, sentence)]
        unsupported += [f for f in facts if f not in unsupported
                        and self._paired_with_another(f, pairs[f.key] if f.key in pairs else self._said_of(said))]
        unsupported += [f for f in facts if f not in unsupported and not self.across and
                        (self._someone_elses_number(f) or self._from_another_topic(f))]
        if self.amount_only and not any(f.kind in AMOUNT_KINDS for f in facts):
            unsupported += [f for f in facts if f.kind == "phone" and f not in unsupported]
        if any(_uses(sentence, said, m) for m in self.unnamed):
            unsupported += [f for f in facts if f.kind in QUANTITY_KINDS and f not in unsupported
                            and f.key not in self.users_numbers]
        unsupported += self._steps_of_no_passage(sentence)
        # a product or tool the KB names anywhere is no invention, though this passage does not name it
        unsupported += [f for f in identifiers(sentence) if not written_in(f, self.written)
                        and not (f.kind == "proper" and (self.known_name(f.text)
                                                         or stated_in_parts(f, self.written, self.known_name)))]
        # doing what the passages forbid ("clean the seal with bleach" beside "Do not use bleach on the seal"):
        # said without a negation of its own, it is contradicted
        if not (self.across or NEGATION.search(sentence) or FORBIDS.search(sentence)):
            unsupported += [Fact("forbidden", p.verb, p.text) for p in self.prohibitions
                            if p.verb in said and p.terms & said]
        stated = places(sentence)
        about = own - set().union(*(p.key for p in stated))
        unsupported += [Fact("place", " ".join(sorted(p.key)), p.text) for p in stated
                        if not self.across and not self._placed(p, about)]
        refusal = self._refuses(sentence)
        reply = _REPLY.match(sentence)
        rest = sentence[reply.end():] if reply else sentence
        # in another language than the passages a sentence is checked by what it states of theirs alone:
        # one of their values must be in it, which then bears its reply and its negations too
        vouched = self.across and any(f not in unsupported and f.key not in self.users_numbers for f in facts)
        if self.across and not vouched and not refusal:
            unsupported.append(Fact("unchecked", "", sentence.strip()))
        denial = NEGATION.search(rest)
        denied = bool(denial) and (vouched or self._denied_by_a_source(own, _denied(rest)))
        if denial and not refusal and not denied:
            unsupported.append(Fact("negation", "not", denial.group(0)))
        answered = (reply.group("en") or reply.group("zh")).lower() if reply else ""
        # "No, it has no spare wheel" repeats the question's words, but the passages' denial is the answer
        said_no = denied and bool(NEGATION.match(answered))
        # the driver's own number repeated ("Yes, you can tow 800 kg") is no fact a reply may rest on
        theirs = all(f.key in self.users_numbers for f in facts)
        said_yes = bool(reply) and bool(_YES.fullmatch(answered))
        if self.expected_reply is not None and reply:  # the passages' limit decides the reply
            if self._reply_against_the_limit(answered):
                unsupported.append(Fact("reply", answered, sentence.strip()))
        elif reply and not vouched and ((theirs and not stated and not said_no and not self._adds(rest))
                        or (said_yes and not self._affirmed(rest))
                        # "No, it expires after 30 days" when no passage gives a time at all: the reply
                        # can only rest on the user's number
                        or (facts and theirs and not {unit_of(f) for f in facts} & self.passage_units)):
            unsupported.append(Fact("reply", answered, sentence.strip()))
        # the user's own amounts stated back as the answer to their yes-or-no question ("if you configure
        # nothing, it caches the files for 12 hours") say yes without the word, and need what a yes needs:
        # a passage stating them, or words of the passages beyond the question's
        elif (not reply and theirs and any(unit_of(f) for f in facts) and self.yes_no
              and self.expected_reply != "yes" and not NEGATION.search(main_clause(rest))
              and not self._adds(rest) and not any(self.names.supports(f) for f in facts)):
            unsupported.append(Fact("reply", "yes", sentence.strip()))
        # "Yes, you can below 40 °C" to "at 50 °C, can I ...?": the reply its own bound denies
        if said_yes and bounded_away(rest, self.users_amounts) and not any(f.kind == "reply" for f in unsupported):
            unsupported.append(Fact("reply", answered, sentence.strip()))
        return Check(sentence, facts, unsupported, refusal, off_topic)

    def _refuses(self, sentence: str) -> bool:
        """Whether the sentence says the model does not know: a refusal's words, unless they are the user's
        own said back with the words around them ("不知道滤网在哪儿的话，……" restates "我不知道滤网在哪儿")."""
        return any(not _restated(m, sentence, self.question) for m in _REFUSAL.finditer(sentence))

    def grounded(self, sentence: str) -> bool:
        """Whether a sentence is made of the passages' words and speaks of the question: it shares a term
        with the question, and at least MIN_GROUNDED of its own words (its facts and the question's words
        aside) are the passages', or all but OWN_WORDS. What an answer must be when the model's first reply
        was "I don't know". It uses no word of the question the knowledge base never names: echoed from the
        question, such a word makes a passage about something else look like the answer ("the key for the
        Partitioned flag is SESSION_COOKIE_NAME" from a KB that never mentions the flag)."""
        own = terms(without_facts(sentence))
        if not own & self.question_terms or self.uses_unnamed(sentence):
            return False
        rest = own - self.question_terms
        # one word of its own is a paraphrase ("with debug turned off" for the passages' "disabled"), not
        # a claim: a short sentence would otherwise fail on it alone
        return len(rest - self.passage_terms) <= max(OWN_WORDS, (1 - MIN_GROUNDED) * len(rest))

    def uses_unnamed(self, sentence: str) -> bool:
        """Whether a sentence uses a word of the question the knowledge base never names."""
        return any(_uses(sentence, terms(sentence), w) for w in self.unnamed)

    def source_of(self, check: Check) -> str | None:
        """The passage sentence a failed sentence was drawn from, to say in its place: the one that
        states every value that failed and the most of the sentence's other facts (numbers beyond the
        user's own, identifiers), then shares the most of its words, and speaks of the question. A
        small model picks the right fact and then misreads what it is said of ("an unbraked trailer
        of up to 1,500 kg" from a list of two; "configure SMTPHandler in your configuration file"
        adds a place); the passage's own sentence says the fact as the KB does. None when the model
        invented a value or name no passage states (it is not reading the passages; a long name with
        one part changed was read, and misquoted: identifiers.misquoted) or joined the values of two
        sentences ("brake pads last 15,000 to 30,000 km" from two service intervals),
        when the reply of a yes or no is what failed, when no sentence shares a fact and MIN_SHARED
        words, or when the sentence uses a word of the question the KB never uses: the passage
        sentence would answer about something else ("the maximum load on the roof" said in the tow
        ball's sentence), though that word is sometimes only in passing ("the light on the dash")."""
        if any(_uses(check.text, terms(check.text), m) for m in self.unnamed):
            return None
        written = "\n".join(s.text for s in self.passage_sentences)

        def stated(f: Fact) -> bool:
            return written_in(f, written) if f.kind in ("identifier", "proper") else self._supported(f)

        invented = [f for f in check.unsupported if f.kind not in ("place", "negation") and not stated(f)]
        # a name copied with one part changed is the passages' name misread: their sentence stating it
        # is the source (identifiers.misquoted)
        names = identifiers(written) if invented else []
        meant = {f.key: m for f in invented if (m := misquoted(f, names))}
        invented = [f for f in invented if f.key not in meant]
        if invented or any(f.kind == "reply" for f in check.unsupported):
            return None
        # the facts the passages state, though the sentence may say them of the wrong thing
        anchors = [f for f in check.facts if f.kind in QUANTITY_KINDS and f.key not in self.users_numbers
                   and self._supported(f)]
        anchors += [f for f in identifiers(check.text) if f.kind == "identifier" and written_in(f, written)]
        anchors += list(meant.values())
        # the values that failed must all come from the one sentence: one joined from two sentences'
        # values ("brake pads last 15,000 to 30,000 km" from two service intervals) has no source
        failed = [meant.get(f.key, f) for f in check.unsupported if f.kind in QUANTITY_KINDS or f.kind == "identifier"]
        own = terms(without_facts(check.text))
        best, score = None, (0, 0)
        for s in self.passage_sentences:
            shared, said = len(own & s.terms), sum(_states(s, f) for f in anchors)
            if (said and shared >= MIN_SHARED and (said, shared) > score and all(_states(s, f) for f in failed)
                    and s.terms & self.question_terms and s.text.strip() != check.text.strip()):
                best, score = s.text.strip(), (said, shared)
        return best

    def leans_on_next(self, sentence: str) -> bool:
        """A reply that only restates the question ("Yes, you can make it there."): what it rests on is
        in the sentence after it, so the two are checked together."""
        reply = _REPLY.match(sentence)
        rest = sentence[reply.end():] if reply else ""
        return bool(reply) and not extract_facts(rest) and not self._adds(rest)

    def _supported(self, fact: Fact) -> bool:
        if fact.kind == "name" and _IDENTIFIER_KEY.search(fact.key) and not re.search(r"\s", fact.key):
            # a quoted identifier ("MYAPP_", "config.toml") is the user's own value when the question
            # writes it, as an unquoted one is; a quoted label ("Sport Plus") must be the passages'
            return self.names.supports(fact) or written_in(Fact("identifier", fact.key, fact.text), self.written)
        return (self.names if fact.kind in ("name", "menu") else self.index).supports(fact)

    def _denied_by_a_source(self, own: set[str], denied: set[str]) -> bool:
        """A sentence that denies something ("there is no top speed limit") needs a source sentence
        about the same thing (two shared terms, or all of a short sentence's) that denies it too: the
        words after its negation share one with the source's (`denied`). "The spare wheel should not be
        inflated" is no "has no spare wheel"."""
        need = min(2, len(own))
        return any(s.denied is not None and len(own & s.terms) >= need and (not denied or denied & s.denied)
                   for s in self.sentences)

    def _misattributed(self, facts: list[Fact], own: set[str]) -> list[Fact]:
        """Numbers given to what another passage sentence states a different number for: "you can set
        it to 50 percent, which is recommended for daily driving" when the passage says the slider goes
        from 50 to 100 percent and recommends 80 for daily driving. Such a sentence shares two or more
        terms with a passage sentence that states a number in the same unit, states none of that
        sentence's numbers, and neither the number's own source sentences nor the question use those
        terms (the question's words are the topic: "what charge limit every day?" may say "charge
        limit" beside the 80 percent, though the slider's sentence says it too)."""
        numbers = [f for f in facts if f.kind == "number" and " " in f.key]
        stated = {f.key for f in numbers}
        wrong = []
        for f in numbers:
            unit = " " + f.key.split(" ", 1)[1]
            explained = self.question_terms.union(*(s.terms for s in self.sentences if s.index.supports(f)))
            for s in self.passage_sentences:
                theirs = {k for k in s.index.numbers if k.endswith(unit)}
                if theirs and not theirs & stated and len((own & s.terms) - explained) >= 2:
                    wrong.append(f)
                    break
        return wrong

    def quote_fails(self, quote: str) -> list[Fact]:
        """What a quote of the passages gets wrong as the answer to the question: values of another
        variant than the one the question names, when the quote names none of the driver's ("10 to 80
        percent takes 30 minutes" for "0 to 100"; a quote that gives the WLTP range and the range at a
        steady 120 km/h does answer "how far at 120?"), values stated for no span the driver names, or
        someone else's phone number."""
        facts, index = extract_facts(quote), FactIndex.of([quote])
        named = any(index.supports(Fact("number", q, q)) for q in self.qualifiers)
        # the user's amount a yes or no is asked about, of a kind the quote states, is held against the quote's
        # value ("at 12 km/h" against "below 8 km/h when something is within 60 cm"): it names no variant
        stated = {dimension(unit_of(f)) for f in facts if f.kind == "number"}
        compared = {q.key for q in self.users_amounts if dimension(q.unit) in stated}
        wrong = [] if named else self._said_of_another_variant(facts, named=self.qualifiers - compared)
        wrong += [f for f in self._outside_the_span(facts) if f not in wrong]
        return wrong + [f for f in facts if f not in wrong and self._someone_elses_number(f)]

    def _said_of_another_variant(self, facts: list[Fact], named: set[str] | None = None) -> list[Fact]:
        """Values said of the variant the driver names ("the warranty on the 12-volt battery is 8 years",
        "with 19-inch wheels the range is 480 km", "from 0 to 100 percent takes 30 minutes") when no
        passage clause stating the value names that variant: the 8 years are the drive battery's, the
        480 km are for 18-inch wheels, the 30 minutes for 10 to 80 percent. Only a variant the
        sentence itself names counts (an answer about the range "at 120" may give the WLTP range too),
        and only one named in another unit than the value (200 kPa is compared, not a variant)."""
        named = {f.key for f in facts if f.key in self.qualifiers} if named is None else named
        wrong = []
        for f in facts:
            if not self._passage_value(f):
                continue
            unit = f.key.split(" ", 1)[1]
            variants = [Fact("number", q, q) for q in named if not q.endswith(" " + unit)]
            sources = [c for c in self.clauses if c[0].supports(f)]
            if variants and sources and not any(_names(c, v) for c in sources for v in variants):
                wrong.append(f)
        return wrong

    def _outside_the_span(self, facts: list[Fact]) -> list[Fact]:
        """Values for a span the driver names ("from 20 to 80 percent on a 7.4 kW wallbox") that no
        passage clause states for that span: "it takes about 11 hours" is the full charge's time,
        whether or not the answer repeats the span."""
        wrong = []
        for f in facts:
            if not self._passage_value(f):
                continue
            unit = " " + unit_of(f)
            sources = [c for c, _ in self.clauses if c.supports(f)]
            if sources and any(not any(k.endswith(unit) for k in span) and
                               not any(all(c.supports(Fact("number", k, k)) for k in span) for c in sources)
                               for span in self.spans):
                wrong.append(f)
        return wrong

    def _bound_reversed(self, fact: Fact, sides: dict, sentence: str) -> bool:
        """A passage's number with its bound turned round: "works up to 10 km/h" from "when you drive
        above 10 km/h". Only when every passage sentence stating it bounds it the other way, and the
        sentence does not speak of what comes on the other side ("holds the car for up to 10 minutes
        before the parking brake takes over" is "held for more than 10 minutes, the parking brake is
        applied")."""
        said = sides.get(fact.key, set()) - {None}
        if len(said) != 1 or _OTHER_SIDE.search(sentence):
            return False
        theirs = self._sources_sides(fact)
        return bool(theirs) and not theirs & (said | {None})

    def _paired_with_another(self, fact: Fact, mine: set[str]) -> bool:
        """A number from a list given to another of its things: "the rear tyres need 240 kPa" from "the
        front tyres to 240 kPa and the rear tyres to 260 kPa". `mine`: what the sentence says the
        number of (its own list's words for it, or all its terms). The things it names that lists
        tell apart must all be the number's own in a list stating it, or all be named by a sentence
        stating it alone ("until the tyre reaches 240 kPa" does not make it the rear's)."""
        if fact.kind != "number" or fact.key in self.users_numbers:
            return False
        named = mine & self.telling
        if not named:
            return False
        sources = self._stating(fact)
        if not any(fact.key in s.pairs for s in sources):  # no list states it: nothing to give to another
            return False
        return not any(named <= (s.pairs[fact.key] if fact.key in s.pairs else s.terms) for s in sources)

    def _said_of(self, said: set[str]) -> set[str]:
        """What a sentence stating one number says it of: its own words, or when they name none of the
        things lists tell apart ("The answer is: 3 mm."), the question's ("...the winter tyres...")."""
        return said if said & self.telling else self.question_terms

    def _steps_of_no_passage(self, sentence: str) -> list[Fact]:
        """The steps of the sentence's menu paths (one item to the next) that no passage's path takes."""
        return [Fact("menu", f"{a} > {b}", f"{a} > {b}") for path in menu_paths(sentence)
                for a, b in zip(path, path[1:]) if not any(_same_item(a, x) and _same_item(b, y) for x, y in self.steps)]

    def _sources_sides(self, fact: Fact) -> set[str | None]:
        """The bounds the passage sentences stating a number give it."""
        return set().union(*(s.sides.get(fact.key, set()) for s in self._stating(fact)))

    def _stating(self, fact: Fact) -> list[_Source]:
        """The passage sentences that state a fact."""
        return [s for s in self.passage_sentences if s.index.supports(fact)]

    def _reply_against_the_limit(self, reply: str) -> bool:
        """A yes or no to "can I tow 2,000 kg?" that the passages' bound contradicts: "Yes, you can tow
        up to 1,500 kg." (`expected_reply`: the reply the bound gives, when it gives one)."""
        if not reply or self.expected_reply is None:
            return False
        return ("yes" if _YES.fullmatch(reply) else "no") != self.expected_reply

    def _passage_value(self, fact: Fact) -> bool:
        """A number with a unit that the driver did not say: a value the answer takes from the passages."""
        return fact.kind == "number" and " " in fact.key and fact.key not in self.users_numbers

    def _someone_elses_number(self, fact: Fact) -> bool:
        """A phone number from passages about none of what the question asks the number of: "报警电话是多少？"
        is not answered by the breakdown line, true as "道路救援的电话是 800-555-0199" is."""
        if fact.kind != "phone" or not self.phone_topic:
            return False
        owners = [(text, said) for index, text, said in self.documents if index.supports(fact)]
        return bool(owners) and not any(_uses(text, said, w) for text, said in owners for w in self.phone_topic)

    def _from_another_topic(self, fact: Fact) -> bool:
        """A value from passages that share no word with the question: "the car weighs 1,500 kg" from
        the towing entry, which the question "how much does the car weigh?" is not about."""
        if not self._passage_value(fact) or not self.question_terms:
            return False
        owners = [said for index, _, said in self.documents if index.supports(fact)]
        return bool(owners) and not any(said & self.question_terms for said in owners)

    def _only_when_ruled_out(self, fact: Fact) -> bool:
        """A value the passages state only for a condition the question rules out: "the top speed when
        you're not in Eco mode is 130 km/h" from "Eco mode ... limits the top speed to 130 km/h". A
        sentence that rules the condition out too ("when the car is not plugged in, ...") is about
        the driver's case."""
        if not self.ruled_out or fact.kind not in QUANTITY_KINDS or fact.key in self.users_numbers:
            return False
        sources = self._stating(fact)
        return bool(sources) and all(about_ruled_out(self.ruled_out, s.text) for s in sources)

    def _placed(self, place: Place, about: set[str]) -> bool:
        """A place must be named by a source sentence about the same thing as the answer's sentence
        or the question (a term beyond the place's own): "the tyre repair kit is under the boot
        floor" does not put the fuse box there."""
        wanted = about | self.question_terms
        # the place as the sentence writes it: a menu path's words ("在中控屏上打开“设置”→…") are not in s.terms
        # a stem's longer or shorter spelling names it too: the driver's "dash" is the dashboard
        # and two words written as one: "the tool box" is the passages' "toolbox"
        return any((all(_shares_stem(terms(s.text), t) for t in place.key) or _written_together(place.text, s.text))
                   and (s.asked or (s.terms - place.key) & wanted) for s in self.place_sources)

    def _affirmed(self, rest: str) -> bool:
        """A yes says that what the driver asks is so: the question's words the sentence repeats must all
        be in one passage. "Yes, the car can park itself using the parking sensors" leans on the parking
        sensors' entry, which says nothing of the car parking itself. How it is done ("directly") is no
        part of what is so."""
        repeated = _own_terms(rest) & self.question_terms
        return not repeated or any(repeated <= whole for whole in self.wholes)

    def _adds(self, rest: str) -> bool:
        """Whether the words after a "yes" or "no" say something of the passages' beyond the question."""
        return bool((terms(without_facts(rest)) - self.question_terms) & self.passage_terms)

    def _in_context(self, fact: Fact, own: set[str]) -> bool:
        """A number must be said about what its source sentence is about: "the boot holds 4 litres" is
        not supported by "the washer fluid reservoir holds 4 litres". The sentence's own words (its
        facts taken out) must share a term with a source sentence that states the number."""
        if fact.kind != "number":
            return True
        if len(own) < 2 or own <= self.question_terms:  # "The answer is 290.", "You are 30 cm from the wall.":
            own = self.question_terms  # the number is said of what the question asks about
        if not own:
            return True
        sources = [s for s in self.sentences if s.index.supports(fact)]
        return not sources or any(own & (s.terms | s.referred) for s in sources)


# a prohibition: what follows it in its clause is what the passages forbid ("Do not use bleach on the seal",
# "切勿用酒精擦拭屏幕")
FORBIDS = re.compile(r"\b(?:do\s+not|don't|never|avoid|must\s+not|mustn't|should\s+not|shouldn't)\b"
                     r"|不要|请勿|切勿|禁止|不得|避免", re.I)
_CLAUSE_STOP = re.compile(r"[.;:!?。；：！？\n]")


@dataclass(frozen=True)
class Prohibition:
    verb: str  # the prohibition's first term: what is not to be done ("use")
    terms: frozenset[str]  # what it is not to be done with, by the terms the passages write nowhere else
    text: str  # as the passage writes it: "Do not use bleach on the door seal"


def prohibitions(sentences: list[str]) -> list[Prohibition]:
    """What the passages forbid and name nowhere but there: in "Do not use bleach on the door seal.", "use"
    and bleach when no other sentence names bleach. A thing the passages also name without a prohibition
    ("wipe the door seal dry"; the seal) is no forbidden thing."""
    spans, free, out = [], set(), []
    for text in sentences:
        at = 0
        for m in FORBIDS.finditer(text):
            stop = _CLAUSE_STOP.search(text, m.end())
            end = stop.start() if stop else len(text)
            free |= terms(without_facts(text[at:m.start()]))
            span = without_facts(text[m.end():end]).lower()
            spans.append((sorted(term_words(span), key=lambda t: span.find(t) % (len(span) + 1)),
                          text[m.start():end].strip()))
            at = end
        free |= terms(without_facts(text[at:]))
    for words, said in spans:
        named = frozenset(words[1:]) - free
        if named:
            out.append(Prohibition(words[0], named, said))
    return out


def _states(source: _Source, fact: Fact) -> bool:
    """Whether a passage sentence states a fact: an identifier as written, a value by its key."""
    return written_in(fact, source.text) if fact.kind == "identifier" else source.index.supports(fact)


def _own_terms(sentence: str) -> set[str]:
    """What a sentence is about: its words less its facts and manner adverbs ("approximately", "directly")."""
    return {t for t, w in term_words(without_facts(sentence)).items() if not _MANNER.search(w)}


def _denied(text: str) -> set[str] | None:
    """The terms a text denies, after its first negation; None when it denies nothing."""
    m = NEGATION.search(text)
    return terms(without_facts(text[m.end():])) if m else None


def refers_back(sentence: str) -> bool:
    """A sentence that opens by pointing at the one before ("This method ...", "It ...", "这样 ...")."""
    return bool(_PRONOUN.match(sentence))


def _restated(match: re.Match, sentence: str, question: str, around: int = 3) -> bool:
    """Whether a match in the sentence is in the question too, with `around` characters of the sentence on
    either side of it: words the user said, not the sentence's own."""
    return sentence[max(0, match.start() - around):match.end() + around].lower() in question.lower()


def is_bare_reply(sentence: str) -> bool:
    """"Yes." alone: checked with the sentence after it, which says what the reply rests on."""
    return bool(_REPLY.fullmatch(sentence))


def _names(clause: tuple[FactIndex, FactIndex], variant: Fact) -> bool:
    """Whether a clause is about the variant: it names it, or names no value in its unit and its
    passage names it ("It usually lasts four to six years" in the 12 volt battery's entry)."""
    own, passage = clause
    unit = " " + variant.key.split(" ", 1)[1] if " " in variant.key else None
    # a bare number ("the 360 camera") is another variant's when the clause states bare numbers too
    names_others = any(k.endswith(unit) for k in own.numbers) if unit else bool(own.bare)
    return own.supports(variant) or (not names_others and passage.supports(variant))


def _same_item(a: str, b: str) -> bool:
    """Menu items as two styles write them: "Passenger airbag" in "then Passenger airbag", "Passenger" in
    "Safety > Passenger airbag" (capitalised words only)."""
    return a == b or a.startswith(b + " ") or b.startswith(a + " ")


def _written_together(words: str, text: str) -> bool:
    """Whether two neighbouring English words are one word of the text: "tool box", "toolbox"."""
    pairs = zip(found := re.findall(r"[a-z]+", words.lower()), found[1:])
    return any(re.search(rf"\b{a}{b}\b", text, re.I) for a, b in pairs if len(a) > 2 and len(b) > 2)


def _shares_stem(said: set[str], word: str) -> bool:
    return any(t.startswith(word) or word.startswith(t) for t in said)


def _mentions(sentence: str, said: set[str], word: str) -> bool:
    """Whether a sentence names a word by its stem among its terms `said` (a Chinese word by its
    bigrams), or an identifier (plan._unknown_names: "wtf_csrf_time_limit") as written."""
    if _IDENTIFIER_KEY.search(word):
        return written_in(Fact("identifier", word, word), sentence)
    return _shares_stem(said, word)


def _uses(sentence: str, said: set[str], word: str) -> bool:
    """Whether a sentence uses a question word: as `_mentions` does, a Chinese word whole."""
    return _mentions(sentence, said, word) if word.isascii() else word in sentence
