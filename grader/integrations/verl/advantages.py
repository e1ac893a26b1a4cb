"""verl without a grader in the step: redistribute GRPO advantages right after verl computes them, and
sample only mixed groups. Imports no verl until a function is called.

verl computes GRPO advantages in ``verl.trainer.ppo.ray_trainer.compute_advantage(data, adv_estimator,
...)`` with ``core_algos.compute_grpo_outcome_advantage``: groups are the rows sharing
``data.non_tensor_batch["uid"]``, and ``data.batch["advantages"]`` / ``["returns"]`` are
``(bs, response_length)``: the group-normalized score broadcast over ``response_mask``.
:func:`wrap_compute_advantage` calls verl's function unchanged and then redistributes those advantages (and
the returns, which GRPO sets equal to them), so with uniform weights the result is exactly verl's.
:func:`install` puts the wrapper where both trainers look it up: the legacy ``RayPPOTrainer``
(``ray_trainer.compute_advantage``) and the v1 trainer (``verl.trainer.ppo.v1.utils.compute_advantage``,
imported there by name).

Dynamic sampling: verl's DAPO group filter (``algorithm.filter_groups.enable=True``) evicts groups whose
``metric`` is the same for every trajectory. With ``metric=acc`` and ``acc`` the binary pass flag, that keeps
exactly the mixed groups, the ones gagar grades. :func:`with_pass_flag` makes a reward function report
``acc``; :func:`mixed_rows` is the same rule for custom loops.

Tested against the real verl package (``pip install verl``; runs on CPU; v1 on a local Ray cluster with
TransferQueue).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from grader.integrations.rows import RowMapping, task_paths
from grader.integrations.tensors import redistribute_advantages, to_numpy
from grader.integrations.verl.versions import check_verl_version
from grader.integrations.weights import WeightsFn, call_weights_fn
from grader.redistribution.redistribute import Preserve, mixed_group_mask

__all__ = [
    "VERL_MAPPING",
    "install",
    "preserve_for_loss_agg_mode",
    "verl_rows",
    "mixed_rows",
    "passed_from_scores",
    "redistribute_data",
    "with_pass_flag",
    "wrap_compute_advantage",
]

PASS_FLAG_KEY = "acc"
ROW_KEY = "gagar_trajectory"
VERL_MAPPING = RowMapping(**task_paths("extra_info"))
"""The default mapping for :func:`verl_rows`: the patch in a ``patch`` column (``non_tensor_batch`` or the
reward function's extra infos), the task in the dataset row's ``extra_info``."""
_TOKEN_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm")
GRPO_ESTIMATORS = ("grpo", "grpo_vectorized")


def passed_from_scores(data: Any, pass_threshold: float = 1.0) -> np.ndarray:
    """Pass flags from verl's canonical reward: the row sum of ``token_level_scores`` (before any KL penalty).

    ``token_level_rewards`` would include the KL penalty when ``use_kl_in_reward`` is on, which can push a
    passing score below the threshold.
    """
    scores = to_numpy(data.batch["token_level_scores"]).astype(np.float64).sum(axis=-1)
    return scores >= pass_threshold


def redistribute_data(
    data: Any,
    weights: Any,
    passed: Any = None,
    pass_threshold: float = 1.0,
    preserve: Preserve = "sequence",
) -> dict[Hashable, str]:
    """Redistribute ``data.batch["advantages"]`` and ``["returns"]`` of a verl ``DataProto`` in place.

    Groups are ``data.non_tensor_batch["uid"]``; ``passed`` defaults to :func:`passed_from_scores`. The
    tensors are replaced by new ones of the same dtype, device and shape. Returns ``{uid: reason}`` for the
    groups left unchanged.
    """
    uids = data.non_tensor_batch["uid"]
    flags = passed_from_scores(data, pass_threshold) if passed is None else to_numpy(passed).astype(bool)
    advantages = data.batch["advantages"]
    new, reasons = redistribute_advantages(
        advantages, uids, flags, weights, response_mask=data.batch["response_mask"], preserve=preserve
    )
    data.batch["advantages"] = new
    returns = data.batch.get("returns", None)
    if returns is not None:
        # GRPO's returns are its advantages; any other returns tensor is not ours to rescale.
        same = returns is advantages or bool((returns == advantages).all())
        if same:
            data.batch["returns"] = new.clone()
    return reasons


def wrap_compute_advantage(
    compute_advantage: Callable[..., Any],
    weights_fn: WeightsFn,
    pass_threshold: float = 1.0,
    preserve: Preserve = "sequence",
    on_unchanged: Callable[[dict[Hashable, str]], Any] | None = None,
) -> Callable[..., Any]:
    """verl's ``compute_advantage`` followed by redistribution, for the GRPO estimators only.

    ``weights_fn(uids, passed, data)`` returns one weight per row (1.0 where nothing was graded); it sees
    the whole ``DataProto``. Other estimators (GAE, RLOO, ...) pass through untouched. ``on_unchanged``
    receives ``{uid: reason}`` for groups left as verl computed them, e.g. for logging.
    """

    @functools.wraps(compute_advantage)
    def wrapped(data: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        data = compute_advantage(data, adv_estimator, *args, **kwargs)
        # AdvantageEstimator is a str enum; its value is the name used in configs.
        if str(getattr(adv_estimator, "value", adv_estimator)) not in GRPO_ESTIMATORS:
            return data
        passed = passed_from_scores(data, pass_threshold)
        weights = call_weights_fn(weights_fn, data.non_tensor_batch["uid"], passed, data)
        reasons = redistribute_data(data, weights, passed=passed, preserve=preserve)
        if on_unchanged is not None:
            on_unchanged(reasons)
        return data

    wrapped.__gagar_original__ = compute_advantage  # type: ignore[attr-defined]
    return wrapped


def install(
    weights_fn: WeightsFn,
    pass_threshold: float = 1.0,
    preserve: Preserve = "sequence",
    on_unchanged: Callable[[dict[Hashable, str]], Any] | None = None,
) -> Callable[[], None]:
    """Route verl's trainers through :func:`wrap_compute_advantage`; returns a function that undoes it.

    Call it in the driver process before ``trainer.fit()`` (verl computes advantages on the driver).
    ``compute_advantage`` is looked up by name in both trainer modules, a private contract, so the installed
    verl must be in :data:`~grader.integrations.verl.versions.SUPPORTED_VERL`.

    Raises:
        VerlVersionError: the installed verl is outside the supported range.
    """
    import importlib

    check_verl_version()

    modules = [importlib.import_module("verl.trainer.ppo.ray_trainer")]
    with contextlib.suppress(ImportError):  # verl releases before the v1 trainer have no v1.utils
        modules.append(importlib.import_module("verl.trainer.ppo.v1.utils"))
    originals = [(module, module.compute_advantage) for module in modules]
    for module, original in originals:
        # Installing twice must wrap verl's function, not the previous wrapper.
        unwrapped = getattr(original, "__gagar_original__", original)
        module.compute_advantage = wrap_compute_advantage(
            unwrapped, weights_fn, pass_threshold, preserve, on_unchanged
        )

    def uninstall() -> None:
        for module, original in originals:
            module.compute_advantage = original

    return uninstall


def with_pass_flag(
    compute_score: Callable[..., Any], pass_threshold: float = 1.0
) -> Callable[..., dict[str, Any]]:
    """A verl reward function that also reports ``acc`` (1.0 passed, 0.0 failed) for DAPO group filtering.

    ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw)`` may return a number
    or verl's dict with a ``"score"``; the result is that dict plus ``acc``. Use it with
    ``algorithm.filter_groups.enable=True algorithm.filter_groups.metric=acc``.
    """

    @functools.wraps(compute_score)
    def scored(*args: Any, **kwargs: Any) -> dict[str, Any]:
        result = compute_score(*args, **kwargs)
        out = dict(result) if isinstance(result, dict) else {"score": float(result)}
        out.setdefault(PASS_FLAG_KEY, float(float(out["score"]) >= pass_threshold))
        return out

    return scored


def mixed_rows(data: Any, metric: str = PASS_FLAG_KEY) -> np.ndarray:
    """Per row: does its ``uid`` group have both passing and failing rows (``metric`` 1/0 or bool).

    ``metric`` is read from ``data.non_tensor_batch`` (where verl puts reward-function extras); use
    ``data.select_idxs(mixed_rows(data))`` to keep the mixed groups, as DAPO's filter does for binary acc.
    """
    flags = np.asarray(data.non_tensor_batch[metric], dtype=float)
    return mixed_group_mask(data.non_tensor_batch["uid"], flags)


def preserve_for_loss_agg_mode(loss_agg_mode: str) -> Preserve:
    """The preserve mode verl's loss aggregation needs.

    Args:
        loss_agg_mode: ``actor_rollout_ref.actor.loss_agg_mode``.
    Returns:
        ``"sequence"`` for ``seq-mean-token-mean`` (each response weighs the same), ``"token"`` for the
        modes that weigh a response by its token count (``token-mean``, verl's default, and the token sums).
    Raises:
        ValueError: a mode verl does not have.
    """
    if loss_agg_mode == "seq-mean-token-mean":
        return "sequence"
    if loss_agg_mode in _TOKEN_AGG_MODES:
        return "token"
    raise ValueError(f"unknown verl loss_agg_mode {loss_agg_mode!r}")


def verl_rows(
    data: Any, scores: Any = None, extra: dict[str, Any] | None = None, pass_threshold: float = 1.0
) -> list[dict[str, Any]]:
    """A verl batch as rows for a :class:`~grader.integrations.batch.BatchGrader`, one per response.

    Each row holds every ``non_tensor_batch`` column at its index (``uid``, ``extra_info``, ...), the
    reward function's extra infos (``extra``), then ``group_id`` (the ``uid``), ``trajectory_id`` (the
    row's ``gagar_trajectory`` column, set at submission so it survives reordering; else its index),
    ``passed`` (the response's summed score ``>= pass_threshold``) and ``response_length`` (its
    ``response_mask`` sum).

    Args:
        data: a verl ``DataProto`` after the reward step.
        scores: ``(bs, response_length)`` token-level scores (default ``token_level_scores``, else
            ``rm_scores``).
        extra: the reward function's extra infos, ``{name: per-row values}``.
        pass_threshold: the summed score a passing response reaches.
    Returns:
        one dict per row, in the batch's order.
    Raises:
        KeyError: the batch has no ``uid`` column or no scores.
    """
    if scores is None:
        name = "token_level_scores" if "token_level_scores" in data.batch else "rm_scores"
        scores = data.batch[name]
    passed = to_numpy(scores).astype(np.float64).sum(axis=-1) >= pass_threshold
    lengths = to_numpy(data.batch["response_mask"]).sum(axis=-1).astype(int)
    columns = {**dict(data.non_tensor_batch), **(extra or {})}
    ids = data.non_tensor_batch.get(ROW_KEY)
    rows = []
    for i in range(len(passed)):
        row = {name: values[i] for name, values in columns.items() if len(values) == len(passed)}
        row.update(
            group_id=str(data.non_tensor_batch["uid"][i]),
            trajectory_id=str(ids[i]) if ids is not None else str(i),
            passed=bool(passed[i]),
            response_length=int(lengths[i]),
        )
        rows.append(row)
    return rows
