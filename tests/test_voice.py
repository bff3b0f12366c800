"""Voice mode text shaping: markdown, citations and units made speakable; whole sentences for text-to-speech."""

from __future__ import annotations

from app.answer.sentences import SentenceStream
from app.voice import speakable


def test_speakable_strips_markdown_and_spells_units():
    text = "## Tyres\n- Set **front** tyres to 250 kPa (36 psi) [1].\n- Charging 10–80% takes 30 min at 150 kW."
    assert speakable(text) == ("Tyres. Set front tyres to 250 kilopascals (36 P S I). "
                               "Charging 10 to 80 percent takes 30 minutes at 150 kilowatts.")
    assert speakable("Drive above 25 km/h; the 12V battery; 77 kWh at -10°C.") == \
        "Drive above 25 kilometres per hour; the 12 volts battery; 77 kilowatt hours at -10 degrees Celsius."


def test_phone_numbers_citations_and_chinese_units():
    assert speakable("Call roadside assistance on 800-555-0199.") == "Call roadside assistance on 800 555 0199."
    assert speakable("According to [1], the limit is 1,500 kg.") == "The limit is 1,500 kilograms."
    assert speakable("前轮 240 kPa（35 psi），充到 80%。") == "前轮 240 千帕（35 磅每平方英寸），充到 百分之80。"


def test_sentences_are_released_whole_across_token_boundaries():
    stream = SentenceStream()
    out = []
    for piece in ["1. Open the", " app. 2. Tap", " Reset. 你好", "。再见！ The end"]:
        out += stream.push(piece)
    assert out == ["1. ", "Open the app. ", "2. ", "Tap Reset. ", "你好。", "再见！ "]
    assert stream.flush() == ["The end"]
