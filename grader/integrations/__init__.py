"""Adapters from training frameworks to gagar's redistribution.

``tensors`` and ``weights`` are framework-free and import nothing optional. Each framework module
(``verl``, ``trl``, ``slime``, ``openrlhf``) imports its framework, or torch, only when it is itself imported
or called, so ``import grader.integrations`` never needs them.
"""

from grader.integrations.tensors import redistribute_advantages, to_numpy
from grader.integrations.weights import WeightsFn, call_weights_fn, weights_from_results

__all__ = ["WeightsFn", "call_weights_fn", "redistribute_advantages", "to_numpy", "weights_from_results"]
