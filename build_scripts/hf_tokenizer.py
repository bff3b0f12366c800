"""Tokenizer of a Hugging Face model directory: tokenizer.json plus tokenizer_config.json facts."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from build_scripts.errors import BuildError
from build_scripts.gguf_tokenizer import GGUFTokenizer

_CHAT_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>")


def _token_text(value) -> str | None:
    # tokenizer_config.json spells special tokens as strings or as AddedToken dicts
    return value.get("content") if isinstance(value, dict) else value


def _chat_template(config: dict) -> str | None:
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: keep the default one
        named = {t.get("name"): t.get("template") for t in template}
        return named.get("default") or next(iter(named.values()), None)
    return template


def tokenizer_from_hf_dir(directory: Path) -> GGUFTokenizer:
    path = directory / "tokenizer.json"
    if not path.is_file():
        raise BuildError(f"{directory} has no tokenizer.json")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception for malformed files
        raise BuildError(f"{path} is not a valid tokenizer.json ({e})") from None
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    template_path = directory / "chat_template.jinja"
    template = template_path.read_text() if template_path.is_file() else _chat_template(config)

    bos_id = tok.token_to_id(_token_text(config.get("bos_token")) or "")
    eos_id = tok.token_to_id(_token_text(config.get("eos_token")) or "")
    pad_id = tok.token_to_id(_token_text(config.get("pad_token")) or "")
    unk_id = tok.token_to_id(_token_text(config.get("unk_token")) or "")
    stop_ids = [i for i in [eos_id, *(tok.token_to_id(t) for t in _CHAT_END_TOKENS)] if i is not None]
    specials = [t.content for t in tok.get_added_tokens_decoder().values() if t.special]
    return GGUFTokenizer(
        tokenizer=tok,
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        add_bos=bool(config.get("add_bos_token", False)),
        chat_template=template,
        special_tokens=specials,
        stop_ids=list(dict.fromkeys(stop_ids)),
        unk_id=unk_id,
    )
