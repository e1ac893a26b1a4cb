"""A seeded GRPO simulation: does redistributing passing credit help, and does preserving its sum matter?

This is a simulation, not a training run. The policy is a softmax over a handful of code-agent behaviours
(:data:`BEHAVIOURS`): a clean fix in a normal, a longer and a shorter variant; a fix that leaves a script
behind; a fix with unrelated churn (and a longer variant); a fix that edits the tests; two failing attempts.
Each behaviour has a pass probability, a quality (what an accurate grader sees in the patch) and a response
length in tokens. Every step samples ``groups`` tasks of random difficulty, ``group_size`` rollouts each, and
computes GRPO advantages from the pass/fail rewards. The arms then differ only in what happens to the passing
credit of the mixed groups:

* ``grpo``: nothing (plain GRPO);
* ``gagar-sequence``, ``gagar-token``, ``gagar-none``: a simulated grader ranks the passing rollouts by
  quality plus Gaussian noise plus a position bias, :func:`grader.redistribution.redistribute.rank_to_weights`
  turns the
  ranking into weights, and :func:`grader.redistribution.redistribute.redistribute_batch` applies them with
  ``preserve`` = sequence, token or none.

Each arm runs under both loss aggregations. The model of the loss: every token of a rollout carries the
gradient of its behaviour's log-probability (a behaviour shows in every token), so a sequence-mean loss
weights rollout ``i`` by ``A_i / N`` and a token-mean loss by ``A_i * L_i / sum_j L_j`` (N rollouts, L
tokens).
Those coefficients summed over a step are its *advantage mass*; sequence preservation keeps the first
unchanged per group, token preservation the second. The update is one SGD step on the logits.

All arms of a seed share their random numbers (task difficulty, the uniforms that pick behaviours and
outcomes, grader noise), so differences between arms come from the arms, and a seed's result does not depend
on how many other seeds or arms run. Everything is vectorized over arms, aggregations and seeds at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grader.redistribution import redistribute
from grader.redistribution.redistribute import PRESERVE_MODES

__all__ = [
    "AGGREGATIONS",
    "ARMS",
    "BEHAVIOURS",
    "Behaviour",
    "SimulationConfig",
    "SimulationResult",
    "simulate",
    "step_variance",
]

ARMS: dict[str, str | None] = {"grpo": None, **{f"gagar-{mode}": mode for mode in PRESERVE_MODES}}
"""Arm name -> the preserve mode it redistributes with (None: plain GRPO, no redistribution)."""

AGGREGATIONS: tuple[str, ...] = ("sequence-mean", "token-mean")

GRPO_EPS = 1e-6  # as grader.groups.models.complete_group, so advantages are those the pipeline would compute


@dataclass(frozen=True)
class Behaviour:
    """One thing a code agent can do on a task."""

    name: str
    """Short id, shown in tables and plots."""
    pass_rate: float
    """Probability that the tests pass on a task of average difficulty, in (0, 1)."""
    quality: float
    """What an accurate grader sees in the patch, higher is better; passing rollouts are ranked by it."""
    tokens: float
    """Mean response length in tokens."""
    prior: float
    """Relative probability under the initial policy (the base model's habits)."""
    clean: bool = False
    """Counts toward the clean share: the patch is the clean, scoped fix, whatever the response's length."""


# The shortcuts pass a little more often than the clean fix (a few points: a harness that restores the test
# files before running them takes most of the gain of editing them away), and longer variants pass a little
# more often than shorter ones (more exploration finds more): the two pressures plain GRPO follows, towards
# shortcuts and towards length. The grader sees only the patch, so the three clean variants share one
# quality and it cannot tell them apart by length.
BEHAVIOURS: tuple[Behaviour, ...] = (
    Behaviour("clean", 0.70, 1.00, 6_000, 0.10, clean=True),
    Behaviour("clean-long", 0.74, 1.00, 12_000, 0.06, clean=True),
    Behaviour("clean-short", 0.62, 1.00, 3_000, 0.04, clean=True),
    Behaviour("leftover-script", 0.72, 0.60, 8_000, 0.14),
    Behaviour("unrelated-churn", 0.71, 0.40, 9_000, 0.12),
    Behaviour("churn-long", 0.76, 0.40, 15_000, 0.08),
    Behaviour("edits-tests", 0.76, 0.05, 7_000, 0.10),
    Behaviour("fails-short", 0.05, 0.00, 4_000, 0.18),
    Behaviour("fails-long", 0.10, 0.00, 18_000, 0.18),
)


# Fields `gagar simulate` does not generate an option for: the scheme comes from GradingOptions' options, as
# `gagar grade` takes it, and the name lists have their own comma-separated parsing.
_NOT_AN_OPTION = {"cli": None}


@dataclass
class SimulationConfig:
    """Everything a simulation depends on; two runs with equal configs give equal results, bit for bit."""

    steps: int = 1000
    """Training steps."""
    seeds: int = 8
    """Independent runs per arm, each with its own random stream drawn from the base seed."""
    seed: int = 0
    """Base seed."""
    groups: int = 16
    """Tasks (rollout groups) per step."""
    group_size: int = 8
    """Rollouts per task."""
    learning_rate: float = 0.5
    """SGD step size on the policy's logits."""
    grader_noise: float = 0.2
    """Standard deviation of the Gaussian noise on a rollout's quality as the grader sees it (0-1 scale)."""
    position_bias: float = 0.1
    """Score bonus for the rollout shown first, falling linearly to minus this for the one shown last."""
    task_spread: float = 1.0
    """Standard deviation of task difficulty on the logit scale of the pass probability."""
    length_jitter: float = 0.25
    """Log-normal sigma of a rollout's length around its behaviour's mean."""
    scheme: str = field(default=redistribute.DEFAULT_SCHEME, metadata=_NOT_AN_OPTION)
    """Weight scheme (a name in ``grader.redistribution.redistribute.WEIGHT_SCHEMES``)."""
    scheme_params: dict[str, float] = field(
        default_factory=lambda: {"floor": redistribute.DEFAULT_FLOOR}, metadata=_NOT_AN_OPTION
    )
    """Parameters of the weight scheme, e.g. ``floor``."""
    arms: tuple[str, ...] = field(default=tuple(ARMS), metadata=_NOT_AN_OPTION)
    """Arms to run, names from :data:`ARMS`."""
    aggregations: tuple[str, ...] = field(default=AGGREGATIONS, metadata=_NOT_AN_OPTION)
    """Loss aggregations to run each arm under."""

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        for name in ("steps", "seeds", "groups"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(self.group_size, bool) or not isinstance(self.group_size, int) or self.group_size < 2:
            raise ValueError(
                f"group_size must be an integer >= 2 (GRPO needs a group), got {self.group_size!r}"
            )
        for name in ("learning_rate",):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        for name in ("grader_noise", "position_bias", "task_spread", "length_jitter"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
        unknown = [arm for arm in self.arms if arm not in ARMS]
        if unknown or not self.arms or len(set(self.arms)) != len(self.arms):
            raise ValueError(f"arms must be distinct names from {list(ARMS)}, got {list(self.arms)}")
        unknown = [a for a in self.aggregations if a not in AGGREGATIONS]
        if unknown or not self.aggregations or len(set(self.aggregations)) != len(self.aggregations):
            raise ValueError(f"aggregations must be distinct names from {list(AGGREGATIONS)}")
        # Fails here, with the scheme's own message, rather than on the first step.
        rank_weight_table(self.group_size, self.scheme, self.scheme_params)


@dataclass(eq=False)
class SimulationResult:
    """Per-step series, each of shape ``(len(runs), seeds, steps)``; ``runs[r]`` is (arm, aggregation)."""

    config: SimulationConfig
    behaviours: tuple[Behaviour, ...]
    runs: list[tuple[str, str]]
    clean_share: np.ndarray
    """Probability the policy gives the clean behaviours, before the step's update."""
    shares: np.ndarray
    """The whole policy, shape ``(runs, seeds, steps, behaviours)``."""
    mean_tokens: np.ndarray
    """Expected response length under the policy."""
    pass_rate: np.ndarray
    """Share of the step's rollouts that passed."""
    mass: np.ndarray
    """The step's advantage mass: the loss coefficients summed over its rollouts, after redistribution."""
    mass_grpo: np.ndarray
    """The same sum with the GRPO advantages of the same rollouts (before redistribution)."""
    update_norm: np.ndarray
    """L2 norm of the step's update to the logits."""
    sequence_credit_change: np.ndarray
    """Largest change, over the step's groups, of the passing advantages' sum, relative to that sum."""
    token_credit_change: np.ndarray
    """Largest change, over the step's groups, of the passing ``sum a_i * len_i``, relative to that sum."""
    redistributed: np.ndarray
    """Groups whose advantages redistribution changed in the step."""

    def run_index(self, arm: str, aggregation: str) -> int:
        return self.runs.index((arm, aggregation))

    def summary(self, tail: float = 0.1) -> list[dict[str, Any]]:
        """One row per (arm, aggregation): start and end (mean of the last ``tail`` of steps) values, mean
        and standard deviation over seeds, and the stability figures (see :func:`step_variance`)."""
        steps = self.clean_share.shape[2]
        last = max(1, int(round(steps * tail)))
        index = {b.name: k for k, b in enumerate(self.behaviours)}
        rows = []
        for r, (arm, aggregation) in enumerate(self.runs):

            def end(series: np.ndarray, r: int = r) -> tuple[float, float]:
                per_seed = series[r, :, -last:].mean(axis=1)
                return float(per_seed.mean()), float(per_seed.std())

            rows.append(
                {
                    "arm": arm,
                    "aggregation": aggregation,
                    "clean_start": float(self.clean_share[r, :, 0].mean()),
                    "clean_end": end(self.clean_share),
                    "edits_tests_end": end(self.shares[..., index["edits-tests"]])
                    if "edits-tests" in index
                    else None,
                    "tokens_start": float(self.mean_tokens[r, :, 0].mean()),
                    "tokens_end": end(self.mean_tokens),
                    "pass_end": end(self.pass_rate),
                    "mass_variance": float(step_variance(self.mass[r]).mean()),
                    "mass_change": float(np.abs(self.mass[r] - self.mass_grpo[r]).mean()),
                    "norm_variance": float(step_variance(self.update_norm[r]).mean()),
                    "sequence_credit_change": float(self.sequence_credit_change[r].max()),
                    "token_credit_change": float(self.token_credit_change[r].max()),
                }
            )
        return rows


def step_variance(series: np.ndarray) -> np.ndarray:
    """Step-to-step variance along the last axis: half the mean squared difference of consecutive values.

    This is von Neumann's variance estimate: for noise around a slowly moving level it estimates the noise's
    variance, where the plain variance would also count the slow trend (the update norm shrinks as the policy
    converges, which is not instability).
    """
    diffs = np.diff(series, axis=-1)
    if diffs.shape[-1] == 0:
        return np.zeros(series.shape[:-1])
    return 0.5 * np.mean(diffs**2, axis=-1)


def rank_weight_table(group_size: int, scheme: str, params: dict[str, float]) -> np.ndarray:
    """``table[n, r]``: the weight of rank position ``r`` in a ranking of ``n`` tie groups, from
    :func:`grader.redistribution.redistribute.rank_to_weights` itself (row 0 and unused cells are 1.0)."""
    table = np.ones((group_size + 1, group_size))
    for n in range(1, group_size + 1):
        ranking = [[str(position)] for position in range(n)]
        weights = redistribute.rank_to_weights(ranking, scheme, **params)
        table[n, :n] = [weights[str(position)] for position in range(n)]
    return table


def _dense_ranks(scores: np.ndarray, passed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per rollout, its tie group's position among the passing rollouts of its group (0 = best; equal scores
    share a position), and per group the number of tie groups. Axis -1 is the group."""
    keyed = np.where(passed, scores, -np.inf)
    order = np.argsort(-keyed, axis=-1, kind="stable")
    ordered = np.take_along_axis(keyed, order, axis=-1)
    new_tier = np.ones(ordered.shape, dtype=bool)
    new_tier[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    tier_sorted = np.cumsum(new_tier & np.isfinite(ordered), axis=-1) - 1
    ranks = np.empty_like(tier_sorted)
    np.put_along_axis(ranks, order, tier_sorted, axis=-1)
    n_ranks = np.where(passed.any(axis=-1), np.max(np.where(passed, ranks, -1), axis=-1) + 1, 0)
    return np.where(passed, ranks, 0), n_ranks


def _credit_change(before: np.ndarray, after: np.ndarray, passed: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Largest relative change of a group's passing ``sum(a * size)`` over the groups (axis -1)."""
    kept = np.where(passed, before * size, 0.0).sum(axis=-1)
    now = np.where(passed, after * size, 0.0).sum(axis=-1)
    relative = np.abs(now - kept) / np.maximum(np.abs(kept), 1e-12)
    relative = np.where(np.abs(kept) > 0, relative, 0.0)
    return relative.max(axis=-1)


def simulate(
    config: SimulationConfig | None = None, behaviours: tuple[Behaviour, ...] = BEHAVIOURS
) -> SimulationResult:
    """Run every (arm, aggregation) of ``config`` over its seeds and steps; see the module docstring.

    Raises ValueError for a bad config (see :meth:`SimulationConfig.validate`) or bad behaviours.
    """
    config = config or SimulationConfig()
    config.validate()
    if len(behaviours) < 2:
        raise ValueError("a simulation needs at least two behaviours")
    for b in behaviours:
        if not (0 < b.pass_rate < 1 and b.tokens > 0 and b.prior > 0):
            raise ValueError(f"behaviour {b.name!r}: pass_rate must be in (0, 1), tokens and prior positive")

    runs = [(arm, aggregation) for arm in config.arms for aggregation in config.aggregations]
    R, S, T, B, G, K = (
        len(runs),
        config.seeds,
        config.steps,
        config.groups,
        config.group_size,
        len(behaviours),
    )
    pass_logit = np.log([b.pass_rate / (1 - b.pass_rate) for b in behaviours])
    quality = np.array([b.quality for b in behaviours])
    tokens = np.array([b.tokens for b in behaviours])
    clean = np.array([b.clean for b in behaviours])
    weight_table = rank_weight_table(G, config.scheme, config.scheme_params)
    preserve_of_run = [ARMS[arm] for arm, _ in runs]
    token_mean = np.array([aggregation == "token-mean" for _, aggregation in runs])
    # The rollout shown first gets +bias, the last -bias: rollout order is random with respect to behaviour,
    # so the bias is noise the grader adds, correlated with position only.
    position = config.position_bias * np.linspace(1.0, -1.0, G)

    theta = np.tile(np.log([b.prior for b in behaviours]), (R, S, 1))
    out = {
        name: np.zeros((R, S, T))
        for name in (
            "clean_share",
            "mean_tokens",
            "pass_rate",
            "mass",
            "mass_grpo",
            "update_norm",
            "sequence_credit_change",
            "token_credit_change",
            "redistributed",
        )
    }
    shares_out = np.zeros((R, S, T, K))

    # One stream per seed, drawn up front: (S, T, B, G) uniforms and normals shared by every arm of a seed.
    streams = [np.random.default_rng([config.seed, s]) for s in range(S)]
    draws = {
        name: np.stack([draw(rng) for rng in streams])
        for name, draw in (
            ("difficulty", lambda rng: rng.normal(0.0, 1.0, (T, B, 1))),
            ("pick", lambda rng: rng.random((T, B, G))),
            ("outcome", lambda rng: rng.random((T, B, G))),
            ("noise", lambda rng: rng.normal(0.0, 1.0, (T, B, G))),
            ("jitter", lambda rng: rng.normal(0.0, 1.0, (T, B, G))),
        )
    }
    group_ids = np.arange(R * S * B).reshape(R, S, B, 1).repeat(G, axis=-1)
    rows_per_policy = B * G

    for t in range(T):
        logits = theta - theta.max(axis=-1, keepdims=True)
        policy = np.exp(logits)
        policy /= policy.sum(axis=-1, keepdims=True)
        shares_out[:, :, t] = policy
        out["clean_share"][:, :, t] = policy[..., clean].sum(axis=-1)
        out["mean_tokens"][:, :, t] = policy @ tokens

        # Sample behaviours by inverse CDF from the shared uniforms: (R, S, B, G).
        cdf = np.cumsum(policy, axis=-1)
        pick = draws["pick"][None, :, t, :, :, None]
        chosen = np.minimum((pick > cdf[:, :, None, None, :]).sum(axis=-1), K - 1)
        ease = pass_logit[chosen] - config.task_spread * draws["difficulty"][None, :, t]
        passed = draws["outcome"][None, :, t] < 1.0 / (1.0 + np.exp(-ease))
        length = tokens[chosen] * np.exp(
            config.length_jitter * draws["jitter"][None, :, t] - config.length_jitter**2 / 2
        )
        out["pass_rate"][:, :, t] = passed.mean(axis=(-1, -2))

        reward = passed.astype(np.float64)
        mean = reward.mean(axis=-1, keepdims=True)
        std = reward.std(axis=-1, ddof=1, keepdims=True)
        grpo = (reward - mean) / (std + GRPO_EPS)
        mixed = passed.any(axis=-1) & ~passed.all(axis=-1)

        # The grader: quality plus noise plus position bias, ranked with ties among the passing rollouts.
        scores = quality[chosen] + config.grader_noise * draws["noise"][None, :, t] + position
        ranks, n_ranks = _dense_ranks(scores, passed)
        weights = np.where(passed & mixed[..., None], weight_table[n_ranks[..., None], ranks], 1.0)

        advantages = grpo.copy()
        for mode in {m for m in preserve_of_run if m is not None}:
            selected = [r for r, m in enumerate(preserve_of_run) if m == mode]
            new, _ = redistribute.redistribute_batch(
                grpo[selected].ravel(),
                group_ids[selected].ravel(),
                passed[selected].ravel(),
                weights[selected].ravel(),
                preserve=mode,  # type: ignore[arg-type]
                lengths=length[selected].ravel(),
            )
            advantages[selected] = new.reshape(len(selected), S, B, G)
        changed = np.any(advantages != grpo, axis=-1)
        out["redistributed"][:, :, t] = changed.sum(axis=-1)
        out["sequence_credit_change"][:, :, t] = _credit_change(
            grpo, advantages, passed, np.ones_like(length)
        )
        out["token_credit_change"][:, :, t] = _credit_change(grpo, advantages, passed, length)

        # Loss coefficients per rollout: A / N (sequence-mean) or A * L / sum L (token-mean).
        total_tokens = length.sum(axis=(-1, -2), keepdims=True)
        scale = np.where(token_mean[:, None, None, None], length / total_tokens, 1.0 / rows_per_policy)
        coefficient = advantages * scale
        out["mass"][:, :, t] = coefficient.sum(axis=(-1, -2))
        out["mass_grpo"][:, :, t] = (grpo * scale).sum(axis=(-1, -2))

        # The policy gradient of a softmax: sum_i c_i (onehot(b_i) - policy).
        flat = (np.arange(R * S).reshape(R, S, 1, 1) * K + chosen).ravel()
        gradient = np.bincount(flat, weights=coefficient.ravel(), minlength=R * S * K).reshape(R, S, K)
        gradient -= policy * coefficient.sum(axis=(-1, -2))[..., None]
        update = config.learning_rate * gradient
        theta += update
        out["update_norm"][:, :, t] = np.linalg.norm(update, axis=-1)

    return SimulationResult(config=config, behaviours=behaviours, runs=runs, shares=shares_out, **out)
