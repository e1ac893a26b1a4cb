"""Adapters from training frameworks to gagar's redistribution.

``tensors``, ``weights``, ``rows`` and ``batch`` are framework-free and import nothing optional. Each
framework module (``verl``, ``trl``, ``slime``, ``openrlhf``) imports its framework, or torch, only when it is
itself imported or called, so ``import grader.integrations`` never needs them.
"""

from grader.integrations.batch import BatchClosed, BatchGrader, CollectError, GuardConfig, StepWeights
from grader.integrations.rows import MappingError, RowError, RowMapping, task_paths
from grader.integrations.tensors import redistribute_advantages, to_numpy
from grader.integrations.weights import WeightsFn, call_weights_fn, weights_from_results

__all__ = [
    "BatchClosed",
    "BatchGrader",
    "CollectError",
    "GuardConfig",
    "MappingError",
    "RowError",
    "RowMapping",
    "StepWeights",
    "WeightsFn",
    "call_weights_fn",
    "redistribute_advantages",
    "task_paths",
    "to_numpy",
    "weights_from_results",
]
