"""gagar in verl's v1 trainer, configured by name (``algorithm.adv_estimator=gagar_grpo``): verl's own
``PPOTrainer.step`` on a local Ray + TransferQueue, on CPU.

The rollout is written to TransferQueue as v1's agent loop writes it (one row per agent-loop output, keyed
``{uid}_{session}_{index}``, the reward and the reward function's extras already in each row), and the
replay buffer hands it to the step. From there on everything is verl's: ``PPOTrainer.step`` and
``_step_once`` (balance with padding rows, old log-probs in bypass mode, advantages, metrics aggregation).
Not run: the model calls (rollout, log-probs recomputed by an actor, the actor update) and v1's
``_validate``, which needs an agent loop and a tokenizer; the last test checks it never reaches the hooks.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from grader.redistribution.redistribute import redistribute_batch

torch = pytest.importorskip("torch", reason="the integrations extra is not installed")
ray = pytest.importorskip("ray", reason="the ray extra is not installed")
tq = pytest.importorskip("transfer_queue", reason="verl's v1 trainer needs transfer_queue")
trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base", reason="verl has no v1 trainer")
from omegaconf import OmegaConf  # noqa: E402
from transfer_queue import KVBatchMeta  # noqa: E402
from verl.trainer.ppo import ray_trainer  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402

from grader.graders.heuristic import HeuristicGrader  # noqa: E402
from grader.groups.formats import load_group_file  # noqa: E402
from grader.integrations import verl as gagar_verl  # noqa: E402
from grader.integrations.batch import BatchGrader  # noqa: E402
from grader.integrations.verl import plugin as verl_plugin  # noqa: E402
from grader.pipeline import grade_group_sync  # noqa: E402
from tests.conftest import EXAMPLE_GROUP  # noqa: E402

DP_SIZE = 4  # 11 rows: verl pads the batch with one synthetic row to a multiple of the data-parallel size


@pytest.fixture(scope="module", autouse=True)
def transfer_queue():
    # As a verl run registers gagar's names in its actors (the trainer's TaskRunner, reward-loop workers).
    hook = {"worker_process_setup_hook": "grader.integrations.verl.plugin.register"}
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, runtime_env=hook)
    # One storage unit: the controller and two units would want more CPUs than the test cluster has.
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield
    with contextlib.suppress(Exception):
        tq.close()
    ray.shutdown()


class CPUTrainer(trainer_base.PPOTrainer):
    """verl's v1 PPOTrainer with no model: the hooks below are the ones the sync trainer uses to sleep and
    wake its rollout replicas, and ``prepare_step`` would send the next prompts to the agent loop."""

    def on_step_end(self) -> None:
        return None

    def on_sample_end(self) -> None:
        return None

    def prepare_step(self) -> dict:
        return {}


class Rollout:
    """Stands for v1's ReplayBuffer once the agent loop has finished the rows: hands them to the step."""

    def __init__(self, keys: list[str], tags: list[dict], partition_id: str = "train") -> None:
        self.batch = KVBatchMeta(keys=keys, tags=tags, partition_id=partition_id)

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        return KVBatchMeta(
            keys=list(self.batch.keys), tags=list(self.batch.tags), partition_id=partition_id
        ), {}


def make_trainer(rollout: Rollout, adv_estimator: str = "grpo") -> CPUTrainer:
    trainer = CPUTrainer.__new__(CPUTrainer)  # __init__ builds Ray worker groups and the real replay buffer
    trainer.config = OmegaConf.create(
        {
            "data": {"train_batch_size": 2},
            "actor_rollout_ref": {
                "rollout": {"temperature": 1.0, "n": 1, "calculate_log_probs": False},
                "actor": {"ppo_mini_batch_size": 1},
            },
            "algorithm": {
                "adv_estimator": adv_estimator,
                "gamma": 1.0,
                "lam": 1.0,
                "norm_adv_by_std_in_grpo": True,
                "use_kl_in_reward": False,
                # old log-probs are the rollout's: no actor model needed to compute them
                "rollout_correction": {"bypass_mode": True},
            },
            "trainer": {"critic_warmup": 10**6},  # no actor update (it needs the model)
        }
    )
    trainer.use_critic = trainer.use_reference_policy = False
    trainer.parameter_sync_step = 1
    trainer.local_trigger_step = 0
    trainer.global_steps = 1
    trainer.replay_buffer = rollout
    # Rewards computed while rolling out (reward loop workers), so no colocated reward step.
    trainer.reward_loop_manager = SimpleNamespace(reward_loop_worker_handles=[])
    trainer.actor_rollout_wg = SimpleNamespace(_dispatch_info={"actor": list(range(DP_SIZE))})
    trainer.tokenizer = SimpleNamespace(eos_token_id=2)
    return trainer


def put_rollout(partition_id: str = "train") -> tuple[Rollout, dict[str, Any]]:
    """The example group (one session with an earlier tool-call output) and an all-failing group, as v1's
    agent loop writes them: the score on the last response token, the patch in the reward's extra info."""
    (example,) = load_group_file(EXAMPLE_GROUP)
    task = {"repo": example.task.repo, "base_commit": example.task.base_commit, "statement": "s"}
    sessions = [("graded", t.id, t.patch, float(bool(t.passed))) for t in example.trajectories]
    sessions += [("all-fail", f"f{i}", "", 0.0) for i in range(3)]
    two_outputs = "edits-tests"  # passing, ranked last: its earlier output must get the same new advantage
    keys, fields, tags, names = [], [], [], {}
    for session, (uid, name, patch, score) in enumerate(sessions):
        for index in range(2 if name == two_outputs else 1):
            length = 2 + (3 * len(keys)) % 5
            rm_scores = torch.zeros(length)
            rm_scores[-1] = score  # the agent loop copies the final reward to earlier outputs
            keys.append(f"{uid}_{session}_{index}")
            names[keys[-1]] = name
            fields.append(
                {
                    "uid": uid,
                    "session_id": session,
                    "prompts": torch.ones(3, dtype=torch.int64),
                    "responses": torch.ones(length, dtype=torch.int64),
                    "response_mask": torch.ones(length, dtype=torch.int64),
                    "rm_scores": rm_scores,
                    "rollout_log_probs": torch.zeros(length),
                    "extra_fields": {"reward_extra_info": {"patch": patch, "acc": score}},
                    "extra_info": dict(task),
                }
            )
            tags.append({"status": "success", "prompt_len": 3, "response_len": length, "seq_len": 3 + length})
    tq.kv_clear(keys=keys, partition_id=partition_id)
    tq.kv_batch_put(
        keys=keys, partition_id=partition_id, fields=list_of_dict_to_tensordict(fields), tags=tags
    )
    return Rollout(keys, tags, partition_id), {"example": example, "names": names, "two_outputs": two_outputs}


def read(keys: list[str], *fields: str) -> list[np.ndarray]:
    data = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=list(fields))
    return [data[f].to_padded_tensor(0).numpy() if data[f].is_nested else data[f].numpy() for f in fields]


class Recording(BatchGrader):
    """Records, at each submission, whether verl had computed the old log-probs of those rows yet."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.submitted: list[tuple[list[dict], bool]] = []

    def submit(self, rows: Any) -> int:
        keys = [row["trajectory_id"] for row in rows]
        old = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["old_log_probs"])
        # `in` on a TensorDict is not a field lookup
        self.submitted.append((list(rows), "old_log_probs" in old.keys()))  # noqa: SIM118
        return super().submit(rows)


def originals() -> list[Any]:
    """The verl functions gagar's hooks wrap (its private ones, version-checked)."""
    return [
        ray_trainer.extract_reward,
        ray_trainer.compute_data_metrics,
        trainer_base.PPOTrainer.__dict__["_balance_batch"],
    ]


@dataclass
class StepRun:
    """One v1 step by verl alone (`verl_estimator`), then the same rollout graded (`adv_estimator`)."""

    keys: list[str]
    info: dict[str, Any]
    base: np.ndarray
    """verl's advantages, (rows, response_length)."""
    mask: np.ndarray
    verl_metrics: dict
    grader: Recording
    steps: list
    metrics: dict
    batch: Any


@pytest.fixture
def run_step():
    """Runs :class:`StepRun`'s two steps; checks the hooks are gone afterwards."""

    def run(adv_estimator: str, verl_estimator: str = "grpo") -> StepRun:
        rollout, info = put_rollout()
        verl_metrics: dict = {}
        make_trainer(rollout, verl_estimator).step(verl_metrics, {})
        base, mask = read(rollout.batch.keys, "advantages", "response_mask")
        before = originals()
        grader = Recording(HeuristicGrader(), gagar_verl.VERL_MAPPING)
        steps: list = []
        detach = verl_plugin.attach(grader, deadline=60, on_step=steps.append)
        try:
            rollout, _ = put_rollout()
            metrics: dict = {}
            batch = make_trainer(rollout, adv_estimator).step(metrics, {})
        finally:
            detach()
            grader.close()
        assert originals() == before
        assert not grader._owner  # nothing left pending
        keys = list(rollout.batch.keys)
        return StepRun(keys, info, base, mask, verl_metrics, grader, steps, metrics, batch)

    return run


def test_v1_step_configured_by_name_submits_after_the_reward_and_redistributes_verls_grpo(run_step) -> None:
    run = run_step(verl_plugin.ADV_ESTIMATOR)
    keys, info, base, mask = run.keys, run.info, run.base, run.mask

    # Submitted once, at the balance step: after the reward (rows carry its pass flag and the patch from its
    # extra info), before old log-probs; one row per session (its final output), no padding rows.
    ((rows, had_old_log_probs),) = run.grader.submitted
    assert not had_old_log_probs
    names, example = info["names"], info["example"]
    earlier_key = next(k for k in keys if names[k] == info["two_outputs"] and k.endswith("_0"))
    finals = [k for k in keys if k != earlier_key]
    assert sorted(row["trajectory_id"] for row in rows) == sorted(finals)
    by_name = {t.id: t for t in example.trajectories}
    for row in rows:
        t = by_name.get(names[row["trajectory_id"]])
        assert row["passed"] == bool(t and t.passed)
        assert row["patch"] == (t.patch if t else "")
        assert row["extra_info"]["repo"] == example.task.repo
    assert len(run.batch) == len(keys) + 1  # verl's padding row went through the step, ungraded

    # The graded advantages: verl's GRPO (estimator "grpo", which ranks each session's final output),
    # redistributed by the heuristic grader's weights over the final outputs.
    (step,) = run.steps
    weights = grade_group_sync(example, HeuristicGrader()).weights
    final = [keys.index(k) for k in finals]
    uids = np.array([k.rsplit("_", 2)[0] for k in finals], dtype=object)
    passed = np.array([bool(by_name.get(names[k]) and by_name[names[k]].passed) for k in finals])
    w = np.array([weights.get(names[k], 1.0) for k in finals])
    expected, reasons = redistribute_batch(base[final], uids, passed, w, mask[final], preserve="token")
    (got,) = read(keys, "advantages")
    np.testing.assert_allclose(got[final], expected, rtol=1e-5, atol=1e-7)
    assert not np.allclose(expected, base[final])
    assert set(reasons) == {"all-fail"}  # the graded group changed
    # The session's earlier output gets its final output's new advantage, as verl broadcasts it.
    earlier = keys.index(earlier_key)
    twin = keys.index(next(k for k in finals if names[k] == info["two_outputs"]))
    np.testing.assert_allclose(got[earlier][mask[earlier] > 0], got[twin][0], rtol=1e-6)
    assert got[earlier][0] != base[earlier][0]
    (returns,) = read(keys, "returns")
    np.testing.assert_allclose(returns, got)

    # Metrics in v1's step metrics (aggregated over its local steps and logged by fit), next to verl's own.
    assert run.metrics["gagar/graded"] == run.metrics["gagar/skipped"] == 0.5
    assert step.metrics["gagar/groups"] == run.metrics["gagar/groups"] == 2
    assert set(run.verl_metrics) < set(run.metrics)


def test_v1_other_estimators_are_untouched_and_the_submission_discarded(run_step) -> None:
    run = run_step("rloo", verl_estimator="rloo")
    (got,) = read(run.keys, "advantages")
    np.testing.assert_array_equal(got, run.base)  # RLOO untouched
    assert len(run.grader.submitted) == 1 and run.steps == []  # submitted, never collected, discarded
    assert not any(name.startswith("gagar/") for name in run.metrics)


def test_v1_validation_is_not_graded() -> None:
    grader = Recording(HeuristicGrader(), gagar_verl.VERL_MAPPING)
    detach = verl_plugin.attach(grader, deadline=60)
    try:
        # A validation rollout, were a trainer to balance it: not submitted.
        val, _ = put_rollout("val")
        make_trainer(val)._balance_batch(val.sample(1, "val", 2)[0], metrics={})
    finally:
        detach()
        grader.close()
    assert grader.submitted == []
    # verl's v1 validation neither balances nor computes advantages, so it never reaches the hooks.
    validate = inspect.getsource(trainer_base.PPOTrainer._validate)
    assert "_balance_batch" not in validate and "_compute_advantage" not in validate


def test_ray_setup_hook_registers_both_names_in_verls_actors() -> None:
    def names_in_a_ray_worker() -> tuple[bool, str, str]:
        # Nested, so Ray ships it by value: the worker imports nothing of this test module or of gagar.
        import sys

        from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
        from verl.trainer.ppo import core_algos

        hooked = "grader.integrations.verl.plugin" in sys.modules
        estimator = core_algos.get_adv_estimator_fn("gagar_grpo")
        manager = get_reward_manager_cls("gagar")
        return (
            hooked,
            f"{estimator.__module__}.{estimator.__name__}",
            f"{manager.__module__}.{manager.__name__}",
        )

    assert ray.get(ray.remote(names_in_a_ray_worker).remote()) == (
        True,
        "grader.integrations.verl.plugin.gagar_grpo_advantage",
        "grader.integrations.verl.plugin.GagarRewardManager",
    )
