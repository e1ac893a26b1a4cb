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

Grading during the rollout (:class:`SlimeGrading`): with ``--group-rm``, slime calls the
``--custom-rm-path`` function once per group, as soon as the group's samples are generated. The function
:meth:`SlimeGrading.group_rm` builds computes the rewards with your reward function, submits the group to a
:class:`~grader.integrations.batch.BatchGrader` (it grades in the background while slime generates the other
groups) and returns the rewards; :meth:`SlimeGrading.reward_post_process` collects the weights for all
samples, waiting at most ``deadline`` seconds, and redistributes slime's GRPO rewards. Rows come from
:func:`slime_rows` (:data:`SLIME_MAPPING`: the patch in ``sample.metadata["patch"]``, the task in the
metadata's ``repo``, ``base_commit``, ``statement``, ``image``). ``preserve`` defaults to ``token``, what
slime's default per-token loss aggregation needs; ``sequence`` for ``--calculate-per-token-loss`` off
(a per-sample mean). The last step's ``StepWeights`` (metrics included) is kept in ``last_step`` for your
logger: slime's post-process hook has no metrics channel.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from grader.integrations.batch import BatchGrader, StepWeights
from grader.integrations.deadlines import checked_seconds
from grader.integrations.rows import RowMapping, task_paths
from grader.integrations.tensors import redistribute_advantages
from grader.integrations.weights import WeightsFn, call_weights_fn
from grader.redistribution.redistribute import Preserve, is_mixed_group

__all__ = [
    "SLIME_MAPPING",
    "WEIGHT_KEY",
    "SlimeGrading",
    "slime_rows",
    "keep_mixed_groups",
    "make_dynamic_filter",
    "make_reward_post_process",
    "metadata_weights",
    "reward_post_process",
    "slime_rewards",
]

WEIGHT_KEY = "gagar_weight"
GROUP_KEY = "gagar_group"
TRAJECTORY_KEY = "gagar_trajectory"
SLIME_MAPPING = RowMapping(**task_paths("metadata"))
"""The default mapping for :func:`slime_rows`: patch and task in each sample's metadata."""
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


def slime_rows(samples: list[Any], rewards: list[float], pass_threshold: float = 1.0) -> list[dict[str, Any]]:
    """slime samples as rows for a :class:`~grader.integrations.batch.BatchGrader`, one per sample.

    A row holds ``metadata``, ``prompt``, ``response`` and ``label`` as the sample has them, ``patch``
    (``metadata["patch"]``), ``group_id`` and ``trajectory_id`` (``metadata["gagar_group"]`` and
    ``["gagar_trajectory"]``, set by :meth:`SlimeGrading.group_rm`; else the sample's ``group_index`` and
    ``index``, else its position),
    ``passed`` (its reward ``>= pass_threshold``) and ``response_length``.

    Args:
        samples: slime ``Sample`` objects (only these attributes are read, each optional but metadata).
        rewards: each sample's reward.
        pass_threshold: the reward a passing sample reaches.
    Returns:
        one dict per sample, in order.
    """
    rows = []
    for position, (sample, reward) in enumerate(zip(samples, rewards, strict=True)):
        metadata = sample.metadata if isinstance(getattr(sample, "metadata", None), dict) else {}
        index = getattr(sample, "index", None)
        rows.append(
            {
                "metadata": metadata,
                "prompt": getattr(sample, "prompt", None),
                "response": getattr(sample, "response", None),
                "label": getattr(sample, "label", None),
                "patch": metadata.get("patch"),
                "group_id": metadata.get(GROUP_KEY, getattr(sample, "group_index", None)),
                "trajectory_id": str(metadata.get(TRAJECTORY_KEY, index if index is not None else position)),
                "passed": float(reward) >= pass_threshold,
                "response_length": getattr(sample, "response_length", None),
            }
        )
    return rows


class SlimeGrading:
    """A ``--group-rm`` reward function that submits each group, and the post-process that collects.

    Args:
        grader: the batch grader (its mapping reads :func:`slime_rows`; :data:`SLIME_MAPPING` by default).
        reward_fn: your group reward ``(args, samples) -> rewards`` (a coroutine function or a plain one).
        deadline: seconds the post-process waits for grading at most (None: the grader's own default;
            ``math.inf``: every group).
        pass_threshold: the reward a passing sample reaches.
        preserve: ``token`` (slime's per-token loss) or ``sequence``.
    Raises:
        ValueError, TypeError: the deadline is NaN, or not a number (refused here, never in a step).
    """

    def __init__(
        self,
        grader: BatchGrader,
        reward_fn: Callable[[Any, list[Any]], Any],
        deadline: float | None = None,
        pass_threshold: float = 1.0,
        preserve: Preserve = "token",
    ) -> None:
        self.grader = grader
        self.reward_fn = reward_fn
        self.deadline = checked_seconds(deadline, "deadline")
        self.pass_threshold = pass_threshold
        self.preserve: Preserve = preserve
        self.last_step: StepWeights | None = None
        self._groups = itertools.count()
        self.reward_post_process = make_reward_post_process(self._weights, pass_threshold, preserve)
        """The ``--custom-reward-post-process-path`` function: collect, then redistribute slime's rewards."""

    async def group_rm(self, args: Any, samples: list[Any]) -> list[float]:
        """The ``--custom-rm-path`` function under ``--group-rm``: rewards now, grading in the background.

        Args:
            args: slime's arguments.
            samples: one group's samples.
        Returns:
            the rewards of `reward_fn`, one per sample.
        """
        rewards = self.reward_fn(args, samples)
        if hasattr(rewards, "__await__"):
            rewards = await rewards
        rewards = [float(r) for r in rewards]
        group = f"group-{next(self._groups)}"
        for position, sample in enumerate(samples):
            if not isinstance(getattr(sample, "metadata", None), dict):
                sample.metadata = {}
            sample.metadata[GROUP_KEY], sample.metadata[TRAJECTORY_KEY] = group, str(position)
        self.grader.submit(slime_rows(samples, rewards, self.pass_threshold))
        return rewards

    def _weights(self, group_ids: np.ndarray, passed: np.ndarray, samples: list[Any]) -> np.ndarray:
        rewards = [1.0 if p else 0.0 for p in passed]  # only the pass flag matters to the rows' keys
        rows = slime_rows(samples, rewards, 0.5)
        submitted = [i for i, row in enumerate(rows) if (row["metadata"] or {}).get(GROUP_KEY) is not None]
        weights = np.ones(len(rows))
        if submitted:
            self.last_step = self.grader.weights([rows[i] for i in submitted], self.deadline)
            weights[submitted] = self.last_step.weights
        self.grader.discard_pending()  # groups slime's filters dropped were submitted, never collected
        return weights
