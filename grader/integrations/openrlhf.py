"""OpenRLHF: redistribute on the ``(n_prompts, n_samples)`` matrix its ``group_norm`` estimator produces.

In OpenRLHF (``openrlhf/trainer/ppo_utils/experience_maker.py``, ``compute_advantages_and_returns``) the
rewards of all experiences are put back in prompt order (``experience.index``), reshaped to
``(-1, args.rollout.n_samples_per_prompt)`` and, for ``--advantage_estimator group_norm``, normalized per row
as ``(r - mean) / (std + 1e-9)`` (torch's unbiased std). Each row's value then becomes the response's
per-token advantage (a cumulative return with gamma 1 of a reward on the last action token), so with the KL
as a loss term (``--use_kl_loss``, how OpenRLHF runs GRPO) ``experience.advantages`` is that value on every
action token.

Two entry points: :func:`redistribute_group_norm` acts on the matrix itself, and
:func:`redistribute_experiences` on the experiences after ``compute_advantages_and_returns`` (group
``index // n_samples_per_prompt``, the same rows the reshape makes), for a subclass of OpenRLHF's experience
maker that calls it after ``super()``. OpenRLHF needs GPUs (deepspeed, flash-attn) and does not install on
CPU, so :func:`group_norm` reproduces its normalization and the tests check against that reproduction.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from grader.integrations.tensors import redistribute_advantages, to_numpy
from grader.redistribution.redistribute import Preserve

__all__ = ["group_norm", "redistribute_experiences", "redistribute_group_norm"]

GROUP_NORM_EPS = 1e-9


def group_norm(rewards: Any) -> Any:
    """OpenRLHF's ``group_norm`` (reproduced): per row ``(r - mean) / (unbiased std + 1e-9)``, torch."""
    return (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + GROUP_NORM_EPS)


def redistribute_group_norm(
    advantages: Any,
    passed: Any,
    weights: Any,
    response_lengths: Any = None,
    preserve: Preserve = "sequence",
) -> tuple[Any, dict[Hashable, str]]:
    """Redistribute a ``(n_prompts, n_samples)`` matrix of group-normalized advantages, row by row.

    ``passed`` and ``weights`` have the same shape; ``response_lengths`` too, needed only for
    ``preserve="token"``. Returns the same type, dtype, device and shape, and ``{row: reason}`` for the
    rows left unchanged.

    Raises:
        ValueError: ``advantages`` is not 2-D, ``preserve="token"`` comes without ``response_lengths``, or
            an argument is off as :func:`grader.redistribution.redistribute.redistribute_batch` refuses it.
    """
    shape = tuple(advantages.shape)
    if len(shape) != 2:
        raise ValueError(f"advantages must be (n_prompts, n_samples), got shape {shape}")
    n_prompts, n_samples = shape
    flat = advantages.reshape(-1)
    group_ids = np.repeat(np.arange(n_prompts), n_samples)
    mask = None
    if preserve == "token":
        if response_lengths is None:
            raise ValueError('preserve="token" needs response_lengths')
        lengths = to_numpy(response_lengths).reshape(-1).astype(np.int64)
        mask = np.arange(max(1, int(lengths.max()))) < lengths[:, None]
    new, reasons = redistribute_advantages(
        flat,
        group_ids,
        to_numpy(passed).reshape(-1),
        to_numpy(weights).reshape(-1),
        mask,
        preserve,
    )
    return new.reshape(shape), reasons


def redistribute_experiences(
    experiences: Sequence[Any],
    n_samples_per_prompt: int,
    passed: Any,
    weights: Any,
    preserve: Preserve = "sequence",
) -> dict[Hashable, str]:
    """Redistribute ``experience.advantages`` (and ``returns``) of OpenRLHF experiences in place.

    ``passed`` and ``weights`` are flat, in the experiences' concatenated order (the order of
    ``torch.cat([e.rewards for e in experiences])``). Groups are ``experience.index // n_samples_per_prompt``.
    Rows are rescaled whole, so each stays a constant over its action tokens.
    """
    import torch

    advantages = [e.advantages for e in experiences]
    width = max(a.shape[1] for a in advantages)
    # Experiences are micro-batches padded to their own length; pad to one width to redistribute at once.
    pad = torch.nn.functional.pad
    padded = torch.cat([pad(a, (0, width - a.shape[1])) for a in advantages])
    mask = torch.cat([pad(e.action_mask, (0, width - e.action_mask.shape[1])) for e in experiences])
    index = np.concatenate([np.asarray(e.index) for e in experiences])
    new, reasons = redistribute_advantages(
        padded, index // n_samples_per_prompt, passed, weights, response_mask=mask.float(), preserve=preserve
    )
    start = 0
    for experience, rows in zip(experiences, advantages, strict=True):
        end = start + rows.shape[0]
        experience.advantages = new[start:end, : rows.shape[1]]
        if getattr(experience, "returns", None) is not None:
            # group_norm's returns are its advantages (OpenRLHF clones one from the other).
            experience.returns = experience.advantages.clone()
        start = end
    return reasons
