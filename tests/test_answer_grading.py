"""The answer eval's grader is strict: a fact counts when the answer states it (in any spelling of
its value and unit), a fact the reference passages do not state fails the answer, and an answer to
an unanswerable question is wrong."""

from __future__ import annotations

from app.answer.types import Citation
from app.bench.answers import AnswerQuestion, expected_shown, facts_shown, grade, summarize

REFERENCE = ["With a normal load, inflate the front tyres to 240 kPa (35 psi) and the rear tyres to 260 kPa (38 psi)."]
FRONT = AnswerQuestion("what pressure do the front tyres need?", "en", True, ["tyre-pressure"], [["240 kPa", "35 psi"]], [])
BOTH = AnswerQuestion("front and rear?", "en", True, ["tyre-pressure"], [["240 kPa"], ["260 kPa"]], [])


def _grade(q, text, refused=False):
    return grade(q, text, refused, REFERENCE)["grade"]


def test_a_fact_counts_in_any_spelling_of_its_value_and_unit():
    assert _grade(FRONT, "The front tyres need 240 kPa.") == "correct"
    assert _grade(FRONT, "The front tyres need 240 kilopascals (35 P S I).") == "correct"  # a voice answer
    assert _grade(FRONT, "Front tyres: two hundred and forty.") == "wrong"  # no unit: not stated


def test_a_missing_fact_is_partial_and_a_false_one_fails_the_answer():
    assert _grade(BOTH, "Front 240 kPa.") == "partial"
    assert _grade(BOTH, "Front 240 kPa, rear 260 kPa.") == "correct"
    assert _grade(BOTH, "Front 240 kPa, rear 290 kPa, or 260 kPa with a light load.") == "wrong"


def test_refusals_and_answers_to_unanswerable_questions():
    sunroof = AnswerQuestion("how do I open the sunroof?", "en", False, [], [], [])
    assert _grade(sunroof, "I don't know.", refused=True) == "refused"
    assert _grade(sunroof, "Press the button above the mirror.") == "wrong"


def test_a_yes_or_no_question_needs_the_right_reply():
    tow = AnswerQuestion("can I tow a 1,800 kg caravan?", "en", True, ["towing"], [["1,500 kg"]], [], reply="no")
    reference = ["The car can tow a braked trailer of up to 1,500 kg."]
    assert grade(tow, "No. The car can tow up to 1,500 kg.", False, reference)["grade"] == "correct"
    assert grade(tow, "You can't: the limit is 1,500 kg.", False, reference)["grade"] == "correct"
    assert grade(tow, "Yes, the car can tow up to 1,500 kg.", False, reference)["grade"] == "wrong"
    assert grade(tow, "The car can tow up to 1,500 kg.", False, reference)["grade"] == "partial"  # no reply given
    low = AnswerQuestion("能设到百分之四十吗？", "zh", True, ["charge-limit-zh"], [["50%"]], [], reply="no")
    assert grade(low, "不能，最低只能设到 50%。", False, ["充电上限可以设在 50% 到 100% 之间。"])["grade"] == "correct"
    assert grade(low, "可以，范围是 50% 到 100%。", False, ["充电上限可以设在 50% 到 100% 之间。"])["grade"] == "wrong"


def test_false_claims_count_answers_to_unanswerable_questions_and_false_facts():
    sunroof = AnswerQuestion("how do I open the sunroof?", "en", False, [], [], [])
    rows = [grade(FRONT, "The front tyres need 240 kPa.", False, REFERENCE),  # right
            grade(FRONT, "The front tyres need 290 kPa.", False, REFERENCE),  # a false number
            grade(FRONT, "I don't know.", True, REFERENCE),  # refused: no claim
            grade(sunroof, "Press the button above the mirror.", False, REFERENCE),  # invented
            grade(sunroof, "I don't know.", True, REFERENCE)]
    summary = summarize(rows)
    assert summary["false_claim_rate"] == 0.4 and summary["refused_answerable"] == round(1 / 3, 4)


def test_whether_an_expected_passage_was_shown_splits_retrieval_from_answer_failures():
    faq = Citation(index=1, source="faq.md", entry_id="tyre-pressure", snippet="", score=0.5)
    section = Citation(index=2, source="docs/config.html", heading="Configuration > Builtin Configuration Values",
                       snippet="", score=0.4)
    assert expected_shown([faq], ["tyre-pressure"]) and not expected_shown([faq], ["wipers"])
    assert expected_shown([section], ["config.html#Builtin Configuration Values"])  # a heading's last parts
    assert not expected_shown([section], ["config.html#Configuration"])
    assert not expected_shown([section], ["api.html#Builtin Configuration Values"])
    assert not expected_shown([], ["tyre-pressure"])  # refused before any passage was shown
    rows = [{**grade(FRONT, "The front tyres need 240 kPa.", False, REFERENCE), "shown": True},
            {**grade(FRONT, "I don't know.", True, REFERENCE), "shown": True},
            {**grade(FRONT, "I don't know.", True, REFERENCE), "shown": False}]
    summary = summarize(rows)
    assert summary["shown"] == round(2 / 3, 4) and summary["correct_when_shown"] == 0.5


def test_whether_every_expected_fact_was_shown_splits_the_window_from_the_reader():
    """A section's window may show the expected passage without the sentence that answers: the facts
    themselves must be written in what the model read, as an answer would have to state them."""
    tyres = ["Tyres\n" + REFERENCE[0]]
    assert facts_shown(tyres, FRONT.facts) and facts_shown(tyres, BOTH.facts)
    assert facts_shown(["Tyres\nThe front ones take 35 psi."], FRONT.facts)  # any one spelling
    assert not facts_shown(["Tyres\nThe front ones take 240 kPa."], BOTH.facts)  # one of two
    assert not facts_shown([], FRONT.facts)
    rows = [{**grade(BOTH, "240 kPa front, 260 kPa rear.", False, REFERENCE), "facts_shown": True},
            {**grade(BOTH, "240 kPa front.", False, REFERENCE), "facts_shown": True},
            {**grade(BOTH, "I don't know.", True, REFERENCE), "facts_shown": False}]
    summary = summarize(rows)
    assert summary["facts_shown"] == round(2 / 3, 4) and summary["correct_when_facts_shown"] == 0.5
