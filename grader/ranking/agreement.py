"""How far rankings agree: Kendall's tau-b, mean pairwise agreement, position bias. Pure, no I/O.

Beside `ranking` so that the floors that need these (the length monitor, the batch guard) need not reach up to
`evaluation`; `evaluation.metrics` re-exports them with the figures scored against a reference.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from grader.ranking.order import Ranking, positions
from grader.util.lazy import renamed_names


def kendall_tau(a: Ranking, b: Ranking) -> float | None:
    """Kendall's tau-b between two rankings over the ids both list; None when undefined.

    tau-b = (concordant - discordant) / sqrt((n0 - ties_a) (n0 - ties_b)), so ties in either ranking are
    accounted for rather than counted as agreement. Undefined with fewer than two common ids, or when either
    ranking ties every common id.
    """
    rank_a, rank_b = positions(a), positions(b)
    common = [tid for tid in rank_a if tid in rank_b]
    if len(common) < 2:
        return None
    concordant = discordant = tied_a = tied_b = 0
    for x, y in itertools.combinations(common, 2):
        da, db = rank_a[x] - rank_a[y], rank_b[x] - rank_b[y]
        tied_a += da == 0
        tied_b += db == 0
        if da * db > 0:
            concordant += 1
        elif da * db < 0:
            discordant += 1
    n0 = len(common) * (len(common) - 1) // 2
    denominator = ((n0 - tied_a) * (n0 - tied_b)) ** 0.5
    return (concordant - discordant) / denominator if denominator else None


def mean_tau(rankings: Sequence[Ranking]) -> float | None:
    """Mean Kendall tau-b over every pair of rankings; None with fewer than two.

    Identical rankings agree fully (1.0) even when tau-b is undefined for them (everything tied); a pair
    whose tau-b is otherwise undefined (one ties everything, the other does not) counts as 0, no agreement.
    """
    if len(rankings) < 2:
        return None
    taus = []
    for a, b in itertools.combinations(rankings, 2):
        if _canonical(a) == _canonical(b):
            taus.append(1.0)
        else:
            tau = kendall_tau(a, b)
            taus.append(0.0 if tau is None else tau)
    return sum(taus) / len(taus)


def _canonical(ranking: Ranking) -> list[list[str]]:
    return [sorted(tier) for tier in ranking]


@dataclass(frozen=True)
class PositionBias:
    """How often the candidate shown first, or last, was ranked first; `chance` is an order-blind grader's."""

    first_ranked_first: float
    last_ranked_first: float
    chance: float
    gradings: int


def position_bias(shown: Sequence[Sequence[Sequence[str]]], rankings: Sequence[Ranking]) -> PositionBias:
    """How often the candidate shown first (or last) ends up ranked first, against chance.

    `shown[i]` is grading i's candidates in the order shown, each a list of the trajectory ids it stands for
    (an equivalence class is shown once); `rankings[i]` is what that grading returned. A shown candidate
    ranked in a best tier shared with m shown candidates counts 1/m: the chance it is the first of a random
    tie-break. `chance` is the mean of 1/(candidates shown), what an order-blind grader scores on average.

    Raises:
        ValueError: `shown` and `rankings` differ in length.
    """
    if len(shown) != len(rankings):
        raise ValueError("one shown order per ranking")
    first = last = chance = 0.0
    counted = 0
    for order, ranking in zip(shown, rankings, strict=True):
        if not order or not ranking:
            continue
        top = set(ranking[0])
        on_top = [i for i, item in enumerate(order) if top & set(item)]
        share = 1.0 / len(on_top) if on_top else 0.0
        first += share if 0 in on_top else 0.0
        last += share if len(order) - 1 in on_top else 0.0
        chance += 1.0 / len(order)
        counted += 1
    if not counted:
        return PositionBias(0.0, 0.0, 0.0, 0)
    return PositionBias(first / counted, last / counted, chance / counted, counted)


# Old names, for one release.
__getattr__ = renamed_names(__name__, {"agreement": "mean_tau"}, globals())
