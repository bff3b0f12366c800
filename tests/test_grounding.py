"""The answer layer's fact check on crafted answers, against passages of the sample in-car KB."""

from __future__ import annotations

import pytest

from app.answer.extractive import extract_answer
from app.answer.facts import extract_facts
from app.answer.verify import Verifier

ROADSIDE = ("Aurora roadside assistance is available 24 hours a day on 800-555-0199. Assistance is free for "
            "3 years from first registration.")
TOWING = "The Aurora EV can tow a braked trailer of up to 1,500 kg and an unbraked trailer of up to 750 kg."
FAST = ("At a charger rated 150 kW or more, charging from 10 to 80 percent takes about 30 minutes when the "
        "battery is warm.")
TYRES = ("With a normal load, inflate the front tyres to 240 kPa (35 psi) and the rear tyres to 260 kPa (38 psi). "
         "With a full load of five people and luggage, use 260 kPa (38 psi) front and 290 kPa (42 psi) rear.")
FAST_ZH = "在 150 千瓦或以上的充电桩上，从百分之十充到百分之八十大约需要 30 分钟。"
TPMS = "Then, with the car in Park, open Settings, then Vehicle, then Tyres, and tap Reset TPMS and confirm."


@pytest.mark.parametrize("passage, answer, ok", [
    (ROADSIDE, "Call roadside assistance on 800-555-0199.", True),
    (ROADSIDE, "Call roadside assistance on 800 555 0199.", True),
    (ROADSIDE, "Call roadside assistance on 800-555-1234.", False),  # a wrong phone number
    (ROADSIDE, "Call 800-376-0199 any time.", False),
    (TOWING, "You can tow up to 1500 kilograms with a braked trailer.", True),  # digit grouping, unit spelled
    (TOWING, "You can tow up to 150 kg.", False),
    (TOWING, "You can tow up to 1,500 lb.", True),  # an unknown unit is not checked, the number is
    (FAST, "It takes about thirty minutes.", True),  # a spelled-out number
    (FAST, "It takes about 30 hours.", False),  # the right number with the wrong unit
    (FAST, "It takes about 36 hours.", False),
    (FAST, "From 10 to 80% in half of an hour at up to 150 kilowatts.", True),
    (TYRES, "Inflate the rear tyres to 260 kPa (38 psi).", True),
    (TYRES, "Inflate the rear tyres to 38 kPa.", False),
    (FAST_ZH, "从百分之十充到八十大约需要三十分钟。", True),  # Chinese numerals
    (FAST_ZH, "大约需要 ３０ 分钟。", True),  # full-width digits
    (FAST_ZH, "大约需要三十六小时。", False),
    (FAST_ZH, "最高充电功率是一百五十千瓦。", True),
    (FAST_ZH, "最高充电功率是两百千瓦。", False),
    (TPMS, "Open Settings > Vehicle > Tyres and tap Reset TPMS.", True),  # a menu path
    (TPMS, "Open Settings > Vehicle > Wheels and tap Reset TPMS.", False),
    (TPMS, "Open “设置”→“车辆”→“轮胎”。", False),  # items the passage never names
    (TPMS, "With the car in Park, tap Reset TPMS.", True),  # a named control
    (TPMS, "Open Settings and select Massage.", False),
])
def test_hard_facts_must_be_in_the_passages(passage, answer, ok):
    check = Verifier([passage]).check(answer)
    assert check.ok is ok, (check.facts, check.unsupported)


def test_a_number_said_about_something_else_fails():
    washer = "The washer fluid reservoir holds 4 litres and has a blue cap with a windscreen symbol."
    verifier = Verifier([washer], question="what's the boot capacity in litres?")
    assert not verifier.check("The boot capacity is 4 litres.").ok
    assert verifier.check("The washer fluid reservoir holds four litres.").ok
    assert not verifier.check("Four litres.").ok  # a bare number answers the question: the boot
    tyres = Verifier([TYRES], question="what's the boot capacity in litres?")
    assert not tyres.check("The answer is: 290.").ok  # 290 is a tyre pressure, not a boot volume


def test_a_correct_paraphrase_without_numbers_passes():
    check = Verifier([TOWING]).check("Yes, the car can pull a trailer, with or without its own brakes.")
    assert check.ok and not check.facts and not check.refusal


def test_the_question_is_a_source_and_refusals_are_recognised():
    verifier = Verifier([TOWING], question="Can I tow 2,000 kg?")
    assert verifier.check("No: 2000 kg is more than the 1,500 kg the car can tow.").ok
    assert verifier.check("I don't know.").refusal
    massage = Verifier([TPMS], question="how do I switch on the massage function?")
    assert not massage.check("Open Settings, then Vehicle, and select Massage.").ok  # not a number: no echo
    assert Verifier([FAST_ZH]).check("资料里没有提到这个问题。").refusal


def test_words_of_the_question_the_kb_never_uses_are_off_topic():
    opening = "When the car is unlocked, press the rear edge of the flap and it opens automatically."
    verifier = Verifier([opening], question="How do I open the sunroof?", unknown={"sunro"})
    assert verifier.check("To open the sunroof, press the rear edge of the flap.").off_topic
    assert not verifier.check("Press the rear edge of the flap.").off_topic


def test_fact_keys_are_one_spelling():
    keys = [f.key for f in extract_facts("1,500 kg, 一千五百公斤, thirty minutes, 30 min, 三十分钟, 百分之八十, 80 %")]
    assert keys == ["1500 kg", "1500 kg", "30 min", "30 min", "30 min", "80 %", "80 %"]
    assert [f.key for f in extract_facts("Call 800-555-0199 or use the CCS2 plug.")] == ["8005550199", "ccs2"]


def test_extractive_answer_quotes_the_sentence_that_answers():
    assert extract_answer("how much air do the back tyres take?", TYRES).startswith("With a normal load")
    assert extract_answer("what number do I call?", ROADSIDE) == (
        "Aurora roadside assistance is available 24 hours a day on 800-555-0199.")
    safety = ("Never fit a rear-facing child seat on the front passenger seat while the front passenger airbag is "
              "active. To switch off the airbag, open Settings, then Safety, then Passenger airbag, select Off and "
              "confirm. The indicator PASSENGER AIRBAG OFF in the overhead console lights up to confirm.")
    answer = extract_answer("how do I switch off the passenger airbag for a child seat?", safety)
    assert answer.startswith("Never fit") and "Passenger airbag, select Off" in answer  # the safety step stays
