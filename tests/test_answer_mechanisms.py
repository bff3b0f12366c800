"""The answer layer's domain-neutral mechanisms, on text from three kinds of knowledge base (a car's FAQ, a
web framework's docs, an operating system's installation guide): limits answered as limits, identifiers
and names checked against the passages, repair of a refusal, the KB's profile in the prompt."""

from __future__ import annotations

import pytest

from app.answer.extractive import extract_answer
from app.answer.facts import extract_facts, normalize
from app.answer.identifiers import identifiers
from app.answer.limits import comparison_note, judge_limit
from app.answer.question import asks_yes_no
from app.answer.relevance import in_context
from app.answer.sentences import split_sentences
from app.answer.verify import Verifier

CHAINS = "Snow chains fit the rear wheels only. Do not drive faster than 50 km/h with chains fitted."
TOWING = ("The car can tow a braked trailer of up to 1,500 kg and an unbraked trailer of up to 750 kg. "
          "The maximum vertical load on the tow ball is 75 kg.")
MEMORY = ("You must have at least 780MB of memory and 1160MB of hard disk space to perform a normal installation. "
          "Installation images that support the graphical installer require more memory.")
CHARGE_ZH = "拖动“充电上限”滑块，可以设置在百分之五十到百分之一百之间。日常使用建议设为百分之八十。"
ACC_ZH = "自适应巡航可在 30 到 180 公里每小时之间使用。"
SLIDER = "Move the Charge limit slider anywhere between 50 and 100 percent."
BOOSTER = "Children under 150 cm must travel in a booster seat."
BLIND_SPOT = "Radar sensors watch the blind spots when you drive above 10 km/h."
SWAP = "With swap enabled, it is possible to install Debian with as little as 350MB."
TANK = "The water tank holds as much as 1.5 litres."
UPLOADS = ("To limit the size of uploads, set the MAX_CONTENT_LENGTH config key. If a larger file is transmitted, "
           "Flask will raise a RequestEntityTooLarge exception.")


def _reply(question: str, passage: str) -> str | None:
    limit = judge_limit(question, [passage])
    return limit.reply if limit else None


@pytest.mark.parametrize("question, passage, reply", [
    # a bare number takes the bound's unit
    ("We're off skiing. Is it alright to keep doing 60 with chains on?", CHAINS, "no"),
    ("Can I drive at 30 mph with chains?", CHAINS, "yes"),  # 30 mph = 48 km/h
    # ... the unit of a value the passage bounds, not of what the chains are fitted to
    ("With chains on my wheels, can I keep doing 60?",
     "Snow chains can only be used on 18-inch wheels. Do not drive faster than 50 km/h with chains fitted.", "no"),
    ("My mate's trailer is about 1,200 kilos with brakes. Can the car pull that?", TOWING, "yes"),  # the braked one
    ("Can I tow 2000 kg?", TOWING, "no"),  # above both
    ("My old laptop only has about 700 megs of RAM. Will the installer run?", MEMORY, "no"),  # at least 780MB
    ("I have 2 GB of memory. Is that enough for a normal installation?", MEMORY, "yes"),  # GB against MB
    ("我想把充电上限调到百分之四十，能设这么低吗？", CHARGE_ZH, "no"),  # outside a range
    ("高速上我开到一百六，自适应巡航还能开着用吗？", ACC_ZH, "yes"),  # 一百六 is 160, inside it
    # "between 50 and 100 percent" says its unit once, after the second end
    ("我想把充电上限调到百分之四十，能设这么低吗？", SLIDER, "no"),
    ("Can I set the limit to 70%?", SLIDER, "yes"),
    # "as little as" names the least that will do, "as much as" the most
    ("I have 400 MB of RAM and swap on. Can I install Debian?", SWAP, "yes"),
    ("I have 256 MB of RAM and swap on. Can I install Debian?", SWAP, "no"),
    ("Can I pour 2 litres into the tank?", TANK, "no"),
    ("Can I pour 1 litre into the tank?", TANK, "yes"),
    # a deadline is an upper bound; "shouldn't be smaller than" a lower one (an amount right after a Chinese
    # character is an amount all the same)
    ("I was on the phone for three minutes before selecting Drive. Can I still drive off?",
     "Press the brake pedal and select Drive within 2 minutes.", "no"),
    ("我打算 swap 只分256MB，可以吗？", "It also shouldn't be smaller than 512MB, in most cases.", "no"),
    # spoken Chinese: a speed said as its distance (车速二十公里 is 20 km/h), two neighbouring digits
    # as "this or the next" (五六米: 5 or 6 metres, each beyond 3; not 56)
    ("我车速大概二十公里，能打开全景影像吗？", "The 360-degree view can be shown at up to 15 km/h.", "no"),
    # ... or bare after a word for speed; "limits ... to" is an upper bound
    ("开着经济模式，车速能跑到140吗？", "Eco mode limits power to 150 kW and limits the top speed to 130 km/h.", "no"),
    ("开着经济模式，车速能跑到120吗？", "Eco mode limits power to 150 kW and limits the top speed to 130 km/h.", "yes"),
    ("Can I set the charge limit to 90%?", "For daily use, set the charge limit to 80 percent.", None),  # advice
    ("揣着钥匙走出去五六米远，车会自己锁上吗？",
     "The car locks itself when the key fob or the phone key is more than about 3 metres away.", "yes"),
    # of two amounts, the one said with the asking part's words
    ("The PC has 8 GB of RAM and I figured a 256 MB swap partition is plenty. Is that in line with the swap advice?",
     "Swap shouldn't be smaller than 512MB, in most cases.", "no"),
    ("揣着钥匙走出去三四十米远，车会自己锁上吗？", "The car locks itself when the key is more than 35 metres away.",
     None),  # 30 or 40 metres: one each side of the bound
    # a speed said with its "per hour" first (每小时二十五公里 is 25 km/h; not a distance)
    ("下坡的时候也就每小时二十五公里，能开着定速巡航吗？", "Cruise control works between 30 and 110 km/h.", "no"),
])
def test_a_users_amount_is_held_against_the_passages_limit(question, passage, reply):
    assert _reply(question, passage) == reply


DISK = ("A standard installation takes up 1242MB of disk space. A minimal base installation, without the desktop "
        "task, will take 1012MB.")
CHARGING = "Charging from 10 to 80 percent at a fast charger takes 30 minutes."


@pytest.mark.parametrize("question, passage, reply", [
    # what a thing takes, needs or uses is a minimum the user's amount must reach
    ("I only have a 5 GB partition free. Would a minimal base installation fit?", DISK, "yes"),
    ("I have 900 MB free. Would a minimal base installation fit?", DISK, "no"),
    ("Is 20 minutes at the fast charger enough?", CHARGING, "no"),
    ("Can I be done at the fast charger in 45 minutes?", CHARGING, "yes"),
    # a negation the bound's sentence says too names the thing, it does not turn the question round
    ("I have 5 GB free. Would a minimal base installation, without the desktop task, fit?", DISK, "yes"),
])
def test_what_a_thing_takes_is_the_least_the_users_amount_must_be(question, passage, reply):
    assert _reply(question, passage) == reply



@pytest.mark.parametrize("question, reply", [
    # "does it meet ..." asks whether the amount is enough: the value the table row names is the one to reach
    ("I can spare a 16 GB partition. Does that meet the recommended hard drive size for a desktop install?", "yes"),
    ("I can spare an 8 GB partition. Does that meet the recommended hard drive size for a desktop install?", "no"),
])
def test_an_amount_asked_if_it_meets_a_value_is_held_against_the_value_named(question, reply):
    limit = judge_limit(question, [REQUIREMENTS])
    assert limit.reply == reply and "Hard Drive" in limit.bound
    # ... before a bound further down on another thing (memory), which would have said yes to both
    limit = judge_limit(question, [f"{REQUIREMENTS}\n\n{SWAP}"])
    assert limit.reply == reply and "Hard Drive" in limit.bound


@pytest.mark.parametrize("amount, reply", [(1200, "yes"), (1800, "no")])
def test_a_chinese_verbs_potential_complement_asks_whether_it_can_be_done(amount, reply):
    question = f"我的带刹车拖车装满了大概{amount}公斤，这车拖得动吗？"  # 拖得动: can it pull
    about = f"My braked trailer weighs about {amount} kg loaded. Can the car tow it?"  # its translation
    assert judge_limit(question, [TOWING], about).reply == reply


KETTLE = ("The keep-warm mode holds the water at 80 degrees Celsius. Frost protection switches the heater on "
          "automatically when the room is below 5 degrees Celsius.")


@pytest.mark.parametrize("question, reply", [
    ("The room is at 3 degrees. Will the heater switch on by itself?", "yes"),
    ("The room is at 12 degrees. Will the heater switch on by itself?", "no"),
    ("屋里只有 3 度，加热器会自己开吗？", "yes"),
    ("The room is at 5 degrees. Will the heater switch on by itself?", None),  # "below 5" says nothing of 5
    ("The room is at 3 degrees. Can I switch the heater on?", None),  # a condition says when, not what may be done
    ("The room is at 3 degrees. Will the heater stay off?", None),  # another outcome than the condition's
])
def test_a_condition_on_a_value_answers_whether_its_outcome_happens_at_the_users_amount(question, reply):
    limit = judge_limit(question, [KETTLE], "The room is only 3 degrees. Will the heater switch on by itself?"
                        if "屋里" in question else "")
    assert (limit.reply if limit else None) == reply, limit


@pytest.mark.parametrize("question, passage, reply", [
    ("My son is 140 cm. Does he still need his booster seat?", BOOSTER, "yes"),
    ("My son is 160 cm. Does he still need his booster seat?", BOOSTER, "no"),
    ("孩子一米四了，还要用增高座椅吗？", "身高不到 150 厘米的儿童必须使用增高座椅。", "yes"),  # 一米四: 1.4 m
    ("孩子一米六了，还要用增高座椅吗？", "身高不到 150 厘米的儿童必须使用增高座椅。", "no"),
    ("Will the heat pump still work at minus 15 degrees?", "It is most efficient above minus 10 degrees.", None),
    # going without what the rule obliges of whom the amount names is not allowed; of others it says nothing
    ("My daughter is 140 cm and wants to sit without her booster. Is she allowed to?", BOOSTER, "no"),
    ("My daughter is 155 cm and wants to sit without her booster. Is she allowed to?", BOOSTER, None),
    ("My trailer is 900 kg. Can I tow it without brakes?", "Trailers over 750 kg must have their own brakes.", "no"),
    ("My trailer is 900 kg. Can I tow it without a problem?", "Trailers over 750 kg must have their own brakes.",
     None),  # the question goes without something the rule does not oblige
])
def test_a_condition_on_whom_a_sentence_is_about_answers_whether_it_applies(question, passage, reply):
    """"Children under 150 cm must ..." says who must: whether the user's child still has to; "most efficient
    above minus 10 degrees" says how well, not when."""
    limit = judge_limit(question, [passage])
    assert (limit.reply if limit else None) == reply, limit


REQUIREMENTS = ("Install Type: No desktop; RAM (minimum): 256 megabytes; RAM (recommended): 512 megabytes; "
                "Hard Drive: 4 gigabytes\nInstall Type: With Desktop; RAM (minimum): 1 gigabytes; RAM (recommended): "
                "2 gigabytes; Hard Drive: 10 gigabytes")
TYRES = ("Under normal load, inflate the front tyres to 240 kPa (35 psi) and the rear tyres to 260 kPa (38 psi). "
         "With a full load of five people and luggage, use 260 kPa (38 psi) front and 290 kPa (42 psi) rear.")
TYRES_ZH = "正常载荷时，前轮 240 kPa（35 psi），后轮 260 kPa（38 psi）。请在冷胎状态下检查。"
FAST_ZH = "直流充电功率最高 150 千瓦。在 150 千瓦或以上的充电桩上，充到百分之八十大约需要 30 分钟。"


@pytest.mark.parametrize("question, passage, reply", [
    # a question asking whether the amount is enough makes the one value it names the amount to reach:
    # a table row's value by its column's label, a list's by what it is said of (240 kPa is 35 psi)
    ("I've got 4 GB of RAM and want a desktop. Is that at least what the guide recommends?", REQUIREMENTS, "yes"),
    ("I have 1 GB of RAM. Is that enough for the recommended RAM with a desktop?", REQUIREMENTS, "no"),
    ("前轮我只打了 33 psi，这气压够不够？", TYRES_ZH, "no"),  # A-not-A: a yes-or-no question
    ("前轮打到了 250 kPa，够不够？", TYRES_ZH, "yes"),
    # the user's amount said twice is one amount; a fast charger (超充桩) is no "more than" (超过)
    ("找了个 350 千瓦的超充桩，这车能按 350 千瓦充吗？", FAST_ZH, "no"),
    # an instruction's "use 260 kPa" is the value to set for its case, not a minimum for every case
    ("I only put 33 psi in the front tyres. Is that enough?", TYRES, "no"),
    ("I put 36 psi in the front tyres. Is that enough?", TYRES, "yes"),
])
def test_a_question_asking_if_the_amount_is_enough_is_held_against_the_value_it_names(question, passage, reply):
    assert _reply(question, passage) == reply


@pytest.mark.parametrize("question, passage", [
    ("Is 4 GB enough?", REQUIREMENTS),  # names none of the row's values more than the others
    ("Is 40 psi too much?", TYRES_ZH),  # "too much" asks the other way round
    # the amount in the asking clause is what the user needs: "is it enough for 300 km?"
    ("I need 5 GB of RAM for my apps. Is the recommended RAM enough for 5 GB?", REQUIREMENTS),
    ("前轮的气压够 300 kPa 吗？", TYRES_ZH),
])
def test_an_amount_asked_as_enough_against_no_one_value_is_not_judged(question, passage):
    assert judge_limit(question, [passage]) is None


@pytest.mark.parametrize("question, passage", [
    ("My son is 160 cm. Is he allowed in the front?", BOOSTER),  # "under 150 cm" is a condition, not a limit
    ("Can I use blind spot monitoring at 5 km/h?", BLIND_SPOT),  # "above 10 km/h" is when it works
    ("Is 2,000 kg too much for it?", TOWING),  # "too much" asks the other way round
    ("How fast can I go with chains?", CHAINS),  # no amount of the user's own
])
def test_no_reply_is_judged_where_the_limit_does_not_decide_it(question, passage):
    assert judge_limit(question, [passage]) is None


# a reference entry: a name, what it is, and a default said in a line of its own
SETTINGS = ("SESSION_TIMEOUT\nHow long an idle session is kept before the user must sign in again.\n"
            "Default: timeout(minutes=30)\n\nUPLOAD_LIMIT\nThe largest request body the server accepts, in bytes.\n"
            "Defaults to 8192.\n")


@pytest.mark.parametrize("question, reply", [
    # the value asked about, against the one its entry states (a leading condition is no part of the question)
    ("If I leave the setting alone, does an idle session end after 2 hours?", "no"),
    ("Does an idle session end after 30 minutes by default?", "yes"),
    ("Does an idle session end after half an hour?", None),  # no amount the reader knows
    # pointed back at: the same number bare is that value; another bare number may count anything
    ("I want to reject bodies above 8192 bytes. Is that already the default?", "yes"),
    ("I want to reject bodies above 10000 bytes. Is that already the default?", None),
    # whether an amount is good or allowed is no question of what the value is
    ("Is it OK to keep an idle session for 45 minutes?", None),
    # nor is what the user has to do: a session idle for 2 hours is past its 30 minutes, no "no"
    ("Do I need to sign in again after 2 hours idle?", None),
    ("Does the user have to sign in again after 45 minutes?", None),
    # a default is what holds when nothing is set: no reply to a user who sets their own value
    ("I set SESSION_TIMEOUT = 120. Does an idle session end after 2 hours?", None),
    ("I changed the timeout to 7200. Does an idle session now end after 2 hours?", None),
])
def test_a_question_whether_a_value_is_the_users_amount_is_answered_by_the_value(question, reply):
    assert _reply(question, SETTINGS) == reply


def test_a_line_with_a_value_and_hardly_a_word_is_about_its_entry():
    sentences = split_sentences(SETTINGS)
    context = dict(zip(sentences, in_context(sentences)))
    assert context["Default: timeout(minutes=30)\n\n"].startswith("SESSION_TIMEOUT\nHow long an idle session")
    assert context["Defaults to 8192.\n"].startswith("UPLOAD_LIMIT")  # the entry ends at a blank line
    assert context["The largest request body the server accepts, in bytes.\n"].startswith("The largest")
    verifier = Verifier([SETTINGS], "If I leave the setting alone, does an idle session end after 2 hours?")
    assert verifier.check("No, an idle session ends after 30 minutes.").ok  # the default's entry names it
    assert not verifier.check("An upload may take 30 minutes.").ok  # not what the entry is about


def test_a_question_after_a_condition_is_still_a_yes_or_no_one():
    assert asks_yes_no("If I never change it, does the session expire?")
    assert asks_yes_no("Once the update is done, can I unplug it?")
    assert not asks_yes_no("If it rains, how far can I go?")


FLUID = "Replace the brake fluid every 2 years, whatever the mileage, because it absorbs water over time."
FLUID_ZH = "无论行驶了多少公里，刹车油都应每 2 年更换一次，因为刹车油会逐渐吸收水分。"
SERVICE = "Service the car every 12 months or 15,000 km, whichever comes first."


@pytest.mark.parametrize("question, passage, reply", [
    ("Do I need to change the brake fluid after 3 years?", FLUID, "yes"),  # the time since, against how often
    ("It has been 12 months. Should I replace the brake fluid?", FLUID, "no"),  # months against years
    ("刹车油三年没换了，需要换了吗？", FLUID_ZH, "yes"),  # "没换" tells the time since: it negates nothing asked
    ("刹车油一年没换了，需要换了吗？", FLUID_ZH, "no"),
    ("I have not serviced it in 14 months. Is a service due?", SERVICE, "yes"),  # one interval reached is enough
    ("I drove 20,000 km. Do I need a service?", SERVICE, "yes"),  # "every 12 months or 15,000 km"
    ("I drove 10,000 km. Do I need a service?", SERVICE, None),  # the 12 months may have passed
    ("Do I need to change the brake fluid every 3 years?", FLUID, None),  # how often, not the time since
    ("Should I not service it after 14 months?", SERVICE, None),  # a negated asking clause
])
def test_what_is_due_is_the_time_since_against_how_often(question, passage, reply):
    assert _reply(question, passage) == reply


TYRE_CHECKS = "Check the tyre pressures at least once a month and before long journeys."


@pytest.mark.parametrize("question, about, reply", [
    ("I haven't checked my tyre pressures for two months. Should I check them?", "", "yes"),  # "once a month"
    ("I checked them 2 weeks ago. Do I need to check them again?", "", "no"),
    # a question asked of passages in another language is judged on topic by its translation
    ("胎压我差不多两个月没看过了，是不是早该查一下了？", "I haven't checked my tyre pressure for two months. "
                                                  "Should I check it now?", "yes"),
])
def test_an_interval_said_in_words_is_due_as_one_in_figures(question, about, reply):
    limit = judge_limit(question, [TYRE_CHECKS], about)
    assert limit is not None and limit.reply == reply


def test_limits_of_two_passages_that_disagree_decide_nothing():
    outlet = "With the adapter in the charge port, the car can supply up to 3.6 kW to your devices."
    fast = "The car accepts up to 150 kW of DC power at a fast charger."
    assert judge_limit("Can I charge at 100 kW?", [outlet, fast]) is None  # which limit is the question's?
    assert judge_limit("Can I charge at 100 kW?", [fast, outlet]) is None
    assert judge_limit("Can I charge at 100 kW?", [fast]).reply == "yes"
    # limits that give one reply leave open which to say, and one of them is wrong: the towed car's 30 km/h
    # is no answer on a trailer, whichever passage the search found first
    towed = "When towing the car itself on all four wheels, do not exceed 30 km/h."
    towing = "When towing a trailer, do not exceed 100 km/h."
    question = "Can I drive at 110 km/h when towing?"
    assert judge_limit(question, [towed, towing]) is None and judge_limit(question, [towing, towed]) is None
    assert judge_limit(question, [towing]).bound == towing
    swap = "Swap shouldn't be smaller than 512MB."
    var = "You should allocate at least 200MB for /var."
    assert judge_limit("For a small server, is 150 MB enough for /var?", [var, swap]) is None
    # a bound on something the question never names decides nothing, where the deciding one's sentence does
    lane = "车速在 60 到 150 公里每小时之间时，车道保持辅助会轻轻把车拉回车道。"
    assert judge_limit("高速上我开到一百六，自适应巡航还能开着用吗？", [lane, ACC_ZH]).reply == "yes"
    lane = "Lane assist works between 60 and 150 km/h."
    cruise = "Adaptive cruise control works between 30 and 180 km/h."
    assert judge_limit("Can I use adaptive cruise at 160 km/h?", [lane, cruise]).reply == "yes"
    assert judge_limit("Can I use it at 160 km/h?", [lane, cruise]) is None  # which one "it" is is unknown
    # ... or its entry's title does: the fast charger's sentence never says "charge", its entry does
    fast = "It accepts up to 150 kW of DC power."
    question = "Can this car charge at 100 kW?"
    assert judge_limit(question, [outlet, fast], titles=["Can I power devices?", "How fast can it charge?"]) is None


def test_the_model_is_shown_the_numbers_compared():
    assert comparison_note("Is it alright to keep doing 60 with chains on?", [CHAINS], "en") == \
        "60 km/h is more than 50 km/h."
    assert comparison_note("我想把充电上限调到百分之四十，能设这么低吗？", [CHARGE_ZH], "zh").startswith("40% 小于 50%")
    assert comparison_note("How do I fit chains?", [CHAINS], "en") == ""
    # one amount written in two units is one value, and a large one is written out
    assert comparison_note("Does it expire after 30 days?", ["Default: timedelta(days=31) (2678400 seconds)"],
                           "en") == "30 day is less than 31 day."
    assert comparison_note("Is it 3000000 seconds?", ["Default: 2678400 seconds"], "en") == \
        "3000000 s is more than 2678400 s."


def test_a_limit_is_answered_with_the_passages_sentence():
    limit = judge_limit("Can I tow 2000 kg?", [TOWING])
    assert limit.alone and limit.answer("Can I tow 2000 kg?", "en") == f"No. {TOWING.split('. ')[0]}."
    zh = judge_limit("我想把充电上限调到百分之四十，能设这么低吗？", [CHARGE_ZH])
    assert zh.answer("我想把充电上限调到百分之四十，能设这么低吗？", "zh").startswith("不能。")


def test_spoken_chinese_numbers_and_tables():
    assert normalize("一百六").strip() == "160" and normalize("两千五").strip() == "2500"
    assert normalize("一百零六").strip() == "106"
    # spoken fractions: a height of 一米四 is 1.4 m (not 1 m and a 4), half hours and half kilometres
    said = {"我家孩子一米四了": ["1.4 m"], "他一米七五": ["1.75 m"], "长2米5宽1米8": ["2.5 m", "1.8 m"],
            "充了一个半小时": ["1.5 h"], "再等半个小时": ["0.5 h"], "还能开三公里半": ["3.5 km"],
            "1米 4个人": ["1 m", "4"], "拖车大概一吨二": ["1.2 t"], "3.5 tonnes": ["3.5 t"], "两吨": ["2 t"]}
    assert {text: [f.key for f in extract_facts(text)] for text in said} == said
    # tonnes are a mass: "一吨二" is held against a limit in kilograms
    limit = judge_limit("拖车大概一吨二，带刹车的，这车能拖吗？", [TOWING],
                        "My braked trailer weighs about 1.2 tonnes. Can the car tow it?", [])
    assert limit and limit.reply == "yes" and limit.asked.value == 1.2, limit
    assert judge_limit("Can the car tow a 1.6 tonne braked trailer?", [TOWING], "", []).reply == "no"
    # a table row's numbers are numbers, not a phone number; a phone number spoken in groups still is one
    assert [f.kind for f in extract_facts("KDE Plasma 4584 1316 5900")] == ["number"] * 3
    assert [f.kind for f in extract_facts("call 800 555 0199")] == ["phone"]
    # 一 is a count before a unit, like English "one"; before a measure word it is the article "a"
    assert [f.key for f in extract_facts("把交换空间放在一个普通文件上，用一种文件系统")] == []
    assert [f.key for f in extract_facts("需要两个适配器，一公里后，按一次")] == ["2", "1 km", "1 times"]
    # tenths as spoken are a percentage; the idiom and words beginning with 成 are no number
    assert [f.key for f in extract_facts("从一成充到八成要多久？")] == ["10 %", "80 %"]
    assert extract_facts("一成不变，他是一成年人") == []
    # two neighbouring digits are "this or the next"; three or more are spoken digit by digit
    said = {"走出去五六米": ["5 m", "6 m"], "两三天": ["2 day", "3 day"], "七八十公里": ["70 km", "80 km"],
            "二〇二四年": ["2024 year"]}
    assert {text: [f.key for f in extract_facts(text)] for text in said} == said


@pytest.mark.parametrize("question, said", [
    ("At 20 km/h, can I press the camera button to see the 360 view?", False),
    ("At 10 km/h, can I press the camera button to see the 360 view?", True),
    ("我车速大概二十公里，按摄像头按钮能调出全景画面吗？", False),  # 车速二十公里: 20 km/h
])
def test_a_yes_whose_own_bound_leaves_out_the_users_amount_is_not_said(question, said):
    camera = "Press the camera button on the centre console at speeds below 15 km/h to show the 360 view."
    answer = "是的，车速低于 15 公里/小时时可以按摄像头按钮。" if "车速" in question else \
        "Yes, you can press the camera button at speeds below 15 km/h."
    assert Verifier([camera], question).check(answer).ok == said


@pytest.mark.parametrize("passages, question, answer, forbidden", [
    (["The image must be written to the whole-disk device. Do not use tools like unetbootin which alter the image.",
      "On Linux, write the image with cp debian.iso /dev/sdX."],
     "Which program do I use to write the ISO to a USB stick?", "Use unetbootin to write the image.", True),
    (["Do not use a pressure washer on the charge port.", "The charge port is on the left rear."],
     "How do I clean the charge port?", "You can use a pressure washer to clean the charge port.", True),
    (["切勿用高压水枪冲洗充电口。", "充电口在车身左后方。"], "充电口怎么清洁？", "可以用高压水枪冲洗充电口。", True),
    # saying it is not to be done, or doing something else with what is named elsewhere too
    (["Do not use tools like unetbootin which alter the image."], "Can I use unetbootin?",
     "No, do not use unetbootin: it alters the image.", False),
    (["Do not use a pressure washer on the charge port.", "The charge port is on the left rear."],
     "Where is the charge port?", "The charge port is on the left rear.", False),
])
def test_doing_what_the_passages_forbid_is_contradicted(passages, question, answer, forbidden):
    unsupported = Verifier(passages, question).check(answer).unsupported
    assert any(f.kind == "forbidden" for f in unsupported) == forbidden


@pytest.mark.parametrize("answer, invented", [
    ("Flask raises an `UploadError` when the file is too large.", {"uploaderror"}),
    ("Set the FLASK_MAX_UPLOAD environment variable.", {"flask_max_upload"}),
    ("Pass --max-size to flask run.", {"--max-size"}),
    ("Use werkzeug.limits.check() before saving.", {"werkzeug.limits.check"}),
    ("Set MAX_CONTENT_LENGTH; Flask then raises RequestEntityTooLarge.", set()),
])
def test_identifiers_must_be_written_in_the_passages(answer, invented):
    verifier = Verifier([UPLOADS], "How do I limit upload sizes in my app?")
    assert {f.key for f in verifier.check(answer).unsupported} == invented


def test_an_identifier_the_question_names_may_be_repeated_and_a_name_the_kb_uses_stands():
    verifier = Verifier([MEMORY], "Do I need to set lowmem=1 on a 512 MB machine?",
                        known_name=lambda name: name == "Debian")
    assert verifier.check("Add lowmem=1 to the boot line.").ok  # the question's own identifier
    assert verifier.check("Debian's installer then saves memory.").ok  # the KB names Debian elsewhere
    # a name qualified by one the KB uses is the passages' name; their word alone does not make one up
    release = Verifier(["Under systemd as init system (the default since jessie) halt and poweroff differ."],
                       "Since which release is systemd the default?", known_name=lambda name: name == "debian")
    assert release.check("Since Debian Jessie.").ok
    assert {f.text for f in release.check("Since Debian Bookworm.").unsupported} == {"Debian Bookworm"}
    assert {f.text for f in release.check("Since Ubuntu Jessie.").unsupported} == {"Ubuntu Jessie"}
    assert {f.text for f in verifier.check("You can resize the disk with GParted first.").unsupported} == {"GParted"}
    assert {f.kind for f in identifiers("Run grub-install on /dev/sda, then reboot.")} == {"identifier"}
    # in Chinese text any capitalised word is a name, which ends where the Chinese characters begin
    assert [f.key for f in identifiers("在Aurora Companion应用中点击 Climate，再打开SECRET_KEY设置。")] == [
        "secret_key", "aurora companion", "climate"]
    # quoted, the question's own identifier is still the user's; a quoted label must still be the passages'
    prefixed = Verifier(["from_prefixed_env() loads every variable that starts with the prefix."],
                        "How do I load every environment variable starting with MYAPP_?")
    assert prefixed.check('from_prefixed_env() loads the variables that start with "MYAPP_".').ok
    assert not prefixed.check('from_prefixed_env() loads the variables that start with "OTHER_".').ok
    assert not prefixed.check('Press "Load All" to load the variables.').ok


NETCFG = ("To set up the network by hand, boot with netcfg/disable_autoconfig=true and enter the address when "
          "asked. The installer then skips DHCP. With netcfg/get_hostname=box the host name is preset.")


def test_a_long_name_misquoted_in_one_part_is_said_in_the_passages_sentence_that_writes_it():
    from app.answer.identifiers import misquoted

    written = identifiers(NETCFG)
    said = lambda text: max(identifiers(text), key=lambda f: len(f.key))  # noqa: E731
    assert misquoted(said("dhcpserver/disable_autoconfig=true"), written).key == "netcfg/disable_autoconfig=true"
    assert misquoted(said("app.push_context()"), identifiers("Call app.app_context() first.")).key == "app.app_context"
    assert misquoted(said("WTF_CSRF_TIME_LIMIT"), identifiers("Set WTF_CSRF_ENABLED.")) is None  # one part: invented
    assert misquoted(said("dhcpserver/other_option=false"), written) is None  # two parts changed
    # one part from two names at once: which was meant is not known
    assert misquoted(said("netcfg/x=true"), identifiers("netcfg/a=true or netcfg/b=true")) is None
    verifier = Verifier([NETCFG], "The DHCP server hands out wrong settings. Which boot parameter lets me type the "
                                  "IP address myself?")
    check = verifier.check("Boot with dhcpserver/disable_autoconfig=true to enter the address yourself.")
    assert not check.ok and {f.key for f in check.unsupported} == {"dhcpserver/disable_autoconfig=true"}
    assert verifier.source_of(check) == ("To set up the network by hand, boot with netcfg/disable_autoconfig=true "
                                         "and enter the address when asked.")
    invented = verifier.check("Boot with dhcp/override=true to enter the address yourself.")
    assert verifier.source_of(invented) is None  # a name no passage writes anything like


def test_a_reply_that_only_restates_the_question_is_checked_with_the_sentence_after_it():
    sealant = "After sealing, drive no faster than 80 km/h and no further than 200 km."
    verifier = Verifier([sealant], "The tyre shop is 150 km away. Can I make it there?", expected_reply="yes")
    assert verifier.leans_on_next("Yes, you can make it there.")
    assert verifier.check("Yes, you can make it there. Drive no further than 200 km.").ok
    assert not verifier.check("No, you can't. Drive no further than 200 km.").ok  # against the limit


def test_a_yes_need_not_find_how_it_is_done_in_the_passage():
    toml = "You can load configuration from a file in a format of your choice using from_file(), TOML for example."
    verifier = Verifier([toml], "Can I load my app config directly from a TOML file?")
    assert verifier.check("Yes, you can load your config directly from a TOML file using from_file().").ok
    remote = Verifier([toml], "Can I load my app config directly from a TOML file over the network?")
    assert not remote.check("Yes, you can load your config from a TOML file over the network.").ok


def test_a_reply_resting_only_on_the_users_number_needs_a_passage_value_of_its_kind():
    refresh = "Sending the cookie with every response keeps the session from expiring. Default: True"
    verifier = Verifier([refresh], "If I never touch the config, does a permanent session expire after 30 days?")
    assert not verifier.check("No, a permanent session expires after 30 days if you never touch the config.").ok
    chains = Verifier([CHAINS], "Can I do 40 km/h with chains on?")  # the passage gives a speed to rest on
    assert chains.check("Yes, you can drive at 40 km/h with chains.").ok


KEEP = ("FILE_MAX_AGE\nHow long a browser may keep a served file before asking for it again, in seconds.\n"
        "If None, browsers ask every time.\nDefault: None")


def test_the_users_amount_stated_back_is_a_yes_that_needs_a_source():
    """"Does it tell browsers to keep files for 12 hours?" answered "it tells browsers to keep files for 12
    hours" says yes without the word ("tells" says no more than the question's "tell")."""
    question = "If I configure nothing, does the server tell browsers to keep files for 12 hours?"
    verifier = Verifier([KEEP], question)
    check = verifier.check("If you configure nothing, the server tells browsers to keep files for 12 hours.")
    assert [(f.kind, f.key) for f in check.unsupported] == [("reply", "yes")]
    assert verifier.check("No, by default browsers ask every time.").ok
    stated = Verifier([KEEP.replace("Default: None", "Default: 12 hours")], question)
    assert stated.check("The server tells browsers to keep files for 12 hours.").ok  # the passage's value


class _TwoAnswers:
    """A model that first says "I don't know" and, told not to begin so, its next best answer."""

    def __init__(self, refusal: str, otherwise: str):
        self.refusal, self.otherwise, self.calls = refusal, otherwise, 0

    def encode(self, text, bos=True):
        return [len(w) for w in text.split()]

    def generate(self, prompt_ids, max_new_tokens, sampling, stop, cancel, placed=None, draft=False,
                 ban_first=frozenset()):
        from runtime.llm import Delta, GenerationResult

        self.calls += 1
        answer = self.otherwise if ban_first else self.refusal

        class Gen:
            result = None

            def __iter__(gen):
                words = answer.split(" ")
                for i, w in enumerate(words):
                    yield Delta(i, w if i == 0 else " " + w)
                gen.result = GenerationResult(list(range(len(words))), answer, "stop", 10, 0, 0.1, 0.1, 0.1)

        return Gen()


def _generate(llm, question: str, passage: str, **plan):
    from app.answer.passages import Passage
    from app.answer.pipeline import AnswerPlan, GroundedGeneration
    from knowledge.retrieval import Hit
    from runtime.sampling import SamplingParams

    hit = Hit(1, f"The question?\n{passage}", "faq.jsonl", "faq.jsonl", "", "entry", 0.6, {"dense": 0.6})
    plan = AnswerPlan(question, "en", voice=False, grounded=True, prompt_ids=[1, 2, 3], max_tokens=64,
                      passages=[Passage.of(1, hit)], **plan)
    gen = GroundedGeneration(llm, plan, SamplingParams())
    return "".join(gen), gen.result.grounding


@pytest.mark.parametrize("question", ["At what file size does Flask refuse an upload?",
                                      "How big may an upload be before Flask refuses it?"])
def test_an_amount_is_answered_by_an_amount(question):
    """"It depends on MAX_CONTENT_LENGTH" names no size: no answer to a question asking one, though true."""
    text, grounding = _generate(_Says("It depends on the MAX_CONTENT_LENGTH config key."), question, UPLOADS)
    assert grounding.decision == "refused" and "no number" in grounding.reason, (text, grounding.reason)
    text, grounding = _generate(_Says("It depends on the MAX_CONTENT_LENGTH config key."),
                                "Which config key limits the size of uploads?", UPLOADS)
    assert grounding.decision == "answered", grounding.reason  # a key is what this one asks for


FILTER = "Replace the filter cartridge every 6 months or after 2,000 litres, whichever comes first."


def test_an_amount_asked_in_a_unit_is_answered_in_that_kind_of_unit():
    """"How many litres?" is not answered by the months the same sentence gives: held back, then refused (no
    quote here); asked in millilitres, litres answer it, and an amount asked without a unit takes any."""
    text, grounding = _generate(_Says("Replace it every 6 months."), "How many litres does a cartridge last?", FILTER)
    assert grounding.decision == "refused" and "no number" in grounding.reason, (text, grounding.reason)
    said = "It lasts 2,000 litres, or 6 months."
    assert _generate(_Says(said), "How many millilitres does a cartridge last?", FILTER)[0] == said
    assert _generate(_Says("Every 6 months."), "How many months does a cartridge last?", FILTER)[0] == "Every 6 months."
    # a count or a degree may be said otherwise: "every 12 months" for how many times a year, 度 for kWh
    assert _generate(_Says("Every 6 months."), "How many times a year do I replace it?", FILTER)[0] == "Every 6 months."
    both = "It lasts 2,000 litres. Replace it every 6 months."  # the unit asked for said, then the other part
    assert _generate(_Says(both), "How many litres does it last, and how often do I replace it?", FILTER)[0] == both
    assert _generate(_Says("Every 6 months."), "How long does a cartridge last?", FILTER)[0] == "Every 6 months."


SERVER = ("The development server is not intended for production. It is not designed to be particularly efficient, "
          "stable, or secure.")


def test_a_refusal_is_repaired_with_the_models_next_answer_made_of_the_passages_words():
    llm = _TwoAnswers("I don't know.", "No, the development server is not designed to be efficient, stable, or secure.")
    text, grounding = _generate(llm, "Is it fine to run the development server in production?", SERVER)
    assert llm.calls == 2 and grounding.decision == "answered" and text.startswith("No, the development server")


def test_a_repair_in_words_of_its_own_is_refused():
    llm = _TwoAnswers("I don't know.", "Yes, many teams happily deploy it behind a reverse proxy these days.")
    text, grounding = _generate(llm, "Is it fine to run the development server in production?", SERVER)
    assert grounding.decision == "refused" and "don't know" in text


def test_a_repair_that_echoes_a_word_the_kb_never_names_is_refused():
    """The question names a flag the KB never mentions; the model's next best answer after "I don't know"
    pins it on a key the passage does describe, in the passage's and the question's words."""
    cookie = "SESSION_COOKIE_NAME: the name of the session cookie. Can be changed in case you already have a cookie."
    question = "What is the config key for marking the session cookie as Partitioned?"
    llm = _TwoAnswers("I don't know.", "The config key for marking the session cookie as Partitioned is "
                                       "SESSION_COOKIE_NAME.")
    text, grounding = _generate(llm, question, cookie, unnamed={"partit"})
    assert llm.calls == 2 and grounding.decision == "refused" and "don't know" in text
    text, grounding = _generate(_TwoAnswers("I don't know.", "The session cookie's name is set by "
                                                             "SESSION_COOKIE_NAME."),
                                "Which config key sets the name of the session cookie?", cookie)
    assert grounding.decision == "answered"  # the same repair where the question names nothing the KB lacks


def test_a_failed_reply_about_the_users_amount_is_told_the_passages_value_of_its_kind():
    """Where no bound decides the reply ("under 150 cm" is a condition) and the model's yes fails, the
    passages' sentence stating a value of the amount's kind is said instead of "I don't know"."""
    from app.answer.limits import bound_sentence

    question = "My daughter is 140 cm now and keeps asking to sit without her booster. Is she allowed to?"
    quote = bound_sentence(question, [f"The boot holds 400 litres. {BOOSTER}"])
    assert quote == BOOSTER and bound_sentence("Can I bring 2 cats?", [BOOSTER]) == ""  # no amount of its kind
    text, grounding = _generate(_Says("Yes, she is allowed to sit without her booster."), question, BOOSTER,
                                bound_quote=quote)
    assert text == BOOSTER and grounding.decision == "extractive"


MOWER_SENSORS = "The obstacle sensors switch on below 8 km/h when something is within 60 cm of the mower."


def test_a_translated_question_about_the_users_amount_is_told_the_passages_value_of_its_kind():
    """A Chinese question asked of an English manual is ranked against its sentences by its translation, and the
    user's amount is held against the quote's value, not taken for a variant the quote must name: the 60 cm
    is said of the same sentence as the bound the 12 km/h is compared with."""
    from app.answer.limits import bound_sentence
    from app.answer.verify import Verifier

    question = "割草机开到每小时十二公里，前面有石头，避障传感器会自己打开吗？"
    about = "Will the obstacle sensors switch on by themselves at 12 km/h with a rock ahead?"
    assert bound_sentence(question, [MOWER_SENSORS], about) == MOWER_SENSORS
    assert bound_sentence(question, [MOWER_SENSORS]) == ""  # the Chinese words name nothing of the English
    assert Verifier([MOWER_SENSORS], question).quote_fails(MOWER_SENSORS) == []
    # a number naming which thing is meant is still a variant the quote must name
    assert Verifier([MOWER_SENSORS], "How close must something be to the 24-volt model before its sensors switch "
                                     "on?").quote_fails(MOWER_SENSORS)


def test_a_limit_question_is_answered_without_the_model():
    from app.answer.limits import judge_limit

    question = "Can I tow 2000 kg?"
    limit = judge_limit(question, [TOWING])
    llm = _TwoAnswers("Yes, sure.", "Yes, sure.")
    text, grounding = _generate(llm, question, TOWING, limit=limit, direct=limit.answer(question, "en"))
    assert llm.calls == 0 and grounding.decision == "extractive" and text.startswith("No. The car can tow")


_CAR_WORDS = __import__("re").compile(r"\b(?:car|cars|driver|drivers|vehicle|aurora|speakers)\b", __import__("re").I)


def _engine_over(files, tmp_path, llm, embedder):
    """An engine over a KB of `files` ingested under `tmp_path` (no answer profile)."""
    from app.engine import Engine
    from app.settings import Settings
    from knowledge import KnowledgeBase
    from runtime.embedder import Embedder

    with KnowledgeBase.open(tmp_path / "kb", Embedder(embedder)) as kb:
        kb.ingest(files, progress=False)
    return Engine.load(Settings(llm=llm, embedder=embedder, kb=tmp_path / "kb"))


@pytest.mark.slow
def test_a_kb_without_a_profile_gets_no_car_wording(smollm_build, minilm_build, tmp_path):
    """An installation guide ingested with no answer profile: neither the prompts (text and voice) nor the
    answers speak of a car; with the sample's profile, the same KB's prompts do."""
    from app.answer.types import AnswerRequest
    from knowledge.sample_kb import sample_kb
    from tests.conftest import SAMPLES

    pages = SAMPLES / "realdocs" / "debian-install" / "en"
    engine = _engine_over([pages / "ch02s05.html", pages / "ch08s01.html"], tmp_path, smollm_build, minilm_build)
    question = "How much memory do I need for a normal installation?"
    for voice in (False, True):
        plan = engine.plan(AnswerRequest.ask(question, voice=voice))
        prompt = engine.llm.tokenizer.decode(plan.prompt_ids, skip_special_tokens=False)
        assert "780MB" in prompt and not _CAR_WORDS.search(prompt), prompt
        # a question asking two things has the same instructions
        two = engine.plan(AnswerRequest.ask(f"{question[:-1]}, and how much disk space?", voice=voice))
        assert "using only the facts in the passages" in engine.llm.tokenizer.decode(two.prompt_ids)
        answer = "".join(engine.generation(plan))
        assert answer and not _CAR_WORDS.search(answer), answer
    engine.kb.set_profile(sample_kb().answer_profile())
    prompt = engine.llm.tokenizer.decode(engine.plan(AnswerRequest.ask(question, voice=True)).prompt_ids)
    assert "car's built-in assistant" in prompt and "the driver's question" in prompt


def test_a_kbs_profile_may_set_its_own_answerability_thresholds():
    from app.answer.passages import confident
    from app.answer.relevance import Confidence
    from knowledge import AnswerProfile

    read, unread = Confidence(0.35, 0.5, 0.45), Confidence(None, 0.5, 7.0)
    assert confident(read) and confident(unread)  # the defaults
    strict = AnswerProfile(min_confidence=0.5, min_bm25=9.0)
    assert not confident(read, strict) and not confident(unread, strict)


class _Says(_TwoAnswers):
    def __init__(self, answer: str):
        super().__init__(answer, answer)


class _Judges(_Says):
    """A model whose answer fails its checks, and which judges any text an answer with probability `p_yes`
    when asked in a prompt of its own (judge.py: "yes" and "no" are tokens 3 and 2 of this tokenizer)."""

    def __init__(self, answer: str, p_yes: float):
        super().__init__(answer)
        self.p_yes, self.asked = p_yes, []

    def encode_chat(self, messages):
        self.asked.append(messages[-1]["content"])
        return [-1, *self.encode(messages[-1]["content"])]

    def generate(self, prompt_ids, max_new_tokens, sampling=None, stop=None, cancel=None, **options):
        import math

        from runtime.llm import GenerationResult

        if prompt_ids[0] != -1:
            return super().generate(prompt_ids, max_new_tokens, sampling, stop, cancel, **options)
        top = ((3, math.log(self.p_yes)), (2, math.log(1 - self.p_yes)))

        class Judgement:
            def run(gen):
                return GenerationResult([3], "yes", "length", len(prompt_ids), 0, 0.1, 0.1, 0.0, first_top=top)

        return Judgement()


LOST_CARD = ("Open Settings, then Keys, select the lost key card and tap Remove, so it can no longer open or start the "
             "car. New key cards can be ordered from a service centre.")


@pytest.mark.parametrize("p_yes, said", [(0.9, True), (0.5, False)])
def test_a_quote_in_doubt_by_the_questions_words_is_said_when_the_model_judges_it_an_answer(p_yes, said):
    """"Make the card invalid": the KB never writes "invalid", so whether its lost-card entry answers is in
    doubt by words. When the model's own answer fails its checks, the quote is said only if the model,
    asked in a prompt of its own with the question as the user asked it, judges that it answers."""
    quote = LOST_CARD.split(". New")[0] + "."
    question = "I lost a key card. Can I make that card invalid?"
    llm = _Judges("No, a lost card stays valid for 30 days.", p_yes)
    text, grounding = _generate(llm, question, LOST_CARD, doubted=quote)
    assert llm.asked and question in llm.asked[0] and quote in llm.asked[0]
    if said:
        assert text == quote and grounding.decision == "extractive", grounding.reason
        assert "the model judges them an answer (0.90)" in grounding.reason
    else:
        assert grounding.decision == "refused" and "don't know" in text, (text, grounding.reason)
    # a profile's threshold decides instead of the default
    text, grounding = _generate(_Judges("No, a lost card stays valid for 30 days.", p_yes), question, LOST_CARD,
                                doubted=quote, min_answers=0.4)
    assert grounding.decision == "extractive" and text == quote
    # the same words as a part's sentence come first, said without a judgement
    llm = _Judges("No, a lost card stays valid for 30 days.", p_yes)
    text, grounding = _generate(llm, question, LOST_CARD, doubted=quote, part_quote=quote)
    assert text == quote and grounding.decision == "extractive" and not llm.asked
    assert "judges" not in grounding.reason
    # an answer about what the KB never names is refused before any quote is judged
    llm = _Judges("Open Settings, then Keys, and set the badge to invalid.", p_yes)
    text, grounding = _generate(llm, question, LOST_CARD, doubted=quote, missing_topic={"badge"})
    assert grounding.decision == "refused" and "never mentions" in grounding.reason and not llm.asked


def test_a_sentence_the_passages_do_not_support_is_left_out_and_the_rest_said():
    text, grounding = _generate(_Says("Flask raises `UploadTooBig` then. Set MAX_CONTENT_LENGTH to limit the size of "
                                      "uploads."), "How do I limit upload sizes?", UPLOADS)
    assert text == "Set MAX_CONTENT_LENGTH to limit the size of uploads."
    assert grounding.decision == "answered" and "left out" in grounding.reason
    assert "UploadTooBig" in grounding.unsupported
    # what comes after a left-out sentence and speaks of it goes too: nothing is left, so nothing is said
    text, grounding = _generate(_Says("Call `app.limit_uploads()`. It sets the size of uploads."),
                                "How do I limit upload sizes?", UPLOADS)
    assert grounding.decision == "refused" and "don't know" in text


def test_a_part_asking_no_kind_of_value_gets_its_passage_sentence_when_the_answer_skips_it():
    question = "Which config key caps the size of uploads, and what exception does Flask raise for a bigger file?"
    asked = __import__("app.answer.question", fromlist=["parts"]).parts(question)
    from app.answer.plan import _supplement

    text, grounding = _generate(_Says("Set MAX_CONTENT_LENGTH to limit the size of uploads."), question, UPLOADS,
                                supplement=_supplement(question, asked, [_passage(UPLOADS)], None))
    assert text == ("Set MAX_CONTENT_LENGTH to limit the size of uploads. If a larger file is transmitted, Flask "
                    "will raise a RequestEntityTooLarge exception."), text
    # an answer that already names what the part asks about is left as it is
    both = "Set MAX_CONTENT_LENGTH; a bigger upload makes Flask raise a RequestEntityTooLarge exception."
    text, _ = _generate(_Says(both), question, UPLOADS,
                        supplement=_supplement(question, asked, [_passage(UPLOADS)], None))
    assert text == both


def _passage(body: str):
    from app.answer.passages import Passage
    from knowledge.retrieval import Hit

    return Passage.of(1, Hit(1, body, "docs.html", "docs.html", "Uploads", None, 0.6, {"dense": 0.6}))


@pytest.mark.parametrize("word, forms", [
    ("unreadable", ["readable", "read"]), ("misconfigured", ["configured"]), ("hopeless", ["hope"]),
    ("install", []), ("under", []), ("字体", []),
    # compared: the KB's "dark" theme names "darker", whichever of the forms it writes is looked up
    ("darker", ["dark", "darke"]), ("larger", ["larg", "large"]), ("bigger", ["big"]), ("easiest", ["easy"]),
])
def test_a_derived_english_word_is_known_by_the_word_it_comes_from(word, forms):
    from app.answer.plan import base_forms

    assert base_forms(word) == forms


def test_function_words_and_judging_words_name_no_topic():
    from app.answer.plan import _topic_words
    from app.answer.relevance import terms

    assert terms("whenever it logs an error anywhere") == terms("it logs an error")
    assert terms("it keeps saying it can't find my key. what now?") == terms("it keeps it can't find my key")
    assert terms("the log tells me it needs the others") == terms("the log")  # function words inflected
    topic = _topic_words("Is it fine to run the built-in server in production?")
    assert set(topic) == {"run", "built", "serve", "produ"}


def test_an_identifiers_underscores_are_not_emphasis():
    from app.answer.sentences import strip_markdown

    assert strip_markdown("Set MAX_CONTENT_LENGTH, _not_ __this__.") == "Set MAX_CONTENT_LENGTH, not this."


class _LexicalKB:
    """A KB's lexical search over a few texts: the texts sharing a word with the query."""

    def __init__(self, *texts: str):
        self.texts = texts

    def search(self, query: str, k: int, mode: str):
        import re
        from types import SimpleNamespace

        words = {w.lower() for w in re.findall(r"[A-Za-z0-9]+", query)}
        return [SimpleNamespace(text=t) for t in self.texts if words & {w.lower() for w in re.findall(r"[A-Za-z0-9]+", t)}][:k]


def test_an_identifier_the_kb_never_writes_is_unnamed_and_no_number_may_be_said_of_it():
    from app.answer.plan import _unknown_names

    kb = _LexicalKB("PERMANENT_SESSION_LIFETIME: Default: timedelta(days=31) (2678400 seconds)",
                    "Cross-Site Request Forgery (CSRF) tokens protect forms; the time limit is up to you.")
    question = "What is the default WTF_CSRF_TIME_LIMIT for CSRF tokens?"
    assert _unknown_names(kb, question) == {"wtf_csrf_time_limit": "WTF_CSRF_TIME_LIMIT"}
    assert _unknown_names(kb, "What is the default PERMANENT_SESSION_LIFETIME?") == {}
    verifier = Verifier([kb.texts[0]], question, unnamed={"wtf_csrf_time_limit"})
    said = verifier.check("The default WTF_CSRF_TIME_LIMIT is 2678400 seconds.")
    assert [f.text for f in said.unsupported] == ["2678400 seconds"]  # another key's default
    assert verifier.check("PERMANENT_SESSION_LIFETIME defaults to 2678400 seconds.").ok  # not said of it


TYRE = ("The amber symbol shaped like a tyre with an exclamation mark means at least one tyre is 20 percent or more "
        "below its recommended pressure. Slow down and check all four tyres.")
ERRORS = ("To be told of errors, you can configure a logging.handlers.SMTPHandler to send an email when errors and "
          "higher are logged. Set up logging before you create the app.")


@pytest.mark.parametrize("question, passage, answer, said", [
    # a list's number given to the list's other thing
    ("How heavy a trailer without its own brakes can I tow?", TOWING,
     "You can tow an unbraked trailer of up to 1,500 kg.", TOWING.split(". ")[0] + "."),
    # a place the passages never give added to the right identifier
    ("How do I get an email when my app logs an error?", ERRORS,
     "Configure a logging.handlers.SMTPHandler in your settings file to send an email when errors are logged.",
     ERRORS.split(". ")[0] + "."),
])
def test_a_fact_said_of_the_wrong_thing_is_said_in_the_passages_own_sentence(question, passage, answer, said):
    text, grounding = _generate(_Says(answer), question, passage)
    assert text == said and grounding.decision == "answered" and "own words" in grounding.reason
    assert grounding.unsupported  # what the model said wrong is reported


def test_a_number_said_of_a_word_the_kb_never_uses_is_not_repaired_into_another_things_sentence():
    text, grounding = _generate(_Says("The maximum load on the roof is 75 kg."),
                                "I want to put a roof box on. What's the maximum load I can put on the roof?", TOWING,
                                unnamed={"roof"})
    assert "own words" not in grounding.reason and "tow ball" not in text, text


def test_a_fact_of_another_variant_is_not_repaired_into_its_passage_sentence():
    warranty = "The drive battery is covered by a warranty of 8 years or 160,000 km, whichever comes first."
    text, grounding = _generate(_Says("The 12-volt battery is covered by a warranty of 8 years."),
                                "How long is the warranty on the 12-volt battery?", warranty)
    assert grounding.decision == "refused" and "own words" not in grounding.reason, text


@pytest.mark.parametrize("answer", [
    "It means at least one of the four tyres is 30 percent below its recommended pressure.",  # an invented value
    "Use a MailHandler to send an email when errors are logged.",  # an invented name
])
def test_an_invented_fact_is_not_repaired_from_the_passages(answer):
    passage = ERRORS if "Handler" in answer else TYRE
    question = ("How do I get an email when my app logs an error?" if "Handler" in answer
                else "What does the orange tyre light mean?")
    text, grounding = _generate(_Says(answer), question, passage)
    assert "own words" not in grounding.reason and text not in passage, text


@pytest.mark.parametrize("said, meant", [
    ("To get both, modify the template as shown in Passage 2. ", "To get both, modify the template. "),
    ("According to Passage 1, the limit is 16 MB.", "The limit is 16 MB."),
    ("Set MAX_CONTENT_LENGTH (Passage 1).", "Set MAX_CONTENT_LENGTH."),
    ("Use from_file() from passages 1 and 2 to load it.", "Use from_file() to load it."),
    ("The passage on uploads says so.", "The passage on uploads says so."),  # no passage of the prompt's
])
def test_what_an_answer_says_of_the_prompts_passages_is_left_out(said, meant):
    from knowledge.prompts import without_passage_mentions

    assert without_passage_mentions(said) == meant


def test_an_answer_pointing_at_a_passage_is_said_without_it():
    """The user never sees "Passage 1": the sentence is checked and said without it, not dropped for its
    "1"."""
    text, grounding = _generate(_Says("Configure a logging.handlers.SMTPHandler to send an email when errors are "
                                      "logged, as described in Passage 1."),
                                "How do I get an email when my app logs an error?", ERRORS)
    assert text == "Configure a logging.handlers.SMTPHandler to send an email when errors are logged."
    assert grounding.decision == "answered", grounding.reason


def test_a_name_misquoted_in_one_part_is_repaired_into_the_passages_sentence():
    text, grounding = _generate(_Says("Use a logging.handlers.MailHandler to send an email when errors are logged."),
                                "How do I get an email when my app logs an error?", ERRORS)
    assert text == ERRORS.split(". ")[0] + "." and "own words" in grounding.reason, text


MANUAL_EN = ("# Coffee machine\n\n## Descaling\n\nDescale the machine every 3 months, or every month with hard "
             "water.\n\n## Water tank\n\nThe water tank holds 1.8 litres. Fill it with fresh cold water only.\n")
ENGLISH = {"咖啡机多久除一次垢？": "How often should I descale the coffee machine?",
           "咖啡机的蒸汽棒怎么清洗？": "How do I clean the steam wand of the coffee machine?",
           "水箱里该加什么水？": "What water should I put in the water tank?",
           "除垢要花多少钱？": "How much is descaling the machine?"}


def test_a_question_the_kb_does_not_write_the_language_of_is_searched_and_checked_in_english(
        smollm_build, minilm_build, tmp_path, monkeypatch):
    """Chinese asked of an English manual (no second embedder): searched in the model's English translation
    (a fixed one here), answered in Chinese from the English passage it finds, told to answer in Chinese;
    a value the passage states passes in Chinese, one it does not state fails and the passage's own
    sentence is said instead, as the KB writes it; a question about what the KB never names is refused
    before the model runs."""
    from app.answer import generation, plan as planning
    from app.answer.pipeline import GroundedGeneration
    from app.answer.types import AnswerRequest
    from runtime.sampling import SamplingParams

    (tmp_path / "manual.md").write_text(MANUAL_EN)
    monkeypatch.setattr(planning, "to_english", lambda llm, text, **_: ENGLISH[text])
    engine = _engine_over([tmp_path / "manual.md"], tmp_path, smollm_build, minilm_build)
    plan = engine.plan(AnswerRequest.ask("咖啡机多久除一次垢？"))
    assert plan.translation == ENGLISH["咖啡机多久除一次垢？"] and plan.refusal is None
    assert plan.passages[0].title == "Descaling" and "translation_ms" in plan.timings
    assert "请用中文回答" in engine.llm.tokenizer.decode(plan.prompt_ids)
    assert plan.quotes().extractive == "Descale the machine every 3 months, or every month with hard water."
    # a translation that lost what kind of value is asked (a price) quotes nothing the question did not ask
    assert not engine.plan(AnswerRequest.ask("除垢要花多少钱？")).quotes().extractive

    def answered(answer: str):
        gen = GroundedGeneration(_Says(answer), plan, SamplingParams())
        return "".join(gen), gen.result.grounding.decision

    descale = "每 3 个月除一次垢，水质硬的话每个月一次。"
    assert answered(descale) == (descale, "answered")
    assert answered("每 6 个月除一次垢。") == (plan.extractive, "extractive")
    # a sentence of words alone is checked by its English (the model's translation: a fixed one here), its
    # values as written; a translation with Chinese left in it, or other values, stands for nothing
    said = {"只能加新鲜的冷水。": "Fill it with fresh cold water only.",
            "水箱在机器下面。": "The water tank is under the machine.",
            "只加冷水。": "Only add 冷 water.",
            "加满为止。": "Fill it with 2 litres."}
    monkeypatch.setattr(generation, "to_english", lambda llm, text, whole, **_: said[text])
    plan = engine.plan(AnswerRequest.ask("水箱里该加什么水？"))
    assert plan.passages[0].title == "Water tank", plan.passages
    assert answered("只能加新鲜的冷水。") == ("只能加新鲜的冷水。", "answered")
    # none of them is said: the passage's own sentences are, in the passages' language
    for wrong in ("水箱在机器下面。",  # no passage puts it there
                  "只加冷水。", "加满为止。"):
        assert answered(wrong) == (plan.quotes().extractive, "extractive")
        assert plan.extractive.startswith("The water tank")
    steam = engine.plan(AnswerRequest.ask("咖啡机的蒸汽棒怎么清洗？"))
    assert steam.refusal and "never mentions" in steam.refusal, steam.refusal


def test_a_translated_question_about_the_users_amount_is_told_the_value_of_the_passage_about_it(
        smollm_build, minilm_build, tmp_path, monkeypatch):
    """Chinese asked of an English manual, a yes or no about the user's amount that no bound decides ("holds"
    is no limit): where the model's reply fails, the sentence stating a value of its kind is said, from a
    passage naming what the question is most specifically about only (the tank's 1.8 litres are no amount
    for descaling)."""
    from app.answer import generation, plan as planning
    from app.answer.pipeline import GroundedGeneration
    from app.answer.types import AnswerRequest
    from runtime.sampling import SamplingParams

    english = {"水箱里加 2 升水行吗？": "Can I put 2 litres of water in the water tank?",
               "除垢的时候加 2 升水行吗？": "Can I use 2 litres of water when I descale the machine?"}
    (tmp_path / "manual.md").write_text(MANUAL_EN)
    monkeypatch.setattr(planning, "to_english", lambda llm, text, **_: english[text])
    monkeypatch.setattr(generation, "to_english", lambda llm, text, whole, **_: {"可以。": "Yes."}[text])
    engine = _engine_over([tmp_path / "manual.md"], tmp_path, smollm_build, minilm_build)
    plan = engine.plan(AnswerRequest.ask("水箱里加 2 升水行吗？"))
    assert plan.limit is None and plan.bound_quote == "The water tank holds 1.8 litres."
    gen = GroundedGeneration(_Says("可以。"), plan, SamplingParams())
    assert "".join(gen) == plan.bound_quote and gen.result.grounding.decision == "extractive"
    descaling = engine.plan(AnswerRequest.ask("除垢的时候加 2 升水行吗？"))
    assert "Water tank" in [p.title for p in descaling.passages] and descaling.rarest == {"desca"}
    assert descaling.bound_quote == ""


MANUAL_LIGHTS = ("# Kettle\n\n## Descale light\n\nThe amber drop light means the kettle needs descaling. Descale it "
                 "within 2 weeks of the light coming on.\n\n## Base\n\nThe base has a cord store underneath.\n")


def test_a_word_the_kb_never_writes_stops_a_quote_of_a_value_or_a_reply_not_of_a_meaning(
        smollm_build, minilm_build, tmp_path):
    """"the panel" is a word the KB never writes, one among the question's words: what the light means is
    still quoted from its entry, but not how long it may stay on, nor whether it may be ignored, as the
    entry's values and reply may be about something else than what the word names."""
    from app.answer.types import AnswerRequest

    (tmp_path / "manual.md").write_text(MANUAL_LIGHTS)
    engine = _engine_over([tmp_path / "manual.md"], tmp_path, smollm_build, minilm_build)
    meaning = engine.plan(AnswerRequest.ask("What does the amber drop light on the panel mean?"))
    assert "panel" in meaning.unnamed and not meaning.missing_topic, (meaning.unnamed, meaning.missing_topic)
    assert meaning.quotes().extractive.startswith("The amber drop light means the kettle needs descaling.")
    for question in ("How many weeks may the amber drop light on the panel stay on?",
                     "Can I ignore the amber drop light on the panel for a month?"):
        plan = engine.plan(AnswerRequest.ask(question))
        assert plan.passages[0].title == "Descale light" and "panel" in plan.unnamed and not plan.quotes().extractive


def test_quotes_are_computed_when_first_needed_not_before_the_first_word(smollm_build, minilm_build, tmp_path,
                                                                         monkeypatch):
    """Ranking a passage's sentences for a quote embeds every one of them; a quote is said only after the
    model's answer, so the plan leaves it to `quotes()`, which computes it once."""
    from app.answer.types import AnswerRequest

    (tmp_path / "manual.md").write_text(MANUAL_LIGHTS)
    engine = _engine_over([tmp_path / "manual.md"], tmp_path, smollm_build, minilm_build)
    embedded = []
    real = engine.kb.embedder.embed
    monkeypatch.setattr(engine.kb.embedder, "embed", lambda texts, **kw: embedded.append(texts) or real(texts, **kw))
    plan = engine.plan(AnswerRequest.ask("What does the amber drop light mean?"))
    planned = len(embedded)  # the search's own
    assert plan.pending is not None and not plan.extractive
    assert plan.quotes().extractive.startswith("The amber drop light means the kettle needs descaling.")
    assert len(embedded) > planned and any("Descale it within 2 weeks of the light coming on." in t
                                           for texts in embedded[planned:] for t in texts)
    once = len(embedded)
    assert plan.quotes().extractive and plan.refusal_quote is not None and len(embedded) == once


def test_a_quote_for_where_something_is_says_where():
    """Of an entry's sentences, the one stating the kind of answer asked for is quoted first: for "where",
    the sentence placing the button, though another shares more of the question's words."""
    passage = ("Press the emergency call button to call the emergency services without a phone. "
               "The SOS button is in the overhead console.")
    quote = extract_answer("Where is the emergency call button located?", passage)
    assert "The SOS button is in the overhead console." in quote


class _Translator:
    """A model that translates with a fixed reply (`english`: its reply when no Chinese token is allowed); its
    vocabulary: "a", "中", "b"."""

    def __init__(self, reply: str, english: str | None = None):
        from types import SimpleNamespace

        self.reply, self.english = reply, english
        self.tokenizer = SimpleNamespace(get_vocab_size=lambda: 3, decode_batch=lambda ids: ["a", "中", "b"])

    def encode_chat(self, messages):
        return [0]

    def encode(self, text, bos=True):
        return [0] * len(text)

    def generate(self, ids, max_new_tokens, sampling, ban, placed=None):
        from types import SimpleNamespace

        from runtime.llm import Delta

        self.banned = ban  # the tokens writing Chinese, when every word must be English
        reply = self.english if ban and self.english else self.reply

        class Gen:
            result = SimpleNamespace(finish_reason="stop")

            def __iter__(gen):
                yield Delta(0, reply)

        return Gen()


def test_a_translation_that_answers_or_adds_a_number_is_none():
    from app.answer.translation import to_english

    assert to_english(_Translator("Where do I clamp the black cable?"), "黑色的线夹在哪儿？") == \
        "Where do I clamp the black cable?"
    assert to_english(_Translator("Clamp the black cable to the earth point."), "黑色的线夹在哪儿？") == ""
    # such a reply is tried again with every word English, which leads the model another way
    assert to_english(_Translator("Clamp the black cable to the earth point.", "Where does the black cable go?"),
                      "黑色的线夹在哪儿？") == "Where does the black cable go?"
    assert to_english(_Translator("I have 8 GB left. Is that enough?"), "只剩 8GB 了，够吗？") != ""
    assert to_english(_Translator("I have 8 GB left, and 10 GB is needed?"), "只剩 8GB 了，够吗？") == ""
    assert to_english(_Translator("It is behind the glove box."), "在手套箱后面。") == "It is behind the glove box."
    model = _Translator("It is behind the glove box.")
    assert to_english(model, "在手套箱后面。", whole=True) and model.banned == {1}
    assert to_english(model, "在手套箱后面。") and model.banned == set()


class _TranslatorOf(_Translator):
    """A model that translates each text with its own reply (`replies`; "" when it has none)."""

    def __init__(self, replies: dict[str, str]):
        super().__init__("")
        self.replies, self.texts = replies, []

    def encode_chat(self, messages):
        self.texts.append(messages[-1]["content"])
        return [0]

    def generate(self, ids, max_new_tokens, sampling, ban, placed=None):
        self.reply = self.replies.get(self.texts[-1], "")
        return super().generate(ids, max_new_tokens, sampling, ban, placed)


def test_a_long_question_the_model_answers_whole_is_translated_piece_by_piece():
    """The model answers a narrative question instead of translating it; its sentences, and the clauses
    leading up to its question apart from the one asking, are each translated: what happened, then the
    question. A piece telling what happened that gets no translation is left out; a question that gets none
    leaves the whole untranslated."""
    from app.answer.translation import to_english

    question = "朋友开车过来帮我搭电，那根黑色的线应该夹在哪儿？"
    replies = {question: "Clamp the black cable to the earth point.",
               "朋友开车过来帮我搭电。": "A friend came over to jump-start my car.",
               "那根黑色的线应该夹在哪儿？": "Where should the black cable be clamped?"}
    assert to_english(_TranslatorOf(replies), question) == ""  # where its own search found an answer
    model = _TranslatorOf(replies)
    assert to_english(model, question, pieces=True) == ("A friend came over to jump-start my car. "
                                                        "Where should the black cable be clamped?")
    assert model.texts == [question, question, "朋友开车过来帮我搭电。", "那根黑色的线应该夹在哪儿？"]
    two = "开着开着黄色的ABS灯亮了，这时候刹车还管用吗？开的时候要注意点啥？"
    model = _TranslatorOf({"这时候刹车还管用吗？": "Do the brakes still work now?",
                           "开的时候要注意点啥？": "What should I watch out for while driving?"})
    assert to_english(model, two, pieces=True) == ("Do the brakes still work now? "
                                                   "What should I watch out for while driving?")
    assert model.texts[2:] == ["开着开着黄色的ABS灯亮了。", "这时候刹车还管用吗？", "开的时候要注意点啥？"]
    answered = {**replies, "那根黑色的线应该夹在哪儿？": "It goes on the earth point."}
    assert to_english(_TranslatorOf(answered), question, pieces=True) == ""


def test_a_translation_may_say_a_spoken_range_as_one_figure_inside_it():
    """"八九百公斤" is 800-900 kg: "about 890 kilograms" restates it; 1,200 kg is the model's own number."""
    from app.answer.translation import to_english

    question = "没刹车的小拖车，八九百公斤，这车能拖吗？"
    assert to_english(_Translator("Can the car tow an unbraked trailer of about 890 kilograms?"), question)
    assert to_english(_Translator("Can the car tow an unbraked trailer of 800 to 900 kg?"), question)
    assert to_english(_Translator("Can the car tow an unbraked trailer of 1,200 kg?"), question) == ""
    assert to_english(_Translator("Can the car tow 1.2 tonnes with brakes?"), "拖车大概一吨二，带刹车的，能拖吗？")


def test_a_translation_states_the_values_of_its_text_as_written():
    from app.answer.translation import same_values

    assert same_values("Press the ACC button within 10 seconds.", "在 10 秒内按下 ACC 按钮。")
    assert same_values("进入 Settings > Charging。", "Go to Settings > Charging.")
    assert not same_values("Go to Settings > Charging.", "进入设置 > 充电。")  # the labels the screen shows, lost
    assert not same_values("It takes 36 hours.", "大约需要 36 分钟。")
    assert not same_values("Call 800-555-0199.", "请拨打 800-555-0190。")
    assert not same_values("It is behind the glove box.", "在手套箱后面，拧 2 圈。")  # a number the text never gave


def test_a_sentence_in_another_language_is_checked_by_its_english_values_by_themselves():
    """CrossLingualVerifier: a value that fails as written fails, whatever its translation says; words alone pass
    as their English would, but not about a thing of the question the KB never names; a refusal in any words
    is one."""
    from app.answer.across import CrossLingualVerifier

    passages = [MANUAL_EN.split("## Water tank")[1]]
    english = "What water goes in the water tank and the steam wand?"
    said = {"水箱能装 2 升。": "The water tank holds 1.8 litres.", "只能加冷水。": "Fill it with cold water only.",
            "蒸汽棒只能加冷水。": "Fill the steam wand with cold water only.", "我 don't know.": "I don't know."}
    verifier = CrossLingualVerifier(Verifier(passages, "水箱和蒸汽棒加什么水？", across=True),
                                    Verifier(passages, english, unnamed={"wand"}), said.get)
    assert not verifier.check("水箱能装 2 升。").ok
    assert verifier.check("只能加冷水。").ok and not verifier.check("蒸汽棒只能加冷水。").ok
    assert verifier.check("我 don't know.").refusal


def test_a_translated_question_ranks_the_passages_sentences_by_its_english_words():
    """The amount is the question's own; which sentence bounds it is read by the translation's words."""
    full_first = " ".join(reversed(TYRES.split(". ")))
    question, english = "前轮我只打了 33 psi，这气压够不够？", "Is the air pressure in my front tyres enough?"
    limit = judge_limit(question, [full_first], about=english)
    assert limit.reply == "no" and limit.bound.startswith("Under normal load"), limit
    assert judge_limit(question, [full_first]) is None  # without it no word names one of the values
