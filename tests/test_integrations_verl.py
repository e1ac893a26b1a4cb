"""verl adapter, against the real verl package: its compute_advantage, DataProto and GRPO estimator."""

from __future__ import annotations

import numpy as np
import pytest

from grader.redistribute import redistribute_batch

torch = pytest.importorskip("torch", reason="the integrations extra is not installed")
ray_trainer = pytest.importorskip(
    "verl.trainer.ppo.ray_trainer", reason="verl is not installed (pip install 'gagar[integrations]')"
)
from verl import DataProto  # noqa: E402

from grader.integrations import verl as gagar_verl  # noqa: E402

RESPONSE_LENGTH = 6


def make_batch(scores: list[float], uids: list[str], lengths: list[int]) -> DataProto:
    """A verl batch as its reward step leaves it: the score on the last response token, zeros elsewhere."""
    bs = len(scores)
    mask = torch.zeros(bs, RESPONSE_LENGTH, dtype=torch.float32)
    token_scores = torch.zeros(bs, RESPONSE_LENGTH, dtype=torch.float32)
    for row, (score, length) in enumerate(zip(scores, lengths, strict=True)):
        mask[row, :length] = 1
        token_scores[row, length - 1] = score
    return DataProto.from_dict(
        tensors={
            "response_mask": mask,
            "token_level_scores": token_scores,
            "token_level_rewards": token_scores.clone(),
        },
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


SCORES = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
UIDS = ["a", "a", "a", "a", "b", "b", "b", "b"]
LENGTHS = [6, 3, 5, 2, 4, 6, 1, 3]


def weights_by_row(values: list[float]):
    return lambda uids, passed, data: np.array(values)


def test_uniform_weights_return_exactly_verls_grpo() -> None:
    expected = ray_trainer.compute_advantage(make_batch(SCORES, UIDS, LENGTHS), adv_estimator="grpo")
    wrapped = gagar_verl.wrap_compute_advantage(ray_trainer.compute_advantage, weights_by_row([1.0] * 8))
    got = wrapped(make_batch(SCORES, UIDS, LENGTHS), adv_estimator="grpo")
    assert torch.equal(got.batch["advantages"], expected.batch["advantages"])
    assert torch.equal(got.batch["returns"], expected.batch["returns"])


def test_weights_redistribute_verls_advantages() -> None:
    weights = [1.0, 0.5, 1.0, 0.75, 1.0, 1.0, 1.0, 1.0]
    seen: list[dict] = []
    wrapped = gagar_verl.wrap_compute_advantage(
        ray_trainer.compute_advantage, weights_by_row(weights), on_unchanged=seen.append
    )
    base = ray_trainer.compute_advantage(make_batch(SCORES, UIDS, LENGTHS), adv_estimator="grpo")
    got = wrapped(make_batch(SCORES, UIDS, LENGTHS), adv_estimator="grpo")
    advantages = got.batch["advantages"]
    assert advantages.shape == (8, RESPONSE_LENGTH) and advantages.dtype == torch.float32
    mask = base.batch["response_mask"].numpy()
    expected, reasons = redistribute_batch(
        base.batch["advantages"].numpy(), np.array(UIDS), np.array(SCORES) >= 1, np.array(weights), mask
    )
    np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-6)
    assert torch.equal(got.batch["returns"], advantages)
    # Group a: sum of passing sequence advantages kept; failing row and padding untouched.
    seq = lambda t: (t * mask).sum(1) / mask.sum(1)  # noqa: E731
    before, after = seq(base.batch["advantages"].numpy()), seq(advantages.numpy())
    passing_a = [0, 1, 3]
    assert after[passing_a].sum() == pytest.approx(before[passing_a].sum(), rel=1e-6)
    assert after[1] < after[0]
    assert torch.equal(advantages[2], base.batch["advantages"][2])
    assert torch.all(advantages[mask == 0] == 0)
    # Group b has one passing row: uniform weights, unchanged.
    assert seen == [{"b": "uniform weights"}] == [reasons]


def test_other_estimators_pass_through() -> None:
    wrapped = gagar_verl.wrap_compute_advantage(ray_trainer.compute_advantage, weights_by_row([0.5] * 8))
    expected = ray_trainer.compute_advantage(make_batch(SCORES, UIDS, LENGTHS), adv_estimator="rloo")
    got = wrapped(make_batch(SCORES, UIDS, LENGTHS), adv_estimator="rloo")
    assert torch.equal(got.batch["advantages"], expected.batch["advantages"])


def test_install_patches_both_trainers_and_undoes() -> None:
    original = ray_trainer.compute_advantage
    uninstall = gagar_verl.install(weights_by_row([1.0, 0.5, 1.0, 0.75, 1.0, 1.0, 1.0, 1.0]))
    try:
        assert ray_trainer.compute_advantage is not original
        data = ray_trainer.compute_advantage(make_batch(SCORES, UIDS, LENGTHS), adv_estimator="grpo")
        assert data.batch["advantages"][1, 0] < data.batch["advantages"][0, 0]
        v1 = pytest.importorskip("verl.trainer.ppo.v1.utils")
        assert v1.compute_advantage is not original
        # Installing twice wraps verl's function once, not the wrapper.
        gagar_verl.install(weights_by_row([1.0] * 8))()
    finally:
        uninstall()
    assert ray_trainer.compute_advantage is original


def test_bf16_advantages_keep_dtype() -> None:
    data = ray_trainer.compute_advantage(make_batch(SCORES, UIDS, LENGTHS), adv_estimator="grpo")
    data.batch["advantages"] = data.batch["advantages"].to(torch.bfloat16)
    data.batch["returns"] = data.batch["advantages"]
    gagar_verl.redistribute_data(data, np.array([1.0, 0.5, 1.0, 0.75, 1.0, 1.0, 1.0, 1.0]))
    assert data.batch["advantages"].dtype == torch.bfloat16
    assert data.batch["advantages"][1, 0] < data.batch["advantages"][0, 0]


def test_pass_flag_reward_and_mixed_rows_match_dapo_filter() -> None:
    score = gagar_verl.with_pass_flag(lambda data_source, solution_str, ground_truth, extra_info=None: 1.0)
    assert score("swe", "patch", None) == {"score": 1.0, "acc": 1.0}
    partial = gagar_verl.with_pass_flag(lambda *a, **k: {"score": 0.3, "tests": 3})
    assert partial("swe", "patch", None) == {"score": 0.3, "tests": 3, "acc": 0.0}
    data = make_batch(SCORES, UIDS, LENGTHS)
    data.non_tensor_batch["acc"] = np.array([float(s >= 1) for s in SCORES] + [], dtype=object)
    keep = gagar_verl.mixed_rows(data)
    # verl's DAPO filter evicts a group whose metric has zero std: for 0/1 acc, exactly the unmixed ones.
    dapo_keep = {u: np.std([a for v, a in zip(UIDS, SCORES, strict=True) if v == u]) != 0 for u in set(UIDS)}
    assert keep.tolist() == [dapo_keep[u] for u in UIDS]
    assert len(data.select_idxs(keep)) == int(keep.sum())


# ------------------------------------------------------------------------------------------
# Grading inside verl's step: submit after extract_reward, collect in compute_advantage
# ------------------------------------------------------------------------------------------


def verls_own_grpo(batch: DataProto) -> torch.Tensor:
    """verl's GRPO advantages of a copy of `batch`, computed by its own function (the unwrapped one)."""
    return ray_trainer.compute_advantage.__gagar_original__(
        DataProto.from_dict(
            tensors={k: batch.batch[k].clone() for k in ("response_mask", "token_level_rewards")},
            non_tensors={"uid": batch.non_tensor_batch["uid"]},
        ),
        adv_estimator="grpo",
    ).batch["advantages"]


def generated_batch(group_ids: list[str], patches: list[str], scores: list[float], task: dict) -> DataProto:
    """A batch at the reward step, with response lengths that vary from row to row."""
    from grader.testing import verl_reward_batch

    lengths = [2 + (3 * i) % (RESPONSE_LENGTH - 1) for i in range(len(scores))]
    return verl_reward_batch(group_ids, patches, scores, lengths, task, RESPONSE_LENGTH)


def test_grading_overlaps_verls_log_probs_and_lands_in_its_advantages_and_metrics() -> None:
    from grader.formats import load_group_file
    from grader.graders.heuristic import HeuristicGrader
    from grader.integrations.batch import BatchGrader
    from grader.pipeline import grade_group_sync
    from tests.conftest import EXAMPLE_GROUP

    (example,) = load_group_file(EXAMPLE_GROUP)
    ts = example.trajectories
    task = {"repo": example.task.repo, "base_commit": example.task.base_commit, "statement": "s"}
    uids = ["graded"] * len(ts) + ["all-fail"] * 3
    patches = [t.patch for t in ts] + ["", "", ""]
    scores = [float(bool(t.passed)) for t in ts] + [0.0] * 3
    grader = BatchGrader(HeuristicGrader(), gagar_verl.VERL_MAPPING)
    steps: list = []
    uninstall = gagar_verl.install_grader(grader, deadline=60, on_step=steps.append)
    try:
        batch = generated_batch(uids, patches, scores, task)
        # The order fit() calls them in: reward, then old log-probs (grading runs meanwhile), then advantages.
        reward_tensor, extras = ray_trainer.extract_reward(batch)
        assert set(extras) == {"patch", "acc"}
        validation = generated_batch(uids, patches, scores, task)
        validation.meta_info["validate"] = True  # as verl's _validate marks its batches
        ray_trainer.extract_reward(validation)
        assert "gagar_trajectory" not in validation.non_tensor_batch  # not submitted
        old = DataProto.from_dict(tensors={"old_log_probs": torch.zeros(len(scores), RESPONSE_LENGTH)})
        batch = batch.union(old)
        batch.reorder(torch.tensor(list(reversed(range(len(scores))))))  # rows may move; ids travel along
        batch.batch["token_level_scores"] = batch.batch["rm_scores"]
        batch.batch["token_level_rewards"] = batch.batch["rm_scores"]
        base = verls_own_grpo(batch)
        batch = ray_trainer.compute_advantage(batch, adv_estimator="grpo", num_repeat=1)
        metrics = ray_trainer.compute_data_metrics(batch=batch, use_critic=False)
    finally:
        uninstall()
    assert ray_trainer.extract_reward.__module__ == "verl.trainer.ppo.reward"
    (step,) = steps
    # The heuristic grader's weights for the example, row by row (rows were reversed after submission).
    named = grade_group_sync(example, HeuristicGrader()).weights
    submitted = list(reversed(range(len(scores))))
    assert step.weights.tolist() == [named.get(ts[i].id, 1.0) if i < len(ts) else 1.0 for i in submitted]
    mask = batch.batch["response_mask"].numpy()
    passed = batch.batch["token_level_scores"].sum(-1).numpy() >= 1
    expected, _ = redistribute_batch(
        base.numpy(), batch.non_tensor_batch["uid"], passed, step.weights, mask, preserve="token"
    )
    np.testing.assert_allclose(batch.batch["advantages"].numpy(), expected, rtol=1e-6)
    assert not np.allclose(expected, base.numpy())
    assert "gagar_trajectory" not in batch.non_tensor_batch
    assert metrics["gagar/graded"] == metrics["gagar/skipped"] == 0.5
    assert "critic/advantages/mean" in metrics  # verl's own metrics are still there
    grader.close()


def test_a_step_whose_rows_cannot_be_submitted_trains_on_verls_advantages(caplog) -> None:
    from grader.formats import load_group_file
    from grader.graders.heuristic import HeuristicGrader
    from grader.integrations.batch import BatchGrader
    from tests.conftest import EXAMPLE_GROUP

    (example,) = load_group_file(EXAMPLE_GROUP)
    ts = example.trajectories
    task = {"repo": example.task.repo, "base_commit": example.task.base_commit, "statement": "s"}
    args = (["g"] * len(ts), [t.patch for t in ts], [float(bool(t.passed)) for t in ts], task)
    grader = BatchGrader(HeuristicGrader(), gagar_verl.VERL_MAPPING)
    uninstall = gagar_verl.install_grader(grader, deadline=60)
    try:
        ray_trainer.extract_reward(generated_batch(*args))
        # The same groups again before the first were collected (a trainer that re-scores a batch): the
        # batch grader refuses them, and that must not cost the step.
        again = generated_batch(*args)
        ray_trainer.extract_reward(again)
        assert "gagar_trajectory" not in again.non_tensor_batch
        assert "this step is not graded: CollectError" in caplog.text
        again.batch["token_level_scores"] = again.batch["token_level_rewards"] = again.batch["rm_scores"]
        plain = verls_own_grpo(again)
        got = ray_trainer.compute_advantage(again, adv_estimator="grpo", num_repeat=1).batch["advantages"]
        assert torch.equal(got, plain)
    finally:
        uninstall()
        grader.close()


def test_preserve_follows_verls_loss_aggregation() -> None:
    assert gagar_verl.preserve_for_loss_agg_mode("token-mean") == "token"
    assert gagar_verl.preserve_for_loss_agg_mode("seq-mean-token-mean") == "sequence"
    with pytest.raises(ValueError, match="unknown verl loss_agg_mode"):
        gagar_verl.preserve_for_loss_agg_mode("mean")
