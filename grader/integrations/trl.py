"""TRL: a ``GRPOTrainer`` that redistributes advantages over whole groups, even when a group spans processes.

In TRL's ``GRPOTrainer._generate_and_score_completions`` each process generates completions for its own
slice of the generation batch; ``_calculate_rewards`` gathers the rewards of all processes, advantages are
computed per group of ``num_generations`` consecutive samples over that gathered batch, and each process
then keeps only its slice (``process_index * n_local`` onwards) in ``output["advantages"]``. A group can
straddle two processes, so weights computed from a process's own slice would see part of a group only.

:class:`GagarGRPOTrainer` therefore works at the gathered level: it records the gathered reward matrix in
``_calculate_rewards``, and after TRL's ``_generate_and_score_completions`` it gathers the local advantages
back into the full batch (``gather`` concatenates in process order, which reproduces TRL's own gathered
advantages), gathers the prompts, completions and inputs for the weights function, computes weights once on
the main process and broadcasts them (so a nondeterministic grader cannot give processes different
weights), redistributes the full batch and keeps this process's slice again. With uniform weights the
advantages are exactly TRL's. Only training batches are redistributed. TRL's logged ``advantages`` column is
its own, from before redistribution.

Tested against the real trl package (``pip install trl``; runs on CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from grader.integrations.batch import BatchGrader, StepWeights
from grader.integrations.deadlines import checked_seconds
from grader.integrations.tensors import redistribute_advantages, to_numpy
from grader.integrations.weights import WeightsFn, call_weights_fn
from grader.redistribution.redistribute import Preserve

try:
    from accelerate.utils import broadcast_object_list, gather, gather_object
    from trl import GRPOTrainer
except ImportError as exc:  # pragma: no cover - exercised only without trl
    raise ImportError("the TRL integration needs trl: pip install trl") from exc

__all__ = ["Collectives", "GagarGRPOTrainer", "default_preserve", "redistribute_gathered", "trainer_rows"]


@dataclass
class Collectives:
    """The cross-process operations the redistribution needs, so it can be tested without processes."""

    process_index: int
    is_main_process: bool
    gather: Callable[[Any], Any]  # tensor -> tensors of all processes concatenated in process order
    gather_object: Callable[[list[Any]], list[Any]]  # list -> lists of all processes concatenated
    broadcast_object: Callable[[Any], Any]  # the main process's object, on every process


def redistribute_gathered(
    local_advantages: Any,
    rewards_per_func: Any,
    num_generations: int,
    local_batch: dict[str, list[Any]],
    weights_fn: WeightsFn,
    collectives: Collectives,
    pass_column: int = 0,
    pass_threshold: float = 1.0,
    preserve: Preserve = "sequence",
) -> tuple[Any, dict[Hashable, str]]:
    """Redistribute one process's advantages using the whole gathered batch; returns its new slice.

    ``rewards_per_func`` is TRL's gathered ``(N, n_reward_funcs)`` matrix; a sample passed when column
    ``pass_column`` is ``>= pass_threshold`` (NaN: failed). ``local_batch`` maps names to per-sample lists
    of this process (e.g. ``prompts``, ``completions``, ``inputs``, ``response_lengths``, the last needed for
    ``preserve="token"``); ``weights_fn`` receives them gathered.
    Every process must call this (it runs collectives) and gets the same ``{group: reason}`` back.

    Raises:
        ValueError: the gathered rewards and advantages differ in length, ``preserve="token"`` without
            ``response_lengths``, or weights of the wrong shape or not finite.
    """
    full = collectives.gather(local_advantages)
    n_local = int(local_advantages.shape[0])
    column = to_numpy(rewards_per_func)[:, pass_column].astype(np.float64)
    passed = np.nan_to_num(column, nan=-np.inf) >= pass_threshold
    if passed.shape[0] != full.shape[0]:
        raise ValueError(f"{passed.shape[0]} gathered rewards for {full.shape[0]} gathered advantages")
    # TRL's sampler puts the num_generations completions of a prompt next to each other in the global batch.
    group_ids = np.arange(full.shape[0]) // num_generations
    batch = {name: collectives.gather_object(list(values)) for name, values in sorted(local_batch.items())}
    weights = call_weights_fn(weights_fn, group_ids, passed, batch) if collectives.is_main_process else None
    weights = np.asarray(collectives.broadcast_object(weights), dtype=np.float64)
    mask = None
    if preserve == "token":
        if "response_lengths" not in batch:
            raise ValueError('preserve="token" needs "response_lengths" in local_batch')
        lengths = np.asarray(batch["response_lengths"], dtype=np.int64)
        mask = np.arange(max(1, int(lengths.max(initial=0)))) < lengths[:, None]
    new, reasons = redistribute_advantages(full, group_ids, passed, weights, mask, preserve)
    start = collectives.process_index * n_local
    return new[start : start + n_local], reasons


SEQUENCE_MEAN_LOSSES = frozenset({"grpo", "sapo"})
"""TRL loss types that average each sequence's tokens before averaging sequences; every other loss type
(``dapo``, the default, ``bnpo``, ``dr_grpo``, ``cispo``, ``vespo``, ``luspo``) weighs a trajectory by its
token count, so preservation must keep the token-weighted advantage sum."""


def default_preserve(loss_type: str) -> Preserve:
    """The preserve mode TRL's loss aggregation needs: ``sequence`` for grpo/sapo, ``token`` otherwise.

    Args:
        loss_type: ``GRPOConfig.loss_type``.
    Returns:
        ``"sequence"`` or ``"token"``.
    """
    return "sequence" if loss_type in SEQUENCE_MEAN_LOSSES else "token"


def trainer_rows(
    group_ids: np.ndarray, passed: np.ndarray, batch: dict[str, list[Any]], step: int
) -> list[dict[str, Any]]:
    """The gathered batch as rows for a :class:`~grader.integrations.batch.BatchGrader`.

    Each row holds the sample's dataset columns and rollout extra fields (its ``inputs`` entry), then
    ``prompt``, ``completion``, ``group_id`` (``"<step>-<group>"``, unique across steps), ``trajectory_id``
    (its position in the group), ``passed`` and ``response_length`` (completion tokens), which take
    precedence over columns of the same name.

    Args:
        group_ids: the group of each gathered sample.
        passed: its pass flag.
        batch: the gathered ``prompts``, ``completions``, ``inputs`` and ``response_lengths``.
        step: the trainer's global step.
    Returns:
        one dict per sample, in the gathered order.
    """
    rows = []
    inputs, lengths = batch.get("inputs", []), batch.get("response_lengths", [])
    for i, group in enumerate(group_ids.tolist()):
        row = dict(inputs[i]) if i < len(inputs) and isinstance(inputs[i], dict) else {}
        row.update(
            prompt=batch["prompts"][i],
            completion=batch["completions"][i],
            group_id=f"{step}-{group}",
            trajectory_id=str(i - int(np.flatnonzero(group_ids == group)[0])),
            passed=bool(passed[i]),
            response_length=int(lengths[i]) if i < len(lengths) else None,
        )
        rows.append(row)
    return rows


class GagarGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose training advantages are redistributed by gagar weights.

    Give either ``grader``, a :class:`~grader.integrations.batch.BatchGrader` whose row mapping says where
    each sample's patch and task are (rows are built by :func:`trainer_rows`: dataset columns, rollout extra
    fields, ``completion``, ...), or a hand-written ``weights_fn(group_ids, passed, batch)`` (``batch``:
    gathered ``prompts``, ``completions``, ``inputs`` and ``response_lengths``; one weight per sample, 1.0
    where not graded). Other keyword arguments: ``deadline`` (seconds the step waits for grading at most;
    groups still grading then keep their advantages), ``pass_reward`` (name or index of the reward function
    whose value says "passed", default the first), ``pass_threshold`` (default 1.0) and ``preserve``
    (default :func:`default_preserve` of ``args.loss_type``: ``token`` for TRL's default ``dapo``).

    TRL 1.16 computes rewards after the old and reference log-probs, so grading has nothing to overlap with
    inside the step: it is submitted and collected back to back, and ``deadline`` bounds the wait. The
    grader's metrics (``gagar/...``) go to TRL's own metric logging; ``self.gagar_unchanged`` holds the
    last step's ``{group: reason}`` and ``self.gagar_step`` the grader's last ``StepWeights``.

    Raises:
        ValueError: (constructor) neither or both of ``grader`` and ``weights_fn`` are given, or the
            deadline is NaN (``math.inf`` waits for every group; ``grader.integrations.deadlines``).
        TypeError: (constructor) the deadline is not a number.
    """

    def __init__(
        self,
        *args: Any,
        weights_fn: WeightsFn | None = None,
        grader: BatchGrader | None = None,
        deadline: float | None = None,
        pass_reward: int | str = 0,
        pass_threshold: float = 1.0,
        preserve: Preserve | None = None,
        **kwargs: Any,
    ) -> None:
        if (weights_fn is None) == (grader is None):
            raise ValueError("give GagarGRPOTrainer exactly one of grader or weights_fn")
        checked_seconds(deadline, "deadline")  # refused here, before training, never in a step
        super().__init__(*args, **kwargs)
        self.gagar_grader = grader
        self.gagar_deadline = deadline
        self.gagar_weights_fn: WeightsFn = weights_fn or self._grade_batch
        self.gagar_pass_column = _reward_column(pass_reward, self.reward_func_names)
        self.gagar_pass_threshold = pass_threshold
        self.gagar_preserve: Preserve = preserve or default_preserve(self.loss_type)
        self.gagar_unchanged: dict[Hashable, str] = {}
        self.gagar_step: StepWeights | None = None
        self._gagar_step: tuple[Any, dict[str, list[Any]]] | None = None

    def _grade_batch(self, group_ids: np.ndarray, passed: np.ndarray, batch: dict[str, list[Any]]) -> Any:
        # Runs on the main process only; the weights are broadcast to the others.
        assert self.gagar_grader is not None
        rows = trainer_rows(group_ids, passed, batch, self.state.global_step)
        self.gagar_grader.submit(rows)
        self.gagar_step = self.gagar_grader.weights(rows, self.gagar_deadline)
        mode = "train" if self.model.training else "eval"
        for key, value in self.gagar_step.metrics.items():
            self._metrics[mode][key].append(value)
        return self.gagar_step.weights

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # type: ignore[no-untyped-def]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        # Already gathered across processes by TRL; the local lists are gathered later, in step with the
        # advantages, so every process runs the same collectives in the same order.
        self._gagar_step = (
            rewards_per_func,
            {"prompts": list(prompts), "completions": list(completions), "inputs": list(inputs)},
        )
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):  # type: ignore[no-untyped-def]
        output = super()._generate_and_score_completions(inputs)
        step, self._gagar_step = self._gagar_step, None
        if step is None or not self.model.training:
            return output
        rewards_per_func, local_batch = step
        local_batch["response_lengths"] = output["completion_mask"].sum(dim=1).tolist()
        accelerator = self.accelerator
        collectives = Collectives(
            process_index=accelerator.process_index,
            is_main_process=accelerator.is_main_process,
            gather=gather,
            gather_object=gather_object,
            broadcast_object=_broadcast_object,
        )
        output["advantages"], self.gagar_unchanged = redistribute_gathered(
            output["advantages"],
            rewards_per_func,
            self.num_generations,
            local_batch,
            self.gagar_weights_fn,
            collectives,
            pass_column=self.gagar_pass_column,
            pass_threshold=self.gagar_pass_threshold,
            preserve=self.gagar_preserve,
        )
        return output


def _broadcast_object(value: Any) -> Any:
    holder = [value]
    broadcast_object_list(holder, from_process=0)
    return holder[0]


def _reward_column(pass_reward: int | str, names: Sequence[str]) -> int:
    if isinstance(pass_reward, str):
        if pass_reward not in names:
            raise ValueError(f"pass_reward {pass_reward!r} is not one of the reward functions {list(names)}")
        return list(names).index(pass_reward)
    if not 0 <= pass_reward < len(names):
        raise ValueError(f"pass_reward index {pass_reward} out of range for {len(names)} reward functions")
    return pass_reward
