"""Where an adapter's per-sample weights come from: a callable the user supplies, or finished GroupResults.

Every adapter asks the same question, "what weight does each sample of this batch get?", and answers it with
one of two sources. A *weights function* ``weights_fn(group_ids, passed, batch) -> (N,) weights`` grades
live (it may call :func:`grader.grade_group_sync`, a remote grader, anything); ``batch`` is whatever the
framework holds (a verl ``DataProto``, TRL's prompts and completions, slime's samples), so the function can
find the trajectories. :func:`weights_from_results` reads weights off results graded earlier (``gagar
grade``'s results.jsonl). Samples that were not graded get 1.0, which redistribution treats as "no
preference" (a group whose passing weights are all 1.0 is left unchanged).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from grader.groups.models import GroupResult
from grader.integrations.tensors import to_numpy

__all__ = ["WeightsFn", "call_weights_fn", "weights_from_results"]

WeightsFn = Callable[[np.ndarray, np.ndarray, Any], Any]
"""``weights_fn(group_ids, passed, batch)``: one weight per sample, 1.0 where there is no grade."""


def call_weights_fn(
    weights_fn: WeightsFn, group_ids: np.ndarray, passed: np.ndarray, batch: Any
) -> np.ndarray:
    """Call a user's weights function and check what it returns: ``(N,)`` finite numbers.

    A wrong shape or a NaN must fail here, naming the function, rather than surface later as a silently
    unchanged group (redistribution leaves groups with invalid weights alone) or as NaN advantages.

    Raises:
        ValueError: the weights are not ``(N,)`` or not all finite (the message names the function).
    """
    weights = to_numpy(weights_fn(group_ids, passed, batch)).astype(np.float64)
    n = len(passed)
    if weights.shape != (n,):
        raise ValueError(f"weights_fn {weights_fn!r} returned shape {weights.shape}, expected ({n},)")
    if not np.all(np.isfinite(weights)):
        raise ValueError(f"weights_fn {weights_fn!r} returned non-finite weights: {weights}")
    return weights


def weights_from_results(
    results: Iterable[GroupResult],
    trajectory_ids: Sequence[str],
    group_ids: Sequence[Hashable] | None = None,
) -> np.ndarray:
    """Per-sample weights from graded results: ``result.weights[trajectory_id]``, else 1.0.

    Trajectory ids are unique only within a group, so with ``group_ids`` (one per sample, compared with
    ``str(group_id)`` to ``result.group_id``) each sample is looked up in its own group's result. Without
    them an id is looked up across all results and must not occur in two of them. Results that were skipped
    or failed carry no weights, so their samples get 1.0 and pass through unchanged.

    Raises:
        ValueError: ``group_ids`` and ``trajectory_ids`` differ in length, or (without ``group_ids``) a
            trajectory id occurs in two results.
    """
    results = list(results)
    if group_ids is not None:
        if len(group_ids) != len(trajectory_ids):
            raise ValueError(
                f"group_ids has {len(group_ids)} entries but trajectory_ids has {len(trajectory_ids)}"
            )
        by_group = {r.group_id: r.weights for r in results}
        return np.array(
            [by_group.get(str(g), {}).get(t, 1.0) for g, t in zip(group_ids, trajectory_ids, strict=True)],
            dtype=np.float64,
        )
    merged: dict[str, float] = {}
    owner: dict[str, str] = {}
    for result in results:
        for trajectory_id, weight in result.weights.items():
            if trajectory_id in owner:
                raise ValueError(
                    f"trajectory id {trajectory_id!r} is weighted in groups {owner[trajectory_id]!r} and "
                    f"{result.group_id!r}: pass group_ids to tell them apart"
                )
            owner[trajectory_id] = result.group_id
            merged[trajectory_id] = weight
    return np.array([merged.get(t, 1.0) for t in trajectory_ids], dtype=np.float64)
