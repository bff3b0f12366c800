"""The answer layer's fact check on crafted answers, against passages of the sample in-car KB."""

from __future__ import annotations

import pytest

from app.answer.extractive import extract_answer
from app.answer.facts import extract_facts
from app.answer.passages import Passage, confidence, language, select
from app.answer.pipeline import DONT_KNOW
from app.answer.question import answers_kind, asks_yes_no, meant, on_topic, parts, ruled_out
from app.answer.relevance import Confidence, content_words, terms
from app.answer.verify import Verifier
from knowledge.retrieval import Hit

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
    (FAST, "From 10 to 80% in half of an hour at a 150 kilowatt charger or faster.", True),
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
    # the user's own "不知道" said back is theirs, not the model's refusal; said by the model, it is one
    lost = Verifier([FAST_ZH], question="找了半天不知道滤网在哪儿，怎么拆下来？")
    assert not lost.check("找了半天不知道滤网在哪儿的话，先打开底部的盖板。").refusal
    assert lost.check("抱歉，我不知道滤网在哪儿。").refusal
    assert Verifier([TOWING], question="I don't know how to hitch a trailer. Help?").check("I don't know.").refusal


def test_words_of_the_question_the_kb_never_uses_are_off_topic():
    opening = "When the car is unlocked, press the rear edge of the flap and it opens automatically."
    verifier = Verifier([opening], question="How do I open the sunroof?", unknown={"sunro"})
    assert verifier.check("To open the sunroof, press the rear edge of the flap.").off_topic
    assert not verifier.check("Press the rear edge of the flap.").off_topic


def test_a_number_said_about_something_the_kb_never_names_has_no_source():
    towing = "The maximum vertical load on the tow ball is 75 kg. Do not exceed 100 km/h when towing."
    verifier = Verifier([towing], question="I want a roof box. What's the maximum load on the roof, is 80 kg ok?",
                        unnamed={"roof"})
    assert not verifier.check("The maximum load you can put on the roof is 75 kg.").ok
    assert verifier.check("The maximum vertical load on the tow ball is 75 kg.").ok
    assert verifier.check("80 kg on the roof is not something I can confirm.").unsupported[0].kind == "negation"
    zh = Verifier(["座椅加热共有三档，可在中控屏上调节。"], question="座椅通风能调几档？", unnamed={"通风"})
    assert not zh.check("座椅通风共有 3 档。").ok and zh.check("座椅加热共有 3 档。").ok


def test_a_sentence_of_the_passages_words_may_paraphrase_one():
    passage = ("Do not use the development server in production. It is not designed to be particularly secure, "
               "stable, or efficient.")
    verifier = Verifier([passage], "Is it fine to run the built-in server in production as long as debug is off?")
    assert verifier.grounded("No, it is not fine to run the built-in server in production with debug turned off.")
    assert not verifier.grounded("No, run it behind nginx with gunicorn workers.")  # words of its own


def test_fact_keys_are_one_spelling():
    keys = [f.key for f in extract_facts("1,500 kg, 一千五百公斤, thirty minutes, 30 min, 三十分钟, 百分之八十, 80 %")]
    assert keys == ["1500 kg", "1500 kg", "30 min", "30 min", "30 min", "80 %", "80 %"]
    assert [f.key for f in extract_facts("Call 800-555-0199 or use the CCS2 plug.")] == ["8005550199", "ccs2"]
    # a speed as Chinese speakers say it, per hour first or as a distance after the word for speed: km/h
    spoken = "也就每小时五公里，车速大概二十公里，时速一百二"
    assert [f.key for f in extract_facts(spoken)] == ["5 km/h", "20 km/h", "120 km/h"]
    assert [f.key for f in extract_facts("每小时充三十公里")] == ["30 km"]  # range gained per hour
    # a range's unit said once is both ends' ("between 2 and 3 people" has none)
    assert [f.key for f in extract_facts("between 50 and 100 percent, between 1,000 and 1,500 kg, between 2 and 3 "
                                         "people")] == ["50 %", "100 %", "1000 kg", "1500 kg", "2", "3"]


def test_a_lists_numbers_are_no_facts_and_a_unit_named_argument_is_an_amount():
    steps = "You need to follow these steps:\n1. Download the tarball.\n  2) Unpack it onto the USB stick.\n"
    assert extract_facts(steps) == []
    assert [f.key for f in extract_facts("Set the volume to 3.\n12. 30 minutes later")] == ["3", "30 min"]
    assert [f.key for f in extract_facts("Default: timedelta(days=31) (2678400 seconds)")] == ["31 day", "2678400 s"]
    assert [f.key for f in extract_facts("max_age = 5, hours = 12")] == ["12 h", "5"]  # max_age names no unit
    passage = "Default: timedelta(days=31)."
    assert Verifier([passage], question="How long does it last by default?").check("It lasts 31 days by default.").ok
    assert not Verifier([passage], question="How long does it last?").check("It lasts 30 days.").ok
    numbered = Verifier(["Copy the files onto the stick. Unpack them into /firmware."], question="How do I load them?")
    assert numbered.check("Do this:\n1. Copy the files onto the stick.\n").ok


def test_extractive_answer_quotes_the_sentence_that_answers():
    assert extract_answer("how much air do the back tyres take?", TYRES).startswith("With a normal load")
    assert extract_answer("what number do I call?", ROADSIDE) == (
        "Aurora roadside assistance is available 24 hours a day on 800-555-0199.")
    safety = ("Never fit a rear-facing child seat on the front passenger seat while the front passenger airbag is "
              "active. To switch off the airbag, open Settings, then Safety, then Passenger airbag, select Off and "
              "confirm. The indicator PASSENGER AIRBAG OFF in the overhead console lights up to confirm.")
    answer = extract_answer("how do I switch off the passenger airbag for a child seat?", safety)
    assert answer.startswith("Never fit") and "Passenger airbag, select Off" in answer  # the safety step stays


@pytest.mark.parametrize("spoken, asked", [
    ("how much range does the heat pump... no, how much range do I get at 120 on the motorway?",
     "how much range do I get at 120 on the motorway?"),
    ("what's the tyre pressure, sorry, the tow limit with a braked trailer?", "the tow limit with a braked trailer?"),
    ("快充要多久，不对，慢充要多久？", "慢充要多久？"),
    ("is there no way to open the flap?", "is there no way to open the flap?"),  # "no" inside a question
    ("can I tow a caravan? no, thanks", "can I tow a caravan? no, thanks"),  # nothing asked after the "no"
])
def test_a_spoken_repair_keeps_the_question_after_it(spoken, asked):
    assert meant(spoken) == asked


WASHER = "The washer fluid reservoir holds 4 litres and has a blue cap with a windscreen symbol."
ROADSIDE_ENTRY = ROADSIDE + " It covers breakdowns, punctures and lockouts."
KEY_FOB = "The key fob uses a CR2032 coin battery, which lasts about two years."


@pytest.mark.parametrize("question, quote, ok", [
    ("what's the boot capacity in litres?", WASHER, False),  # litres, but said of the washer fluid
    ("how much washer fluid fits in the tank?", WASHER, True),
    ("how much does a replacement key fob cost?", KEY_FOB, False),  # a price question, no price
    ("what battery goes in the key fob?", KEY_FOB, True),
    ("what number do I ring when the car breaks down?", "Press it again within 10 seconds to cancel.", False),
    ("what number do I ring when the car breaks down?", ROADSIDE_ENTRY, True),
    ("what's the battery warranty in years and kilometres?", "The battery warranty is 8 years or 160,000 km.",
     True),
    ("how many kilometres can I drive?", FAST, False),  # a number, in the wrong unit
    ("does roadside assistance cost anything?", ROADSIDE, True),  # "free" answers a price question
    ("how quick is it from 0 to 100 in Sport mode?", "Sport mode gives the quickest accelerator response.",
     False),  # an amount asked, none stated
])
def test_a_quote_answers_only_the_question_it_is_about(question, quote, ok):
    """Each quote here is a whole (short) passage: the topic is checked on the passage, the kind of
    value on the quote."""
    assert (on_topic(question, quote) and answers_kind(question, quote)) is ok


@pytest.mark.parametrize("question, quote, ok", [
    ("后备箱能装多少升？", "洗涤液壶容量 4 升。", True),  # litres asked and stated
    ("后备箱能装多少升？", "保养周期是 12 个月。", False),
    ("无线充电板最大功率是多少瓦？", "两者都支持无线和有线连接。", False),  # "两者" is no amount in watts
    ("每天充到多少合适？", "日常使用建议设为百分之八十。", True),  # 每天 "every day" names no unit
])
def test_a_chinese_quote_states_the_kind_of_value_asked(question, quote, ok):
    assert answers_kind(question, quote) is ok


def test_chinese_question_words_are_whole_words():
    words = set(content_words("车在路上抛锚了，打哪个救援电话？"))
    assert {"救援", "电话"} <= words and not {"车在", "在路", "锚了"} & words  # no bigrams across words


def test_english_compound_prepositions_name_no_topic():
    # "according to the guide" asks nothing a KB could lack
    assert set(content_words("Is it enough for /var according to the guide?")) == terms("enough var guide")


def test_chinese_topic_words_are_nouns_not_the_drivers_verbs():
    # a KB that says 跟车距离 … 档 answers "能调几档" though it never writes 能调
    assert set(content_words("跟车距离那个键一共能调几档？", topic_only=True)) == {"跟车", "距离"}
    assert {"座椅", "通风"} <= set(content_words("夏天太热了，座椅通风在哪儿开啊？", topic_only=True))
    assert "能调" in content_words("跟车距离那个键一共能调几档？")  # a word of the question all the same


@pytest.mark.parametrize("question, asked", [
    ("I just used the goo kit on a flat tyre. How far can I drive on it now and how fast?",
     ["I just used the goo kit on a flat tyre. How far can I drive on it now", "how fast?"]),
    ("When does the coolant get replaced? How many years or kilometres?",
     ["When does the coolant get replaced?", "How many years or kilometres?"]),
    ("Why does it say lane assist isn't available? I'm driving through town at fifty.",
     ["Why does it say lane assist isn't available?"]),  # the second sentence asks nothing
    ("How heavy a trailer can it pull, with brakes and without?", ["How heavy a trailer can it pull, with brakes and without?"]),
    ("刹车油该加哪个型号的？多长时间得换一次？", ["刹车油该加哪个型号的？", "多长时间得换一次？"]),
])
def test_a_question_asking_several_things_has_parts(question, asked):
    assert parts(question) == asked


def test_a_two_part_question_quotes_a_sentence_for_each_part():
    passage = ("Use the sealant kit only for small punctures. After sealing, drive no further than 200 km. "
               "Do not exceed 80 km/h until the tyre is replaced. The kit is under the boot floor.")
    quote = extract_answer("How far can I drive after the goo kit, and how fast can I go?", passage)
    assert "200 km" in quote and "80 km/h" in quote and "boot floor" not in quote


def _hit(entry: str, text: str, dense: float, bm25: float) -> Hit:
    return Hit(0, text, "faq.jsonl", "faq.jsonl", "", entry, 0.0, {"dense": dense, "bm25": bm25})


def test_among_close_passages_the_one_stating_the_wanted_fact_comes_first():
    sos = _hit("ecall-sos", "How does the SOS button work?\nPress it again within 10 seconds to cancel.", 0.38, 3.5)
    roadside = _hit("roadside-assistance", "What is the roadside number?\n" + ROADSIDE, 0.32, 3.9)
    far = _hit("walk-away-lock", "Can the car lock itself?\nYes, within 3 metres.", 0.10, 0.0)
    phone = lambda h: any(f.kind == "phone" for f in extract_facts(h.text))  # noqa: E731
    assert [h.entry_id for h in select([sos, roadside, far], True)] == ["ecall-sos"]
    assert [h.entry_id for h in select([sos, roadside, far], True, states_wanted=phone)][:2] == [
        "roadside-assistance", "ecall-sos"]
    assert select([sos, far], True, states_wanted=phone)[0].entry_id == "ecall-sos"  # none states one


def test_a_second_embedders_order_is_kept_and_its_gate_stays_on_words():
    """A question only a second embedder reads: its best hit by meaning leads (the KB's order), hits
    join it by their share of the best BM25 (not the first embedder's cosine margins: another scale),
    and the confidence is the BM25 of the best-worded passage, as for a question no embedder reads."""
    meaning = _hit("keys-battery", "遥控钥匙用什么电池？\n钥匙使用 CR2032 纽扣电池。", 0.91, 4.0)
    words = _hit("keys-lock", "怎么用钥匙锁车？\n按一下钥匙上的锁车键。", 0.88, 12.0)
    far = _hit("wipers", "雨刮怎么换？\n每年更换一次雨刮片。", 0.87, 2.0)
    chosen = select([meaning, words, far], False, ranked_by_kb=True)
    assert [h.entry_id for h in chosen] == ["keys-battery", "keys-lock"]
    assert [h.entry_id for h in select([meaning, words, far], False)] == ["keys-lock"]  # words alone
    c = confidence("钥匙的电池是什么型号？", chosen[0], False, others=chosen[1:])
    assert c.dense is None and c.value == 12.0


def test_a_denial_needs_a_source_that_denies():
    heater = ("The rear window heater switches off automatically after 15 minutes. You do not need to remove the "
              "maintenance cover to reach the washer fluid.")
    verifier = Verifier([heater], question="does the back window heater switch itself off?")
    assert not verifier.check("The back window heater does not switch itself off.").ok
    assert not verifier.check("There is no time limit for the rear window heater.").ok
    assert not verifier.check("The rear window heater shouldn't switch itself off.").ok  # any n't
    assert not verifier.check("后窗加热没有自动关闭功能。").ok
    spare = Verifier(["The Aurora EV has no spare wheel; a puncture repair kit is under the boot floor."],
                     question="what pressure should the spare wheel be?")
    assert not spare.check("The spare wheel should not be inflated.").ok  # denies what the passage does not
    assert spare.check("There is no spare wheel, only a puncture repair kit.").ok
    assert spare.check("No, the Aurora EV has no spare wheel.").ok
    asked = Verifier(["The Aurora EV has no spare wheel; a puncture repair kit is under the boot floor."],
                     question="Does the car have a spare wheel?")
    assert asked.check("No, the Aurora EV has no spare wheel.").ok  # the passage's denial is the answer
    assert not asked.check("Yes, the car has a spare wheel.").ok  # the question's words only
    assert verifier.check("It switches off automatically after 15 minutes.").ok
    assert verifier.check("No, you do not need to remove the maintenance cover.").ok  # the passage denies it too
    assert Verifier([FAST_ZH]).check("不需要三十六小时，大约需要 30 分钟。").ok is False  # a number still fails
    # words that begin with 不 and deny nothing ("不足": insufficient) need no denying source
    brake = Verifier(["如果松开后仍然常亮，可能是刹车油液位过低或制动系统故障。"], question="红灯一直亮着，怎么回事？")
    assert brake.check("可能是刹车油不足或制动系统故障。").ok
    assert not brake.check("这不是制动系统故障。").ok


WASHER = ("The washer fluid reservoir holds 4 litres and has a blue cap with a windscreen symbol at the front left "
          "under the bonnet.")
REPAIR_KIT = "The tyre repair kit is under the boot floor."
TRACTION = ("Open Settings, then Driver assistance, then Stability, and select Traction control Off. Traction control "
            "switches back on automatically above 50 km/h and every time you start the car.")


CHARGE_LIMIT = ("Move the Charge limit slider anywhere between 50 and 100 percent. For daily driving, 80 percent is "
                "recommended because it is gentler on the battery. Set 100 percent before a long trip.")


@pytest.mark.parametrize("answer, ok", [
    ("You can set the charge limit to 50 percent, which is recommended for daily driving.", False),  # 80 is
    ("For daily driving, 80 percent is recommended.", True),
    ("The slider goes from 50 to 100 percent.", True),
    ("Set 100 percent before a long trip.", True),
    ("Set 80 percent before a long trip.", False),  # the long trip's sentence says 100
])
def test_a_number_given_to_what_another_sentence_numbers_fails(answer, ok):
    question = "How low can I set the max charge thing, and what should I leave it on for driving to work every day?"
    check = Verifier([CHARGE_LIMIT], question).check(answer)
    assert check.ok is ok, check.unsupported


ECO = ("Eco mode limits power to 150 kW, softens the accelerator response, reduces climate control power and "
       "limits the top speed to 130 km/h.")
TOW_SPEED = "Do not exceed 100 km/h, or lower local limits, when towing."
PRECONDITION = ("Preconditioning runs for up to 30 minutes. If the car is plugged in it uses power from the grid, "
                "and if it is not, it only runs when the battery is above 20 percent.")
ECO_ZH = "经济模式将功率限制为 150 千瓦，并把最高车速限制在 130 公里每小时。"


@pytest.mark.parametrize("passages, question, answer, ok", [
    # the passages' only value is for the case the driver rules out: not the answer to their case
    ([ECO], "What's the top speed of this car when I'm not in Eco mode?", "The top speed is 130 km/h.", False),
    ([ECO], "Outside Eco mode, what's the maximum power?", "Outside Eco mode the maximum power is 150 kW.", False),
    ([ECO, TOW_SPEED], "What's the speed limit when I'm not towing anything?", "The speed limit is 100 km/h.", False),
    ([ECO_ZH], "不在经济模式的时候，最高车速是多少？", "最高车速是 130 公里每小时。", False),
    ([ECO], "What's the top speed in Eco mode?", "In Eco mode the top speed is 130 km/h.", True),
    ([ECO_ZH], "经济模式的时候，最高车速是多少？", "最高车速是 130 公里每小时。", True),
    ([ECO, TOW_SPEED], "What's the speed limit when towing?", "The speed limit is 100 km/h.", True),
    # a sentence that speaks of the case without the condition too answers it
    ([PRECONDITION], "If it's not plugged in, how much charge does preconditioning need?",
     "It only runs when the battery is above 20 percent.", True),
    # an action left undone is no condition ruled out: "what if I do not fasten it?" asks about the belt
    (["Above 25 km/h a chime sounds for up to 90 seconds until the belt is fastened."],
     "What happens if I do not fasten the belt?", "Above 25 km/h a chime sounds.", True),
])
def test_a_value_for_a_case_the_driver_rules_out_is_no_answer(passages, question, answer, ok):
    check = Verifier(passages, question).check(answer)
    assert check.ok is ok, check.unsupported


@pytest.mark.parametrize("question, ruled", [
    ("What's the top speed when the car isn't in Eco?", {"eco"}),
    ("What's the speed limit when I'm not towing anything?", terms("towing")),
    ("Apart from the app, how can I unlock it?", {"app"}),
    ("不在经济模式的时候，这车极速是多少？", {"经济"}),
    ("Why won't it charge?", set()),  # a complaint, not a condition
    ("How heavy a trailer can it pull, with brakes and without?", set()),  # both cases asked
    ("What is the outside temperature limit?", set()),
])
def test_the_conditions_a_question_rules_out(question, ruled):
    assert ruled_out(question) == ruled


def test_a_quote_about_a_ruled_out_case_is_not_an_answer():
    assert not answers_kind("What's the top speed when I'm not in Eco mode?", ECO)
    assert answers_kind("What's the top speed in Eco mode?", ECO)


RANGE = ("The official WLTP range with 18-inch wheels is up to 520 km for the rear-wheel drive version and 480 km "
         "for the all-wheel drive version; 19-inch wheels reduce it by about 15 km. Real range depends on speed: at a "
         "steady 120 km/h expect around 370 km.")
WARRANTY = "The battery is covered by a warranty of 8 years or 160,000 km, whichever comes first."


@pytest.mark.parametrize("passages, question, answer, ok", [
    # the value belongs to another variant than the one the driver names and the answer repeats
    ([RANGE], "What's the range of the all-wheel drive version with 19-inch wheels?",
     "The range of the all-wheel drive version with 19-inch wheels is up to 480 km.", False),  # 480: 18-inch
    ([WARRANTY], "How long is the warranty on the 12-volt battery?",
     "The warranty on the 12-volt battery is 8 years or 160,000 km.", False),  # the drive battery's
    ([FAST], "How long does it take to charge from 0 to 100 percent at a fast charger?",
     "It takes about 30 minutes to charge from 0 to 100 percent.", False),  # 30 minutes: 10 to 80
    # the variant's own clause, or a value of the same unit the driver compares
    ([RANGE], "With 19-inch wheels, how much range do I lose?", "19-inch wheels reduce it by about 15 km.", True),
    ([RANGE], "How far at 120 on the motorway?", "At a steady 120 km/h expect around 370 km.", True),
    ([RANGE], "How far will a full battery get me if I'm sitting at 120 on the motorway?",
     "The WLTP range is up to 520 km for the rear-wheel drive version.", True),  # no variant named: context
    ([TYRES], "My front tyres are at 200 kPa, is that enough?", "No, 200 kPa is below the 240 kPa for the front.",
     True),
])
def test_a_value_of_another_variant_fails(passages, question, answer, ok):
    check = Verifier(passages, question).check(answer)
    assert check.ok is ok, check.unsupported


BLIND_SPOT = ("Radar sensors behind the rear bumper corners watch the blind spots on both sides when you drive "
              "above 10 km/h.")
CHAINS = "Do not drive faster than 50 km/h with chains fitted, and remove them as soon as the road is clear."
HOME_CHARGING = ("With an 11 kW three-phase wallbox, a full charge from empty takes about 8 hours. On a 7.4 kW "
                 "single-phase wallbox it takes about 11 hours.")
LOW_12V = ("Does the 12 volt battery need maintenance?\nThe 12 volt battery is under the maintenance cover below the "
           "bonnet. It is tested at every annual service and usually lasts four to six years.")


@pytest.mark.parametrize("passages, question, answer, ok", [
    ([BLIND_SPOT], "Up to what speed does blind spot monitoring work?", "It works up to 10 km/h.", False),
    ([BLIND_SPOT], "盲区监测在什么车速下工作？", "车速低于10公里/小时时工作。", False),
    ([BLIND_SPOT], "When does blind spot monitoring work?", "It works above 10 km/h.", True),
    ([BLIND_SPOT], "When does blind spot monitoring work?", "Blind spot monitoring needs at least 10 km/h.", True),
    ([CHAINS], "How fast can I go with chains on?", "No faster than 50 km/h.", True),  # a negated lower bound
    ([CHAINS], "How fast can I go with chains on?", "You can drive up to 50 km/h.", True),
    ([CHAINS], "How fast can I go with chains on?", "Drive above 50 km/h with chains.", False),
    ([TOW_SPEED], "How fast can I tow?", "When towing, drive at 100 km/h or less.", True),
    ([TOW_SPEED], "How fast can I tow?", "Tow at at least 100 km/h.", False),
])
def test_a_bound_turned_round_fails(passages, question, answer, ok):
    check = Verifier(passages, question).check(answer)
    assert check.ok is ok, check.unsupported


@pytest.mark.parametrize("question, answer, ok", [
    ("Can I tow 2000 kg?", "Yes, you can tow up to 1,500 kg.", False),
    ("Can I tow 2000 kg?", "No, the braked limit is up to 1,500 kg.", True),
    ("Can I tow 1,200 kg with a braked trailer?", "Yes, up to 1,500 kg with brakes.", True),
    ("Can I tow 1,200 kg with a braked trailer?", "No, it can tow up to 1,500 kg.", False),
    ("我能拖2000公斤的拖车吗？", "可以，最多可以拖1500公斤。", False),
    ("Is 2,000 kg too much for it?", "Yes, the limit is up to 1,500 kg.", True),  # yes: it is too much
    ("Can I tow 2000 kg?", "The answer to this question is yes, you can tow up to 1,500 kg.", False),
    ("Can I tow 800 kg without brakes?", "Yes, you can tow 800 kg without brakes.", False),  # their words only
    ("Can I tow 800 kg without brakes?", "No, an unbraked trailer may weigh up to 750 kg.", True),
])
def test_a_yes_or_no_must_agree_with_the_limit_the_passages_give(question, answer, ok):
    from app.answer.limits import judge_limit

    limit = judge_limit(question, [TOWING])
    check = Verifier([TOWING], question, expected_reply=limit.reply if limit else None).check(answer)
    assert check.ok is ok, check.unsupported


def test_a_yes_must_be_said_of_what_the_driver_asks_by_one_passage():
    sensors = ("The Aurora EV has 12 ultrasonic parking sensors, six in the front bumper and six in the rear. They "
               "switch on automatically when you select Reverse.")
    verifier = Verifier([sensors], question="Can the car park itself?", documents=[sensors])
    assert not verifier.check("Yes, the car can park itself using the parking sensors.").ok  # nothing parks itself
    roadside = ("Aurora roadside assistance is available 24 hours a day. You can also call from the Aurora Companion "
                "app, which shares your location.")
    app = Verifier([roadside], question="Can I call roadside assistance from the app?", documents=[roadside])
    assert app.check("Yes, you can call roadside assistance from the Aurora Companion app.").ok  # one passage says all


@pytest.mark.parametrize("question, answer, ok", [
    ("How long on a 7.4 kW wallbox from 20 to 80 percent?", "It takes about 11 hours.", False),
    ("How long on a 7.4 kW wallbox from 20 to 80 percent?", "From 20 to 80 percent it takes about 11 hours.", False),
    ("从20%充到80%，7.4千瓦的墙盒要多久？", "大约需要11个小时。", False),
    ("How long on a 7.4 kW wallbox?", "It takes about 11 hours.", True),
    ("How long from 10 to 80 percent at a fast charger?", "About 30 minutes.", True),  # FAST states the span
])
def test_a_value_for_another_span_than_the_drivers_fails(question, answer, ok):
    check = Verifier([HOME_CHARGING, FAST], question).check(answer)
    assert check.ok is ok, check.unsupported
    assert Verifier([HOME_CHARGING], question).quote_fails(HOME_CHARGING) != [] or ok


def test_a_variant_named_by_the_passage_not_the_clause_is_its_own():
    # "It usually lasts four to six years": the 12 volt battery's entry, though the clause says "it"
    question = "How long does the 12 volt battery last?"
    title, body = LOW_12V.split("\n")
    assert Verifier([body, title], question, documents=[LOW_12V]).check(
        "The 12 volt battery usually lasts four to six years.").ok
    assert not Verifier([WARRANTY], "How long is the warranty on the 12-volt battery?").check(
        "The 12-volt battery's warranty is 8 years.").ok


@pytest.mark.parametrize("question, ok", [
    ("不在经济模式的时候，这车极速是多少？", False),  # a top speed asked: the breakdown line is no answer
    ("How long does the recovery truck take to come?", False),
    ("车在路边趴窝了，救援电话是多少？", True),  # the number asked for
    ("My car broke down, what do I do?", True),  # no amount asked: calling is the answer
    ("How long is assistance free, and what number do I ring?", True),  # two parts, one of them the number
])
def test_a_phone_number_is_no_amount(question, ok):
    said = "Call roadside assistance on 800-555-0199."
    check = Verifier([ROADSIDE], question).check(said)
    assert check.ok is ok, check.unsupported
    assert answers_kind(question, said) is ok  # nor is it quoted as one


@pytest.mark.parametrize("question, ok", [
    ("What number do I call for the police?", False),
    ("报警电话是多少？", False),  # 报警: the police, whose number the passage does not give
    ("What number do I ring when the car breaks down?", True),
    ("车在路边趴窝了，救援电话是多少？", True),
    ("What's the number?", True),  # nobody's in particular: the passage's
])
def test_a_phone_number_is_the_number_of_what_the_question_asks(question, ok):
    title, body = "What should I do if the car breaks down? 车辆抛锚了怎么办？", ROADSIDE + " 道路救援电话是 800-555-0199。"
    check = Verifier([body, title], question, documents=[f"{title}\n{body}"]).check("The number is 800-555-0199.")
    assert check.ok is ok, check.unsupported


@pytest.mark.parametrize("question, model_says, passage", [
    ("How long does it take to charge from 0 to 100 percent at a fast charger?",
     "It takes about 30 minutes to charge from 0 to 100 percent.", FAST),  # the quote's 30 minutes: 10 to 80
    ("报警电话是多少？", "道路救援电话是 800-555-0199。", ROADSIDE),  # the quote's number: the breakdown line
])
def test_a_quote_about_another_variant_or_someone_elses_number_is_not_said(question, model_says, passage):
    assert _answer(model_says, question, passage, extractive=passage) == (DONT_KNOW[language(question)], "refused")


def test_a_quote_naming_the_drivers_variant_answers_it():
    # the WLTP clause has no 120, but the quote's next sentence gives the range at a steady 120 km/h
    assert Verifier([RANGE], "how much range do I get at 120 on the motorway?").quote_fails(RANGE) == []
    assert Verifier([FAST], "How long from 0 to 100 percent at a fast charger?").quote_fails(FAST)


def test_the_drivers_own_number_is_no_amount():
    assert not answers_kind("How long is the warranty on the 12-volt battery?", "The 12 volt battery is in the boot.")
    assert answers_kind("How long from 10 to 80 percent?", FAST)


@pytest.mark.parametrize("question, ok", [
    ("How much does the car weigh?", False),  # the towing entry says nothing about the car's weight
    ("How heavy a trailer can this thing actually pull?", True),
    ("What's the braked towing limit?", True),
])
def test_a_value_comes_from_a_passage_about_the_question(question, ok):
    title = "How much can the Aurora EV tow?"
    check = Verifier([TOWING, title], question, documents=[f"{title}\n{TOWING}"]).check(
        "The Aurora EV takes 1,500 kg with a braked trailer.")
    assert check.ok is ok, check.unsupported


def test_eco_modes_top_speed_is_not_said_for_the_car_outside_eco():
    said, decision = _answer("The top speed of this car when you're not in Eco mode is 130 km/h.",
                             "What's the top speed of this car when I'm not in Eco mode?", ECO)
    assert (said, decision) == (DONT_KNOW["en"], "refused")


@pytest.mark.parametrize("passages, question, answer, ok", [
    ([WASHER], "where do I top up the screen wash?", "It is at the front left under the bonnet.", True),
    ([WASHER], "where do I top up the screen wash?", "The reservoir is in the boot.", False),  # a place nowhere said
    ([WASHER, REPAIR_KIT], "Where's the fuse box?", "The fuse box is under the boot floor.", False),  # the kit's place
    ([REPAIR_KIT], "where's the tyre repair kit?", "You'll find it under the boot floor.", True),
    # the driver's own place is theirs to mention, unless it is what they ask
    ([REPAIR_KIT], "I've got a puncture in the snow, what now?", "Use the tyre repair kit in the snow.", True),
    ([REPAIR_KIT], "The socket in the boot is dead. Where's the fuse box?", "The fuse box is in the boot.", False),
    ([WASHER], "洗涤液在哪里加？", "洗涤液壶位于仪表板下方。", False),
    # two words the passage writes as one
    (["The cabin filter sits behind the glovebox."], "Where is the cabin filter?", "It is behind the glove box.", True),
    (["The cabin filter sits behind the glove box."], "Where is the cabin filter?", "It is behind the glovebox.", True),
    (["The cabin filter sits behind the glovebox."], "Where is the cabin filter?", "It is behind the box.", False),
])
def test_a_place_must_be_said_about_the_same_thing(passages, question, answer, ok):
    check = Verifier(passages, question).check(answer)
    assert check.ok is ok, check.unsupported
    assert ok or check.unsupported[0].kind == "place"


@pytest.mark.parametrize("answer, ok", [
    ("Yes, you should remember to switch the traction control back on.", False),  # the driver's words echoed
    ("Yes, you do.", False),
    ("No. It switches back on automatically every time you start the car.", True),
    ("No, it comes back on by itself above 50 km/h.", True),  # a supported number
    ("不用，每次启动都会自动打开。", False),  # nothing of the (English) passage
])
def test_a_yes_or_no_must_rest_on_something_the_passages_say(answer, ok):
    question = "I turned the traction control off in a muddy field. Do I need to remember to switch it back on?"
    check = Verifier([TRACTION], question).check(answer)
    assert check.ok is ok, check.unsupported


def test_a_bare_yes_is_checked_with_the_sentence_after_it():
    question = "Do I need to remember to switch traction control back on?"
    said, decision = _answer("Yes. It switches back on automatically every time you start the car.", question,
                             TRACTION)
    assert (said, decision) == ("Yes. It switches back on automatically every time you start the car.", "answered")
    said, decision = _answer("Yes. You need to remember that.", question, TRACTION,
                             extractive="Traction control switches back on automatically every time you start the car.")
    assert (said, decision) == ("Traction control switches back on automatically every time you start the car.",
                                "extractive")


@pytest.mark.parametrize("question, quote, ok", [
    ("where do I top up the screen wash?", WASHER, True),
    ("where's the fuse box?", "If the breaker trips even at low current, stop using that socket.", False),
    ("where do I set the charge limit?", "Open Charging > Charge limit and move the slider.", True),  # a menu
    ("座椅通风在哪儿开？", "座椅加热有三档。", False),
])
def test_a_where_question_is_answered_by_a_place(question, quote, ok):
    assert answers_kind(question, quote) is ok


class _ScriptedLLM:
    """Says a fixed answer word by word, as the runtime's LLM streams it."""

    def __init__(self, answer: str):
        self.answer = answer

    def encode(self, text, bos=True):  # a token per word is all refusal_starts needs
        return [len(w) for w in text.split()]

    def generate(self, prompt_ids, max_new_tokens, sampling, stop, cancel, placed=None, draft=False,
                 ban_first=frozenset()):
        from runtime.llm import Delta, GenerationResult

        class Gen:
            result = None

            def __iter__(gen):
                words = self.answer.split(" ")
                for i, w in enumerate(words):
                    yield Delta(i, w if i == 0 else " " + w)
                gen.result = GenerationResult(list(range(len(words))), self.answer, "stop", 10, 0, 0.1, 0.1, 0.1)

        return Gen()


SEALANT = ("Use the sealant kit only for small punctures. After sealing, drive no further than 200 km. "
           "Drive at up to 80 km/h until the tyre is replaced.")


def _two_part_answer(model_says: str, question="I just used the goo kit. How far can I drive on it now, and how fast?",
                     passage=SEALANT, supplement=None, part_quote="") -> tuple[str, str]:
    """(the answer's text, the grounding decision) for a scripted model answer to a two-part question."""
    supplement = supplement or [("How far can I drive on it now", "After sealing, drive no further than 200 km."),
                                ("how fast?", "Drive at up to 80 km/h until the tyre is replaced.")]
    return _answer(model_says, question, passage, supplement=supplement, part_quote=part_quote)


def _answer(model_says: str, question: str, passage: str, **plan) -> tuple[str, str]:
    """(the answer's text, the grounding decision) for a scripted model answer; `plan`: more AnswerPlan
    fields (the extractive quote, the parts' sentences)."""
    from app.answer.pipeline import AnswerPlan, GroundedGeneration
    from runtime.sampling import SamplingParams

    plan = AnswerPlan(question, language(question), voice=False, grounded=True, prompt_ids=[1, 2, 3], max_tokens=64,
                      passages=[Passage.of(1, _hit("entry", "The question?\n" + passage, 0.6, 8.0))],
                      timings={"plan_ms": 500.0}, **plan)
    gen = GroundedGeneration(_ScriptedLLM(model_says), plan, SamplingParams(temperature=0.0))
    text = "".join(gen)
    timings = gen.result.timings  # both from the question's arrival: the plan's 500 ms included
    assert timings["total_ms"] >= timings["first_sentence_ms"] >= 500
    return text, gen.result.grounding.decision


def test_a_part_the_model_left_out_is_said_in_the_passages_words():
    assert _two_part_answer("You can drive up to 200 km.") == (
        "You can drive up to 200 km. Drive at up to 80 km/h until the tyre is replaced.", "answered")


def test_an_answer_to_every_part_is_left_as_the_model_said_it():
    said = "You can drive up to 200 km, at up to 80 km/h."
    assert _two_part_answer(said) == (said, "answered")


def test_a_value_of_the_kind_asked_is_not_every_value_asked():
    # the step for a short press is a km/h value, but the part asked about holding the button
    rule = "短按加号或减号每次调整 1 公里每小时，长按每次调整 5 公里每小时。"
    question = "按一下加号速度能加多少？按住不放又是加多少？"
    text, decision = _two_part_answer("按一下加号速度能加1公里每小时。", question, rule,
                                      supplement=[("按住不放又是加多少？", rule)])
    assert (text, decision) == ("按一下加号速度能加1公里每小时。" + rule, "answered")


def test_an_announcement_is_said_only_with_what_it_announces():
    question = "How do I seal a puncture and how far can I go?"
    # the steps are the passage's: said with the line that announces them
    text, decision = _answer("Do this:\n- Use the sealant kit only for small punctures.\n- After sealing, drive no "
                             "further than 200 km.", question, SEALANT)
    assert decision == "answered" and text.startswith("Do this:") and "200 km" in text
    # the steps the passages do not support are left out, and the announcement with them: no answer is left
    text, decision = _answer("Follow these steps:\n- Inflate the tyre to 300 kPa.\n- Drive 900 km to a garage.",
                             question, SEALANT)
    assert decision != "answered" and "Follow these steps" not in text


def test_when_the_model_finds_no_answer_the_sentence_for_each_part_is_said():
    quote = "After sealing, drive no further than 200 km. Drive at up to 80 km/h until the tyre is replaced."
    assert _two_part_answer("I don't know.", part_quote=quote) == (quote, "extractive")
    text, decision = _two_part_answer("I don't know.")  # no sentence for every part: the refusal stands
    assert decision == "refused" and "don't know" in text


def test_a_yes_or_no_the_model_finds_no_answer_to_is_answered_by_its_one_entry():
    # the driver's 50 is not in the entry, so a small model says it does not know; the range answers it
    lane = ("Lane Keep Assist gently steers the car back if you drift towards a lane marking, between 60 and 180 "
            "km/h. It can be adjusted under Settings.")
    quote = "Lane Keep Assist gently steers the car back if you drift towards a lane marking, between 60 and 180 km/h."
    read = Confidence(0.6, 1.0, 0.8)  # the embedder read the question
    assert _answer("I don't know.", "Does lane keep assist work at 50 km/h?", lane, extractive=quote,
                   confidence=read) == (quote, "extractive")
    _, decision = _answer("I don't know.", "At what speed does lane keep assist work?", lane, extractive=quote,
                          confidence=read)
    assert decision == "refused"  # no yes or no: the model's word stands
    from app.answer.pipeline import AnswerPlan

    plan = lambda passages, confidence: AnswerPlan("Does lane keep assist work at 50 km/h?", "en", voice=False,
                                                   grounded=True, passages=passages, extractive=quote,
                                                   confidence=confidence)
    one = [Passage.of(1, _hit("entry", "The question?\n" + lane, 0.6, 8.0))]
    assert plan(one, read).refusal_quote == quote
    assert plan(one * 2, read).refusal_quote == ""  # no entry leads clearly: another entry's 3.6 kW is no limit
    assert plan(one, Confidence(None, 1.0, 30.0)).refusal_quote == ""  # BM25 alone chose the entry


def test_a_part_asking_about_a_charge_wants_to_hear_the_price_or_that_it_is_free():
    assert not answers_kind("这个要收钱吗？", "Aurora 道路救援电话是 800-555-0199。")
    assert answers_kind("这个要收钱吗？", "自首次上牌起 3 年内救援免费。")
    assert not answers_kind("And how strong is the strongest setting?", "The strongest setting is High.")
    assert answers_kind("And how strong is the strongest setting?", "High: strong deceleration of up to about 0.2 g.")


def test_the_sentence_for_a_part_is_one_that_states_what_the_part_asks():
    from functools import partial

    from app.answer.extractive import best_sentence

    towing = ("With a trailer attached, the trailer is shown on the display. The maximum vertical load on the tow "
              "ball is 75 kg. Do not exceed 100 km/h, or lower local limits, when towing.")
    part = "when I've got an actual trailer on, what's the fastest I should go?"
    assert best_sentence(part, towing, keep=partial(answers_kind, part)) == (
        "Do not exceed 100 km/h, or lower local limits, when towing.")
    assert best_sentence(part, "The trailer is shown on the display.", keep=partial(answers_kind, part)) == ""


def test_a_chunk_is_shown_with_the_chunks_of_its_section_that_best_match_the_question():
    from app.answer.plan import _fit

    class Words:
        def encode(self, text):
            return text.split()

    # a reference section indexed as four windows (the 2nd and 3rd overlap by " Default: 31 days."); the
    # search's hit is the 2nd, the value asked for is in the 3rd
    doc = ("SESSION_REFRESH Whether the cookie is sent with every response. PERMANENT_LIFETIME How long a "
           "permanent session lives. Default: 31 days. Can be an int. LOGGER_NAME The logger's name.")
    pieces = ["SESSION_REFRESH Whether the cookie is sent with every response.",
              "PERMANENT_LIFETIME How long a permanent session lives. Default: 31 days.",
              "Default: 31 days. Can be an int.", "LOGGER_NAME The logger's name."]
    cosines = [0.2, 0.6, 0.7, 0.1]
    chunks = [Hit(i, t, "config.html", "config.html", "Config > Builtin", None, c, {"dense": c},
                  doc.index(t), doc.index(t) + len(t)) for i, (t, c) in enumerate(zip(pieces, cosines))]

    class KB:
        def section_chunks(self, hit, query):
            return chunks if hit.chunk_id < len(chunks) else [hit]

        def section_text(self, hit):
            return doc if hit.chunk_id < len(chunks) else hit.text

    question = "How long does a permanent session last?"
    shown = _fit(Words(), KB(), question, parts(question), [chunks[0]], 500, window=20)[0].body
    # the hit, then the best others about as relevant as the best while they fit, in document order,
    # overlaps merged
    assert shown == ("SESSION_REFRESH Whether the cookie is sent with every response.\n\nPERMANENT_LIFETIME How "
                     "long a permanent session lives. Default: 31 days.")
    assert _fit(Words(), KB(), question, parts(question), [chunks[1]], 500, window=16)[0].body == (
        "PERMANENT_LIFETIME How long a permanent session lives. Default: 31 days. Can be an int.")
    # with room for all: those far less relevant than the best are not shown (BUDGET_MARGIN)
    assert _fit(Words(), KB(), question, parts(question), [chunks[1]], 500, window=100)[0].body == (
        "PERMANENT_LIFETIME How long a permanent session lives. Default: 31 days. Can be an int.")
    no_room = _fit(Words(), KB(), question, parts(question), [chunks[0]], 16, window=100)
    assert no_room[0].body == chunks[0].text  # the chunk alone
    alone = Hit(9, "A section of one chunk.", "a.md", "a.md", "A", None, 0.3, {"dense": 0.3})
    assert _fit(Words(), KB(), question, parts(question), [alone], 500)[0].body == alone.text

    class Unread(KB):  # the embedder cannot read the question: nothing ranks the chunks by meaning
        def section_chunks(self, hit, query):
            return [Hit(c.chunk_id, c.text, c.source, c.name, c.heading, None, 0.0, {}, c.start, c.end) for c in chunks]

    assert _fit(Words(), Unread(), question, parts(question), [chunks[1]], 500, window=100)[0].body == chunks[1].text


def test_a_window_is_widened_to_its_whole_short_section_only_for_a_value_it_lacks():
    from app.answer.plan import _fit

    class Words:
        def encode(self, text):
            return text.split()

    class KB:
        def section_chunks(self, hit, query):
            return [hit]

        def section_text(self, hit):
            return hit.text + " Do not exceed 100 km/h when towing."

    hit = _hit("", "The maximum vertical load on the tow ball is 75 kg.", 0.6, 8.0)
    hit.entry_id, hit.heading = None, "Driving > Towing a trailer"
    both = "How much can the tow ball take? And what's the fastest I should go?"
    assert _fit(Words(), KB(), both, parts(both), [hit], 500)[0].body.endswith("Do not exceed 100 km/h when towing.")
    load = "How much can the tow ball take?"
    assert _fit(Words(), KB(), load, parts(load), [hit], 500)[0].body == hit.text  # stated: no more text to misread
    fastest = "And what's the fastest I should go?"
    assert _fit(Words(), KB(), fastest, parts(fastest), [hit], 20)[0].body == hit.text  # no room


def _lacks(kb, question: str, passages) -> dict[str, str]:
    """The question's topic words the KB lacks, found as plan_answer finds them."""
    from app.answer.plan import _places, _topic_words, _unknown_words

    words = _topic_words(question)
    return _unknown_words(words, _places(kb, words), passages)


def _quotes(kb, question: str, passages) -> bool:
    """Whether plan_answer may quote the first passage, on its rarest-word test."""
    from app.answer.plan import _places, _quotable, _rarest, _topic_words

    # a car KB's profile lists "car" among the words every question may use (aurora_profile.json)
    return _quotable(_rarest(_places(kb, _topic_words(question, {"car"}))), question, passages)


def test_the_drivers_own_numbers_are_no_words_the_kb_lacks():
    # "can I tow 2000 kg?" asks about towing: a 2000 the KB never writes is not a topic it lacks, nor is
    # "heaviest", which says what kind of answer is wanted

    class KB:  # the lexical index of a KB about towing
        def search(self, word, k, mode):
            return [TOWING] if word.lower() in TOWING.lower() else []

    passages = [Passage.of(1, _hit("towing", TOWING, 0.6, 8.0))]
    assert _lacks(KB(), "Can I tow 2000 kg?", passages) == {}
    assert _lacks(KB(), "What's the heaviest trailer I can tow?", passages) == {}
    assert set(_lacks(KB(), "Can I tow a caravan?", passages).values()) == {"caravan"}
    # nor is a unit the reader gives no value in: "一吨二" translated as "1.2 tons"
    assert _lacks(KB(), "Can I tow a trailer of 1.2 tons?", passages) == {}



class _Lexical:
    """The lexical index of a KB of a few entries: each hit is an entry holding the word."""

    def __init__(self, *entries):
        self.entries = entries

    def search(self, words, k, mode):  # any of the words, as BM25 ORs them
        return [_hit("", e, 0.6, 8.0) for e in self.entries if any(w in e.lower() for w in words.lower().split())][:k]


SOS = ("The red SOS button is in the overhead console. If you press it by accident, press it again within 10 seconds "
       "to cancel the call.")
LIMIT_AND_WARRANTY = ("Move the Charge limit slider anywhere between 50 and 100 percent. The battery warranty covers 8 years "
                "or 160,000 km.")


@pytest.mark.parametrize("question, lacks", [
    # a word the KB lacks, one among five: no topic (plan_answer's share rule), but lacking all the same
    ("Can I cancel the SOS call if I press it by mistake?", {"mistake"}),
    ("How low can I set the, uh, the max charge thing?", set()),  # how they talk
    ("Honestly, how low can the charge limit actually go?", set()),
    ("What's the battery warranty in years and kilometres?", set()),  # the KB writes km
    ("Can I cancel the SOS call from my watch?", {"watch"}),
])
def test_vague_words_units_and_manner_are_no_words_the_kb_lacks(question, lacks):

    passages = [Passage.of(1, _hit("sos", SOS, 0.6, 8.0)), Passage.of(2, _hit("limit", LIMIT_AND_WARRANTY, 0.6, 8.0))]
    kb = _Lexical(SOS, LIMIT_AND_WARRANTY)
    assert set(_lacks(kb, question, passages).values()) == lacks


ATTENTION = "An infrared camera on the steering column watches your eyes and head position."
CHILD_SEAT = "Switch off the passenger airbag before you fit a rear-facing child seat in the front."


def test_a_hyphenated_name_the_kb_never_writes_is_a_word_it_lacks():
    # "head" and "display" are both in the KB, "head-up" nowhere: the question is about something it lacks
    from app.answer.plan import _unknown_compounds

    kb = _Lexical(ATTENTION, CHILD_SEAT, "The driver display shows the speed.")
    assert _unknown_compounds(kb, "Does the car have a head-up display?") == {"head-up": "head-up"}
    assert _unknown_compounds(kb, "Can I put a rear-facing seat in the front?") == {}
    assert _unknown_compounds(kb, "Where is the 12-volt battery?") == {}  # a number: facts.py reads it


LANE = ("Start Highway Assist with the lane button on the left steering wheel spoke. If the car detects no steering "
        "input for 15 seconds it warns you.")
NO_SPARE = ("The Aurora EV has no spare wheel; a puncture repair kit with sealant and a compressor is under the "
            "boot floor.")
HEATED_WHEEL = "The heated steering wheel switches off after 30 minutes."
PRESSURES = "With a normal load, inflate the front tyres to 240 kPa and the rear wheels to 260 kPa."


def test_a_quote_comes_from_a_passage_naming_what_the_question_is_most_about():
    # "wheel" is in four entries, "spare" in one: the lane-keeping entry says nothing about a spare wheel

    kb = _Lexical(LANE, NO_SPARE, HEATED_WHEEL, PRESSURES)
    passages = lambda *texts: [Passage.of(i + 1, _hit("", t, 0.6, 8.0)) for i, t in enumerate(texts)]
    spare = "Does the car have a spare wheel?"
    assert not _quotes(kb, spare, passages(LANE, PRESSURES)) and _quotes(kb, spare, passages(NO_SPARE))
    assert _quotes(kb, "Does the heated steering wheel switch itself off?", passages(HEATED_WHEEL))
    assert _quotes(kb, "Is there a sunroof?", passages(LANE))  # nothing the KB names: other checks refuse it
    # not a yes or no: a passage without the word may be a paraphrase, unless another passage names it
    pressure = "What pressure should the spare wheel be?"
    assert _quotes(kb, pressure, passages(PRESSURES, LANE))
    assert not _quotes(kb, pressure, passages(PRESSURES, NO_SPARE))
    assert asks_yes_no(spare) and asks_yes_no("电池质保能转给下一个车主吗？")
    assert not asks_yes_no("How long does the SOS call give me to cancel?") and not asks_yes_no("胎压应该打多少？")


TREAD = ("The legal minimum tread depth in most countries is 1.6 mm. For safety, Aurora recommends replacing summer "
         "tyres at 3 mm and winter tyres at 4 mm.")
HEAT_PUMP = "The heat pump is most efficient above minus 10 degrees Celsius. Below that, a high-voltage heater helps out."


@pytest.mark.parametrize("passages, answer, ok", [
    ([TYRES], "The rear tyres need 240 kPa.", False),  # the front's
    ([TYRES], "Inflate the rear tyres to 260 kPa (38 psi).", True),
    ([TYRES], "The front tyres need 240 kPa and the rear 260 kPa.", True),
    ([TYRES], "The front tyres need 260 kPa and the rear 240 kPa.", False),
    ([TYRES], "With a full load, use 260 kPa at the front.", True),  # the list that ends in its names
    ([TYRES], "With a full load, use 290 kPa at the front.", False),
    ([TYRES, "Switch the compressor on until the tyre reaches 240 kPa."], "The rear tyres need 240 kPa.", False),
    ([TREAD], "Replace winter tyres at 3 mm.", False),  # the summer tyres'
    ([TREAD], "Winter tyres should be replaced at 4 mm.", True),
    ([TREAD], "The legal minimum tread depth is 1.6 mm.", True),
    ([RANGE], "The rear-wheel drive version does up to 480 km.", False),
    ([RANGE], "The all-wheel drive version does up to 480 km with 18-inch wheels.", True),
    ([FAST_ZH], "从百分之十充到八十大约需要三十分钟。", True),  # a span, not a list
])
def test_a_number_of_a_list_belongs_to_its_own_thing(passages, answer, ok):
    check = Verifier(passages, "What does the manual say?").check(answer)
    assert check.ok is ok, check.unsupported


@pytest.mark.parametrize("answer, ok", [
    ("The heat pump is most efficient above minus 10 degrees Celsius.", True),
    ("It works best above -10 °C.", True),
    ("The heat pump is most efficient above 10 degrees Celsius.", False),  # the sign is the fact
    ("热泵在零下十摄氏度以上效率最高。", True),
    ("热泵在10摄氏度以上效率最高。", False),
])
def test_a_negative_number_keeps_its_sign(answer, ok):
    passages = [HEAT_PUMP, "热泵在零下 10 摄氏度以上效率最高。"]
    check = Verifier(passages, "Above what temperature is the heat pump most efficient?").check(answer)
    assert check.ok is ok, check.unsupported


def test_a_sentence_starting_with_a_pronoun_is_about_the_one_before():
    passage = "Every Aurora EV has a heat pump. It is most efficient above minus 10 degrees Celsius."
    check = Verifier([passage], "down to what temperature does the heat pump work well?").check(
        "The heat pump works well down to minus 10 degrees Celsius.")
    assert check.ok, check.unsupported
    assert not Verifier([passage], "How cold can the boot get?").check("The boot gets down to minus 10 degrees.").ok


def test_a_bare_number_naming_the_thing_is_no_other_variant():
    # "the 360 camera": its entry's clause says "below 15 km/h" without repeating the 360
    entry = ("How do I use the 360-degree camera?\nThe 360-degree camera shows a bird's-eye view of the car. Press the "
             "camera button on the centre console at speeds below 15 km/h.")
    title, body = entry.split("\n")
    verifier = Verifier([body, title], "Up to what speed does the 360 camera work?", documents=[entry])
    assert verifier.check("The 360-degree camera works up to 15 km/h.").ok


AIRBAG = "To switch off the airbag, open Settings, then Safety, then Passenger airbag, select Off and confirm."


@pytest.mark.parametrize("answer, ok", [
    ("Open Settings, then Safety, then Passenger airbag, and select Off.", True),
    ("Open Settings > Safety > Passenger airbag and select Off.", True),  # the same steps in the other style
    ("To switch it off, open Settings, then Vehicle, then Passenger airbag.", False),  # Vehicle is the tyres' menu
    ("Open Settings, then Passenger airbag.", False),  # a step left out: no such item under Settings
    ("在中控屏上打开“设置”→“安全”→“乘客安全气囊”。", False),  # items of no passage
])
def test_a_menu_path_takes_the_passages_steps(answer, ok):
    check = Verifier([AIRBAG, TPMS], "How do I turn off the passenger airbag?").check(answer)
    assert check.ok is ok, check.unsupported


def test_inflected_words_are_one_term():
    # "fully loaded" finds "a full load": the quote gives the full-load sentence too
    assert terms("loaded tyres charging") == terms("load tyre charge")
    assert "With a full load" in extract_answer("with the car fully loaded, what should the front tyres be at?", TYRES)


def test_a_place_inside_a_menu_path_is_the_passages():
    passage = "然后把车挂到 P 挡，在中控屏上打开“设置”→“车辆”→“轮胎”，点击“重置胎压监测”并确认。"
    check = Verifier([passage], "胎压监测怎么复位？").check("然后挂到P挡，在中控屏上打开“设置”→“车辆”→“轮胎”，点击“重置胎压监测”。")
    assert check.ok, check.unsupported


@pytest.mark.parametrize("answer, ok", [("The answer is: 3mm.", False), ("The answer is: 4 mm.", True)])
def test_a_number_said_of_nothing_is_said_of_what_the_question_names(answer, ok):
    check = Verifier([TREAD], "at what tread depth do the winter tyres need replacing?").check(answer)
    assert check.ok is ok, check.unsupported


def test_a_number_no_list_states_is_nobody_elses():
    # the question names the front tyres, but the 20 percent is said of no list's thing
    passage = ("The amber symbol means at least one tyre is 20 percent or more below its recommended pressure. "
               "Inflate them when cold to 240 kPa (35 psi) at the front and 260 kPa (38 psi) at the rear.")
    check = Verifier([passage], "The tyre light came on. What should I pump them up to, front and back?").check(
        "It means at least one of your tyres is 20 percent or more below its recommended pressure.")
    assert check.ok, check.unsupported


def test_the_time_to_the_first_sentence_is_reported_in_its_parts():
    """retrieval + the rest of the plan + placement + prefill + the model's tokens + the checks = the time to the
    first sentence, each part as the answer measured it (a model whose prefill takes 50 ms)."""
    import time

    from app.answer.pipeline import AnswerPlan, GroundedGeneration
    from app.bench.answers import FIRST_PARTS, first_parts, summarize
    from runtime.sampling import SamplingParams

    class SlowPrefill(_ScriptedLLM):
        def generate(self, *args, **kwargs):
            inner = super().generate(*args, **kwargs)

            class Gen:
                result = None

                def __iter__(gen):
                    time.sleep(0.05)
                    yield from inner
                    gen.result = inner.result
            return Gen()

    plan = AnswerPlan("How far can I drive after sealing?", "en", voice=True, grounded=True, prompt_ids=[1, 2, 3],
                      max_tokens=64, passages=[Passage.of(1, _hit("entry", "The question?\n" + SEALANT, 0.6, 8.0))],
                      timings={"retrieval_ms": 120.0, "plan_ms": 500.0})
    gen = GroundedGeneration(SlowPrefill("You can drive no further than 200 km. Then replace the tyre."), plan,
                             SamplingParams(temperature=0.0))
    assert "200 kilometres" in "".join(gen)  # spoken
    timings = gen.result.timings
    parts = first_parts({**timings, "prefill_ms": 50.0})  # the scripted result reports 100 ms: the time slept
    assert parts["retrieval"] == 120.0 and parts["prompt"] == 380.0 and parts["prefill"] == 50.0
    assert parts["verification"] > 0 and parts["draft"] >= 0
    assert abs(sum(parts.values()) - timings["first_sentence_ms"]) < 5  # the sleep's own overshoot aside
    summary = summarize([{"answerable": True, "refused": False, "grade": "correct", "lang": "en", "unsupported": [],
                          "first_sentence_ms": float(ms), "first_parts": dict.fromkeys(FIRST_PARTS, float(ms))}
                         for ms in range(1, 11)])
    assert summary["first_sentence_ms"] == {"median": 5.5, "p90": 9.0, "max": 10.0}
    assert summary["first_parts"]["draft"] == {"median": 5.5, "p90": 9.0, "max": 10.0}


def test_a_spoken_first_clause_is_said_early_only_in_the_passages_words():
    from app.answer.pipeline import AnswerPlan, GroundedGeneration
    from runtime.sampling import SamplingParams

    def pieces(model_says: str) -> list[str]:
        plan = AnswerPlan("How far can I drive after sealing the tyre?", "en", voice=True, grounded=True,
                          prompt_ids=[1, 2, 3], max_tokens=64,
                          passages=[Passage.of(1, _hit("entry", "The question?\n" + SEALANT, 0.6, 8.0))])
        return list(GroundedGeneration(_ScriptedLLM(model_says), plan, SamplingParams(temperature=0.0)))

    # the passage's words: said at the comma, the rest of the sentence after it without a capital
    assert pieces("After sealing the tyre with the kit, drive no further than 200 km.") == [
        "After sealing the tyre with the kit,", " drive no further than 200 kilometres."]
    # words of the model's own: the clause waits and is checked with its sentence
    assert pieces("To stay safe until a mechanic looks at it, drive no further than 200 km.") == [
        "To stay safe until a mechanic looks at it, drive no further than 200 kilometres."]
