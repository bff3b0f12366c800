"""GGUF -> tokenizers conversion and chat-template rendering, checked on the packaged models.

Reference ids come from an independent conversion (the transformers GGUF loader) and are compared
exactly; the chat prompts are spelled out by hand from the models' published formats.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, pre_tokenizers

from build_scripts.errors import BuildError, UnsupportedModelError
from build_scripts.fetch import fetch
from build_scripts.gguf_tokenizer import PRE_TOKENIZERS, save_tokenizer, tokenizer_from_gguf_metadata
from build_scripts.weights.gguf_file import read_gguf_metadata
from runtime.chat_template import ChatTemplate, ChatTemplateError, render_chat

REFS_PATH = Path(__file__).resolve().parent / "fixtures" / "tokenizer_refs.json"

# packaged model key -> (fetch parts, prefix of its entry in tokenizer_refs.json, default system prompt)
MODELS = {
    "smollm2-135m-instruct": (
        None, "SmolLM2-135M-Instruct", "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    ),
    "qwen2.5-coder-1.5b-instruct": (
        1, "Qwen2.5-Coder-1.5B-Instruct", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
    ),
}

CONVERSATION = [
    {"role": "user", "content": "My tyre pressure light is on."},
    {"role": "assistant", "content": "Check all four tyres with a gauge."},
    {"role": "user", "content": "And if they are fine?"},
]


def _chatml(system: str, messages: list[dict]) -> str:
    turns = [{"role": "system", "content": system}, *messages]
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in turns) + "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def refs() -> dict:
    assert REFS_PATH.is_file(), f"missing reference ids {REFS_PATH}"
    return json.loads(REFS_PATH.read_text(encoding="utf-8"))["models"]


@functools.cache
def _load(key: str):
    # cached here rather than by the fixture: pytest re-runs a module fixture when its params
    # are regrouped or overridden per test, and reading the 1.5B metadata takes seconds
    meta = read_gguf_metadata(fetch(key, parts=MODELS[key][0], quiet=True))
    return key, meta, tokenizer_from_gguf_metadata(meta)


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    """(key, GGUF metadata, converted tokenizer) for each packaged model."""
    return _load(request.param)


def _cases(refs: dict, key: str) -> list[dict]:
    prefix = MODELS[key][1]
    [entry] = [v for name, v in refs.items() if name.startswith(prefix)]
    return entry["cases"]


# ---------------------------------------------------------------------------------------------
# packaged models
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ids_match_reference_exactly(model, refs):
    key, _, tok = model
    cases = _cases(refs, key)
    assert cases
    for case in cases:
        ids = tok.tokenizer.encode(case["text"], add_special_tokens=False).ids
        assert ids == case["ids"], f"{key}: {case['text']!r}"
        assert tok.tokenizer.decode(ids) == case["text"]


@pytest.mark.slow
def test_special_tokens_keep_gguf_ids(model):
    key, meta, tok = model
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    im_start, im_end = tokens.index("<|im_start|>"), tokens.index("<|im_end|>")
    assert tok.tokenizer.token_to_id("<|im_start|>") == im_start
    assert tok.tokenizer.token_to_id("<|im_end|>") == im_end
    for i, t in enumerate(types):
        if t == 3:  # every control token is an added special token at its GGUF id
            assert tok.tokenizer.token_to_id(tokens[i]) == i
            assert tokens[i] in tok.special_tokens

    enc = tok.tokenizer.encode("<|im_start|>user", add_special_tokens=False)
    assert enc.ids[0] == im_start
    assert len(enc.ids) == 2
    assert tok.tokenizer.decode(enc.ids, skip_special_tokens=False) == "<|im_start|>user"
    assert tok.tokenizer.decode(enc.ids) == "user"

    for role in ("bos", "eos", "padding"):
        assert getattr(tok, f"{role[:3]}_id") == meta[f"tokenizer.ggml.{role}_token_id"]
    assert tok.add_bos is meta["tokenizer.ggml.add_bos_token"] is False
    assert tok.stop_ids[0] == tok.eos_id
    assert {im_end, tokens.index("<|endoftext|>")} <= set(tok.stop_ids)
    # add_bos is false for both: encoding with special tokens adds nothing
    assert tok.tokenizer.encode("hi").ids == tok.tokenizer.encode("hi", add_special_tokens=False).ids


@pytest.mark.slow
def test_numbers_split_into_single_digits(model):
    # both families (smollm, qwen2) give every digit its own token; the reference cases hold no
    # multi-digit number, so this is the check that the pre-tokenizer table was applied
    _, _, tok = model
    enc = tok.tokenizer.encode("Hello world! 2024", add_special_tokens=False)
    assert enc.tokens[-4:] == ["2", "0", "2", "4"]
    assert tok.tokenizer.decode(enc.ids) == "Hello world! 2024"


@pytest.mark.slow
@pytest.mark.parametrize("model", ["qwen2.5-coder-1.5b-instruct"], indirect=True)
def test_user_defined_tokens_are_plain_text(model):
    _, meta, tok = model
    tool_call = meta["tokenizer.ggml.tokens"].index("<tool_call>")
    assert meta["tokenizer.ggml.token_type"][tool_call] == 4
    ids = tok.tokenizer.encode("<tool_call>x", add_special_tokens=False).ids
    assert ids[0] == tool_call
    assert "<tool_call>" not in tok.special_tokens
    assert tok.tokenizer.decode(ids) == "<tool_call>x"  # kept even with skip_special_tokens


@pytest.mark.slow
def test_chat_template_two_turns_with_default_system_prompt(model):
    key, _, tok = model
    system = MODELS[key][2]
    assert tok.chat_template
    prompt = render_chat(tok.chat_template, CONVERSATION)
    assert prompt == _chatml(system, CONVERSATION)
    assert prompt.endswith("<|im_start|>assistant\n")

    # a given system message replaces the default one; no generation prompt when not asked for
    own = [{"role": "system", "content": "Answer briefly."}, *CONVERSATION]
    compiled = ChatTemplate(tok.chat_template, eos_token=tok.token(tok.eos_id))
    expected = _chatml("Answer briefly.", CONVERSATION).removesuffix("<|im_start|>assistant\n")
    assert compiled.render(own, add_generation_prompt=False) == expected

    ids = tok.tokenizer.encode(prompt).ids
    im_start = tok.tokenizer.token_to_id("<|im_start|>")
    assert ids.count(im_start) == 5  # system, 3 turns, generation prompt
    assert tok.tokenizer.decode(ids, skip_special_tokens=False) == prompt


@pytest.mark.slow
def test_save_tokenizer_round_trips(model, refs, tmp_path):
    key, _, tok = model
    info = save_tokenizer(tok, tmp_path)
    assert info["tokenizer"] == "tokenizer.json"
    assert info["chat_template"] == "chat_template.jinja"
    assert (tmp_path / "chat_template.jinja").read_text(encoding="utf-8") == tok.chat_template
    for field in ("bos_id", "eos_id", "pad_id", "add_bos"):
        assert info[field] == getattr(tok, field)
    assert info["stop_ids"] == tok.stop_ids
    assert info["eos_token"] == "<|im_end|>"
    json.dumps(info)  # goes into the model manifest

    loaded = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    texts = [c["text"] for c in _cases(refs, key)]
    texts += [render_chat(tok.chat_template, CONVERSATION), "x 12345 <tool_call>"]
    for text in texts:
        for add_special in (True, False):
            expected = tok.tokenizer.encode(text, add_special_tokens=add_special).ids
            assert loaded.encode(text, add_special_tokens=add_special).ids == expected


@pytest.mark.slow
def test_unsupported_tokenizers_are_refused(model):
    _, meta, _ = model
    with pytest.raises(UnsupportedModelError, match="'llama'"):
        tokenizer_from_gguf_metadata({**meta, "tokenizer.ggml.model": "llama"})
    with pytest.raises(UnsupportedModelError, match="'no-such-pre'"):
        tokenizer_from_gguf_metadata({**meta, "tokenizer.ggml.pre": "no-such-pre"})
    without_pre = {k: v for k, v in meta.items() if k != "tokenizer.ggml.pre"}
    with pytest.raises(UnsupportedModelError, match="tokenizer.ggml.pre"):
        tokenizer_from_gguf_metadata(without_pre)


# ---------------------------------------------------------------------------------------------
# small synthetic vocabularies: pre-tokenizer table and special-token handling
# ---------------------------------------------------------------------------------------------


def _tiny_meta(pre: str, **extra) -> dict:
    """A byte-level BPE that knows only the 256 byte symbols, one merge and two control tokens."""
    tokens = sorted(pre_tokenizers.ByteLevel.alphabet()) + ["ab", "<s>", "<|im_end|>"]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [1] * (len(tokens) - 2) + [3, 3],
        "tokenizer.ggml.merges": ["a b"],
        "tokenizer.ggml.bos_token_id": len(tokens) - 2,
        "tokenizer.ggml.eos_token_id": len(tokens) - 1,
        **extra,
    }


def _pieces(pre: str, text: str) -> list[str]:
    tok = tokenizer_from_gguf_metadata(_tiny_meta(pre)).tokenizer
    return [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]


@pytest.mark.parametrize(
    ("pre", "expected"),
    [
        ("smollm", ["x", "1", "2", "3", "4", "Ġab", "'s"]),
        ("gpt-2", ["x", "1234", "Ġab", "'s"]),
        ("qwen2", ["x", "1", "2", "3", "4", "Ġab", "'s"]),
        ("llama-bpe", ["x", "123", "4", "Ġab", "'s"]),
    ],
)
def test_pre_tokenizer_digit_rules(pre, expected):
    assert pre in PRE_TOKENIZERS
    assert _pieces(pre, "x1234 ab's") == expected


def test_llama3_adds_bos_by_default_and_metadata_overrides():
    tok = tokenizer_from_gguf_metadata(_tiny_meta("llama3"))
    bos = tok.bos_id
    assert tok.add_bos
    assert tok.tokenizer.encode("ab").ids == [bos, tok.tokenizer.token_to_id("ab")]
    assert tok.tokenizer.encode("ab", add_special_tokens=False).ids == [tok.tokenizer.token_to_id("ab")]
    off = tokenizer_from_gguf_metadata(_tiny_meta("llama3", **{"tokenizer.ggml.add_bos_token": False}))
    assert not off.add_bos and bos not in off.tokenizer.encode("ab").ids


def test_control_tokens_split_out_and_stop_ids():
    tok = tokenizer_from_gguf_metadata(_tiny_meta("gpt-2"))
    end = tok.eos_id
    assert tok.tokenizer.encode("ab<|im_end|>ab", add_special_tokens=False).ids == [256, end, 256]
    assert tok.stop_ids == [end]
    assert tok.special_tokens == ["<s>", "<|im_end|>"]


def test_malformed_metadata_is_a_build_error():
    meta = _tiny_meta("gpt-2")
    with pytest.raises(BuildError, match="duplicate token"):
        tokenizer_from_gguf_metadata({**meta, "tokenizer.ggml.tokens": meta["tokenizer.ggml.tokens"][:-1] + ["ab"]})
    with pytest.raises(BuildError, match="outside the vocabulary"):
        tokenizer_from_gguf_metadata({**meta, "tokenizer.ggml.eos_token_id": 10_000})
    with pytest.raises(BuildError, match="add_bos_token is true"):
        no_bos = {k: v for k, v in meta.items() if "bos" not in k}
        tokenizer_from_gguf_metadata({**no_bos, "tokenizer.ggml.add_bos_token": True})


# ---------------------------------------------------------------------------------------------
# chat template rendering
# ---------------------------------------------------------------------------------------------


def test_template_sees_bos_eos_and_raise_exception():
    template = (
        "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}"
        "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"
    )
    chat = ChatTemplate(template, bos_token="<s>", eos_token="</s>")
    assert chat.render([{"role": "user", "content": "hi"}]) == "<s>hi</s>"
    assert ChatTemplate(template).render([{"role": "user", "content": "hi"}]) == "hi"  # unset tokens render empty
    with pytest.raises(ChatTemplateError, match="first message must be from the user"):
        chat.render([{"role": "assistant", "content": "hi"}])


def test_template_errors_are_chat_template_errors():
    with pytest.raises(ChatTemplateError, match="line 2"):
        ChatTemplate("ok\n{% if %}")
    with pytest.raises(ChatTemplateError):
        render_chat("{{ messages[0].content + '!' }}", [{"role": "user", "content": None}])
    assert issubclass(ChatTemplateError, ValueError)


def test_template_environment_matches_transformers():
    # lstrip_blocks drops the indent, trim_blocks the newlines after block tags; tojson keeps
    # non-ASCII; {% generation %} (transformers' assistant-mask marker) is accepted
    template = "  {% for m in messages %}\n{% generation %}{{ m | tojson }}{% endgeneration %}\n{% endfor %}"
    out = render_chat(template, [{"role": "user", "content": "é"}], add_generation_prompt=False)
    assert out == '{"role": "user", "content": "é"}'
    with pytest.raises(ChatTemplateError):  # the sandbox refuses mutating data passed in
        render_chat("{{ messages.append(1) }}", [])
