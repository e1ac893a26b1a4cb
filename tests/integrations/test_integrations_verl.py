"""verl adapter, against the real verl package: its compute_advantage, DataProto and GRPO estimator."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from grader.redistribution.redistribute import redistribute_batch
from tests.conftest import REPO_ROOT

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
# Grading inside verl's step, configured by name: reward manager "gagar", estimator "gagar_grpo"
# ------------------------------------------------------------------------------------------


def verl_config(*overrides: str):
    """verl's own trainer config (its hydra files, as `python -m verl.trainer.main_ppo` composes them)."""
    import os

    import verl
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=list(overrides))


def verls_own_grpo(batch: DataProto) -> torch.Tensor:
    """verl's GRPO advantages of a copy of `batch`, computed by verl's estimator named "grpo"."""
    return ray_trainer.compute_advantage(
        DataProto.from_dict(
            tensors={k: batch.batch[k].clone() for k in ("response_mask", "token_level_rewards")},
            non_tensors={"uid": batch.non_tensor_batch["uid"]},
        ),
        adv_estimator="grpo",
    ).batch["advantages"]


def generated_batch(group_ids: list[str], patches: list[str], scores: list[float], task: dict) -> DataProto:
    """A batch at the reward step, with response lengths that vary from row to row."""
    from grader.servers.scripted import verl_reward_batch

    lengths = [2 + (3 * i) % (RESPONSE_LENGTH - 1) for i in range(len(scores))]
    return verl_reward_batch(group_ids, patches, scores, lengths, task, RESPONSE_LENGTH)


def example_batch():
    from grader.groups.formats import load_group_file
    from tests.conftest import EXAMPLE_GROUP

    (example,) = load_group_file(EXAMPLE_GROUP)
    ts = example.trajectories
    task = {"repo": example.task.repo, "base_commit": example.task.base_commit, "statement": "s"}
    uids = ["graded"] * len(ts) + ["all-fail"] * 3
    patches = [t.patch for t in ts] + ["", "", ""]
    scores = [float(bool(t.passed)) for t in ts] + [0.0] * 3
    return example, (uids, patches, scores, task)


def fit_step(batch: DataProto, config) -> tuple[DataProto, torch.Tensor, dict]:
    """The legacy RayPPOTrainer.fit step from the reward on, with verl's own functions in fit's order and
    fit's arguments: reward, old log-probs (grading runs meanwhile), advantages by the configured
    estimator, data metrics. Returns the batch, verl's "grpo" advantages of it, and the metrics."""
    reward_tensor, extras = ray_trainer.extract_reward(batch)
    old = DataProto.from_dict(tensors={"old_log_probs": torch.zeros(len(batch), RESPONSE_LENGTH)})
    batch = batch.union(old)
    batch.batch["token_level_scores"] = reward_tensor
    batch.non_tensor_batch.update({k: np.array(v) for k, v in extras.items()})
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    base = verls_own_grpo(batch)
    batch = ray_trainer.compute_advantage(
        batch,
        adv_estimator=config.algorithm.adv_estimator,
        gamma=config.algorithm.gamma,
        lam=config.algorithm.lam,
        num_repeat=config.actor_rollout_ref.rollout.n,
        norm_adv_by_std_in_grpo=config.algorithm.norm_adv_by_std_in_grpo,
        config=config.algorithm,
    )
    metrics = ray_trainer.compute_data_metrics(batch=batch, use_critic=False)
    return batch, base, metrics


def test_legacy_step_configured_by_name_grades_and_redistributes_verls_grpo() -> None:
    from grader.graders.heuristic import HeuristicGrader
    from grader.integrations.batch import BatchGrader
    from grader.integrations.verl import plugin as verl_plugin
    from grader.pipeline import grade_group_sync

    config = verl_config("algorithm.adv_estimator=gagar_grpo", "reward.reward_manager.name=gagar")
    example, args = example_batch()
    grader = BatchGrader(HeuristicGrader(), gagar_verl.VERL_MAPPING)
    steps: list = []
    detach = verl_plugin.attach(grader, deadline=60, on_step=steps.append)
    try:
        validation = generated_batch(*args)
        validation.meta_info["validate"] = True  # as verl's _validate marks its batches
        ray_trainer.extract_reward(validation)
        assert not grader._owner  # validation is not submitted
        batch, base, metrics = fit_step(generated_batch(*args), config)
    finally:
        detach()
        grader.close()
    assert ray_trainer.extract_reward.__module__ == "verl.trainer.ppo.reward"  # detached
    (step,) = steps
    ts = example.trajectories
    named = grade_group_sync(example, HeuristicGrader()).weights
    assert step.weights.tolist() == [named.get(t.id, 1.0) for t in ts] + [1.0] * 3
    mask = batch.batch["response_mask"].numpy()
    passed = np.array(args[2]) >= 1
    expected, _ = redistribute_batch(
        base.numpy(), batch.non_tensor_batch["uid"], passed, step.weights, mask, preserve="token"
    )
    np.testing.assert_allclose(batch.batch["advantages"].numpy(), expected, rtol=1e-6)
    assert not np.allclose(expected, base.numpy())
    assert torch.equal(batch.batch["returns"], batch.batch["advantages"])
    assert metrics["gagar/graded"] == metrics["gagar/skipped"] == 0.5
    assert "critic/advantages/mean" in metrics  # verl's own metrics are still there
    assert not grader._owner


def test_gagar_grpo_with_nothing_attached_is_verls_grpo() -> None:
    from grader.integrations.verl import plugin as verl_plugin

    config = verl_config("algorithm.adv_estimator=gagar_grpo", "algorithm.norm_adv_by_std_in_grpo=false")
    batch = make_batch(SCORES, UIDS, LENGTHS)
    expected = ray_trainer.compute_advantage(
        make_batch(SCORES, UIDS, LENGTHS), adv_estimator="grpo", norm_adv_by_std_in_grpo=False
    )
    got = ray_trainer.compute_advantage(
        batch, adv_estimator=verl_plugin.ADV_ESTIMATOR, config=config.algorithm
    )
    assert torch.equal(got.batch["advantages"], expected.batch["advantages"])


def test_a_batch_changed_after_submission_trains_on_verls_grpo(caplog) -> None:
    from grader.graders.heuristic import HeuristicGrader
    from grader.integrations.batch import BatchGrader
    from grader.integrations.verl import plugin as verl_plugin

    config = verl_config("algorithm.adv_estimator=gagar_grpo")
    _, args = example_batch()
    grader = BatchGrader(HeuristicGrader(), gagar_verl.VERL_MAPPING)
    detach = verl_plugin.attach(grader, deadline=60)
    try:
        batch = generated_batch(*args)
        ray_trainer.extract_reward(batch)
        # A trainer that reorders rows between the reward and the advantages (verl 0.9 does not): the
        # estimator cannot tell which weight is whose, so it must not apply any.
        batch.reorder(torch.tensor(list(reversed(range(len(batch))))))
        batch.batch["token_level_rewards"] = batch.batch["rm_scores"]
        plain = verls_own_grpo(batch)
        got = ray_trainer.compute_advantage(batch, adv_estimator="gagar_grpo", config=config.algorithm)
    finally:
        detach()
        grader.close()
    assert torch.equal(got.batch["advantages"], plain)
    assert "this step is not graded" in caplog.text and "reordered or changed the batch" in caplog.text
    assert not grader._owner


def test_a_step_whose_rows_cannot_be_submitted_trains_on_verls_grpo(caplog) -> None:
    from grader.graders.heuristic import HeuristicGrader
    from grader.integrations.batch import BatchGrader
    from grader.integrations.verl import plugin as verl_plugin

    _, args = example_batch()
    grader = BatchGrader(HeuristicGrader(), gagar_verl.VERL_MAPPING)
    detach = verl_plugin.attach(grader, deadline=60)
    try:
        grader.submit(gagar_verl.verl_rows(generated_batch(*args)))  # the same groups, submitted elsewhere
        again = generated_batch(*args)
        ray_trainer.extract_reward(again)  # the batch grader refuses them; that must not cost the step
        assert "this step is not graded: CollectError" in caplog.text
        again.batch["token_level_rewards"] = again.batch["rm_scores"]
        plain = verls_own_grpo(again)
        got = ray_trainer.compute_advantage(again, adv_estimator="gagar_grpo").batch["advantages"]
        assert torch.equal(got, plain)
    finally:
        detach()
        grader.close()


def test_reward_manager_selected_by_name_reports_pass_flag_and_patch(tmp_path) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast
    from verl.experimental.reward_loop import migrate_legacy_reward_impl
    from verl.trainer.ppo.reward import load_reward_manager

    from grader.integrations.verl import plugin as verl_plugin

    reward = tmp_path / "reward.py"
    reward.write_text(
        "def score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
        "    return {'score': float(solution_str == ground_truth), 'patch': 'diff of ' + solution_str}\n"
    )
    # verl's legacy spelling, migrated by verl itself to reward.reward_manager.name
    config = migrate_legacy_reward_impl(
        verl_config(
            "reward_model.reward_manager=gagar",
            f"custom_reward_function.path={reward}",
            "custom_reward_function.name=score",
        )
    )
    assert config.reward.reward_manager.name == verl_plugin.REWARD_MANAGER
    words = {"[UNK]": 0, "[PAD]": 1, "fix": 2, "bug": 3}
    backend = Tokenizer(WordLevel(words, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]")
    tokenizer.eos_token = "[PAD]"
    manager = load_reward_manager(config, tokenizer)
    assert type(manager) is verl_plugin.GagarRewardManager

    def row(words_: list[str]) -> DataProto:
        ids = torch.tensor([tokenizer.convert_tokens_to_ids(w) for w in words_])
        return DataProto.from_dict(
            tensors={
                "prompts": torch.ones(1, 2, dtype=torch.long),
                "responses": ids[None],
                "attention_mask": torch.ones(1, 2 + len(ids), dtype=torch.long),
            },
            non_tensors={
                "data_source": np.array(["swe"], dtype=object),
                "reward_model": np.array([{"ground_truth": "fix bug"}], dtype=object),
                "extra_info": np.array([{"repo": "r"}], dtype=object),
            },
        )

    passing = manager.loop.run_until_complete(manager.run_single(row(["fix", "bug"])))
    failing = manager.loop.run_until_complete(manager.run_single(row(["bug"])))
    assert passing["reward_score"] == 1.0 and failing["reward_score"] == 0.0
    assert passing["reward_extra_info"]["acc"] == 1.0 and failing["reward_extra_info"]["acc"] == 0.0
    assert passing["reward_extra_info"]["patch"] == "diff of fix bug"


def test_attach_fails_loudly_outside_the_supported_verl(monkeypatch) -> None:
    import verl

    from grader.errors import GagarError
    from grader.graders.heuristic import HeuristicGrader
    from grader.integrations.batch import BatchGrader
    from grader.integrations.verl import plugin as verl_plugin

    before = ray_trainer.extract_reward
    grader = BatchGrader(HeuristicGrader(), gagar_verl.VERL_MAPPING)
    try:
        for version in ("0.10.0", "0.8.5", "1.0.0", "not-a-version"):
            monkeypatch.setattr(verl, "__version__", version)
            with pytest.raises(verl_plugin.VerlVersionError, match=r"support verl >=0\.9\.0,<0\.10") as err:
                verl_plugin.attach(grader)
            assert version in str(err.value) and isinstance(err.value, GagarError)
            assert ray_trainer.extract_reward is before  # nothing patched
            with pytest.raises(verl_plugin.VerlVersionError):
                gagar_verl.install(weights_by_row([1.0] * 8))
            assert ray_trainer.compute_advantage is not None and not hasattr(
                ray_trainer.compute_advantage, "__gagar_original__"
            )
        monkeypatch.setattr(verl, "__version__", "0.9.7")
        verl_plugin.attach(grader)()
    finally:
        grader.close()
    assert ray_trainer.extract_reward is before


def test_install_grader_is_gone_with_a_migration_note() -> None:
    with pytest.raises(AttributeError, match=r"verl\.plugin\.attach.*adv_estimator=gagar_grpo"):
        gagar_verl.install_grader  # noqa: B018


def test_preserve_follows_verls_loss_aggregation() -> None:
    assert gagar_verl.preserve_for_loss_agg_mode("token-mean") == "token"
    assert gagar_verl.preserve_for_loss_agg_mode("seq-mean-token-mean") == "sequence"
    with pytest.raises(ValueError, match="unknown verl loss_agg_mode"):
        gagar_verl.preserve_for_loss_agg_mode("mean")


def test_the_old_plugin_path_is_the_plugin_with_a_deprecation_warning() -> None:
    # verl_plugin moved into the verl package (integrations/verl/plugin); Ray setup hooks and imports that
    # name the old path keep working for one release. A fresh process: this one has the plugin loaded.
    script = (
        "import warnings\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n"
        "    import grader.integrations.verl_plugin\n"
        "except DeprecationWarning as warning:\n"
        "    print(warning)\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "from grader.integrations import verl_plugin\n"
        "from grader.integrations.verl import plugin\n"
        "print(verl_plugin is plugin, verl_plugin.register is plugin.register)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "grader.integrations.verl_plugin moved to grader.integrations.verl.plugin; the old path goes in "
        "gagar 0.4",
        "True True",
    ]
