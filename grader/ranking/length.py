"""The length-growth monitor: does the grader's credit follow response length?

RL on code agents tends to lengthen trajectories; a grader that prefers longer work would feed that. For each
graded group this measures the rank correlation of credit (the weight, and the advantage after
redistribution) with response length in tokens and with patch size, over the trajectories it ranked.

Kendall's tau-b, not Spearman's rho: a group ranks few trajectories (2 to 16) and its weights tie by
construction (a tier shares one weight, the floor gathers the tail), and tau-b corrects for ties on both
sides. It also reads directly: the share of concordant pairs minus the share of discordant ones, so averages
over groups mean something, where rho over 3 items takes only a few coarse values.

`trend` follows these readings across training steps (one run directory per step) and applies the warning
rule documented on `RewardingLength`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from grader.groups.models import Group, GroupResult, LengthSignal
from grader.ranking.agreement import kendall_tau

MIN_MEAN_TAU = 0.2
"""Mean tau(weight, length) over the window at or above which credit is said to follow length."""
MAX_SIGN_P = 0.05
"""Largest one-sided sign-test p-value (positive against negative groups) for the warning."""
WINDOW = 3
"""Steps the warning rule looks back over (all of them when there are fewer)."""


def rank_correlation(x: Mapping[str, float], y: Mapping[str, float]) -> float | None:
    """Kendall's tau-b of two quantities over the ids both give a value for.

    Each quantity orders the ids (equal values tie), and the orders are compared with
    `ranking_agreement.kendall_tau`, so there is one tau-b in gagar.

    Args:
        x: a value per id (a weight, say).
        y: another value per id (a length).

    Returns:
        In [-1, 1]: +1 when a larger x always goes with a larger y; None with fewer than two common ids or
        when either quantity is constant over them.
    """
    return kendall_tau(_order(x), _order(y))


def _order(values: Mapping[str, float]) -> list[list[str]]:
    tiers: dict[float, list[str]] = {}
    for tid, value in values.items():
        tiers.setdefault(value, []).append(tid)
    return [tiers[value] for value in sorted(tiers, reverse=True)]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def group_signal(group: Group, result: GroupResult) -> LengthSignal | None:
    """The length signal of a graded group, over the trajectories its ranking weighted.

    Args:
        group: the group as graded (its trajectories carry `response_length` when the trainer gave it).
        result: its result, with `ranking`, `weights`, `advantages_after` and per-trajectory patch stats.

    Returns:
        The signal, or None when the group was not graded or nothing was weighted.
    """
    ranked = [tid for tier in result.ranking for tid in tier if tid in result.weights]
    if result.status != "graded" or not ranked:
        return None
    sizes: dict[str, int] = {}
    for tid in ranked:
        report = result.trajectories.get(tid)
        stats = report.stats if report is not None else None
        sizes[tid] = stats.lines_added + stats.lines_removed if stats is not None else 0
    tokens = {t.id: t.response_length for t in group.trajectories if t.id in sizes}
    if all(tokens.get(tid) is not None for tid in ranked):
        source, lengths = "response_length", {tid: float(tokens[tid] or 0) for tid in ranked}
    else:
        source, lengths = "patch_size", {tid: float(sizes[tid]) for tid in ranked}
    weights = {tid: result.weights[tid] for tid in ranked}
    after = {tid: v for tid in ranked if (v := result.advantages_after.get(tid)) is not None}
    weight_length, advantage_length = rank_correlation(weights, lengths), rank_correlation(after, lengths)
    weight_size, advantage_size = rank_correlation(weights, sizes), rank_correlation(after, sizes)
    tiers = [[tid for tid in tier if tid in lengths] for tier in result.ranking]
    tiers = [tier for tier in tiers if tier]
    return LengthSignal(
        source=source,  # type: ignore[arg-type]
        n=len(ranked),
        weight_vs_length=_rounded(weight_length),
        advantage_vs_length=_rounded(advantage_length),
        weight_vs_patch_size=_rounded(weight_size),
        advantage_vs_patch_size=_rounded(advantage_size),
        top_length=round(statistics.fmean(lengths[t] for t in tiers[0]), 2),
        bottom_length=round(statistics.fmean(lengths[t] for t in tiers[-1]), 2),
        lengths=lengths,
        patch_sizes=sizes,
    )


# -- across steps --------------------------------------------------------------------------------------------


@dataclass
class StepReading:
    """One training step (one run directory) as the monitor reads it."""

    name: str
    graded: int
    """Graded groups with a length signal."""
    sources: dict[str, int] = field(default_factory=dict)
    """How many of them measured length in tokens (`response_length`) or in patch lines (`patch_size`)."""
    taus: list[float] = field(default_factory=list)
    """tau(weight, length) of every group where it is defined."""
    advantage_taus: list[float] = field(default_factory=list)
    patch_taus: list[float] = field(default_factory=list)
    """tau(weight, patch size)."""
    top_lengths: list[float] = field(default_factory=list)
    bottom_lengths: list[float] = field(default_factory=list)

    @staticmethod
    def mean(values: list[float]) -> float | None:
        return statistics.fmean(values) if values else None


def read_step(name: str, results: Sequence[GroupResult]) -> StepReading:
    """Gather the length signals of one step's results.

    Args:
        name: how the step is called in the output (its run directory).
        results: the step's results.

    Returns:
        The step's reading.
    """
    step = StepReading(name=name, graded=0)
    for result in results:
        signal = result.length
        if signal is None:
            continue
        step.graded += 1
        step.sources[signal.source] = step.sources.get(signal.source, 0) + 1
        for values, value in (
            (step.taus, signal.weight_vs_length),
            (step.advantage_taus, signal.advantage_vs_length),
            (step.patch_taus, signal.weight_vs_patch_size),
            (step.top_lengths, signal.top_length),
            (step.bottom_lengths, signal.bottom_length),
        ):
            if value is not None:
                values.append(value)
    return step


def sign_test_p(positive: int, negative: int) -> float:
    """One-sided sign test: the chance of at least `positive` of `positive + negative` fair coin flips.

    Args:
        positive: groups where credit rose with length.
        negative: groups where it fell (ties left out before).

    Returns:
        The p-value (1.0 with no flips).
    """
    n = positive + negative
    return sum(math.comb(n, k) for k in range(positive, n + 1)) / 2**n if n else 1.0


@dataclass
class RewardingLength:
    """The warning rule. Over the last `window` steps (all when fewer), pool every group's
    tau(weight, length); the grader is said to reward length when both hold:

    * their mean is at least `min_mean_tau` (credit follows length clearly, not by a hair), and
    * more groups have a positive tau than chance allows: a one-sided sign test over the groups with a
      non-zero tau gives p below `max_p` (so a handful of groups cannot raise it).

    A window rather than one step, because a step holds few mixed groups and one noisy step should not warn;
    a window rather than the whole run, because a grader can start rewarding length late.
    """

    window: int = WINDOW
    min_mean_tau: float = MIN_MEAN_TAU
    max_p: float = MAX_SIGN_P

    def check(self, steps: Sequence[StepReading]) -> str | None:
        """The warning for these steps, or None when the rule does not fire.

        Args:
            steps: the readings, in step order.

        Returns:
            One line saying what fired, over which steps, with the figures.
        """
        fired, text = self.verdict(steps)
        return text if fired else None

    def verdict(self, steps: Sequence[StepReading]) -> tuple[bool, str]:
        """Whether the rule fires on these steps, and one line with the figures it decided on.

        Args:
            steps: the readings, in step order.

        Returns:
            (fired, explanation); the explanation says so when no group carries a defined tau.
        """
        recent = list(steps[-self.window :]) if self.window > 0 else list(steps)
        where = "no steps" if not recent else recent[0].name
        if len(recent) > 1:
            where = (
                f"steps {len(steps) - len(recent) + 1}-{len(steps)} ({recent[0].name} .. {recent[-1].name})"
            )
        taus = [tau for step in recent for tau in step.taus]
        if not taus:
            return (
                False,
                f"no length signal over {where}: no graded group ranked trajectories of different lengths",
            )
        positive, negative = sum(t > 0 for t in taus), sum(t < 0 for t in taus)
        mean, p = statistics.fmean(taus), sign_test_p(positive, negative)
        tops = [v for step in recent for v in step.top_lengths]
        bottoms = [v for step in recent for v in step.bottom_lengths]
        sources = {source for step in recent for source in step.sources}
        units = {"response_length": "tokens", "patch_size": "changed lines"}.get(
            sources.pop() if len(sources) == 1 else "", "(mixed units)"
        )
        figures = (
            f"credit rose with length in {positive} of {len(taus)} groups and fell in {negative} "
            f"(mean Kendall tau {mean:+.2f}, sign test p={p:.3g}); top-ranked trajectories average "
            f"{statistics.fmean(tops):.0f} {units}, bottom-ranked {statistics.fmean(bottoms):.0f}"
        )
        if mean >= self.min_mean_tau and p < self.max_p:
            return True, f"the grader is rewarding length over {where}: {figures}"
        return False, (
            f"not rewarding length over {where} (the rule needs mean tau >= {self.min_mean_tau:g} and "
            f"p < {self.max_p:g}): {figures}"
        )
