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

from grader.integrations.tensors import redistribute_advantages, to_numpy
from grader.integrations.weights import WeightsFn, call_weights_fn
from grader.redistribute import Preserve

try:
    from accelerate.utils import broadcast_object_list, gather, gather_object
    from trl import GRPOTrainer
except ImportError as exc:  # pragma: no cover - exercised only without trl
    raise ImportError("the TRL integration needs trl: pip install trl") from exc

__all__ = ["Collectives", "GagarGRPOTrainer", "redistribute_gathered"]


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
    of this process (e.g. ``prompts``, ``completions``, ``inputs``); ``weights_fn`` receives them gathered.
    Every process must call this (it runs collectives) and gets the same ``{group: reason}`` back.
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
    new, reasons = redistribute_advantages(full, group_ids, passed, weights, preserve=preserve)
    start = collectives.process_index * n_local
    return new[start : start + n_local], reasons


class GagarGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose training advantages are redistributed by gagar weights.

    Extra keyword arguments: ``weights_fn(group_ids, passed, batch)`` (``batch``: gathered ``prompts``,
    ``completions`` and ``inputs``; one weight per sample, 1.0 where not graded), ``pass_reward`` (name or
    index of the reward function whose value says "passed", default the first), ``pass_threshold``
    (default 1.0) and ``preserve``. ``self.gagar_unchanged`` holds the last step's ``{group: reason}``.
    """

    def __init__(
        self,
        *args: Any,
        weights_fn: WeightsFn,
        pass_reward: int | str = 0,
        pass_threshold: float = 1.0,
        preserve: Preserve = "sequence",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.gagar_weights_fn = weights_fn
        self.gagar_pass_column = _reward_column(pass_reward, self.reward_func_names)
        self.gagar_pass_threshold = pass_threshold
        self.gagar_preserve: Preserve = preserve
        self.gagar_unchanged: dict[Hashable, str] = {}
        self._gagar_step: tuple[Any, dict[str, list[Any]]] | None = None

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
