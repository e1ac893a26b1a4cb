"""Adapters from training frameworks to gagar's redistribution.

``tensors``, ``weights``, ``rows`` and ``batch`` are framework-free and import nothing optional. Each
framework module (``verl``, ``trl``, ``slime``, ``openrlhf``) imports its framework, or torch, only when it is
itself imported or called, so ``import grader.integrations`` never needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.util.lazy import lazy_exports

if TYPE_CHECKING:
    from grader.integrations.batch import BatchClosed, BatchGrader, CollectError, GuardConfig, StepWeights
    from grader.integrations.rows import MappingError, RowError, RowMapping, task_paths
    from grader.integrations.tensors import redistribute_advantages, to_numpy
    from grader.integrations.weights import WeightsFn, call_weights_fn, weights_from_results

# Loaded on first use (grader.util.lazy): importing the package loads none of these modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BatchClosed": "grader.integrations.batch",
        "BatchGrader": "grader.integrations.batch",
        "CollectError": "grader.integrations.batch",
        "GuardConfig": "grader.integrations.batch",
        "StepWeights": "grader.integrations.batch",
        "MappingError": "grader.integrations.rows",
        "RowError": "grader.integrations.rows",
        "RowMapping": "grader.integrations.rows",
        "task_paths": "grader.integrations.rows",
        "redistribute_advantages": "grader.integrations.tensors",
        "to_numpy": "grader.integrations.tensors",
        "WeightsFn": "grader.integrations.weights",
        "call_weights_fn": "grader.integrations.weights",
        "weights_from_results": "grader.integrations.weights",
    },
    globals(),
)

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
