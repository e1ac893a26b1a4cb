"""slime adapter, against a reproduction of slime's reward post-processing (slime is not on PyPI)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the integrations extra is not installed")
from grader.integrations import slime  # noqa: E402
from grader.servers.scripted import SlimeSample as Sample  # noqa: E402
from grader.servers.scripted import slime_args as args  # noqa: E402

REWARDS = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def slime_default(a: SimpleNamespace, rewards: list[float]) -> list[float]:
    """slime's own GRPO normalization, as _post_process_rewards computes it (reproduced)."""
    matrix, _ = slime.slime_rewards(a, rewards)
    return matrix.flatten().tolist()


def test_uniform_weights_return_slimes_rewards_exactly() -> None:
    samples = [Sample(r) for r in REWARDS]
    raw, rewards = slime.reward_post_process(args(), samples)
    assert raw == REWARDS
    assert rewards == slime_default(args(), REWARDS)
    expected = torch.tensor(REWARDS).reshape(2, 4)
    expected = expected - expected.mean(-1, keepdim=True)
    expected = expected / (expected.std(-1, keepdim=True) + 1e-6)
    assert rewards == expected.flatten().tolist()


def test_metadata_weights_redistribute_and_keep_the_sum() -> None:
    weights = [1.0, 0.5, 1.0, 0.75, 1.0, 1.0, 1.0, 1.0]
    samples = [Sample(r, metadata={slime.WEIGHT_KEY: w}) for r, w in zip(REWARDS, weights, strict=True)]
    _, rewards = slime.reward_post_process(args(), samples)
    before = slime_default(args(), REWARDS)
    passing = [0, 1, 3]
    assert sum(rewards[i] for i in passing) == pytest.approx(sum(before[i] for i in passing), rel=1e-6)
    assert rewards[1] < rewards[3] < rewards[0]
    assert rewards[2] == before[2] and rewards[4:] == before[4:]


def test_weights_fn_nested_samples_and_token_preserve() -> None:
    seen = {}

    def weights_fn(group_ids: np.ndarray, passed: np.ndarray, samples: list[Sample]) -> np.ndarray:
        seen.update(groups=group_ids.tolist(), passed=passed.tolist(), n=len(samples))
        return np.array([1.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])

    lengths = [10, 30, 5, 20, 7, 7, 7, 7]
    nested = [[Sample(r, response_length=n) for r, n in zip(REWARDS[:4], lengths[:4], strict=True)]] + [
        [Sample(r, response_length=n) for r, n in zip(REWARDS[4:], lengths[4:], strict=True)]
    ]
    post = slime.make_reward_post_process(weights_fn, preserve="token")
    _, rewards = post(args(), nested)
    assert seen == {"groups": [0, 0, 0, 0, 1, 1, 1, 1], "passed": [r >= 1 for r in REWARDS], "n": 8}
    before = slime_default(args(), REWARDS)
    token_sum = lambda values: sum(values[i] * lengths[i] for i in (0, 1, 3))  # noqa: E731
    assert token_sum(rewards) == pytest.approx(token_sum(before), rel=1e-6)


def test_non_grpo_estimators_pass_through() -> None:
    samples = [Sample(r, metadata={slime.WEIGHT_KEY: 0.5}) for r in REWARDS]
    for a in (
        args(rewards_normalization=False),
        args(advantage_estimator="rloo"),
        args(advantage_estimator="ppo"),
    ):
        assert slime.reward_post_process(a, samples)[1] == slime_default(a, REWARDS)
    # A batch whose size is not n_samples_per_prompt * rollout_batch_size is one group, as in slime.
    assert slime.slime_rewards(args(), REWARDS[:6])[0].shape == (1, 6)


def test_dynamic_filter_keeps_mixed_groups() -> None:
    keep = slime.keep_mixed_groups
    assert keep(args(), [Sample(1.0), Sample(0.0)]) is True
    assert keep(args(), [Sample(1.0), Sample(1.0)]) is False
    assert keep(args(), [[Sample(0.0), Sample(0.0)], [Sample(1.0)]]) is True
    assert slime.make_dynamic_filter(0.5)(args(), [Sample(0.6), Sample(0.4)]) is True


# ------------------------------------------------------------------------------------------
# Grading during the rollout: --group-rm submits, the reward post-process collects
# ------------------------------------------------------------------------------------------

CANDIDATES = [["clean", "edits-tests", "wrong-value", "leftover-script"], ["gave-up", "wrong-value"] * 2]


def test_group_rm_submits_and_post_process_collects_real_grades() -> None:
    import asyncio

    from grader.graders.heuristic import HeuristicGrader
    from grader.groups.formats import load_group_file
    from grader.integrations.batch import BatchGrader
    from grader.pipeline import grade_group_sync
    from grader.redistribution.redistribute import redistribute_batch
    from tests.conftest import EXAMPLE_GROUP

    (example,) = load_group_file(EXAMPLE_GROUP)
    task = {"repo": example.task.repo, "base_commit": example.task.base_commit}

    def group_of(ids: list[str]) -> list[Sample]:
        return [
            Sample(0.0, response_length=20 + 7 * k, metadata={"patch": example.trajectory(t).patch, **task})
            for k, t in enumerate(ids)
        ]

    def run_tests(a: Any, samples: list[Sample]) -> list[float]:
        """Stand-in for running each sample's tests: the example's recorded outcome."""
        by_patch = {t.patch: float(bool(t.passed)) for t in example.trajectories}
        return [by_patch[s.metadata["patch"]] for s in samples]

    grading = slime.SlimeGrading(BatchGrader(HeuristicGrader(), slime.SLIME_MAPPING), run_tests, deadline=60)
    kept, dropped = group_of(CANDIDATES[0]), group_of(CANDIDATES[1])
    for group in (kept, dropped):
        rewards = asyncio.run(grading.group_rm(args(), group))
        for sample, reward in zip(group, rewards, strict=True):
            sample.reward = reward  # what slime does with the group's rewards
    assert slime.keep_mixed_groups(args(), kept) is True
    assert slime.keep_mixed_groups(args(), dropped) is False  # slime's filter drops the all-failing group
    a = args(rollout_batch_size=1)
    raw, rewards = grading.reward_post_process(a, kept)
    step = grading.last_step
    assert step is not None and step.outcomes == ["graded"] * 4
    sub = example.model_copy(update={"trajectories": [example.trajectory(t) for t in CANDIDATES[0]]})
    named = grade_group_sync(sub, HeuristicGrader()).weights
    assert step.weights.tolist() == [named.get(t, 1.0) for t in CANDIDATES[0]]
    lengths = np.array([s.response_length for s in kept])
    mask = np.arange(lengths.max()) < lengths[:, None]
    expected, _ = redistribute_batch(
        slime_default(a, raw), np.zeros(4), np.array(raw) >= 1, step.weights, mask, preserve="token"
    )
    np.testing.assert_allclose(rewards, expected, rtol=1e-6)
    assert rewards[0] > rewards[3] > rewards[1]  # clean > leftover-script > edits-tests
    # The group slime dropped was discarded at collection, not left pending.
    assert grading.grader.discard_pending() == 0
    grading.grader.close()
