"""OpenRLHF: redistribute the (n_prompts, n_samples) matrix of its group_norm advantage estimator.

OpenRLHF reshapes rewards to (n_prompts, n_samples_per_prompt) and normalizes each row; gagar then
redistributes each row's passing entries. OpenRLHF itself needs GPUs, so group_norm here is gagar's
reproduction of OpenRLHF's formula. Run: python examples/integrations/openrlhf_group_norm.py (needs torch).
"""

from __future__ import annotations

import torch

from grader.integrations.openrlhf import group_norm, redistribute_group_norm

n_prompts, n_samples_per_prompt = 3, 4
rewards = torch.tensor([[1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
# One weight per sample from the grader (1.0 where not graded): prompt 0's second patch ranked last.
weights = torch.tensor([[1.0, 0.5, 1.0, 0.75], [1.0, 1.0, 0.6, 1.0], [1.0, 1.0, 1.0, 1.0]])

advantages = group_norm(rewards)
after, unchanged = redistribute_group_norm(advantages, rewards >= 1, weights)
torch.set_printoptions(precision=4, sci_mode=False)
print(f"rewards {tuple(rewards.shape)} (n_prompts, n_samples_per_prompt):\n{rewards}")
print(f"group_norm advantages before:\n{advantages}")
print(f"after redistribution:\n{after}")
print(f"rows left unchanged: {unchanged}")
