"""Hybrid fusion: one score per candidate from the signals themselves, not from their ranks.

    fused = cosine + BM25_SHARE x BM25 / the best BM25 of the query + PLACE_SHARE x place cosine

Rank fusion (RRF) threw the margins away: a section one rank behind on both sides lost to one that
led a single side by a hair, and sibling sections of one page, which share most words, were ordered
by noise. The cosine is on its own scale already; BM25 is divided by the query's best so that its
share does not grow with the query's length or the KB's size; the place (the cosine of the question
and the section's title and heading path alone, chunking.place_text) separates siblings. A query the
embedder cannot read (Chinese with an English model) is ranked by BM25 alone.
"""

from __future__ import annotations

from collections.abc import Hashable

# a grid on the development sets (the MkDocs, Doxygen and AsciiDoc dev splits, the Flask pages' questions
# and the sample KB's eval_questions; knowledge/samples/realdocs/README.md): pooled hybrid R@1 0.795 with
# rank fusion, 0.843 here, none of them lower; the held-out splits and the sample's answer question sets
# measured after (AsciiDoc held out +2 questions at R@1, the answer question sets -3 of 108)
BM25_SHARE = 0.1
PLACE_SHARE = 0.2


def fused_scores(candidates: dict[Hashable, None], cosine: dict, bm25: dict, place: dict,
                 readable: bool) -> list[tuple[Hashable, float]]:
    """(candidate, fused score) best first; `candidates` in tie order (dict keys). `bm25` and `place`
    may lack a candidate (not in the lexical list; a KB without place vectors): it scores 0 there."""
    top = max(bm25.values(), default=0.0) or 1.0
    scores = {c: BM25_SHARE * bm25.get(c, 0.0) / top
              + ((cosine[c] + PLACE_SHARE * place.get(c, 0.0)) if readable else 0.0) for c in candidates}
    return sorted(scores.items(), key=lambda t: -t[1])  # stable: ties keep the candidates' order
