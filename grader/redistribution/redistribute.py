"""Advantage redistribution: turn a grader's ranking of passing trajectories into GRPO advantages.

In a GRPO rollout group every passing trajectory gets the same positive advantage, so the policy learns
"pass the tests" and nothing about which passing patch is better. A grader ranks the passing trajectories
(best first, ties allowed); a weight scheme turns rank positions into weights; and the passing advantages are
rescaled so that their sum is unchanged:

    a'_i = a_i * w_i * S / sum_j(a_j * w_j),    S = sum_j a_j    (j over the passing trajectories)

Failing trajectories keep their advantage bit for bit, so the pass/fail contrast the tests provide is left
exactly as GRPO computed it; only the split of the passing credit changes.

Why the default is ``linear`` with ``floor = 0.5``:

* A linear ramp moves credit in proportion to rank: each step down the ranking costs the same amount, so no
  single boundary in the ranking (which a grader may place arbitrarily among near-equals) carries outsized
  weight, unlike ``top-k`` which puts all the signal on one boundary.
* The floor bounds how much one grader mistake can cost: the worst passing candidate keeps at least half the
  best one's weight, so a correct patch that the grader misjudges still gets a clearly positive advantage and
  passing always stays well above failing.
* Together they keep redistribution a refinement of the test signal rather than a replacement for it: the
  tests decide the sign and the total credit, the grader only reshapes credit among the passing trajectories.

The module is pure numpy with no I/O, in the style of verl's ``core_algos.py``: plain functions over arrays
and weight schemes registered by name in :data:`WEIGHT_SCHEMES`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
from numpy.typing import ArrayLike

from grader.groups.outcomes import RedistributionOutcome

__all__ = [
    "DEFAULT_FLOOR",
    "DEFAULT_SCHEME",
    "PRESERVE_MODES",
    "WEIGHT_SCHEMES",
    "Preserve",
    "Redistribution",
    "WeightScheme",
    "exponential_weights",
    "is_mixed_group",
    "linear_weights",
    "mixed_group_mask",
    "rank_to_weights",
    "redistribute_batch",
    "redistribute_group",
    "register_scheme",
    "top_k_weights",
]

DEFAULT_SCHEME = "linear"
DEFAULT_FLOOR = 0.5

Preserve = Literal["sequence", "token", "none"]
PRESERVE_MODES: tuple[str, ...] = get_args(Preserve)
"""The preserve modes by name, the one list every option, CLI choice and adapter checks against."""

# A scheme maps rank positions 0..n_ranks-1 (0 = best tie group) to weights in (0, 1].
WeightScheme = Callable[..., np.ndarray]
WEIGHT_SCHEMES: dict[str, WeightScheme] = {}

# Checked in this order; a group gets the first reason that applies. Validity comes before uniformity
# because NaN weights are neither uniform nor usable.
_IDENTITY_OUTCOMES: tuple[RedistributionOutcome, ...] = (
    RedistributionOutcome.NO_PASSING,
    RedistributionOutcome.BAD_ADVANTAGE,
    RedistributionOutcome.BAD_WEIGHT,
    RedistributionOutcome.UNIFORM,
    RedistributionOutcome.BAD_SCALE,
)
_APPLIED = -1


# ------------------------------------------------------------------------------------------
# Weight schemes
# ------------------------------------------------------------------------------------------


def register_scheme(name: str) -> Callable[[WeightScheme], WeightScheme]:
    """Register a weight scheme under ``name`` in :data:`WEIGHT_SCHEMES`.

    The decorated function is called as ``scheme(n_ranks, **params)`` and must return ``n_ranks`` finite
    positive weights, best rank first. Registering a name twice is an error, because silently replacing a
    scheme would change training runs that refer to it by name.

    Raises:
        ValueError: (when decorating) ``name`` is already registered.
    """

    def decorator(scheme: WeightScheme) -> WeightScheme:
        if name in WEIGHT_SCHEMES:
            raise ValueError(f"weight scheme {name!r} is already registered")
        WEIGHT_SCHEMES[name] = scheme
        return scheme

    return decorator


def _check_floor(floor: float) -> float:
    if not (isinstance(floor, (int, float, np.integer, np.floating)) and not isinstance(floor, bool)):
        raise ValueError(f"floor must be a number in (0, 1], got {floor!r}")
    floor = float(floor)
    # A zero floor would let a grader erase a passing trajectory's credit entirely; above 1 would invert
    # the ranking.
    if not (0.0 < floor <= 1.0):
        raise ValueError(f"floor must be in (0, 1], got {floor!r}")
    return floor


def _check_n_ranks(n_ranks: int) -> int:
    if isinstance(n_ranks, bool) or not isinstance(n_ranks, (int, np.integer)) or n_ranks < 0:
        raise ValueError(f"n_ranks must be a non-negative integer, got {n_ranks!r}")
    return int(n_ranks)


@register_scheme("linear")
def linear_weights(n_ranks: int, *, floor: float = DEFAULT_FLOOR) -> np.ndarray:
    """Weight 1.0 for the best rank, falling linearly to ``floor`` at the worst; a single rank gets 1.0."""
    n_ranks = _check_n_ranks(n_ranks)
    floor = _check_floor(floor)
    if n_ranks == 1:
        return np.ones(1)
    # linspace pins both endpoints exactly, so the worst rank gets precisely `floor`.
    return np.linspace(1.0, floor, n_ranks)


@register_scheme("exponential")
def exponential_weights(n_ranks: int, *, decay: float = 0.5, floor: float = DEFAULT_FLOOR) -> np.ndarray:
    """Weight ``max(floor, decay ** r)`` for rank position ``r``.

    Raises:
        ValueError: ``n_ranks`` is not a positive integer, ``floor`` is not in (0, 1], or ``decay`` is not
            in (0, 1].
    """
    n_ranks = _check_n_ranks(n_ranks)
    floor = _check_floor(floor)
    if not (isinstance(decay, (int, float, np.integer, np.floating)) and 0.0 < float(decay) <= 1.0):
        # decay > 1 would reward worse ranks more.
        raise ValueError(f"decay must be in (0, 1], got {decay!r}")
    return np.maximum(floor, float(decay) ** np.arange(n_ranks, dtype=np.float64))


@register_scheme("top-k")
def top_k_weights(n_ranks: int, *, k: int = 1, floor: float = DEFAULT_FLOOR) -> np.ndarray:
    """Weight 1.0 for the first ``k`` rank positions and ``floor`` for the rest.

    Raises:
        ValueError: ``n_ranks`` is not a positive integer, ``floor`` is not in (0, 1], or ``k`` is not an
            integer >= 1.
    """
    n_ranks = _check_n_ranks(n_ranks)
    floor = _check_floor(floor)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    weights = np.full(n_ranks, floor)
    weights[: int(k)] = 1.0
    return weights


def rank_to_weights(
    ranking: Sequence[Sequence[str]], scheme: str = DEFAULT_SCHEME, **params: Any
) -> dict[str, float]:
    """Turn a ranking into a weight per trajectory id.

    ``ranking`` lists tie groups best first; the rank position of an id is the index of its tie group, so all
    members of a tie group share one weight. ``params`` go to the scheme (e.g. ``floor``, ``decay``, ``k``).
    An empty ranking gives an empty dict. Raises ValueError for an unknown scheme, an empty tie group, a tie
    group given as a bare string, or an id that appears more than once.
    """
    if scheme not in WEIGHT_SCHEMES:
        raise ValueError(f"unknown weight scheme {scheme!r}; known: {sorted(WEIGHT_SCHEMES)}")
    rank_of: dict[str, int] = {}
    for position, tie_group in enumerate(ranking):
        # A bare string is a Sequence[str] too; iterating it would silently rank its characters.
        if isinstance(tie_group, str):
            raise ValueError(f"tie group {position} is the string {tie_group!r}; expected a list of ids")
        if len(tie_group) == 0:
            raise ValueError(f"tie group {position} of the ranking is empty")
        for trajectory_id in tie_group:
            if trajectory_id in rank_of:
                raise ValueError(
                    f"id {trajectory_id!r} appears more than once in the ranking "
                    f"(tie groups {rank_of[trajectory_id]} and {position})"
                )
            rank_of[trajectory_id] = position

    n_ranks = len(ranking)
    weights = np.asarray(WEIGHT_SCHEMES[scheme](n_ranks, **params), dtype=np.float64)
    # Schemes can be registered from outside; a bad one must fail here, not as NaN advantages in training.
    if weights.shape != (n_ranks,) or not np.all(np.isfinite(weights) & (weights > 0)):
        raise ValueError(
            f"weight scheme {scheme!r} returned {weights!r} for {n_ranks} ranks; "
            "expected that many finite positive weights"
        )
    return {trajectory_id: float(weights[position]) for trajectory_id, position in rank_of.items()}


# ------------------------------------------------------------------------------------------
# Redistribution
# ------------------------------------------------------------------------------------------


# eq=False: the generated __eq__ would compare arrays with `==` and fail on truthiness; identity is the
# only equality that makes sense for a result holding an array.
@dataclass(frozen=True, eq=False)
class Redistribution:
    """Result of redistributing one group: the new advantages, whether anything changed, and why not."""

    advantages: np.ndarray
    applied: bool
    reason: str
    outcome: RedistributionOutcome = RedistributionOutcome.APPLIED


def _as_float_array(values: ArrayLike, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric, got dtype {array.dtype}")
    if array.dtype.kind != "f":
        array = array.astype(np.float64)
    return array


def _as_bool_vector(values: ArrayLike, n: int, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {array.shape}")
    if array.dtype == np.bool_:
        return array
    # 0/1 flags from a reward tensor are common; anything else is more likely a bug than a flag.
    if array.dtype.kind not in "biuf" or not np.all((array == 0) | (array == 1)):
        raise ValueError(f"{name} must be boolean (or 0/1), got dtype {array.dtype}")
    return array.astype(np.bool_)


def _as_vector(values: ArrayLike, n: int, name: str) -> np.ndarray:
    array = _as_float_array(values, name)
    if array.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {array.shape}")
    return array.astype(np.float64, copy=False)


def _check_preserve(preserve: str) -> None:
    if preserve not in PRESERVE_MODES:
        raise ValueError(f"preserve must be one of {PRESERVE_MODES}, got {preserve!r}")


def _redistribute_flat(
    advantages: np.ndarray,
    group_index: np.ndarray,
    n_groups: int,
    passed: np.ndarray,
    weights: np.ndarray,
    lengths: np.ndarray | None,
    preserve: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized core over flat float64 arrays of any number of groups.

    Returns the new advantages (float64; only passing entries of applied groups differ from the input) and a
    per-group code: an index into ``_IDENTITY_OUTCOMES``, or ``_APPLIED``.
    """

    def any_in_group(flags: np.ndarray) -> np.ndarray:
        return np.bincount(group_index, weights=flags, minlength=n_groups) > 0

    has_passing = any_in_group(passed)
    bad_advantage = any_in_group(passed & ~(np.isfinite(advantages) & (advantages > 0)))
    bad_weight = any_in_group(passed & ~(np.isfinite(weights) & (weights > 0)))

    # NaN weights already mark their group; leaving them out keeps max/min free of invalid-value warnings.
    comparable = passed & ~np.isnan(weights)
    max_weight = np.full(n_groups, -np.inf)
    min_weight = np.full(n_groups, np.inf)
    np.maximum.at(max_weight, group_index[comparable], weights[comparable])
    np.minimum.at(min_weight, group_index[comparable], weights[comparable])
    uniform = max_weight == min_weight

    candidate = has_passing & ~bad_advantage & ~bad_weight & ~uniform
    usable = passed & candidate[group_index]
    # Zero out everything not redistributed so NaN/inf in ignored entries cannot leak into the group sums.
    usable_advantages = np.where(usable, advantages, 0.0)
    usable_weights = np.where(usable, weights, 0.0)

    if preserve == "none":
        scale = np.ones(n_groups)
    else:
        if preserve == "token":
            assert lengths is not None
            # Token-mean losses see each advantage once per response token, so the token-weighted sum is
            # the credit the loss actually distributes.
            size = np.where(usable, lengths, 0.0)
        else:
            size = np.ones_like(usable_advantages)
        kept_credit = np.bincount(group_index, weights=usable_advantages * size, minlength=n_groups)
        weighted_credit = np.bincount(
            group_index, weights=usable_advantages * usable_weights * size, minlength=n_groups
        )
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            scale = np.divide(
                kept_credit, weighted_credit, out=np.zeros(n_groups), where=candidate & (weighted_credit != 0)
            )
    bad_scale = candidate & ~(np.isfinite(scale) & (scale > 0))

    codes = np.select(
        [~has_passing, bad_advantage, bad_weight, uniform, bad_scale],
        list(range(len(_IDENTITY_OUTCOMES))),
        default=_APPLIED,
    )
    changed = passed & (codes == _APPLIED)[group_index]
    new_advantages = advantages.copy()
    new_advantages[changed] = advantages[changed] * weights[changed] * scale[group_index[changed]]
    return new_advantages, codes


def redistribute_group(
    advantages: ArrayLike,
    passed: ArrayLike,
    weights: ArrayLike,
    lengths: ArrayLike | None = None,
    preserve: Preserve = "sequence",
) -> Redistribution:
    """Redistribute one group's passing advantages by ``weights``.

    All arguments are 1-D with one entry per trajectory; weights of failing trajectories are ignored.
    ``preserve`` selects what stays constant over the passing trajectories: ``"sequence"`` keeps
    ``sum a_i``; ``"token"`` keeps ``sum a_i * len_i`` (for token-mean losses; needs positive ``lengths``
    for the passing trajectories); ``"none"`` applies ``a_i * w_i`` without rescaling (an ablation).

    Returns the identity (``applied=False``, an unchanged copy, and the reason) when there is no passing
    trajectory, a passing advantage is not finite and positive, a passing weight is not finite and positive,
    or all passing weights are equal. Whether the group has a pass/fail contrast is the caller's decision.
    The output keeps the input's floating dtype (float64 for non-float input); failing entries are copied
    bit for bit. Raises ValueError on mismatched shapes, an unknown ``preserve``, or bad ``lengths``.
    """
    _check_preserve(preserve)
    original = _as_float_array(advantages, "advantages")
    if original.ndim != 1:
        raise ValueError(f"advantages must be 1-D, got shape {original.shape}")
    n = original.shape[0]
    passed_flags = _as_bool_vector(passed, n, "passed")
    weight_values = _as_vector(weights, n, "weights")

    length_values: np.ndarray | None = None
    if preserve == "token":
        if lengths is None:
            raise ValueError('preserve="token" requires lengths')
        length_values = _as_vector(lengths, n, "lengths")
        passing_lengths = length_values[passed_flags]
        if not np.all(np.isfinite(passing_lengths) & (passing_lengths > 0)):
            raise ValueError("lengths of passing trajectories must be finite and positive")
    elif lengths is not None:
        _as_vector(lengths, n, "lengths")

    new_advantages, codes = _redistribute_flat(
        original.astype(np.float64),
        np.zeros(n, dtype=np.intp),
        1,
        passed_flags,
        weight_values,
        length_values,
        preserve,
    )
    result = original.copy()
    if codes[0] != _APPLIED:
        outcome = _IDENTITY_OUTCOMES[codes[0]]
        return Redistribution(advantages=result, applied=False, reason=outcome.text, outcome=outcome)
    result[passed_flags] = new_advantages[passed_flags]
    return Redistribution(advantages=result, applied=True, reason="")


def _factorize(group_ids: ArrayLike | Sequence[Hashable], n: int) -> tuple[np.ndarray, list[Hashable]]:
    """Map group ids to dense indices 0..G-1; returns the per-element index and the id of each index."""
    if isinstance(group_ids, np.ndarray):
        ids = group_ids
    else:
        # Build an object array element by element: np.asarray would coerce mixed ints and strings to strings
        # (merging 1 and "1") and turn tuple ids into a 2-D array.
        id_list = list(group_ids)  # type: ignore[arg-type]
        ids = np.fromiter(id_list, dtype=object, count=len(id_list))
    if ids.shape != (n,):
        raise ValueError(f"group_ids must have shape ({n},), got {ids.shape}")
    try:
        unique_ids, inverse = np.unique(ids, return_inverse=True)
    except TypeError:
        # Unorderable mixtures (e.g. ints and strings) cannot be sorted; hashing still works.
        index_of: dict[Hashable, int] = {}
        inverse = np.fromiter((index_of.setdefault(g, len(index_of)) for g in ids), dtype=np.intp, count=n)
        return inverse, list(index_of)
    keys = [key.item() if isinstance(key, np.generic) else key for key in unique_ids]
    return inverse.reshape(n).astype(np.intp, copy=False), keys


def redistribute_batch(
    advantages: ArrayLike,
    group_ids: ArrayLike | Sequence[Hashable],
    passed: ArrayLike,
    weights: ArrayLike,
    response_mask: ArrayLike | None = None,
    preserve: Preserve = "sequence",
    lengths: ArrayLike | None = None,
) -> tuple[np.ndarray, dict[Hashable, str]]:
    """Redistribute every group of a flat batch at once.

    ``advantages`` is ``(N,)`` or ``(N, T)``; ``group_ids`` ``(N,)`` hashable ids; ``passed`` ``(N,)`` bool;
    ``weights`` ``(N,)`` (1.0 where a trajectory was not graded). For ``(N, T)`` input ``response_mask``
    ``(N, T)`` of 0/1 is required: the sequence advantage is the masked row mean (GRPO broadcasts one scalar
    over the response tokens), the length is the mask row sum, and each changed row is multiplied by
    ``a'_i / a_i`` (changed rows always have ``a_i > 0``), so zeros stay zeros. For ``(N,)`` input the mask is
    only needed for ``preserve="token"``, to supply lengths; ``lengths`` ``(N,)`` (response lengths in tokens)
    may supply them instead, without building an ``(N, T)`` mask, and is rejected together with a mask.

    Returns a new array of exactly the input's shape and floating dtype (the input is never mutated) and a
    dict ``group_id -> reason`` for the groups left unchanged; see :func:`redistribute_group` for the
    reasons. A passing row with an empty mask has advantage 0, so its group is left unchanged.

    Raises:
        ValueError: a shape, dtype or value is off (the message names the argument): advantages not (N,) or
            (N, T), inputs of other lengths, a mask not 0/1, lengths with a mask, an unknown ``preserve``.
            A non-finite advantage or weight is no error: its group is left unchanged, with the reason.
    """
    _check_preserve(preserve)
    original = _as_float_array(advantages, "advantages")
    if original.ndim not in (1, 2):
        raise ValueError(f"advantages must be (N,) or (N, T), got shape {original.shape}")
    n = original.shape[0]
    group_index, group_keys = _factorize(group_ids, n)
    passed_flags = _as_bool_vector(passed, n, "passed")
    weight_values = _as_vector(weights, n, "weights")

    mask: np.ndarray | None = None
    if response_mask is not None:
        mask = _as_float_array(response_mask, "response_mask")
        if mask.ndim != 2 or mask.shape[0] != n:
            raise ValueError(f"response_mask must have shape ({n}, T), got {mask.shape}")
        if original.ndim == 2 and mask.shape != original.shape:
            raise ValueError(
                f"response_mask shape {mask.shape} differs from advantages shape {original.shape}"
            )
        if not np.all((mask == 0) | (mask == 1)):
            raise ValueError("response_mask must contain only 0 and 1")
        mask = mask.astype(np.float64, copy=False)
    elif original.ndim == 2:
        raise ValueError("response_mask is required when advantages is 2-D")
    elif preserve == "token" and lengths is None:
        raise ValueError('preserve="token" requires response_mask or lengths to give response lengths')

    length_values: np.ndarray | None = None
    if lengths is not None:
        if mask is not None:
            raise ValueError("give response_mask or lengths, not both")
        length_values = _as_vector(lengths, n, "lengths")
        if preserve == "token":
            passing_lengths = length_values[passed_flags]
            if not np.all(np.isfinite(passing_lengths) & (passing_lengths > 0)):
                raise ValueError("lengths of passing trajectories must be finite and positive")
    elif mask is not None:
        length_values = mask.sum(axis=1)
    if original.ndim == 2:
        assert mask is not None and length_values is not None
        row_sums = np.einsum("nt,nt->n", original.astype(np.float64, copy=False), mask)
        sequence_advantages = np.divide(row_sums, length_values, out=np.zeros(n), where=length_values > 0)
    else:
        sequence_advantages = original.astype(np.float64)

    new_sequence_advantages, codes = _redistribute_flat(
        sequence_advantages,
        group_index,
        len(group_keys),
        passed_flags,
        weight_values,
        length_values,
        preserve,
    )
    reasons = {
        group_keys[g]: _IDENTITY_OUTCOMES[code].text for g, code in enumerate(codes) if code != _APPLIED
    }

    result = original.copy()
    changed = passed_flags & (codes == _APPLIED)[group_index]
    if original.ndim == 1:
        result[changed] = new_sequence_advantages[changed]
    else:
        factor = new_sequence_advantages[changed] / sequence_advantages[changed]
        result[changed] = original[changed].astype(np.float64) * factor[:, None]
    return result, reasons


# ------------------------------------------------------------------------------------------
# Contrast helpers
# ------------------------------------------------------------------------------------------


def _as_passed_vector(passed: ArrayLike) -> np.ndarray:
    flags = np.asarray(passed)
    if flags.ndim != 1:
        raise ValueError(f"passed must be 1-D, got shape {flags.shape}")
    return _as_bool_vector(flags, flags.shape[0], "passed")


def is_mixed_group(passed: ArrayLike) -> bool:
    """True when the group has at least one passing and at least one failing trajectory."""
    flags = _as_passed_vector(passed)
    return bool(flags.any() and not flags.all())


def mixed_group_mask(group_ids: ArrayLike | Sequence[Hashable], passed: ArrayLike) -> np.ndarray:
    """Per element: does its group contain both a passing and a failing trajectory."""
    flags = _as_passed_vector(passed)
    group_index, group_keys = _factorize(group_ids, flags.shape[0])
    group_size = np.bincount(group_index, minlength=len(group_keys))
    passing_count = np.bincount(group_index, weights=flags, minlength=len(group_keys))
    mixed = (passing_count > 0) & (passing_count < group_size)
    return mixed[group_index]


def shrink_weights(weights: dict[str, float], shrink: float) -> dict[str, float]:
    """Pull weights toward 1 (uniform): w' = 1 - shrink * (1 - w). shrink 1 keeps them, 0 makes them uniform.

    For a grader unsure of itself (a consensus whose gradings disagree). Monotone in w for shrink > 0, so it
    never reorders candidates; scheme weights lie in (0, 1], so the results do too and the floor only rises.

    Raises:
        ValueError: ``shrink`` is outside [0, 1].
    """
    if not 0.0 <= shrink <= 1.0:
        raise ValueError(f"shrink must be in [0, 1], got {shrink!r}")
    return {tid: 1.0 - shrink * (1.0 - w) for tid, w in weights.items()}
