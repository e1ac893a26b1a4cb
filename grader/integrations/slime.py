"""slime: a reward post-process that redistributes after slime's GRPO normalization, and a mixed-group filter.

slime turns rewards into GRPO advantages in ``RolloutManager._post_process_rewards(samples)``
(``slime/ray/rollout.py``): unless ``--custom-reward-post-process-path`` names a function
``(args, samples) -> (raw_rewards, rewards)``, it reshapes the rewards to ``(-1, n_samples_per_prompt)``
(one row per prompt; when the count is not ``n_samples_per_prompt * rollout_batch_size``, one row in all),
subtracts the row mean and, for grpo/gspo/cispo with ``--grpo-std-normalization``, divides by the unbiased
row std + 1e-6, in float32 torch. The resulting ``rewards`` are what the loss broadcasts over the response
tokens. :func:`make_reward_post_process` builds such a function that computes exactly that
(:func:`slime_rewards`, a reproduction of slime's code: slime is not on PyPI, the ``slime`` package there is
an unrelated project) and then redistributes the rows' passing entries.

``--dynamic-sampling-filter-path`` takes ``(args, samples, **kwargs) -> DynamicFilterOutput | bool`` per
group; :func:`keep_mixed_groups` keeps the groups with both a passing and a failing sample.

Wire them with ``--custom-reward-post-process-path grader.integrations.slime.reward_post_process`` (weights
read from ``sample.metadata["gagar_weight"]``, e.g. set by a ``--group-rm`` reward function that grades the
group) or a module of your own holding ``make_reward_post_process(weights_fn)``, and
``--dynamic-sampling-filter-path grader.integrations.slime.keep_mixed_groups``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from grader.integrations.tensors import redistribute_advantages
from grader.integrations.weights import WeightsFn, call_weights_fn
from grader.redistribute import Preserve, is_mixed_group

__all__ = [
    "WEIGHT_KEY",
    "keep_mixed_groups",
    "make_dynamic_filter",
    "make_reward_post_process",
    "metadata_weights",
    "reward_post_process",
    "slime_rewards",
]

WEIGHT_KEY = "gagar_weight"
# The estimators whose slime rewards are group-relative advantages with a positive passing value.
_STD_ESTIMATORS = ("grpo", "gspo", "cispo")


def _flat(samples: list[Any]) -> list[Any]:
    while samples and isinstance(samples[0], list):
        samples = list(itertools.chain.from_iterable(samples))
    return samples


def _reward(sample: Any, args: Any) -> float:
    return float(sample.get_reward_value(args))


def slime_rewards(args: Any, raw_rewards: list[float]) -> tuple[Any, bool]:
    """slime's default reward post-processing (reproduced): the ``(groups, n)`` float32 torch matrix, and
    whether it is a GRPO-style normalization that redistribution applies to.

    Estimators other than grpo/gspo/cispo (or ``rewards_normalization`` off) return the raw rewards as one
    row and ``False``; reinforce_plus_plus_baseline and rloo are mean-centred as in slime but not marked
    for redistribution.
    """
    import torch

    rewards = torch.tensor(raw_rewards, dtype=torch.float)
    estimator = args.advantage_estimator
    centred = (*_STD_ESTIMATORS, "reinforce_plus_plus_baseline", "rloo")
    if estimator not in centred or not args.rewards_normalization:
        return rewards.view(1, -1), False
    if rewards.shape[-1] == args.n_samples_per_prompt * args.rollout_batch_size:
        rewards = rewards.reshape(-1, args.n_samples_per_prompt)
    else:
        rewards = rewards.view(-1, rewards.shape[-1])
    rewards = rewards - rewards.mean(dim=-1, keepdim=True)
    if estimator in _STD_ESTIMATORS and args.grpo_std_normalization:
        rewards = rewards / (rewards.std(dim=-1, keepdim=True) + 1e-6)
    if estimator == "rloo":
        size = rewards.shape[-1]
        rewards = torch.zeros_like(rewards) if size == 1 else rewards * size / (size - 1)
    return rewards, estimator in _STD_ESTIMATORS


def metadata_weights(group_ids: np.ndarray, passed: np.ndarray, samples: list[Any]) -> np.ndarray:
    """Weights stored on the samples: ``sample.metadata["gagar_weight"]``, 1.0 where absent."""
    return np.array([float((s.metadata or {}).get(WEIGHT_KEY, 1.0)) for s in samples])


def make_reward_post_process(
    weights_fn: WeightsFn = metadata_weights, pass_threshold: float = 1.0, preserve: Preserve = "sequence"
) -> Callable[[Any, list[Any]], tuple[list[float], list[float]]]:
    """A ``--custom-reward-post-process-path`` function: slime's rewards, then redistribution.

    ``weights_fn(group_ids, passed, samples)`` gets the row of each sample, its pass flag (raw reward
    ``>= pass_threshold``) and the samples. With uniform weights it returns exactly slime's rewards.
    """

    def post_process(args: Any, samples: list[Any]) -> tuple[list[float], list[float]]:
        samples = _flat(samples)
        raw_rewards = [_reward(s, args) for s in samples]
        matrix, redistribute = slime_rewards(args, raw_rewards)
        if not redistribute:
            return raw_rewards, matrix.flatten().tolist()
        n_groups, size = matrix.shape
        group_ids = np.repeat(np.arange(n_groups), size)
        passed = np.array(raw_rewards) >= pass_threshold
        weights = call_weights_fn(weights_fn, group_ids, passed, samples)
        mask = None
        if preserve == "token":
            # Token mode needs response lengths; redistribute_batch takes them as a (N, T) mask.
            lengths = np.array([s.response_length for s in samples], dtype=np.float64)
            mask = np.arange(max(1, int(lengths.max()))) < lengths[:, None]
        new, _ = redistribute_advantages(matrix.flatten(), group_ids, passed, weights, mask, preserve)
        return raw_rewards, new.tolist()

    return post_process


reward_post_process = make_reward_post_process()


def make_dynamic_filter(pass_threshold: float = 1.0) -> Callable[..., Any]:
    """A ``--dynamic-sampling-filter-path`` function keeping groups with a pass/fail contrast."""

    def keep(args: Any, samples: list[Any], **kwargs: Any) -> Any:
        # Agent fan-out stores one list of reward-identical fragments per trajectory: its first stands for it.
        firsts = [s[0] if isinstance(s, list) else s for s in samples]
        passed = np.array([_reward(s, args) >= pass_threshold for s in firsts])
        mixed = is_mixed_group(passed)
        reason = None if mixed else ("all_passed" if passed.all() else "none_passed")
        try:
            from slime.rollout.filter_hub.base_types import DynamicFilterOutput
        except ImportError:  # outside slime (tests, examples): the plain bool slime also accepts
            return mixed
        return DynamicFilterOutput(keep=mixed, reason=reason)

    return keep


keep_mixed_groups = make_dynamic_filter()
