"""GAGAR inside verl's trainer, selected by name in the trainer's config.

Importing this module (or calling :func:`register`) registers, through verl's own registries:

- the reward manager ``gagar`` (``reward.reward_manager.name=gagar``; verl's legacy spelling
  ``reward_model.reward_manager=gagar`` is migrated to it by verl). verl 0.9 scores one trajectory at a time
  in reward-loop Ray actors; this manager is verl's ``naive`` one that also reports the pass flag ``acc``
  (for gagar's rows and DAPO's group filter) and a ``patch`` on every row (verl takes a batch's extra-info
  names from its first row, so a patch the reward function returns for some rows only would be lost).
- the advantage estimator ``gagar_grpo`` (``algorithm.adv_estimator=gagar_grpo``): verl's own GRPO estimator
  (``core_algos.compute_grpo_outcome_advantage``), then the grader's weights for the step's rows collected
  (waiting at most the deadline) and the advantages redistributed. With nothing attached, or when the
  grading fails, it returns verl's GRPO advantages unchanged.

Both registries live in each process, so they must be filled where verl looks them up: the reward manager
in the reward-loop workers, the estimator in the trainer (verl's ``TaskRunner`` actor). Ray's
``worker_process_setup_hook`` does that for every Ray worker:
``+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=grader.integrations.verl.plugin.register``.

Submission needs one private hook per trainer: verl has no public point where the driver sees a step's
rows with their rewards. The reward manager cannot submit groups: it sees one trajectory, in a Ray actor,
and the :class:`~grader.integrations.batch.BatchGrader` lives in the trainer. The estimator is too late
(grading would no longer overlap the log-probs) and receives rewards, mask and ``uid`` only, not the
patches or tasks. So :func:`attach` wraps, after checking the installed verl is in :data:`SUPPORTED_VERL`:

- legacy ``RayPPOTrainer``: ``ray_trainer.extract_reward`` (submits right after the reward step, before the
  old and reference log-probs) and ``ray_trainer.compute_data_metrics`` (adds ``gagar/...`` to the metrics
  verl logs: the legacy ``fit`` keeps its metrics dict local and has no public hook that receives it);
- v1 ``PPOTrainer._balance_batch``: the step's first call after the rewards are known on both reward
  paths (rollout-time reward workers, colocated reward model); it submits the final output of each
  session read from TransferQueue and hands the step's metrics dict, which v1 aggregates and logs, to the
  estimator.

The estimator receives the batch in the order the hook saw it (verl 0.9 neither reorders nor drops rows
between the two); it checks each submitted row's ``uid`` and response length against what it receives
and, on any mismatch, trains the step on verl's GRPO advantages and says so in the log.

Multi-output agent loops (v1 keys ``{uid}_{session}_{index}``): verl selects each session's final output
only for the estimator named ``grpo``; ``gagar_grpo`` does the same selection from the keys the hook
recorded (GRPO over the final outputs, each session's advantage broadcast to its earlier outputs). With
nothing attached it has no keys, and ranks every output of a multi-output session as a member of its group.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from grader.integrations.batch import BatchGrader, StepWeights
from grader.integrations.deadlines import checked_seconds
from grader.integrations.rows import RowMapping
from grader.integrations.tensors import redistribute_advantages, to_numpy
from grader.integrations.verl.advantages import PASS_FLAG_KEY, ROW_KEY, verl_rows
from grader.integrations.verl.versions import SUPPORTED_VERL, VerlVersionError, check_verl_version
from grader.redistribution.redistribute import Preserve

__all__ = [
    "ADV_ESTIMATOR",
    "REWARD_MANAGER",
    "SUPPORTED_VERL",
    "GagarRewardManager",
    "VerlVersionError",
    "attach",
    "check_verl_version",
    "gagar_grpo_advantage",
    "register",
]

log = logging.getLogger("grader.integrations.verl")

REWARD_MANAGER = "gagar"
ADV_ESTIMATOR = "gagar_grpo"
V1_FIELDS = ("uid", "rm_scores", "response_mask", "extra_fields", "extra_info")
"""What the v1 hook reads from TransferQueue for each row, besides the names the row mapping reads."""


# ------------------------------------------------------------------------------------------------------
# The reward manager
# ------------------------------------------------------------------------------------------------------

# The reward manager subclasses verl's, so an unsupported verl must fail here, loudly, before the import.
check_verl_version()
from verl.experimental.reward_loop.reward_manager import naive as _naive  # noqa: E402


class GagarRewardManager(_naive.NaiveRewardManager):
    """verl's ``naive`` reward manager whose rows also carry ``acc`` (the pass flag) and ``patch``.

    The pass threshold is ``reward.reward_kwargs.pass_threshold`` (default 1.0): a score at or above it
    passes. ``acc`` and ``patch`` the reward function returns itself are kept.
    """

    async def run_single(self, data: Any) -> dict[str, Any]:
        """Score one trajectory with the configured reward function.

        Returns:
            verl's ``{"reward_score": float, "reward_extra_info": {...}}``, the extra infos with ``acc`` and
            ``patch`` (``""`` when the reward function returned none).
        """
        out = await super().run_single(data)
        threshold = float(_reward_kwargs(self.config).get("pass_threshold", 1.0))
        info = out["reward_extra_info"]
        info.setdefault(PASS_FLAG_KEY, float(float(out["reward_score"]) >= threshold))
        info.setdefault("patch", "")
        return out


def _reward_kwargs(config: Any) -> Any:
    reward = config.get("reward") if hasattr(config, "get") else None
    return (reward.get("reward_kwargs") if reward is not None else None) or {}


# ------------------------------------------------------------------------------------------------------
# The advantage estimator
# ------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Pending:
    """A submission the estimator has not collected yet."""

    rows: list[dict[str, Any]]
    positions: list[int]
    """Where each submitted row sits in the batch the estimator receives."""
    size: int
    """Rows the estimator receives (v1 adds padding rows and earlier outputs of a session)."""
    keys: list[str] | None
    """v1's row keys in the estimator's order (to find each session's final output); None for legacy."""
    metrics: dict[str, Any] | None
    """v1's step metrics dict, which the estimator adds ``gagar/...`` to; None for legacy."""


@dataclasses.dataclass
class _Session:
    grader: BatchGrader
    deadline: float | None
    pass_threshold: float
    preserve: Preserve
    on_step: Callable[[StepWeights], Any] | None
    pending: _Pending | None = None
    legacy_metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    originals: list[tuple[Any, str, Any]] = dataclasses.field(default_factory=list)
    """(owner, name, verl's function): what `detach` puts back."""

    def detach(self) -> None:
        """Put verl's functions back and forget this grader (its uncollected rows are discarded)."""
        global _session
        for owner, name, original in reversed(self.originals):
            setattr(owner, name, original)
        self.originals.clear()
        if _session is self:
            _session = None
        if self.pending is not None:
            self.pending = None
            self.grader.discard_pending()


_session: _Session | None = None


def _option(config: Any, name: str, default: Any) -> Any:
    if config is None:
        return default
    if hasattr(config, "get"):
        return config.get(name, default)
    return getattr(config, name, default)


def gagar_grpo_advantage(
    token_level_rewards: Any,
    response_mask: Any,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **_: Any,
) -> tuple[Any, Any]:
    """verl's GRPO advantages, redistributed by the grader's weights for the step :func:`attach` submitted.

    verl calls it as ``algorithm.adv_estimator=gagar_grpo`` with the arguments of any registered estimator.

    Args:
        token_level_rewards: ``(bs, response_length)`` rewards.
        response_mask: ``(bs, response_length)`` mask of the response tokens.
        index: each row's ``uid`` (its group).
        epsilon: GRPO's std guard.
        norm_adv_by_std_in_grpo: divide by the group's std (``algorithm.norm_adv_by_std_in_grpo``, read from
            `config` when verl passes it).
        config: verl's ``algorithm`` config.
    Returns:
        ``(advantages, returns)``, equal as in verl's GRPO, same dtype, device and shape as the rewards.
        Grading never fails the step: on any error the advantages are verl's GRPO ones, and the log says why.
    """
    import torch
    from verl.trainer.ppo import core_algos

    norm = bool(_option(config, "norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo))
    session = _session
    pending = session.pending if session is not None else None
    if session is not None:
        session.pending = None
    keys = pending.keys if pending is not None and pending.size == len(index) else None
    final = _final_outputs(keys) if keys is not None else list(range(len(index)))
    selected = torch.as_tensor(final, dtype=torch.long, device=token_level_rewards.device)
    final_mask = response_mask[selected]
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards[selected],
        response_mask=final_mask,
        index=np.asarray(index, dtype=object)[final],
        epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm,
        config=config,
    )
    if session is not None and pending is not None:
        try:
            advantages = _redistribute(session, pending, advantages, final, index, final_mask)
        except Exception as exc:  # grading never crashes the step: it trains on verl's GRPO advantages
            log.warning("gagar: this step is not graded: %s: %s", type(exc).__name__, exc)
            session.grader.discard_pending()
    if len(final) == len(index):
        return advantages, advantages
    # Each session's advantage, read at its final output's first response token, over all its outputs (as
    # verl's compute_advantage_for_multi_trajectories broadcasts it).
    assert keys is not None
    first = final_mask.argmax(dim=1)
    per_final = advantages[torch.arange(len(final), device=advantages.device), first]
    session_of = {_session_key(keys[p]): i for i, p in enumerate(final)}
    rows = torch.as_tensor([session_of[_session_key(k)] for k in keys], device=advantages.device)
    out = per_final[rows].unsqueeze(-1) * response_mask
    return out, out


def _session_key(key: str) -> str:
    parts = key.rsplit("_", 2)
    return f"{parts[0]}_{parts[1]}" if len(parts) == 3 and parts[2].isdigit() else key


def _redistribute(
    session: _Session, pending: _Pending, advantages: Any, final: list[int], index: Any, final_mask: Any
) -> Any:
    """Collect `pending`'s weights; redistribute the final rows' `advantages` (checked against the rows)."""
    if pending.size != len(index):
        raise ValueError(f"the estimator received {len(index)} rows, the step submitted {pending.size}")
    where = {position: i for i, position in enumerate(final)}
    lengths = to_numpy(final_mask).sum(axis=-1).astype(int)
    for row, position in zip(pending.rows, pending.positions, strict=True):
        i = where.get(position)
        if i is None or str(index[position]) != row["group_id"] or lengths[i] != row["response_length"]:
            raise ValueError(
                f"row {position} is not the submitted trajectory {row['trajectory_id']!r} of group "
                f"{row['group_id']!r}: the trainer reordered or changed the batch after submitting it"
            )
    step = session.grader.weights(pending.rows, session.deadline)
    if pending.metrics is not None:
        pending.metrics.update(step.metrics)
    else:
        session.legacy_metrics = dict(step.metrics)
    if session.on_step is not None:
        session.on_step(step)
    weights = np.ones(len(final))
    passed = np.zeros(len(final), dtype=bool)
    for row, position, weight in zip(pending.rows, pending.positions, step.weights, strict=True):
        weights[where[position]] = weight
        passed[where[position]] = row["passed"]  # the reward's pass flag, before any KL penalty
    uids = np.asarray(index, dtype=object)[final]
    new, _ = redistribute_advantages(
        advantages, uids, passed, weights, response_mask=final_mask, preserve=session.preserve
    )
    return new


# ------------------------------------------------------------------------------------------------------
# Registration and the trainer hooks
# ------------------------------------------------------------------------------------------------------


def register() -> None:
    """Register ``gagar`` (reward manager) and ``gagar_grpo`` (advantage estimator) in this process.

    Idempotent; runs on import. Pass it to Ray as ``worker_process_setup_hook`` so that verl's trainer and
    reward-loop actors have them too.

    Raises:
        VerlVersionError: the installed verl is outside :data:`SUPPORTED_VERL`.
    """
    check_verl_version()
    from verl.experimental.reward_loop.reward_manager import register as register_reward_manager
    from verl.trainer.ppo import core_algos

    register_reward_manager(REWARD_MANAGER)(GagarRewardManager)
    core_algos.register_adv_est(ADV_ESTIMATOR)(gagar_grpo_advantage)


def attach(
    grader: BatchGrader,
    deadline: float | None = None,
    pass_threshold: float = 1.0,
    preserve: Preserve = "token",
    on_step: Callable[[StepWeights], Any] | None = None,
) -> Callable[[], None]:
    """Grade each training step of verl's legacy and v1 trainers with `grader`; returns ``detach()``.

    Call it in the process that runs the trainer (verl's ``TaskRunner``), with
    ``algorithm.adv_estimator=gagar_grpo``. The step submits its rows as soon as the driver sees the rewards,
    verl computes its log-probs meanwhile, and ``gagar_grpo`` collects and redistributes; ``gagar/...``
    metrics join verl's logged metrics. Attaching again replaces the previous attachment.

    Args:
        grader: the batch grader (threads or Ray); its row mapping reads rows made by
            :func:`~grader.integrations.verl.verl_rows` (``VERL_MAPPING`` fits a dataset whose ``extra_info``
            holds the task and a reward function that returns the ``patch``).
        deadline: seconds the estimator waits at most (None: the grader's own default; ``math.inf``: every
            group).
        pass_threshold: the summed score a passing response reaches.
        preserve: ``token`` for verl's default ``loss_agg_mode=token-mean``; see
            :func:`~grader.integrations.verl.preserve_for_loss_agg_mode`.
        on_step: called with each step's ``StepWeights`` (e.g. to keep them for a length monitor).
    Returns:
        ``detach()``, which puts verl's functions back and forgets `grader`.
    Raises:
        VerlVersionError: the installed verl is outside :data:`SUPPORTED_VERL` (the hooks are private).
        ValueError, TypeError: the deadline is NaN, or not a number (refused here, never in a step; nothing
            is patched).
    """
    global _session
    deadline = checked_seconds(deadline, "deadline")
    register()  # checks the version
    import importlib

    from verl.trainer.ppo import ray_trainer

    v1_base = None
    try:  # v1 needs transfer_queue
        v1_base = importlib.import_module("verl.trainer.ppo.v1.trainer_base")
    except ImportError as exc:
        log.info("gagar: verl's v1 trainer is not importable (%s); only the legacy trainer is graded", exc)
    if _session is not None:
        _session.detach()
    session = _Session(grader, deadline, pass_threshold, preserve, on_step)
    v1_fields = sorted({*V1_FIELDS, *_mapping_fields(grader.mapping)})

    def patch(owner: Any, name: str, make: Callable[[Any], Callable[..., Any]]) -> None:
        current = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        session.originals.append((owner, name, current))
        setattr(owner, name, make(current))

    def submit(rows: list[dict[str, Any]], pending: _Pending) -> None:
        if session.pending is not None:
            log.warning(
                "gagar: the last step's rows were never collected; is algorithm.adv_estimator=%s?",
                ADV_ESTIMATOR,
            )
            session.pending = None
            grader.discard_pending()
        try:
            grader.submit(rows)
        except Exception as exc:  # grading never crashes the step: it trains on verl's advantages
            log.warning("gagar: this step is not graded: %s: %s", type(exc).__name__, exc)
        else:
            session.pending = pending

    def legacy_extract_reward(base: Callable[..., Any]) -> Callable[..., Any]:
        def extract_reward(batch: Any) -> Any:
            reward_tensor, extra = base(batch)
            if not batch.meta_info.get("validate"):  # verl's validation scores too; nothing to train
                try:
                    rows = verl_rows(batch, reward_tensor, dict(extra or {}), pass_threshold)
                except Exception as exc:
                    log.warning("gagar: this step is not graded: %s: %s", type(exc).__name__, exc)
                else:
                    positions = list(range(len(rows)))
                    submit(rows, _Pending(rows, positions, len(rows), keys=None, metrics=None))
            return reward_tensor, extra

        return extract_reward

    def legacy_data_metrics(base: Callable[..., Any]) -> Callable[..., Any]:
        def compute_data_metrics(batch: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            metrics = base(batch, *args, **kwargs)
            metrics.update(session.legacy_metrics)
            session.legacy_metrics = {}
            return metrics

        return compute_data_metrics

    def v1_balance_batch(base: Callable[..., Any]) -> Callable[..., Any]:
        def _balance_batch(self: Any, batch: Any, metrics: dict[str, Any], *args: Any, **kw: Any) -> Any:
            batch = base(self, batch, metrics, *args, **kw)
            # v1's _validate samples the "val" partition and never balances; the check keeps a subclass
            # that does from grading validation rollouts.
            if batch.partition_id == "val" or (batch.extra_info or {}).get("validate"):
                return batch
            try:
                keys = list(batch.keys)
                real = [
                    k for k, tag in zip(keys, batch.tags, strict=True) if not (tag or {}).get("is_padding")
                ]
                rows = _v1_rows(_Keys(real, batch.partition_id), v1_fields, pass_threshold)
                where = {k: i for i, k in enumerate(keys)}
                positions = [where[row["trajectory_id"]] for row in rows]
            except Exception as exc:
                log.warning("gagar: this step is not graded: %s: %s", type(exc).__name__, exc)
            else:
                submit(rows, _Pending(rows, positions, len(keys), keys=keys, metrics=metrics))
            return batch

        return _balance_batch

    patch(ray_trainer, "extract_reward", legacy_extract_reward)
    patch(ray_trainer, "compute_data_metrics", legacy_data_metrics)
    if v1_base is not None:
        patch(v1_base.PPOTrainer, "_balance_batch", v1_balance_batch)
    _session = session
    return session.detach


@dataclasses.dataclass
class _Keys:
    """The part of a v1 ``KVBatchMeta`` that ``_v1_rows`` reads: its row keys and partition."""

    keys: list[str]
    partition_id: str


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
        index = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 0
        session = _session_key(key)
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

    v1 keeps a batch's data in TransferQueue, keyed by ``batch.keys``; the key is the row's trajectory id.
    The reward function's extra infos are in each row's ``extra_fields["reward_extra_info"]`` (rewards
    computed while rolling out) or in top-level fields (a colocated reward model), which `fields` asks for
    when the row mapping names them.
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


register()
