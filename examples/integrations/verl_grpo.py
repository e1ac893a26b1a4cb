"""verl: GAGAR turned on in the trainer's config, grading inside the step while verl computes log-probs.

`grader.integrations.verl.plugin` registers, through verl's own registries, the advantage estimator
`gagar_grpo` (verl's GRPO, then the grader's weights redistributed) and the reward manager `gagar` (verl's
`naive` one that also reports the pass flag and the patch). A training run selects them by name:

    python -m verl.trainer.main_ppo algorithm.adv_estimator=gagar_grpo reward.reward_manager.name=gagar \
        +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=grader.integrations.verl.plugin.register

and `plugin.attach(BatchGrader(...))` in the trainer process submits each step's rows as soon as the
rewards are known. Here the step of verl's legacy RayPPOTrainer.fit runs from the reward on with verl's own
functions and its own config (composed from verl's hydra files with the overrides above): the batch is the
bundled example group (examples/inventory_group.json) as the reward step leaves it, the log-prob step is
stood in by a 1 s sleep (no model here). tests/integrations/test_integrations_verl_v1.py runs the v1 trainer's
step. Run: python examples/integrations/verl_grpo.py (needs verl).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import verl
from hydra import compose, initialize_config_dir
from verl.trainer.ppo import ray_trainer

from grader.graders.heuristic import HeuristicGrader
from grader.groups.formats import load_group_file
from grader.integrations.batch import BatchGrader
from grader.integrations.verl import VERL_MAPPING, plugin
from grader.servers.scripted import verl_reward_batch

with initialize_config_dir(os.path.join(os.path.dirname(verl.__file__), "trainer/config"), version_base=None):
    config = compose(
        "ppo_trainer", overrides=["algorithm.adv_estimator=gagar_grpo", "reward.reward_manager.name=gagar"]
    )

(example,) = load_group_file(Path(__file__).resolve().parents[1] / "inventory_group.json")
trajectories = example.trajectories
lengths = [12, 5, 9, 3, 7, 11, 2][: len(trajectories)]
task = {
    "repo": example.task.repo,
    "base_commit": example.task.base_commit,
    "statement": example.task.statement,
}
# The batch as verl's reward step leaves it: the task in extra_info, the patch and pass flag (acc) returned
# by the reward function, the score on each response's last token.
batch = verl_reward_batch(
    group_ids=["prompt-0"] * len(trajectories),
    patches=[t.patch for t in trajectories],
    scores=[float(bool(t.passed)) for t in trajectories],
    lengths=lengths,
    task=task,
    response_length=12,
)

grader = BatchGrader(HeuristicGrader(), VERL_MAPPING)
detach = plugin.attach(grader, deadline=30.0)  # preserve="token": verl's default loss is token-mean
try:
    reward_tensor, _ = ray_trainer.extract_reward(batch)  # submits: grading starts in the background
    time.sleep(1.0)  # verl computes old and reference log-probs here
    batch.batch["token_level_scores"] = reward_tensor
    batch.batch["token_level_rewards"] = reward_tensor
    before = ray_trainer.compute_advantage(batch, adv_estimator="grpo").batch["advantages"].clone()
    batch = ray_trainer.compute_advantage(  # collects and redistributes, as fit calls it
        batch, adv_estimator=config.algorithm.adv_estimator, config=config.algorithm
    )
    metrics = ray_trainer.compute_data_metrics(batch=batch, use_critic=False)
finally:
    detach()
    grader.close()

after = batch.batch["advantages"]
print(f"adv_estimator={config.algorithm.adv_estimator} reward_manager={config.reward.reward_manager.name}")
print(f"advantages: shape {tuple(after.shape)} (bs, response_length); first response token:")
print("trajectory        passed tokens  before   after")
for row, t in enumerate(trajectories):
    print(
        f"{t.id:17} {bool(t.passed)!s:6} {lengths[row]:6}  "
        f"{before[row, 0].item():+.4f} {after[row, 0].item():+.4f}"
    )
print("gagar metrics in verl's dict:", {k: round(v, 3) for k, v in metrics.items() if k.startswith("gagar/")})
