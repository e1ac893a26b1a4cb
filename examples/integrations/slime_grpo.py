"""slime: the reward post-process on slime's sample shapes, then grading during the rollout.

slime is not on PyPI, so `grader.servers.scripted` stands in a minimal Sample (the reward, the response
length,
the metadata that a --group-rm reward function filled with gagar weights) and slime's argument namespace.
The second part grades during the rollout: `SlimeGrading.group_rm` (the --custom-rm-path function under
--group-rm) submits each group of the bundled example's patches to the real heuristic grader as it is
generated, and `SlimeGrading.reward_post_process` collects the weights. Run: python
examples/integrations/slime_grpo.py (needs torch).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from grader.graders.heuristic import HeuristicGrader
from grader.groups.formats import load_group_file
from grader.integrations.batch import BatchGrader
from grader.integrations.slime import (
    SLIME_MAPPING,
    WEIGHT_KEY,
    SlimeGrading,
    keep_mixed_groups,
    reward_post_process,
)
from grader.servers.scripted import SlimeSample as Sample
from grader.servers.scripted import slime_args

args = slime_args()
rewards = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
weights = [1.0, 0.5, 1.0, 0.75, 1.0, 1.0, 1.0, 1.0]
samples = [
    Sample(r, response_length=100 + 10 * i, metadata={WEIGHT_KEY: w})
    for i, (r, w) in enumerate(zip(rewards, weights, strict=True))
]

groups = [samples[:4], samples[4:]]
print("dynamic sampling filter:", [keep_mixed_groups(args, group) for group in groups])
baseline = [Sample(s.reward, s.response_length) for s in samples]  # no weights: slime's own rewards
_, before = reward_post_process(args, baseline)
raw, after = reward_post_process(args, samples)
print("sample  raw  weight  before   after")
for i in range(len(samples)):
    print(f"{i:6} {raw[i]:4.1f} {weights[i]:7.2f} {before[i]:+.4f} {after[i]:+.4f}")

# Grading in the rollout: the group's patches and task ride in each sample's metadata.
(example,) = load_group_file(Path(__file__).resolve().parents[1] / "inventory_group.json")
task = {"repo": example.task.repo, "base_commit": example.task.base_commit}
ids = ["clean", "edits-tests", "wrong-value", "leftover-script"]
group = [
    Sample(0.0, response_length=40 + 15 * k, metadata={"patch": example.trajectory(t).patch, **task})
    for k, t in enumerate(ids)
]


def run_tests(args: Any, samples: list[Sample]) -> list[float]:
    """Stand-in for running the tests: the example's recorded outcome of each patch."""
    outcome = {t.patch: float(bool(t.passed)) for t in example.trajectories}
    return [outcome[s.metadata["patch"]] for s in samples]


grading = SlimeGrading(BatchGrader(HeuristicGrader(), SLIME_MAPPING), run_tests, deadline=30.0)
for sample, reward in zip(group, asyncio.run(grading.group_rm(args, group)), strict=True):
    sample.reward = reward  # slime stores the group's rewards on its samples
args.rollout_batch_size = 1
_, before = reward_post_process(args, [Sample(s.reward, s.response_length) for s in group])
_, after = grading.reward_post_process(args, group)
step = grading.last_step
assert step is not None
print("graded during the rollout (preserve=token): candidate        weight  before   after")
for i, t in enumerate(ids):
    print(f"{'':46}{t:16} {step.weights[i]:6.3f} {before[i]:+.4f} {after[i]:+.4f}")
grading.grader.close()
