"""GGUF tokenizer metadata -> a Hugging Face `tokenizers` Tokenizer (byte-level BPE).

The GGUF stores only the vocabulary, merges, token types and a pre-tokenizer *name*
(`tokenizer.ggml.pre`); the actual splitting rules live in llama.cpp (src/llama-vocab.cpp).
`PRE_TOKENIZERS` copies those rules, so the runtime splits text the way llama.cpp would for the
same file. Anything we have no rule for is refused instead of guessed: a wrong pre-tokenizer
still produces plausible ids, and the model then quietly degrades.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from build_scripts.errors import BuildError, UnsupportedModelError
from build_scripts.weights.gguf_file import read_gguf_metadata

TOKENIZER_FILE = "tokenizer.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


@dataclass(frozen=True)
class PreTokenizerSpec:
    """How llama.cpp pre-tokenizes one `tokenizer.ggml.pre` family."""

    # applied in order, each one splitting the pieces left by the previous (llama.cpp's
    # unicode_regex_split); text between matches stays a piece of its own
    regexes: tuple[str, ...]
    nfc: bool = False  # Qwen2's own tokenizer.json NFC-normalizes first (llama.cpp does not)
    ignore_merges: bool = False  # a pre-token that is itself in the vocab is emitted whole (Llama 3)
    add_bos: bool = False  # llama.cpp's default when tokenizer.ggml.add_bos_token is absent


# Regexes verbatim from llama.cpp llm_tokenizer_bpe (the "adapted" forms: (?i:...) spelled out).
_GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS_RE = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_QWEN2_RE = (_CONTRACTIONS_RE + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3_RE = (_CONTRACTIONS_RE + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

_DEFAULT = PreTokenizerSpec((r"[\p{P}\$\+<=>\^~\|]+", _GPT2_RE, r"\p{N}+", r"[0-9][0-9][0-9]"))
_GPT2 = PreTokenizerSpec((_GPT2_RE,))
_STARCODER = PreTokenizerSpec((r"\p{N}", _GPT2_RE))  # every digit its own piece, then GPT-2
_QWEN2 = PreTokenizerSpec((_QWEN2_RE,), nfc=True)
_LLAMA3 = PreTokenizerSpec((_LLAMA3_RE,), ignore_merges=True, add_bos=True)

# tokenizer.ggml.pre -> rules, grouped as in llama_vocab::impl::load. Only names whose llama.cpp
# flags (ignore_merges, add_bos) and HF normalizer are known to match the spec are listed.
PRE_TOKENIZERS: dict[str, PreTokenizerSpec] = {
    "default": _DEFAULT,
    "gpt-2": _GPT2, "phi-2": _GPT2,
    "smollm": _STARCODER, "starcoder": _STARCODER, "refact": _STARCODER,
    "qwen2": _QWEN2,
    "llama-bpe": _LLAMA3, "llama3": _LLAMA3, "llama-v3": _LLAMA3,
}

# GGUF token type -> special flag of the AddedToken it becomes; types not listed (1 normal,
# 5 unused, 6 byte) stay plain vocabulary entries. Like llama.cpp's special-token cache, these
# are matched in raw text before pre-tokenization.
_ADDED_TOKEN_TYPES: dict[int, bool] = {
    2: True,  # unknown
    3: True,  # control: <|im_start|> etc., dropped by decode(skip_special_tokens=True)
    4: False,  # user-defined: <tool_call> etc., ordinary text the model emits
}

# Turn/sequence terminators llama.cpp adds to its end-of-generation set by their text
# (special_eog_ids); FIM-only ones are left out, they never end a chat turn.
_CHAT_END_TOKENS = (
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>",
    "<|end|>", "<|end_of_text|>", "<EOT>", "<end_of_utterance>",
)

_SPECIAL_ID_KEYS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
}

# Explicit end-of-turn ids some converters write besides EOS.
_STOP_ID_KEYS = ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


@dataclass(frozen=True)
class GGUFTokenizer:
    tokenizer: Tokenizer
    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    add_bos: bool
    chat_template: str | None
    special_tokens: list[str]  # control/unknown tokens, in id order
    stop_ids: list[int]  # EOS first, then other end-of-turn tokens in the vocab
    add_eos: bool = False
    unk_id: int | None = None  # the token of text the vocabulary cannot spell (byte-level BPE has none)

    def token(self, token_id: int | None) -> str | None:
        return None if token_id is None else self.tokenizer.id_to_token(token_id)


def tokenizer_from_gguf(path: str | os.PathLike) -> GGUFTokenizer:
    """Convenience: read a GGUF's metadata (no tensors) and convert its tokenizer."""
    return tokenizer_from_gguf_metadata(read_gguf_metadata(path))


def tokenizer_from_gguf_metadata(meta: dict[str, Any]) -> GGUFTokenizer:
    """Build the tokenizer described by a GGUF's `tokenizer.*` metadata."""
    kind = meta.get("tokenizer.ggml.model")
    builder = _MODEL_BUILDERS.get(kind)
    if builder is None:
        raise UnsupportedModelError(
            f"unsupported tokenizer.ggml.model {kind!r}: hexrag converts only byte-level BPE "
            f"({', '.join(map(repr, _MODEL_BUILDERS))})"
        )
    return builder(meta)


def save_tokenizer(tok: GGUFTokenizer, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Write tokenizer.json (+ chat_template.jinja) into out_dir; returns the manifest entry."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.tokenizer.save(str(out / TOKENIZER_FILE))
    template_file = None
    if tok.chat_template:
        template_file = CHAT_TEMPLATE_FILE
        (out / template_file).write_text(tok.chat_template, encoding="utf-8")
    return {
        "tokenizer": TOKENIZER_FILE,
        "chat_template": template_file,
        "bos_id": tok.bos_id,
        "eos_id": tok.eos_id,
        "pad_id": tok.pad_id,
        "stop_ids": list(tok.stop_ids),
        "add_bos": tok.add_bos,
        "add_eos": tok.add_eos,
        "unk_id": tok.unk_id,
        # chat templates refer to these by text ({{ bos_token }})
        "bos_token": tok.token(tok.bos_id),
        "eos_token": tok.token(tok.eos_id),
    }


# ---------------------------------------------------------------------------------------------
# byte-level BPE ("gpt2")
# ---------------------------------------------------------------------------------------------


def _bpe_from_meta(meta: dict[str, Any]) -> GGUFTokenizer:
    spec = _pre_spec(meta)
    tokens = _tokens(meta)
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if len(types) < len(tokens):
        raise BuildError(f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    ids = {role: _token_id(meta, key, len(tokens)) for role, key in _SPECIAL_ID_KEYS.items()}
    add_bos = _flag(meta, "tokenizer.ggml.add_bos_token", spec.add_bos, "bos", ids["bos"])
    add_eos = _flag(meta, "tokenizer.ggml.add_eos_token", False, "eos", ids["eos"])

    tok = Tokenizer(models.BPE(
        vocab=_vocab(tokens),
        merges=_merges(meta),
        ignore_merges=spec.ignore_merges,
    ))
    if spec.nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = _pre_tokenizer(spec)
    tok.decoder = decoders.ByteLevel()
    added = _added_tokens(tokens, types)
    tok.add_tokens(added)  # add_tokens keeps each AddedToken's own special flag
    bos = tokens[ids["bos"]] if add_bos else None
    eos = tokens[ids["eos"]] if add_eos else None
    tok.post_processor = _post_processor(bos, ids["bos"], eos, ids["eos"])

    return GGUFTokenizer(
        tokenizer=tok,
        bos_id=ids["bos"],
        eos_id=ids["eos"],
        pad_id=ids["pad"],
        add_bos=add_bos,
        add_eos=add_eos,
        chat_template=meta.get("tokenizer.chat_template") or None,
        special_tokens=[t.content for t in added if t.special],
        stop_ids=_stop_ids(meta, tokens, ids["eos"]),
    )


_MODEL_BUILDERS = {"gpt2": _bpe_from_meta}


def _pre_spec(meta: dict[str, Any]) -> PreTokenizerSpec:
    name = meta.get("tokenizer.ggml.pre")
    if not name:
        # llama.cpp falls back to "default" here with a "generation quality will be degraded" warning
        raise UnsupportedModelError("GGUF has no tokenizer.ggml.pre; re-convert it with a current llama.cpp")
    spec = PRE_TOKENIZERS.get(name)
    if spec is None:
        raise UnsupportedModelError(
            f"unsupported tokenizer.ggml.pre {name!r} (known: {', '.join(sorted(PRE_TOKENIZERS))})"
        )
    return spec


def _tokens(meta: dict[str, Any]) -> list[str]:
    raw = meta.get("tokenizer.ggml.tokens")
    if not raw:
        raise BuildError("GGUF has no tokenizer.ggml.tokens")
    # llama.cpp renames empty entries the same way, so ids stay aligned
    return [t or f"[EMPTY_{i}]" for i, t in enumerate(raw)]


def _vocab(tokens: list[str]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        if vocab.setdefault(t, i) != i:  # a dict would silently keep only one of the ids
            raise BuildError(f"duplicate token {t!r} in tokenizer.ggml.tokens (ids {vocab[t]} and {i})")
    return vocab


def _merges(meta: dict[str, Any]) -> list[tuple[str, str]]:
    raw = meta.get("tokenizer.ggml.merges")
    if raw is None:
        raise BuildError("GGUF has no tokenizer.ggml.merges (required for a gpt2 tokenizer)")
    pairs = []
    for merge in raw:
        cut = merge.find(" ", 1)  # as llama.cpp: the separator is the first space after char 0
        if cut < 0:
            raise BuildError(f"malformed merge {merge!r} in tokenizer.ggml.merges")
        pairs.append((merge[:cut], merge[cut + 1:]))
    return pairs


def _token_id(meta: dict[str, Any], key: str, n_tokens: int) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    if not 0 <= int(value) < n_tokens:
        raise BuildError(f"{key} = {value} is outside the vocabulary (size {n_tokens})")
    return int(value)


def _flag(meta: dict[str, Any], key: str, default: bool, role: str, token_id: int | None) -> bool:
    value = bool(meta.get(key, default))
    if value and token_id is None:
        raise BuildError(f"{key} is true but {_SPECIAL_ID_KEYS[role]} is not set")
    return value


def _pre_tokenizer(spec: PreTokenizerSpec) -> pre_tokenizers.PreTokenizer:
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in spec.regexes]
    # the regexes did the splitting; ByteLevel only maps bytes to the GPT-2 alphabet
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    return pre_tokenizers.Sequence([*splits, byte_level])


def _added_tokens(tokens: list[str], types: list[int]) -> list[AddedToken]:
    return [
        AddedToken(tokens[i], special=_ADDED_TOKEN_TYPES[t], normalized=False)
        for i, t in enumerate(types[: len(tokens)])
        if t in _ADDED_TOKEN_TYPES
    ]


def _post_processor(bos: str | None, bos_id: int | None, eos: str | None, eos_id: int | None):
    byte_level = processors.ByteLevel(trim_offsets=False)  # offsets only; ids are unaffected
    specials = [(tok, tid) for tok, tid in ((bos, bos_id), (eos, eos_id)) if tok is not None]
    if not specials:
        return byte_level

    def wrap(seq: str, type_id: int) -> list[str]:
        return [f"{piece}:{type_id}" for piece in (bos, seq, eos) if piece]

    template = processors.TemplateProcessing(
        single=wrap("$A", 0), pair=wrap("$A", 0) + wrap("$B", 1), special_tokens=specials
    )
    return processors.Sequence([byte_level, template])


def _stop_ids(meta: dict[str, Any], tokens: list[str], eos_id: int | None) -> list[int]:
    by_text = {t: i for i, t in enumerate(tokens) if t in _CHAT_END_TOKENS}
    explicit = [_token_id(meta, key, len(tokens)) for key in _STOP_ID_KEYS]
    candidates = [eos_id, *explicit, *(by_text.get(t) for t in _CHAT_END_TOKENS)]
    return list(dict.fromkeys(i for i in candidates if i is not None))
