"""Voice mode text shaping: markdown and units made speakable, whole sentences for text-to-speech."""

from __future__ import annotations

from app.voice import SentenceChunker, speakable


def test_speakable_strips_markdown_and_spells_units():
    text = "## Tyres\n- Set **front** tyres to 250 kPa (36 psi) [1].\n- Charging 10–80% takes 30 min at 150 kW."
    assert speakable(text) == ("Tyres. Set front tyres to 250 kilopascals (36 P S I). "
                               "Charging 10 to 80 percent takes 30 minutes at 150 kilowatts.")
    assert speakable("Drive above 25 km/h; the 12V battery; 77 kWh at -10°C.") == \
        "Drive above 25 kilometres per hour; the 12 volts battery; 77 kilowatt hours at -10 degrees Celsius."


def test_sentences_are_released_whole_across_token_boundaries():
    chunker = SentenceChunker()
    out = []
    for piece in ["1. Open the", " app. 2. Tap", " Reset. 你好", "。再见！ The end"]:
        out += chunker.push(piece)
    assert out == ["Open the app.", "Tap Reset.", "你好。", "再见！"]
    assert chunker.flush() == ["The end"]
