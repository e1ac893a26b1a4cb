"""slime: the --custom-reward-post-process-path function on slime's sample shapes.

slime is not on PyPI, so this stands in a minimal Sample (the reward, the response length, the metadata
that a --group-rm reward function filled with gagar weights) and slime's argument namespace.
Run: python examples/integrations/slime_grpo.py (needs torch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from grader.integrations.slime import WEIGHT_KEY, keep_mixed_groups, reward_post_process


@dataclass
class Sample:
    reward: float
    response_length: int
    metadata: dict[str, Any] = field(default_factory=dict)

    def get_reward_value(self, args: Any) -> float:
        return self.reward


args = SimpleNamespace(
    advantage_estimator="grpo",
    rewards_normalization=True,
    grpo_std_normalization=True,
    n_samples_per_prompt=4,
    rollout_batch_size=2,
)
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
