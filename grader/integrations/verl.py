"""verl: redistribute GRPO advantages right after verl computes them, and sample only mixed groups.

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

Grading inside the step (:func:`install_grader`, one call for both trainers). verl's legacy
``RayPPOTrainer.fit`` runs the reward step (``extract_reward``), then the old and reference log-probs, then
``compute_advantage``, so grading can overlap with the log-probs. The installed wrappers submit the batch's
rows to a :class:`~grader.integrations.batch.BatchGrader` right after ``extract_reward`` (rows from
:func:`verl_rows`: ``non_tensor_batch`` columns such as ``uid`` and ``extra_info``, the reward function's
extra infos such as a ``patch`` it returned, the pass flag and response length), collect the weights in the
wrapped ``compute_advantage`` (waiting at most ``deadline`` seconds), and add the grader's ``gagar/...``
metrics to verl's metrics dict through ``compute_data_metrics``. ``preserve`` defaults to ``token``, what
verl's default ``actor.loss_agg_mode=token-mean`` needs (:func:`preserve_for_loss_agg_mode`).

The v1 trainer (``verl.trainer.ppo.v1``: ``sync``, ``colocate_async`` and ``separate_async`` all run
``PPOTrainer._step_once``) keeps the batch in TransferQueue (the step holds only a ``KVBatchMeta`` of row
keys). Its rewards are computed while rolling out (reward loop workers) or, with a colocated reward model,
by ``_compute_reward_colocate`` right after sampling; the step then balances the batch
(``_balance_batch``, which appends padding rows), computes old and reference log-probs and values, then
``_compute_advantage``. The hooks: ``PPOTrainer._balance_batch`` submits, the first call after the rewards
are known on both reward paths, reading from TransferQueue only :data:`V1_FIELDS` and the fields the row
mapping names; a row per session, the final output of a multi-output agent loop (keys
``{uid}_{session}_{index}``), its key being the trajectory id. ``compute_advantage_for_multi_trajectories``
marks the submitted rows by key, so verl's selection of each session's final output carries the marks to
``v1.utils.compute_advantage``, which collects and redistributes; verl then broadcasts each session's
advantage to its earlier outputs. ``PPOTrainer._compute_advantage`` adds the metrics to the metrics dict it
is given (v1 aggregates it over the ``parameter_sync_step`` mini-steps and logs it). Validation is never
graded: v1's ``_validate`` samples the ``val`` partition and neither balances nor computes advantages (the
hook also skips ``val`` batches). Groups the replay buffer evicts (DAPO's filter, staleness) are never
sampled, so never submitted. The overlap is the legacy one, old/ref log-probs and values; with
``rollout_correction.bypass_mode`` the old log-probs are a copy, leaving the reference log-probs. The async
trainers overlap no more than sync: a group's reward is known when its rollout lands in the replay buffer,
possibly a step before it is sampled, but the agent loop and reward workers are Ray actors and the rows
reach the driver only when ``ReplayBuffer.sample`` hands them to the step, so grading starts there.

Tested against the real verl package (``pip install verl``; runs on CPU; v1 on a local Ray cluster with
TransferQueue).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from grader.integrations.batch import BatchGrader, log
from grader.integrations.rows import RowMapping, task_paths
from grader.integrations.tensors import redistribute_advantages, to_numpy
from grader.integrations.weights import WeightsFn, call_weights_fn
from grader.redistribute import Preserve, mixed_group_mask

__all__ = [
    "VERL_MAPPING",
    "install",
    "install_grader",
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
METRICS_KEY = "gagar_metrics"
VERL_MAPPING = RowMapping(**task_paths("extra_info"))
"""The default mapping for :func:`verl_rows`: the patch in a ``patch`` column (``non_tensor_batch`` or the
reward function's extra infos), the task in the dataset row's ``extra_info``."""
_TOKEN_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm")
GRPO_ESTIMATORS = ("grpo", "grpo_vectorized")
V1_FIELDS = ("uid", "rm_scores", "response_mask", "extra_fields", "extra_info")
"""What the v1 hook reads from TransferQueue for each row, besides the names the row mapping reads."""


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
    """
    import importlib

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


def _objects(values: list[Any]) -> np.ndarray:
    # np.array would turn a list of equal-length lists into a 2-D array; a column needs one object per row.
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _final_outputs(keys: list[str]) -> list[int]:
    """Positions of the final output of each v1 session (keys ``{uid}_{session_id}_{index}``), in order.

    A multi-output agent loop writes one row per output; verl's GRPO ranks only the last output of each
    session and broadcasts its advantage to the others, so the last one is the trajectory to grade.
    """
    final: dict[str, tuple[int, int]] = {}
    for position, key in enumerate(keys):
        parts = key.rsplit("_", 2)
        if len(parts) == 3 and parts[2].isdigit():
            session, index = f"{parts[0]}_{parts[1]}", int(parts[2])
        else:
            session, index = key, 0
        if session not in final or final[session][0] < index:
            final[session] = (index, position)
    return sorted(position for _, position in final.values())


def _mapping_fields(mapping: RowMapping) -> set[str]:
    """The top-level names a row mapping reads through key paths (a function's reads cannot be known)."""
    return {
        spec.split(".")[0]
        for f in dataclasses.fields(mapping)
        if isinstance(spec := getattr(mapping, f.name), str)
    }


def _v1_rows(batch: Any, fields: list[str], pass_threshold: float) -> list[dict[str, Any]]:
    """The rows of a v1 ``KVBatchMeta``, read from TransferQueue: one per session's final output.

    v1 keeps a batch's data in TransferQueue, keyed by ``batch.keys``; the key is the row's trajectory id
    (it travels with the row through reordering). The reward function's extra infos are in each row's
    ``extra_fields["reward_extra_info"]`` (rewards computed while rolling out) or in top-level fields
    (a colocated reward model), which `fields` asks for when the row mapping names them.
    """
    import torch
    import transfer_queue as tq
    from verl import DataProto

    keys = [batch.keys[i] for i in _final_outputs(list(batch.keys))]
    data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)
    tensors: dict[str, Any] = {}
    columns: dict[str, np.ndarray] = {}
    extra: dict[str, np.ndarray] = {}
    for name in data.keys():  # noqa: SIM118 (iterating a TensorDict walks its rows, not its fields)
        value = data[name]
        if isinstance(value, torch.Tensor):
            # Rows of different lengths come back as one jagged tensor; verl pads them the same way.
            tensors[name] = value.to_padded_tensor(0) if value.is_nested else value
        elif name == "extra_fields":
            infos = [(e or {}).get("reward_extra_info") or {} for e in value]
            for info_name in dict.fromkeys(k for info in infos for k in info):
                extra[info_name] = _objects([info.get(info_name) for info in infos])
        else:
            columns[name] = _objects(list(value))
    columns[ROW_KEY] = _objects(keys)
    proto = DataProto.from_dict(tensors={"response_mask": tensors["response_mask"]}, non_tensors=columns)
    return verl_rows(proto, tensors["rm_scores"], extra, pass_threshold)


@dataclasses.dataclass
class _V1Step:
    """What v1's advantage step collected: its ``metrics`` dict (v1 logs it) and whether weights came."""

    metrics: dict[str, Any]
    collected: bool = False


def install_grader(
    grader: BatchGrader,
    deadline: float | None = None,
    pass_threshold: float = 1.0,
    preserve: Preserve = "token",
    on_step: Callable[[Any], Any] | None = None,
) -> Callable[[], None]:
    """Grade inside verl's training step, legacy ``RayPPOTrainer`` and v1 ``PPOTrainer`` both; returns a
    function that undoes it.

    Legacy (``verl.trainer.ppo.ray_trainer``): ``extract_reward`` submits the batch's rows to `grader`,
    which grades in the background while verl computes log-probs; ``compute_advantage`` waits at most
    `deadline` seconds for the weights and redistributes verl's GRPO advantages (other estimators pass
    through, their submission collected and discarded); ``compute_data_metrics`` adds the grader's
    ``gagar/...`` metrics to verl's metrics dict.

    v1 (``verl.trainer.ppo.v1``, when installed): ``PPOTrainer._balance_batch``, the step's first call
    after the rewards are known, submits the final output of each session (rows read from TransferQueue);
    ``compute_advantage_for_multi_trajectories`` marks the submitted rows by their keys;
    ``v1.utils.compute_advantage`` collects and redistributes as above; ``PPOTrainer._compute_advantage``
    adds the metrics to the metrics dict it is given, which v1 aggregates and logs.

    The grader's row mapping reads rows made by :func:`verl_rows` (:data:`VERL_MAPPING` fits a dataset whose
    ``extra_info`` holds the task and a reward function that returns the ``patch``).

    Args:
        grader: the batch grader (threads or Ray).
        deadline: seconds the advantage step waits at most (None: the grader's own default).
        pass_threshold: the summed score a passing response reaches.
        preserve: ``token`` for verl's default ``loss_agg_mode=token-mean``; see
            :func:`preserve_for_loss_agg_mode`.
        on_step: called with each step's ``StepWeights`` (e.g. to keep them for a length monitor).
    Returns:
        ``uninstall()``, which puts verl's functions back.
    """
    import importlib
    from contextvars import ContextVar

    legacy = importlib.import_module("verl.trainer.ppo.ray_trainer")
    v1_utils = v1_base = None
    with contextlib.suppress(ImportError):  # verl before 0.9 has no v1; v1 needs transfer_queue
        v1_utils = importlib.import_module("verl.trainer.ppo.v1.utils")
        v1_base = importlib.import_module("verl.trainer.ppo.v1.trainer_base")
    step_var: ContextVar[_V1Step | None] = ContextVar("gagar_v1_step", default=None)
    pending: set[str] = set()  # v1 keys submitted and not yet collected
    v1_fields = sorted({*V1_FIELDS, *_mapping_fields(grader.mapping)})

    def collect(data: Any, adv_estimator: Any) -> None:
        ids = data.non_tensor_batch.get(ROW_KEY)
        if ids is None:  # not submitted (validation, or another caller)
            return
        # v1 marks only the rows it submitted; padding rows and earlier outputs of a session are None.
        sent = np.array([i is not None for i in ids], dtype=bool)
        rows = [row for row, s in zip(verl_rows(data, pass_threshold=pass_threshold), sent, strict=True) if s]
        data.non_tensor_batch.pop(ROW_KEY)
        if not rows:
            return
        step = grader.weights(rows, deadline)
        v1_step = step_var.get()
        if v1_step is None:
            data.meta_info[METRICS_KEY] = step.metrics
        else:
            v1_step.metrics.update(step.metrics)
            v1_step.collected = True
        if on_step is not None:
            on_step(step)
        if str(getattr(adv_estimator, "value", adv_estimator)) in GRPO_ESTIMATORS:
            weights = np.ones(len(ids))
            weights[sent] = step.weights
            redistribute_data(data, weights, pass_threshold=pass_threshold, preserve=preserve)

    # (owner, name, original): what uninstall() puts back.
    originals: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, make: Callable[[Any], Callable[..., Any]]) -> None:
        current = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        base = getattr(current, "__gagar_original__", current)  # installing twice wraps verl's, once
        wrapper = make(base)
        wrapper.__gagar_original__ = base  # type: ignore[attr-defined]
        originals.append((owner, name, current))
        setattr(owner, name, wrapper)

    def legacy_extract_reward(base: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(base)
        def extract_reward(batch: Any) -> Any:
            reward_tensor, extra = base(batch)
            if batch.meta_info.get("validate"):  # verl's validation scores too; nothing to train, no grading
                return reward_tensor, extra
            batch.non_tensor_batch[ROW_KEY] = np.array([str(i) for i in range(len(batch))], dtype=object)
            try:
                grader.submit(verl_rows(batch, reward_tensor, dict(extra or {}), pass_threshold))
            except Exception as exc:  # grading never crashes the step: this one trains on verl's advantages
                batch.non_tensor_batch.pop(ROW_KEY)
                log.warning("gagar: this step is not graded: %s: %s", type(exc).__name__, exc)
            return reward_tensor, extra

        return extract_reward

    def compute_advantage(base: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(base)
        def wrapped(data: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
            data = base(data, adv_estimator, *args, **kwargs)
            collect(data, adv_estimator)
            return data

        return wrapped

    def legacy_data_metrics(base: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(base)
        def compute_data_metrics(batch: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            metrics = base(batch, *args, **kwargs)
            metrics.update(batch.meta_info.pop(METRICS_KEY, {}))
            return metrics

        return compute_data_metrics

    def v1_balance_batch(base: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(base)
        def _balance_batch(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
            # v1's _validate samples from the "val" partition and never balances; the check keeps a
            # subclass that does from grading validation rollouts.
            if batch.partition_id != "val" and not (batch.extra_info or {}).get("validate"):
                try:
                    rows = _v1_rows(batch, v1_fields, pass_threshold)
                    grader.submit(rows)
                except Exception as exc:  # grading never crashes the step: it trains on verl's advantages
                    log.warning("gagar: this step is not graded: %s: %s", type(exc).__name__, exc)
                else:
                    pending.update(row["trajectory_id"] for row in rows)
            return base(self, batch, *args, **kwargs)

        return _balance_batch

    def v1_multi_trajectories(base: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(base)
        def compute_advantage_for_multi_trajectories(
            data: Any, batch_keys: list[str], *args: Any, **kw: Any
        ) -> Any:
            # verl selects each session's final rows (select_idxs keeps this column) before computing GRPO.
            data.non_tensor_batch[ROW_KEY] = _objects([k if k in pending else None for k in batch_keys])
            return base(data, batch_keys, *args, **kw)

        return compute_advantage_for_multi_trajectories

    def v1_compute_advantage(base: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(base)
        def _compute_advantage(self: Any, batch: Any, metrics: dict[str, Any], *args: Any, **kw: Any) -> Any:
            step = _V1Step(metrics)
            token = step_var.set(step)
            try:
                return base(self, batch, metrics, *args, **kw)
            finally:
                step_var.reset(token)
                if pending and not step.collected:
                    # The advantage step never reached verl's compute_advantage with our rows (a subclass's
                    # own estimator, or it raised): forget them, or their groups would clash next time.
                    grader.discard_pending()
                pending.clear()

        return _compute_advantage

    patch(legacy, "extract_reward", legacy_extract_reward)
    patch(legacy, "compute_advantage", compute_advantage)
    patch(legacy, "compute_data_metrics", legacy_data_metrics)
    if v1_utils is not None and v1_base is not None:
        patch(v1_utils, "compute_advantage", compute_advantage)
        patch(v1_base, "compute_advantage_for_multi_trajectories", v1_multi_trajectories)
        patch(v1_base.PPOTrainer, "_balance_batch", v1_balance_batch)
        patch(v1_base.PPOTrainer, "_compute_advantage", v1_compute_advantage)

    def uninstall() -> None:
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)

    return uninstall
