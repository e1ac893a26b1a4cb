"""verl: grading inside the training step, overlapping verl's log-prob computation.

`install_grader` wraps three functions of verl's RayPPOTrainer step: the reward step (`extract_reward`)
submits the batch to a background grader, verl then computes its log-probs while the group is graded, and
`compute_advantage` collects the weights (waiting at most the deadline) and redistributes verl's own GRPO
advantages; `compute_data_metrics` adds the grader's `gagar/...` metrics to verl's metrics dict. Here the
batch is the bundled example group (examples/inventory_group.json) as the reward step leaves it: the task
in each dataset row's `extra_info`, the patch and pass flag returned by the reward function. The log-prob
step is stood in by a 1 s sleep (no model here). The same `install_grader` call hooks verl's v1 trainer
(`verl.trainer.ppo.v1`), whose step keeps its batch in TransferQueue; tests/test_integrations_verl_v1.py
runs that step. Run: python examples/integrations/verl_grpo.py (needs verl).
"""

from __future__ import annotations

import time
from pathlib import Path

from verl.trainer.ppo import ray_trainer

from grader.formats import load_group_file
from grader.graders.heuristic import HeuristicGrader
from grader.integrations.batch import BatchGrader
from grader.integrations.verl import VERL_MAPPING, install_grader
from grader.testing import verl_reward_batch

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
uninstall = install_grader(grader, deadline=30.0)  # preserve="token": verl's default loss is token-mean
try:
    reward_tensor, _ = ray_trainer.extract_reward(batch)  # submits: grading starts in the background
    time.sleep(1.0)  # verl computes old and reference log-probs here
    batch.batch["token_level_scores"] = reward_tensor
    batch.batch["token_level_rewards"] = reward_tensor
    before = ray_trainer.compute_advantage.__gagar_original__(batch, adv_estimator="grpo").batch["advantages"]
    before = before.clone()
    batch = ray_trainer.compute_advantage(batch, adv_estimator="grpo")  # collects and redistributes
    metrics = ray_trainer.compute_data_metrics(batch=batch, use_critic=False)
finally:
    uninstall()
    grader.close()

after = batch.batch["advantages"]
print(f"advantages: shape {tuple(after.shape)} (bs, response_length); first response token:")
print("trajectory        passed tokens  before   after")
for row, t in enumerate(trajectories):
    print(
        f"{t.id:17} {bool(t.passed)!s:6} {lengths[row]:6}  "
        f"{before[row, 0].item():+.4f} {after[row, 0].item():+.4f}"
    )
print("gagar metrics in verl's dict:", {k: round(v, 3) for k, v in metrics.items() if k.startswith("gagar/")})
