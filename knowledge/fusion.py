"""Reciprocal rank fusion: combines rankings whose scores are not comparable (cosine vs BM25)."""

from __future__ import annotations

from collections.abc import Sequence

RRF_K = 60  # the constant of Cormack et al. (2009); damps the weight of the very first ranks


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], weights: Sequence[float] | None = None,
                           k: int = RRF_K) -> list[tuple[int, float]]:
    """(id, fused score) best first; each ranking lists ids best first. A weight of 0 drops a ranking."""
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings)):
        if weight <= 0:
            continue
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    # ties (common: rank r in one list only, from either list) go to the earlier ranking's items,
    # so pass the more reliable ranking first; sorted() is stable over this insertion order
    return sorted(scores.items(), key=lambda t: -t[1])
