"""verl: GRPO advantages from verl's own compute_advantage, redistributed by gagar weights.

A batch as verl's reward step leaves it: 2 prompts (uid) x 4 responses, response_length 8, the test reward
on each response's last token. Weights come from finished gagar results (results.jsonl), looked up by
(uid, trajectory id). Run: python examples/integrations/verl_grpo.py (needs verl and torch).
"""

from __future__ import annotations

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo import ray_trainer

from grader.integrations import weights_from_results
from grader.integrations.verl import install
from grader.models import GroupResult

RESPONSE_LENGTH = 8
uids = np.array(["task-1"] * 4 + ["task-2"] * 4, dtype=object)
trajectory_ids = ["t0", "t1", "t2", "t3"] * 2
scores = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
lengths = [8, 5, 7, 3, 6, 8, 2, 4]

mask = torch.zeros(8, RESPONSE_LENGTH)
token_scores = torch.zeros(8, RESPONSE_LENGTH)
for row, (score, length) in enumerate(zip(scores, lengths, strict=True)):
    mask[row, :length] = 1
    token_scores[row, length - 1] = score


def batch() -> DataProto:
    return DataProto.from_dict(
        tensors={
            "response_mask": mask,
            "token_level_scores": token_scores,
            "token_level_rewards": token_scores.clone(),
        },
        non_tensors={"uid": uids, "trajectory_id": np.array(trajectory_ids, dtype=object)},
    )


# What `gagar grade` wrote for these groups: task-1 graded (t1 ranked below t0 and t3), task-2 too.
results = [
    GroupResult(
        group_id="task-1", status="graded", grader="heuristic", weights={"t0": 1.0, "t3": 1.0, "t1": 0.5}
    ),
    GroupResult(group_id="task-2", status="graded", grader="heuristic", weights={"t0": 1.0, "t3": 0.5}),
]


def weights_fn(group_ids: np.ndarray, passed: np.ndarray, data: DataProto) -> np.ndarray:
    return weights_from_results(
        results, list(data.non_tensor_batch["trajectory_id"]), group_ids=list(group_ids)
    )


before = ray_trainer.compute_advantage(batch(), adv_estimator="grpo").batch["advantages"]
uninstall = install(weights_fn)
after = ray_trainer.compute_advantage(batch(), adv_estimator="grpo").batch["advantages"]
uninstall()

print(f"advantages: shape {tuple(after.shape)} {after.dtype} (bs, response_length)")
print("uid      traj  passed  before   after    (first response token)")
for row in range(8):
    print(
        f"{uids[row]:8} {trajectory_ids[row]:5} {scores[row] >= 1!s:7} "
        f"{before[row, 0].item():+.4f}  {after[row, 0].item():+.4f}"
    )
for uid in ("task-1", "task-2"):
    rows = [i for i in range(8) if uids[i] == uid and scores[i] >= 1]
    print(f"{uid}: passing sum {before[rows, 0].sum().item():.4f} -> {after[rows, 0].sum().item():.4f}")
