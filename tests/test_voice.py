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


def _units(text: str, first_clause: bool = True, step: int = 3) -> list[str]:
    """The units a stream releases for `text` fed `step` characters at a time (as tokens arrive)."""
    stream, out = SentenceStream(first_clause), []
    for i in range(0, len(text), step):
        out += stream.push(text[i:i + step])
    out += stream.flush()
    assert "".join(out) == text
    return out


def test_a_spoken_answer_starts_with_its_first_long_clause():
    steps = "To pair your phone with Bluetooth, turn it on, open Settings and tap Pair. Then confirm the code."
    assert _units(steps) == ["To pair your phone with Bluetooth, ", "turn it on, open Settings and tap Pair. ",
                             "Then confirm the code."]
    assert _units(steps, first_clause=False)[0].startswith("To pair your phone with Bluetooth, turn it on,")
    # a short first clause waits for its sentence; a number's thousands comma is no clause end
    assert _units("Yes, you can tow up to 1,500 kg with a braked trailer. No more.") == [
        "Yes, you can tow up to 1,500 kg with a braked trailer. ", "No more."]
    assert _units("No. The limit is 50 km/h, in every mode.") == ["No. ", "The limit is 50 km/h, in every mode."]
    assert _units("要连接蓝牙手机，请先在手机上打开蓝牙，然后在屏幕上选择设备。接着确认。") == [
        "要连接蓝牙手机，请先在手机上打开蓝牙，", "然后在屏幕上选择设备。", "接着确认。"]
