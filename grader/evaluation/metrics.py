"""How well a ranking matches a reference, and how well several rankings agree: pure functions, no I/O.

A ranking is a list of tie groups of trajectory ids, best first. A reference ranking has the same shape; only
pairs it orders strictly are scored, so pairs it ties, and ids it does not list, carry no judgement. An id the
grader did not rank (its patch did not apply, say) leaves its pairs unscored too: the harness reports those
separately instead of guessing what the grader would have said.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence

from grader.ranking.agreement import PositionBias, kendall_tau, mean_tau, position_bias
from grader.ranking.order import Ranking, positions
from grader.ranking.references import credit
from grader.util.lazy import renamed_names

__all__ = [
    "PositionBias",
    "bootstrap_interval",
    "borda",
    "borda_scores",
    "inversions",
    "kendall_tau",
    "mean_tau",
    "pair_inversions",
    "pairwise_accuracy",
    "pairwise_credit",
    "position_bias",
    "scored_pairs",
    "top1_accuracy",
]


def scored_pairs(reference: Ranking, among: set[str] | None = None) -> list[tuple[str, str]]:
    """(better, worse) for every pair the reference orders strictly, optionally only among some ids."""
    rank = positions(reference)
    ids = [tid for tid in rank if among is None or tid in among]
    pairs = []
    for a, b in itertools.combinations(ids, 2):
        if rank[a] < rank[b]:
            pairs.append((a, b))
        elif rank[b] < rank[a]:
            pairs.append((b, a))
    return pairs


def pairwise_credit(
    ranking: Ranking, reference: Ranking, involving: set[str] | None = None
) -> tuple[float, int]:
    """(credit, scored pairs): 1 per pair the grader orders as the reference does, 0.5 per pair it ties.

    The raw sums, so a batch can pool pairs across groups; `pairwise_accuracy` is their ratio. With
    `involving`, only pairs with at least one of those ids count (how well the grader places them).
    """
    pairs = [
        (better, worse)
        for better, worse in scored_pairs(reference)
        if involving is None or better in involving or worse in involving
    ]
    return credit(ranking, pairs)


def pairwise_accuracy(ranking: Ranking, reference: Ranking) -> float | None:
    """Share of the reference's strict pairs the grader gets right (ties half); None when none is scored."""
    credit, pairs = pairwise_credit(ranking, reference)
    return credit / pairs if pairs else None


def top1_accuracy(ranking: Ranking, reference: Ranking) -> float | None:
    """Chance that the grader's pick (its best tier among the reference's ids, ties broken at random) is
    among the reference's best. None when no reference id was ranked."""
    rank = positions(ranking)
    listed = [tid for tier in reference for tid in tier if tid in rank]
    if not listed:
        return None
    best_reference = next(set(tier) & set(rank) for tier in reference if set(tier) & set(rank))
    best_rank = min(rank[tid] for tid in listed)
    pick = [tid for tid in listed if rank[tid] == best_rank]
    return sum(tid in best_reference for tid in pick) / len(pick)


def inversions(advantages: Mapping[str, float | None], reference: Ranking) -> tuple[int, int]:
    """(inverted, scored pairs) over the pairs a reference ranking orders strictly; see `pair_inversions`."""
    return pair_inversions(advantages, scored_pairs(reference))


def pair_inversions(
    advantages: Mapping[str, float | None], pairs: Iterable[tuple[str, str]]
) -> tuple[int, int]:
    """(inverted, scored pairs): (better, worse) pairs where the worse candidate holds more advantage.

    Counted on advantages after redistribution: that, not the ranking, is what the policy is trained on.
    Ids without a finite advantage are left out.
    """
    known = {tid: value for tid, value in advantages.items() if value is not None}
    inverted = scored = 0
    for better, worse in pairs:  # counted as they come: the pairs may be too many to hold
        if better in known and worse in known:
            scored += 1
            inverted += known[worse] > known[better]
    return inverted, scored


def borda_scores(rankings: Sequence[Ranking]) -> dict[str, float]:
    """Borda points summed over rankings: 1 per id ranked strictly below, 0.5 per id tied with it."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        sizes = [len(tier) for tier in ranking]
        below = sum(sizes)
        for tier in ranking:
            below -= len(tier)
            for tid in tier:
                scores[tid] = scores.get(tid, 0.0) + below + 0.5 * (len(tier) - 1)
    return scores


def borda(rankings: Sequence[Ranking]) -> list[list[str]]:
    """The consensus ranking by Borda count: ids by total points, best first, equal totals tied.

    Ids keep the order of their first appearance within a tie group, so the result is deterministic.
    """
    scores = borda_scores(rankings)
    ordered = sorted(scores, key=lambda tid: -scores[tid])  # stable: first appearance breaks no ties
    result: list[list[str]] = []
    last: float | None = None
    for tid in ordered:
        if last is not None and abs(scores[tid] - last) < 1e-9:
            result[-1].append(tid)
        else:
            result.append([tid])
            last = scores[tid]
    return result


def bootstrap_interval(
    units: Sequence[tuple[float, int]], resamples: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of pooled pairwise accuracy, resampling whole units (groups).

    Pairs of one group share candidates, so they are not independent draws: resampling groups, not pairs,
    keeps that dependence in the interval. With fewer than two groups there is nothing to resample and no
    interval (None), rather than a zero-width one that would look certain.

    Args:
        units: (credit, scored pairs) per group; groups with no scored pair are ignored.
        resamples: how many resamples.
        seed: the generator's seed, so a report is reproducible.
        level: the interval's coverage.

    Returns:
        (low, high), or None when fewer than two units have a scored pair.

    Raises:
        ValueError: resamples < 1 or level outside (0, 1).
    """
    import numpy as np

    if resamples < 1 or not 0.0 < level < 1.0:
        raise ValueError("resamples must be >= 1 and level in (0, 1)")
    kept = [(c, n) for c, n in units if n]
    if len(kept) < 2:
        return None
    credits = np.array([c for c, _ in kept], dtype=float)
    pairs = np.array([n for _, n in kept], dtype=float)
    draws = np.random.default_rng(seed).integers(0, len(kept), size=(resamples, len(kept)))
    accuracy = credits[draws].sum(axis=1) / pairs[draws].sum(axis=1)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(accuracy, [tail, 100 - tail])
    return float(low), float(high)


# Old names, for one release.
__getattr__ = renamed_names(__name__, {"agreement": "mean_tau"}, globals())
