"""Redistribution for whatever array type a trainer holds: numpy arrays and torch tensors alike.

Trainers keep advantages as torch tensors (often bf16, often on a GPU); gagar's arithmetic is numpy. This
module is the one bridge: it copies to float64 numpy, calls
:func:`grader.redistribution.redistribute.redistribute_batch`,
and converts back to exactly the input's type, dtype, device and shape. torch is imported only when a tensor
is passed in, so numpy-only users never need it.

It acts on advantages *after* the framework's own group normalization, never on raw rewards: normalizing
redistributed rewards would undo the redistribution (the group mean and std would absorb it).
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Sequence
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from grader.redistribution.redistribute import Preserve, redistribute_batch

__all__ = ["is_torch_tensor", "redistribute_advantages", "to_numpy"]

ArrayT = TypeVar("ArrayT")


def is_torch_tensor(value: object) -> bool:
    """True for a torch tensor, without importing torch when the caller never did."""
    # A tensor can only exist if torch was imported by someone, so checking sys.modules avoids paying for
    # (or requiring) the import on the numpy path.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def to_numpy(value: Any) -> np.ndarray:
    """A numpy copy of an array, tensor or sequence; tensors are detached and moved to the CPU.

    bf16 tensors go through float32 because numpy has no bfloat16 (every bf16 value is exact in float32);
    the redistribution itself then runs in float64.
    """
    if is_torch_tensor(value):
        import torch

        tensor = value.detach()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return tensor.cpu().numpy().copy()
    return np.array(value, copy=True)


def _ids_to_numpy(group_ids: Any) -> ArrayLike | Sequence[Hashable]:
    # Tensor ids become plain integers; strings and other hashables (verl's uid array is an object array of
    # UUID strings) pass through untouched so redistribute_batch can factorize them.
    return to_numpy(group_ids) if is_torch_tensor(group_ids) else group_ids


def redistribute_advantages(
    advantages: ArrayT,
    group_ids: Any,
    passed: Any,
    weights: Any,
    response_mask: Any = None,
    preserve: Preserve = "sequence",
) -> tuple[ArrayT, dict[Hashable, str]]:
    """:func:`grader.redistribution.redistribute.redistribute_batch` for numpy arrays and torch tensors.

    ``advantages`` is ``(N,)`` or ``(N, T)`` (then ``response_mask`` ``(N, T)`` is required); the other
    arguments may each be numpy, torch or plain sequences. Returns a new array or tensor of the same type,
    dtype, device and shape as ``advantages`` (never the input itself, which is not mutated) and
    ``{group_id: reason}`` for the groups left unchanged. Rows that do not change come back bit for bit,
    also in bf16: values are only rounded where they were rescaled.
    """
    if is_torch_tensor(advantages):
        return _redistribute_tensor(advantages, group_ids, passed, weights, response_mask, preserve)
    new, reasons = redistribute_batch(
        np.asarray(advantages),
        _ids_to_numpy(group_ids),
        to_numpy(passed),
        to_numpy(weights),
        None if response_mask is None else to_numpy(response_mask),
        preserve,
    )
    return new, reasons  # type: ignore[return-value]


def _redistribute_tensor(
    advantages: Any,
    group_ids: Any,
    passed: Any,
    weights: Any,
    response_mask: Any,
    preserve: Preserve,
) -> tuple[Any, dict[Hashable, str]]:
    import torch

    if not advantages.is_floating_point():
        raise ValueError(f"advantages must be a floating tensor, got {advantages.dtype}")
    values = to_numpy(advantages)
    new, reasons = redistribute_batch(
        values,
        _ids_to_numpy(group_ids),
        to_numpy(passed),
        to_numpy(weights),
        None if response_mask is None else to_numpy(response_mask),
        preserve,
    )
    result = advantages.detach().clone()
    # Write back only the rows that changed, so everything else keeps its original bits even where the
    # float32 round trip (bf16) could in principle not be exact.
    changed_rows = np.flatnonzero(np.any(new != values, axis=tuple(range(1, new.ndim))))
    if changed_rows.size:
        index = torch.as_tensor(changed_rows, device=result.device)
        update = torch.as_tensor(new[changed_rows], device=result.device).to(result.dtype)
        result[index] = update
    return result, reasons
