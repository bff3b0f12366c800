"""A SentencePiece-unigram vocabulary -> a `tokenizers` Tokenizer, as XLM-R's own tokenizer.json is made.

    text ─ charsmap (NFKC, control characters dropped, odd spaces to " ") ─ runs of spaces to one
         ─ Metaspace ("▁" for spaces, one in front) ─ Unigram (best-scoring split of each word)
         ─ <s> … </s>

The charsmap comes from the weights file's own per-code-point table (build_scripts/charsmap.py),
not from a Unicode normalization form: both agree on most code points, not on all (full-width "～"
stays, NFKC would make it "~").
"""

from __future__ import annotations

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from build_scripts.charsmap import precompiled_charsmap
from build_scripts.gguf_tokenizer import GGUFTokenizer
from build_scripts.weights.e5_file import E5Vocabulary

_METASPACE = "▁"


def tokenizer_from_unigram(vocab: E5Vocabulary) -> GGUFTokenizer:
    tok = Tokenizer(models.Unigram(list(zip(vocab.pieces, vocab.scores)), unk_id=vocab.unk_id, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(precompiled_charsmap(vocab.charsmap)),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=_METASPACE, prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement=_METASPACE, prepend_scheme="always", split=True)
    # the control pieces score 0 in the vocabulary; as special tokens they are matched whole and
    # never assembled from text
    specials = sorted({vocab.bos_id, vocab.pad_id, vocab.eos_id, vocab.unk_id} |
                      {i for i, p in enumerate(vocab.pieces) if p.startswith("<") and p.endswith(">") and
                       vocab.scores[i] == 0.0})
    tok.add_special_tokens([AddedToken(vocab.pieces[i], special=True, normalized=False) for i in specials])
    bos, eos = vocab.pieces[vocab.bos_id], vocab.pieces[vocab.eos_id]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, vocab.bos_id), (eos, vocab.eos_id)])
    return GGUFTokenizer(tokenizer=tok, bos_id=vocab.bos_id, eos_id=vocab.eos_id, pad_id=vocab.pad_id, add_bos=True,
                         add_eos=True, chat_template=None, special_tokens=[vocab.pieces[i] for i in specials],
                         stop_ids=[vocab.eos_id], unk_id=vocab.unk_id)
