"""A grader that grades K times and agrees with itself: Borda consensus, credit shrunk by disagreement.

`ConsensusGrader(factory, k)` asks `factory(0) ... factory(k-1)` (the same grader with other seeds, so other
label orders) for a ranking, combines them by Borda count, and reports how far to trust the result as its
`certainty`: the mean Kendall tau between the K rankings, floored at 0 (results show it under
`details["weight_shrink"]`). A grader that ranks
the same way whatever the order keeps its full say; one whose rankings disagree moves less credit, because
its weights are pulled toward uniform by `shrink_weights`, which the pipeline applies after the scheme.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.errors import GradingFailed, InvalidRanking
from grader.evaluation import metrics
from grader.graders.base import Grade, Grader
from grader.ranking.order import validate_ranking
from grader.workspace.view import GradingView


def agreement_factor(rankings: list[list[list[str]]]) -> float:
    """How much K rankings agree, in [0, 1]: mean pairwise Kendall tau, floored at 0; 1.0 for one ranking.

    Negative agreement (rankings that contradict each other) is no more informative than none, so it does
    not invert the weights: it floors at uniform.
    """
    value = metrics.mean_tau(rankings)
    return 1.0 if value is None else max(0.0, value)


class ConsensusGrader:
    """The Borda consensus of K gradings by `factory(i)`; a Grader like any other (see module docstring).

    A grading that fails or returns an invalid ranking is left out and recorded; fewer than `quorum`
    valid rankings (default: a majority of K) fail the group.

    Raises:
        ValueError: `k` is below 1, or `quorum` is outside [1, k].
    """

    def __init__(self, factory: Callable[[int], Grader], k: int, quorum: int | None = None) -> None:
        if k < 1:
            raise ValueError("k must be >= 1")
        self.factory = factory
        self.k = k
        self.quorum = quorum if quorum is not None else k // 2 + 1
        if not 1 <= self.quorum <= k:
            raise ValueError(f"quorum must be in [1, {k}]")
        self.name = f"{factory(0).name}-consensus{k}"

    def fingerprint(self) -> str:
        members = "|".join(self.factory(i).fingerprint() for i in range(self.k))
        return f"consensus:{self.k}:{self.quorum}:{members}"

    def grade(self, view: GradingView) -> Grade:
        """K gradings combined; raises GradingFailed when fewer than the quorum give a valid ranking."""
        gradable = view.gradable()
        grades: list[Grade] = []
        rankings: list[list[list[str]]] = []
        failures: list[str] = []
        usage: dict[str, int] = {}
        flags: dict[str, list[str]] = {}
        for i in range(self.k):
            try:
                grade = self.factory(i).grade(view)
                ranking = validate_ranking(grade.ranking, gradable)
            except GradingFailed as exc:
                failures.append(f"grading {i}: {exc}")
                _add_usage(usage, exc.usage)
                continue
            except InvalidRanking as exc:
                failures.append(f"grading {i}: invalid ranking: {exc}")
                continue
            _add_usage(usage, grade.usage)
            for tid, hits in grade.flags.items():
                flags.setdefault(tid, []).extend(h for h in hits if h not in flags.get(tid, []))
            grades.append(grade)
            rankings.append(ranking)
        if len(rankings) < self.quorum:
            raise GradingFailed(
                f"{len(rankings)} of {self.k} gradings succeeded, quorum {self.quorum}: "
                + "; ".join(failures),
                usage=usage,
                flags=flags,
            )
        consensus = metrics.borda(rankings)
        scores = metrics.borda_scores(rankings)
        top = len(rankings) * (len(gradable) - 1)
        shrink = agreement_factor(rankings)
        first = grades[0]
        rationales = {
            tid: f"Borda {scores[tid]:g} of {top}"
            + (f"; {first.rationales[tid]}" if tid in first.rationales else "")
            for tid in gradable
        }
        signals = {tid: {**first.signals.get(tid, {}), "borda": scores[tid]} for tid in gradable}
        members = [dict(g.details) for g in grades]
        return Grade(
            ranking=consensus,
            rationales=rationales,
            signals=signals,
            usage=usage,
            flags=flags,
            certainty=shrink,
            details={
                "consensus": {
                    "k": self.k,
                    "valid": len(rankings),
                    "agreement": metrics.mean_tau(rankings),
                    "rankings": rankings,
                    "failures": failures,
                    "members": members,
                },
            },
        )


def _add_usage(total: dict[str, int], usage: Any) -> None:
    for key, value in (usage or {}).items():
        if isinstance(value, int | float):
            total[key] = total.get(key, 0) + int(value)
