"""Evaluating a grader: score its rankings against references, and grade again under other orders.

`evaluate` grades groups through the ordinary pipeline (so what is scored is exactly what training would
see, redistribution included) and scores each result against its reference ranking. `consistency` grades
each group K times, each time under another candidate order, and measures how much the rankings agree and
whether the order shown sways the pick.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from grader.errors import InputFileError
from grader.evaluation import metrics
from grader.graders.base import Grader
from grader.groups.formats import LoadFailure
from grader.groups.models import Group, GroupResult
from grader.pipeline import GradingOptions, grade_group_sync, grade_groups
from grader.ranking.order import InvalidRanking, check_ranking
from grader.ranking.references import (
    Reference,
    check_ids,
    consensus_reference,
    reference_credit,
    reference_from_ranking,
)
from grader.util.jsontext import loads

GraderFactory = Callable[[int], Grader]
AnyReference = metrics.Ranking | Reference
"""A reference ranking (tie groups, best first) or a `Reference` of any kind."""


def load_reference(path: Path | str) -> dict[str, list[list[str]]]:
    """Read a reference file: a JSON object from group id to a ranking (tie groups of ids, best first).

    Args:
        path: the file.

    Returns:
        Group id -> reference ranking.

    Raises:
        InputFileError: the file cannot be read, is not JSON (or nests past the reader's depth), or is not a
            JSON object.
        InvalidRanking: a ranking is malformed; the message names the file and the group.
    """
    try:
        data = loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputFileError(f"{path}: cannot read the reference file: {exc}") from exc
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: a reference file is a JSON object from group id to ranking")
    for group_id, ranking in data.items():
        try:
            check_ranking(ranking)
        except InvalidRanking as exc:
            raise InvalidRanking(f"{path}: group {group_id!r}: {exc}") from exc
    return data


def kinds_of(group: Group) -> dict[str, str]:
    """Trajectory id -> degradation kind, for trajectories `gagar degrade` made."""
    return {t.id: str(t.metadata["degradation"]) for t in group.trajectories if "degradation" in t.metadata}


# -- scoring against a reference ------------------------------------------------------------------------


@dataclass
class GroupScore:
    """One group's figures. Rates are None when nothing was scored (the group failed, say)."""

    group_id: str
    status: str
    reason: str = ""
    pairwise_accuracy: float | None = None
    kendall_tau: float | None = None
    top1_accuracy: float | None = None
    inversions: float | None = None
    inverted_pairs: int = 0
    scored_pairs: int = 0
    pairwise_credit: float = 0.0
    unranked: list[str] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    by_kind: dict[str, tuple[float, int]] = field(default_factory=dict)  # kind -> (credit, pairs)
    reference_pairs: int = 0  # the pairs the reference defines; scored_pairs of them were both ranked
    by_category: dict[str, tuple[float, int]] = field(default_factory=dict)  # category -> (credit, pairs)


def as_reference(group_id: str, reference: AnyReference) -> Reference:
    """A `Reference` as is; a ranking as the reference of its strict pairs (InvalidReference if bad)."""
    return reference if isinstance(reference, Reference) else reference_from_ranking(group_id, reference)


def score_result(
    result: GroupResult, reference: AnyReference, kinds: Mapping[str, str] | None = None
) -> GroupScore:
    """Score one graded group against its reference.

    Pairwise figures are over the pairs the reference defines whose two ids the grader ranked; tau and
    top-1 need a full ranking and stay None for a partial order. Categorised pairs are also scored per
    category, and `kinds` (variant id -> degradation kind) scores the pairs involving each kind.

    Args:
        result: the graded group.
        reference: its reference, a ranking or a `Reference` of any kind.
        kinds: degradation kinds of `gagar degrade`'s variants.

    Returns:
        The group's figures.

    Raises:
        InvalidReference: a ranking given as the reference is malformed.
    """
    ref = as_reference(result.group_id, reference)
    score = GroupScore(
        group_id=result.group_id,
        status=result.status,
        reason=result.reason,
        tokens=int(result.usage.get("total_tokens", 0)),
        seconds=result.seconds,
        reference_pairs=len(ref.preferences),
    )
    if result.status != "graded":
        return score
    ranked = {tid for tier in result.ranking for tid in tier}
    listed = [tid for tier in ref.ranking or [] for tid in tier] or sorted(ref.ids())
    score.unranked = [tid for tid in listed if tid not in ranked]
    score.pairwise_credit, score.scored_pairs = reference_credit(result.ranking, ref)
    if score.scored_pairs:
        score.pairwise_accuracy = score.pairwise_credit / score.scored_pairs
    if ref.ranking is not None:
        score.kendall_tau = metrics.kendall_tau(result.ranking, ref.ranking)
        score.top1_accuracy = metrics.top1_accuracy(result.ranking, ref.ranking)
    # Pairs one at a time: a ranking's n(n-1)/2 pairs are never all made (references.RankingPairs).
    score.inverted_pairs, inversion_pairs = metrics.pair_inversions(
        result.advantages_after, (p.pair for p in ref.preferences)
    )
    score.inversions = score.inverted_pairs / inversion_pairs if inversion_pairs else None
    for kind in sorted(set((kinds or {}).values())):
        members = {tid for tid, k in (kinds or {}).items() if k == kind}
        involved = [p.pair for p in ref.preferences if members & set(p.pair)]
        credit, scored = metrics.credit(result.ranking, involved)
        if scored:
            score.by_kind[kind] = (credit, scored)
    categories = ref.categories()
    if set(categories) != {"uncategorised"}:
        for name, members in categories.items():
            credit, scored = reference_credit(result.ranking, ref.restricted(members))
            if scored:
                score.by_category[name] = (credit, scored)
    return score


@dataclass
class Evaluation:
    """Per-group scores and their pooled figures."""

    grader: str
    groups: list[GroupScore]
    missing: list[str] = field(default_factory=list)  # reference groups not found in the input

    def overall(self) -> dict[str, Any]:
        """Pairwise accuracy and inversions pool pairs over groups; tau and top-1 average groups."""
        graded = [g for g in self.groups if g.status == "graded"]
        pairs = sum(g.scored_pairs for g in graded)
        credit = sum(g.pairwise_credit for g in graded)
        inverted = sum(g.inverted_pairs for g in graded)
        inversion_pairs = sum(g.scored_pairs for g in graded if g.inversions is not None)
        reference_pairs = sum(g.reference_pairs for g in self.groups)
        return {
            "pairwise_accuracy": credit / pairs if pairs else None,
            "coverage": pairs / reference_pairs if reference_pairs else None,
            "reference_pairs": reference_pairs,
            "kendall_tau": _mean(g.kendall_tau for g in graded),
            "top1_accuracy": _mean(g.top1_accuracy for g in graded),
            "inversions": inverted / inversion_pairs if inversion_pairs else None,
            "inverted_pairs": inverted,
            "scored_pairs": pairs,
            "groups": len(self.groups),
            "graded": len(graded),
            "failed": sum(g.status == "failed" for g in self.groups),
            "tokens": sum(g.tokens for g in self.groups),
            "seconds": round(sum(g.seconds for g in self.groups), 4),
        }

    def by_kind(self) -> dict[str, dict[str, float | int | None]]:
        """Pairwise accuracy on the pairs involving each degradation kind, pooled over groups."""
        return _pooled(g.by_kind for g in self.groups)

    def by_category(
        self, resamples: int = 0, seed: int = 0
    ) -> dict[str, dict[str, float | int | tuple[float, float] | None]]:
        """Pairwise accuracy per category of the reference's pairs, pooled over groups.

        Args:
            resamples: with > 0, add a bootstrap 95% interval ("interval") from that many resamples of the
                graded groups (`metrics.bootstrap_interval`).
            seed: the bootstrap's seed.

        Returns:
            Category -> {"pairwise_accuracy", "scored_pairs", "groups"} (+ "interval").
        """
        table = _pooled(g.by_category for g in self.groups)
        for name, figures in table.items():
            units = [g.by_category[name] for g in self.groups if name in g.by_category]
            figures["groups"] = len(units)
            if resamples:
                figures["interval"] = metrics.bootstrap_interval(units, resamples, seed)
        return table

    def interval(self, resamples: int = 2000, seed: int = 0) -> tuple[float, float] | None:
        """Bootstrap 95% interval of the overall pairwise accuracy, resampling graded groups.

        Args:
            resamples: how many resamples.
            seed: the bootstrap's seed.

        Returns:
            (low, high), or None when nothing was scored.
        """
        units = [(g.pairwise_credit, g.scored_pairs) for g in self.groups if g.scored_pairs]
        return metrics.bootstrap_interval(units, resamples, seed)

    def as_dict(self) -> dict[str, Any]:
        groups = {}
        for g in self.groups:
            entry = asdict(g)
            entry.pop("group_id")
            for name in ("by_kind", "by_category"):
                entry[name] = {
                    key: {"pairwise_accuracy": credit / pairs, "scored_pairs": pairs}
                    for key, (credit, pairs) in getattr(g, name).items()
                }
            groups[g.group_id] = entry
        report: dict[str, Any] = {
            "grader": self.grader,
            "overall": self.overall(),
            "by_kind": self.by_kind(),
        }
        categories = self.by_category()
        if categories:
            report["by_category"] = categories
        return {**report, "groups": groups, "missing": self.missing}


def _pooled(tables: Iterable[Mapping[str, tuple[float, int]]]) -> dict[str, dict[str, Any]]:
    """Sum (credit, pairs) per key over groups: key -> {"pairwise_accuracy", "scored_pairs"}."""
    totals: dict[str, list[float]] = {}
    for table in tables:
        for key, (credit, pairs) in table.items():
            total = totals.setdefault(key, [0.0, 0])
            total[0] += credit
            total[1] += pairs
    return {
        key: {"pairwise_accuracy": credit / pairs if pairs else None, "scored_pairs": int(pairs)}
        for key, (credit, pairs) in sorted(totals.items())
    }


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _with_reference(
    items: Iterable[Group | LoadFailure], references: Mapping[str, AnyReference]
) -> tuple[list[Group | LoadFailure], list[str]]:
    """The items that have a reference (load errors kept, to be reported), and reference groups not found."""
    chosen = [item for item in items if isinstance(item, LoadFailure) or item.group_id in references]
    found = {item.group_id for item in chosen}
    return chosen, [gid for gid in references if gid not in found]


def evaluation_options(options: GradingOptions | None = None) -> GradingOptions:
    """Grading options for evaluation: all-pass groups are graded too, since ranking quality is measured
    whether or not the group is mixed (their redistribution is the identity anyway)."""
    return replace(options or GradingOptions(), grade_all_pass=True)


def evaluate(
    items: Iterable[Group | LoadFailure],
    references: Mapping[str, AnyReference],
    grader: Grader,
    options: GradingOptions | None = None,
    workers: int = 1,
) -> tuple[Evaluation, list[GroupResult]]:
    """Grade every group that has a reference and score it.

    Args:
        items: groups (and load errors, reported as failed groups).
        references: group id -> reference ranking or `Reference` of any kind.
        grader: the grader to score.
        options: grading options (all-pass groups are graded too).
        workers: groups graded at once.

    Returns:
        The scores and the raw results.

    Raises:
        InvalidReference: a ranking given as a reference is malformed, or references name trajectories
            their group lacks (every such group named with its unknown ids); nothing is graded then.
    """
    chosen, missing = _with_reference(items, references)
    check_ids(
        {gid: as_reference(gid, reference) for gid, reference in references.items()},
        {item.group_id: [t.id for t in item.trajectories] for item in chosen if isinstance(item, Group)},
    )
    results = grade_groups(chosen, grader, evaluation_options(options), workers=workers)
    kinds = {item.group_id: kinds_of(item) for item in chosen if isinstance(item, Group)}
    scores = [
        score_result(result, references.get(result.group_id, []), kinds.get(result.group_id))
        for result in results
    ]
    return Evaluation(grader.name, scores, missing), results


# -- consistency under other orders ---------------------------------------------------------------------


@dataclass
class GroupConsistency:
    """K gradings of one group: their rankings, the order each was shown, agreement and position bias."""

    group_id: str
    k: int
    rankings: list[list[list[str]]]
    shown: list[list[list[str]]]
    agreement: float | None
    bias: metrics.PositionBias
    failures: list[str] = field(default_factory=list)
    tokens: int = 0


def shown_order(result: GroupResult) -> list[list[str]]:
    """The candidates in the order the grader saw them, each as the trajectory ids it stands for.

    The LLM grader records `details["labels"]` (label -> ids) in the order the labels were shown. A grader
    that records none saw the workspace's classes, in the order of their first member in the group.
    """
    labels = result.details.get("labels")
    if isinstance(labels, dict) and labels:
        return [list(ids) for ids in labels.values()]
    classes: dict[int, list[str]] = {}
    for tid, report in result.trajectories.items():
        if report.passed and report.branch and report.patch_class is not None:
            classes.setdefault(report.patch_class, []).append(tid)
    return [classes[index] for index in sorted(classes)]


def permuted(group: Group, k: int) -> Group:
    """The group with its trajectories in the k-th order (0: as given), so order-blind graders see
    candidates in another order too; advantages are already computed and do not depend on order."""
    if k == 0:
        return group
    trajectories = list(group.trajectories)
    random.Random(k).shuffle(trajectories)
    return group.model_copy(update={"trajectories": trajectories})


def consistency(
    items: Iterable[Group | LoadFailure],
    make_grader: GraderFactory,
    k: int,
    options: GradingOptions | None = None,
    permute: bool = True,
) -> list[GroupConsistency]:
    """Grade each group `k` times, the i-th time with `make_grader(i)` (another seed, say) and, with
    `permute`, the trajectories in another order. Groups that are not valid are left out.

    Raises:
        ValueError: `k` is below 2.
    """
    if k < 2:
        raise ValueError("consistency needs k >= 2 gradings")
    options = evaluation_options(options)
    report = []
    for item in items:
        if isinstance(item, LoadFailure):
            continue
        rankings, shown, failures, tokens = [], [], [], 0
        for i in range(k):
            result = grade_group_sync(permuted(item, i) if permute else item, make_grader(i), options)
            tokens += int(result.usage.get("total_tokens", 0))
            if result.status != "graded":
                failures.append(f"grading {i}: {result.status}: {result.reason}")
                continue
            rankings.append(result.ranking)
            shown.append(shown_order(result))
        report.append(
            GroupConsistency(
                group_id=item.group_id,
                k=k,
                rankings=rankings,
                shown=shown,
                agreement=metrics.mean_tau(rankings),
                bias=metrics.position_bias(shown, rankings),
                failures=failures,
                tokens=tokens,
            )
        )
    return report


def consistency_summary(groups: Sequence[GroupConsistency]) -> dict[str, Any]:
    """Mean agreement over groups, and position bias pooled over every grading."""
    shown = [order for g in groups for order in g.shown]
    rankings = [ranking for g in groups for ranking in g.rankings]
    bias = metrics.position_bias(shown, rankings)
    return {
        "agreement": _mean(g.agreement for g in groups),
        **asdict(bias),
        "tokens": sum(g.tokens for g in groups),
        "groups": {
            g.group_id: {
                "k": g.k,
                "agreement": g.agreement,
                **asdict(g.bias),
                "rankings": g.rankings,
                "shown": g.shown,
                "failures": g.failures,
                "tokens": g.tokens,
            }
            for g in groups
        },
    }


def consensus_references(groups: Sequence[GroupConsistency], threshold: float) -> dict[str, Reference]:
    """Consensus references from K gradings per group (`consistency`): the pairs at least `threshold` of the
    K gradings order the same way; a grading that failed counts as not agreeing.

    Args:
        groups: what `consistency` returned (each group graded K times under other label orders).
        threshold: the least share of the K gradings that must agree, in (0.5, 1].

    Returns:
        Group id -> `consensus` reference; groups with no successful grading are left out.

    Raises:
        InvalidReference: a threshold outside (0.5, 1], or agreed pairs that form a cycle (named).
    """
    return {
        g.group_id: consensus_reference(g.group_id, g.rankings, threshold, k=g.k)
        for g in groups
        if g.rankings
    }
