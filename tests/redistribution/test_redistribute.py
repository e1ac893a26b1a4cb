"""Tests for grader.redistribution.redistribute: weight schemes, per-group and batch redistribution, contrast
helpers."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.redistribution.redistribute import (
    DEFAULT_FLOOR,
    DEFAULT_SCHEME,
    PRESERVE_MODES,
    WEIGHT_SCHEMES,
    Redistribution,
    is_mixed_group,
    mixed_group_mask,
    rank_to_weights,
    redistribute_batch,
    redistribute_group,
    register_scheme,
)

GRPO_EPS = 1e-6
BUILTIN_SCHEMES = ("linear", "exponential", "top-k")
PROPERTY_SETTINGS = settings(max_examples=200, deadline=None)


def grpo_advantages(rewards: np.ndarray) -> np.ndarray:
    """GRPO outcome advantages of one group: (r - mean) / (unbiased std + eps)."""
    return (rewards - rewards.mean()) / (rewards.std(ddof=1) + GRPO_EPS)


def assert_relatively_close(actual: float, expected: float, rel: float = 1e-9) -> None:
    assert abs(actual - expected) <= rel * abs(expected), (actual, expected)


# ------------------------------------------------------------------------------------------
# Strategies
# ------------------------------------------------------------------------------------------

floors = st.floats(min_value=0.0, max_value=1.0, exclude_min=True)
scheme_params = st.one_of(
    st.tuples(st.just("linear"), st.fixed_dictionaries({"floor": floors})),
    st.tuples(
        st.just("exponential"),
        st.fixed_dictionaries({"floor": floors, "decay": st.floats(0.0, 1.0, exclude_min=True)}),
    ),
    st.tuples(st.just("top-k"), st.fixed_dictionaries({"floor": floors, "k": st.integers(1, 4)})),
)


@dataclass
class GradedGroup:
    """A GRPO-shaped group whose passing trajectories were ranked and weighted."""

    advantages: np.ndarray
    passed: np.ndarray
    weights: np.ndarray
    lengths: np.ndarray
    rank_position: dict[int, int]  # trajectory index -> index of its tie group (passing ones only)

    def redistributed(self, preserve: str) -> Redistribution:
        """The group redistributed under `preserve`."""
        return redistribute_group(
            self.advantages,
            self.passed,
            self.weights,
            self.lengths,
            preserve,  # type: ignore[arg-type]
        )


@st.composite
def ranked_tie_groups(draw: st.DrawFn, members: list[int]) -> list[list[int]]:
    """A random ranking of ``members`` with random ties."""
    order = draw(st.permutations(members))
    starts_new_group = draw(st.lists(st.booleans(), min_size=len(order) - 1, max_size=len(order) - 1))
    ranking = [[order[0]]]
    for member, new_group in zip(order[1:], starts_new_group, strict=True):
        if new_group:
            ranking.append([member])
        else:
            ranking[-1].append(member)
    return ranking


@st.composite
def graded_groups(draw: st.DrawFn, max_size: int = 12) -> GradedGroup:
    """Binary rewards with at least one pass and one fail, GRPO advantages, and rank-derived weights."""
    size = draw(st.integers(2, max_size))
    n_passing = draw(st.integers(1, size - 1))
    order = draw(st.permutations(range(size)))
    rewards = np.array([1.0] * n_passing + [0.0] * (size - n_passing))[list(order)]
    passed = rewards == 1.0
    ranking = draw(ranked_tie_groups([int(i) for i in np.flatnonzero(passed)]))
    scheme, params = draw(scheme_params)
    weight_of = rank_to_weights([[f"t{i}" for i in tie] for tie in ranking], scheme, **params)
    weights = np.ones(size)
    for i in np.flatnonzero(passed):
        weights[i] = weight_of[f"t{i}"]
    lengths = np.array(draw(st.lists(st.integers(1, 4096), min_size=size, max_size=size)), dtype=np.float64)
    rank_position = {member: position for position, tie in enumerate(ranking) for member in tie}
    return GradedGroup(grpo_advantages(rewards), passed, weights, lengths, rank_position)


# ------------------------------------------------------------------------------------------
# Weight schemes
# ------------------------------------------------------------------------------------------


def test_defaults() -> None:
    assert DEFAULT_SCHEME == "linear"
    assert DEFAULT_FLOOR == 0.5
    assert set(BUILTIN_SCHEMES) <= set(WEIGHT_SCHEMES)


@pytest.mark.parametrize(
    ("n_ranks", "floor", "expected"),
    [
        (1, 0.5, [1.0]),
        (1, 0.1, [1.0]),
        (2, 0.5, [1.0, 0.5]),
        (3, 0.5, [1.0, 0.75, 0.5]),
        (5, 0.2, [1.0, 0.8, 0.6, 0.4, 0.2]),
        (4, 1.0, [1.0, 1.0, 1.0, 1.0]),
        (0, 0.5, []),
    ],
)
def test_linear_values(n_ranks: int, floor: float, expected: list[float]) -> None:
    np.testing.assert_allclose(WEIGHT_SCHEMES["linear"](n_ranks, floor=floor), expected, rtol=1e-15)


def test_linear_endpoints_are_exact() -> None:
    weights = WEIGHT_SCHEMES["linear"](7, floor=0.1)
    assert weights[0] == 1.0
    assert weights[-1] == 0.1


@pytest.mark.parametrize(
    ("n_ranks", "params", "expected"),
    [
        (4, {}, [1.0, 0.5, 0.5, 0.5]),
        (5, {"floor": 0.1}, [1.0, 0.5, 0.25, 0.125, 0.1]),
        (3, {"decay": 0.9, "floor": 0.5}, [1.0, 0.9, 0.81]),
        (4, {"decay": 0.8, "floor": 0.6}, [1.0, 0.8, 0.64, 0.6]),
        (3, {"decay": 1.0}, [1.0, 1.0, 1.0]),
    ],
)
def test_exponential_values(n_ranks: int, params: dict[str, float], expected: list[float]) -> None:
    np.testing.assert_allclose(WEIGHT_SCHEMES["exponential"](n_ranks, **params), expected, rtol=1e-15)


@pytest.mark.parametrize(
    ("n_ranks", "params", "expected"),
    [
        (3, {}, [1.0, 0.5, 0.5]),
        (4, {"k": 2, "floor": 0.25}, [1.0, 1.0, 0.25, 0.25]),
        (2, {"k": 5}, [1.0, 1.0]),
        (1, {}, [1.0]),
    ],
)
def test_top_k_values(n_ranks: int, params: dict[str, float], expected: list[float]) -> None:
    np.testing.assert_array_equal(WEIGHT_SCHEMES["top-k"](n_ranks, **params), expected)


@pytest.mark.parametrize("scheme", BUILTIN_SCHEMES)
@pytest.mark.parametrize("floor", [0.0, -0.1, 1.0000001, 2.0, math.nan, math.inf, -math.inf])
def test_floor_outside_unit_interval_is_rejected(scheme: str, floor: float) -> None:
    with pytest.raises(ValueError, match="floor"):
        WEIGHT_SCHEMES[scheme](3, floor=floor)
    with pytest.raises(ValueError, match="floor"):
        rank_to_weights([["a"], ["b"]], scheme, floor=floor)


@pytest.mark.parametrize("scheme", BUILTIN_SCHEMES)
@pytest.mark.parametrize("floor", [1e-300, 0.3, 1.0])
def test_floor_inside_unit_interval_is_accepted(scheme: str, floor: float) -> None:
    weights = WEIGHT_SCHEMES[scheme](4, floor=floor)
    assert weights[0] == 1.0
    assert np.all(weights >= floor)


@pytest.mark.parametrize("decay", [0.0, -0.5, 1.5, math.nan])
def test_exponential_rejects_decay_outside_unit_interval(decay: float) -> None:
    with pytest.raises(ValueError, match="decay"):
        WEIGHT_SCHEMES["exponential"](3, decay=decay)


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_top_k_rejects_bad_k(k: object) -> None:
    with pytest.raises(ValueError, match="k must be"):
        WEIGHT_SCHEMES["top-k"](3, k=k)


@given(scheme_and_params=scheme_params, n_ranks=st.integers(1, 40))
@PROPERTY_SETTINGS
def test_schemes_start_at_one_never_increase_and_respect_floor(
    scheme_and_params: tuple[str, dict[str, float]], n_ranks: int
) -> None:
    scheme, params = scheme_and_params
    weights = WEIGHT_SCHEMES[scheme](n_ranks, **params)
    assert weights.shape == (n_ranks,)
    assert weights[0] == 1.0
    assert np.all(np.diff(weights) <= 0)
    assert np.all(weights >= params["floor"])
    assert np.all(weights <= 1.0)


# ------------------------------------------------------------------------------------------
# rank_to_weights
# ------------------------------------------------------------------------------------------


def test_rank_to_weights_ties_share_the_weight_of_their_rank_position() -> None:
    weights = rank_to_weights([["a"], ["b", "c"], ["d"]])
    assert weights == {"a": 1.0, "b": 0.75, "c": 0.75, "d": 0.5}


def test_rank_to_weights_rank_position_counts_tie_groups_not_members() -> None:
    # Three members tie at the top; "d" is the second tie group, so it gets the r=1 weight.
    weights = rank_to_weights([["a", "b", "c"], ["d"]], "exponential", decay=0.5, floor=0.1)
    assert weights == {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.5}


def test_rank_to_weights_passes_params_to_scheme() -> None:
    assert rank_to_weights([["a"], ["b"], ["c"]], "top-k", k=2, floor=0.3) == {"a": 1.0, "b": 1.0, "c": 0.3}


def test_rank_to_weights_single_tie_group_is_uniform() -> None:
    assert rank_to_weights([["a", "b", "c"]]) == {"a": 1.0, "b": 1.0, "c": 1.0}


def test_rank_to_weights_empty_ranking_gives_no_weights() -> None:
    assert rank_to_weights([]) == {}


def test_rank_to_weights_rejects_empty_tie_group() -> None:
    with pytest.raises(ValueError, match="empty"):
        rank_to_weights([["a"], [], ["b"]])


@pytest.mark.parametrize(
    "ranking", [[["a", "dup"], ["dup"]], [["dup", "dup"]], [["x"], ["dup"], ["y", "dup"]]]
)
def test_rank_to_weights_rejects_repeated_id_and_names_it(ranking: list[list[str]]) -> None:
    with pytest.raises(ValueError, match="'dup'"):
        rank_to_weights(ranking)


def test_rank_to_weights_rejects_bare_string_tie_group() -> None:
    with pytest.raises(ValueError, match="string"):
        rank_to_weights(["ab", ["c"]])  # type: ignore[list-item]


def test_rank_to_weights_rejects_unknown_scheme() -> None:
    with pytest.raises(ValueError, match="unknown weight scheme"):
        rank_to_weights([["a"]], "no-such-scheme")


def test_register_scheme_makes_a_scheme_available_by_name() -> None:
    name = "test-constant-steps"
    try:

        @register_scheme(name)
        def halving(n_ranks: int, *, floor: float = 0.5) -> np.ndarray:
            return np.maximum(floor, 1.0 - 0.25 * np.arange(n_ranks))

        assert WEIGHT_SCHEMES[name] is halving
        assert rank_to_weights([["a"], ["b"], ["c"]], name) == {"a": 1.0, "b": 0.75, "c": 0.5}
        with pytest.raises(ValueError, match="already registered"):
            register_scheme(name)(halving)
    finally:
        WEIGHT_SCHEMES.pop(name, None)


def test_rank_to_weights_rejects_a_scheme_returning_bad_weights() -> None:
    name = "test-broken-scheme"
    try:
        register_scheme(name)(lambda n_ranks, **_: np.zeros(n_ranks))
        with pytest.raises(ValueError, match="finite positive"):
            rank_to_weights([["a"], ["b"]], name)
    finally:
        WEIGHT_SCHEMES.pop(name, None)


# ------------------------------------------------------------------------------------------
# redistribute_group: worked example and properties
# ------------------------------------------------------------------------------------------


def test_worked_example_sequence_mode() -> None:
    advantages = np.array([0.8, 0.8, 0.8, -1.2, -1.2])
    passed = np.array([True, True, True, False, False])
    weights = np.array([1.0, 0.75, 0.5, 1.0, 1.0])
    result = redistribute_group(advantages, passed, weights)
    # S = 2.4, sum a w = 0.8 * 2.25 = 1.8, so each passing advantage becomes w * 0.8 * 2.4 / 1.8 = w * 16/15.
    np.testing.assert_allclose(result.advantages, [16 / 15, 0.8, 8 / 15, -1.2, -1.2], rtol=1e-15)
    assert result.applied is True
    assert result.reason == ""


def test_worked_example_token_mode() -> None:
    advantages = np.array([1.0, 1.0, -1.0])
    passed = np.array([True, True, False])
    weights = np.array([1.0, 0.5, 1.0])
    lengths = np.array([100.0, 300.0, 50.0])
    result = redistribute_group(advantages, passed, weights, lengths=lengths, preserve="token")
    # sum a len = 400, sum a w len = 250, factor 1.6.
    np.testing.assert_allclose(result.advantages, [1.6, 0.8, -1.0], rtol=1e-15)
    assert result.applied


def test_none_mode_multiplies_without_rescaling() -> None:
    advantages = np.array([2.0, 2.0, -1.0])
    result = redistribute_group(advantages, [True, True, False], [1.0, 0.25, 0.1], preserve="none")
    np.testing.assert_array_equal(result.advantages, [2.0, 0.5, -1.0])
    assert result.applied


@given(group=graded_groups())
@PROPERTY_SETTINGS
def test_sequence_mode_preserves_passing_and_total_sums(group: GradedGroup) -> None:
    result = redistribute_group(group.advantages, group.passed, group.weights)
    assert_relatively_close(
        result.advantages[group.passed].sum(), group.advantages[group.passed].sum(), rel=1e-9
    )
    total_tolerance = 1e-9 * np.abs(group.advantages).sum()
    assert abs(result.advantages.sum() - group.advantages.sum()) <= total_tolerance


@given(group=graded_groups(), preserve=st.sampled_from(PRESERVE_MODES))
@PROPERTY_SETTINGS
def test_failing_advantages_are_bit_identical(group: GradedGroup, preserve: str) -> None:
    failing = ~group.passed
    assert group.redistributed(preserve).advantages[failing].tobytes() == group.advantages[failing].tobytes()


@given(group=graded_groups(), preserve=st.sampled_from(PRESERVE_MODES))
@PROPERTY_SETTINGS
def test_better_rank_never_gets_less_and_ties_get_the_same(group: GradedGroup, preserve: str) -> None:
    new = group.redistributed(preserve).advantages
    for i, rank_i in group.rank_position.items():
        for j, rank_j in group.rank_position.items():
            if rank_i < rank_j:
                assert new[i] >= new[j]
            elif rank_i == rank_j:
                assert new[i] == new[j]


@given(group=graded_groups(), preserve=st.sampled_from(PRESERVE_MODES))
@PROPERTY_SETTINGS
def test_every_passing_advantage_stays_above_every_failing_one(group: GradedGroup, preserve: str) -> None:
    new = group.redistributed(preserve).advantages
    assert new[group.passed].min() > new[~group.passed].max()


@given(group=graded_groups(), weight=st.floats(1e-3, 10.0), preserve=st.sampled_from(["sequence", "token"]))
@PROPERTY_SETTINGS
def test_uniform_weights_give_the_identity(group: GradedGroup, weight: float, preserve: str) -> None:
    # Failing weights differ on purpose: only passing weights decide uniformity.
    weights = np.where(group.passed, weight, 3.0)
    result = redistribute_group(group.advantages, group.passed, weights, group.lengths, preserve)
    assert result.applied is False
    assert result.reason == "uniform weights"
    np.testing.assert_array_equal(result.advantages, group.advantages)


@given(group=graded_groups(), data=st.data(), preserve=st.sampled_from(PRESERVE_MODES))
@PROPERTY_SETTINGS
def test_permuting_the_inputs_permutes_the_output(
    group: GradedGroup, data: st.DataObject, preserve: str
) -> None:
    permutation = np.array(data.draw(st.permutations(range(group.advantages.size))))
    original = group.redistributed(preserve)
    permuted = redistribute_group(
        group.advantages[permutation],
        group.passed[permutation],
        group.weights[permutation],
        group.lengths[permutation],
        preserve,
    )
    assert permuted.applied == original.applied
    assert permuted.reason == original.reason
    # Group sums are accumulated in a different order, so allow rounding in the last bits.
    np.testing.assert_allclose(permuted.advantages, original.advantages[permutation], rtol=1e-12, atol=0)


@given(group=graded_groups())
@PROPERTY_SETTINGS
def test_token_mode_preserves_length_weighted_passing_sum(group: GradedGroup) -> None:
    result = group.redistributed("token")
    passing = group.passed
    assert_relatively_close(
        (result.advantages[passing] * group.lengths[passing]).sum(),
        (group.advantages[passing] * group.lengths[passing]).sum(),
        rel=1e-9,
    )


@given(group=graded_groups())
@PROPERTY_SETTINGS
def test_failing_weights_are_ignored(group: GradedGroup) -> None:
    messy_weights = np.where(group.passed, group.weights, np.nan)
    clean = redistribute_group(group.advantages, group.passed, group.weights)
    messy = redistribute_group(group.advantages, group.passed, messy_weights)
    assert messy.applied == clean.applied
    np.testing.assert_array_equal(messy.advantages, clean.advantages)


def test_float32_input_keeps_its_dtype_and_failing_bits() -> None:
    advantages = np.array([0.7, 0.7, -0.3, -0.3], dtype=np.float32)
    result = redistribute_group(advantages, [True, True, False, False], [1.0, 0.5, 1.0, 1.0])
    assert result.advantages.dtype == np.float32
    assert result.advantages[2:].tobytes() == advantages[2:].tobytes()
    assert result.advantages[:2].sum() == pytest.approx(1.4, rel=1e-6)


def test_inputs_are_not_mutated_and_result_is_a_copy() -> None:
    advantages = np.array([0.5, 0.5, -1.0])
    snapshot = advantages.copy()
    applied = redistribute_group(advantages, [True, True, False], [1.0, 0.5, 1.0])
    identity = redistribute_group(advantages, [True, True, False], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(advantages, snapshot)
    assert applied.advantages is not advantages
    assert identity.advantages is not advantages
    identity.advantages[0] = 99.0
    np.testing.assert_array_equal(advantages, snapshot)


def test_result_is_frozen() -> None:
    result = redistribute_group([1.0, -1.0], [True, False], [1.0, 1.0])
    assert isinstance(result, Redistribution)
    with pytest.raises(AttributeError):
        result.applied = True  # type: ignore[misc]


# ------------------------------------------------------------------------------------------
# redistribute_group: identity cases and validation
# ------------------------------------------------------------------------------------------

BAD_ADVANTAGE_REASON = "passing advantage <= 0 or not finite: cannot redistribute"


@pytest.mark.parametrize(
    ("advantages", "passed", "weights", "expected_reason"),
    [
        ([-0.5, -0.5], [False, False], [1.0, 0.5], "no passing trajectory"),
        ([1.0, 1.0, -2.0], [True, True, False], [0.5, 0.5, 1.0], "uniform weights"),
        ([1.0, -1.0], [True, False], [0.5, 1.0], "uniform weights"),
        ([0.0, 0.0, 0.0], [True, True, True], [1.0, 0.5, 0.75], BAD_ADVANTAGE_REASON),
        ([1.0, -0.5, -0.5], [True, True, False], [1.0, 0.5, 1.0], BAD_ADVANTAGE_REASON),
        ([1.0, math.nan, -1.0], [True, True, False], [1.0, 0.5, 1.0], BAD_ADVANTAGE_REASON),
        ([1.0, math.inf, -1.0], [True, True, False], [1.0, 0.5, 1.0], BAD_ADVANTAGE_REASON),
    ],
)
def test_identity_cases_report_their_reason(
    advantages: list[float], passed: list[bool], weights: list[float], expected_reason: str
) -> None:
    result = redistribute_group(np.array(advantages), np.array(passed), np.array(weights))
    assert result.applied is False
    assert result.reason == expected_reason
    np.testing.assert_array_equal(result.advantages, advantages)


@pytest.mark.parametrize("bad_weight", [0.0, -0.5, math.nan, math.inf])
def test_bad_passing_weight_gives_identity_naming_the_weight(bad_weight: float) -> None:
    advantages = np.array([1.0, 1.0, -2.0])
    result = redistribute_group(advantages, [True, True, False], [1.0, bad_weight, 1.0])
    assert result.applied is False
    assert "weight" in result.reason
    assert "not finite" in result.reason
    np.testing.assert_array_equal(result.advantages, advantages)


def test_all_passing_group_with_positive_advantages_is_redistributed() -> None:
    # Contrast is the caller's decision, so a group without failures is not refused on that ground.
    result = redistribute_group([0.5, 0.5], [True, True], [1.0, 0.5])
    assert result.applied
    np.testing.assert_allclose(result.advantages, [2 / 3, 1 / 3])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"passed": [True, False]}, "passed"),
        ({"weights": [1.0, 1.0]}, "weights"),
        ({"advantages": [[1.0, 1.0, -1.0]]}, "1-D"),
        ({"passed": [2, 0, 0]}, "passed"),
        ({"preserve": "tokens"}, "preserve"),
        ({"preserve": "token"}, "lengths"),
        ({"preserve": "token", "lengths": [10.0, 10.0]}, "lengths"),
        ({"preserve": "token", "lengths": [10.0, 0.0, 5.0]}, "lengths"),
        ({"preserve": "token", "lengths": [10.0, -3.0, 5.0]}, "lengths"),
        ({"preserve": "token", "lengths": [10.0, math.nan, 5.0]}, "lengths"),
    ],
)
def test_invalid_inputs_raise(kwargs: dict[str, object], match: str) -> None:
    valid = {"advantages": [1.0, 1.0, -1.0], "passed": [True, True, False], "weights": [1.0, 0.5, 1.0]}
    _assert_refused(redistribute_group, valid, kwargs, match)


def _assert_refused(
    function: Callable[..., object], valid: dict[str, object], change: dict[str, object], match: str
) -> None:
    """With `change` applied to the `valid` arguments, `function` raises ValueError matching `match`."""
    with pytest.raises(ValueError, match=match):
        function(**{**valid, **change})


def test_token_mode_ignores_lengths_of_failing_trajectories() -> None:
    result = redistribute_group(
        [1.0, 1.0, -1.0], [True, True, False], [1.0, 0.5, 1.0], [10.0, 30.0, 0.0], "token"
    )
    assert result.applied


# ------------------------------------------------------------------------------------------
# redistribute_batch
# ------------------------------------------------------------------------------------------


@dataclass
class Batch:
    advantages: np.ndarray
    group_ids: np.ndarray | list[object]
    passed: np.ndarray
    weights: np.ndarray
    lengths: np.ndarray


def degenerate_group(size: int, all_pass: bool) -> GradedGroup:
    rewards = np.full(size, 1.0 if all_pass else 0.0)
    weights = np.linspace(1.0, 0.5, size)
    return GradedGroup(grpo_advantages(rewards), rewards == 1.0, weights, np.full(size, 7.0), {})


@st.composite
def batches(draw: st.DrawFn) -> tuple[Batch, list[object]]:
    """Several graded groups (plus optional all-pass / all-fail ones), shuffled into one flat batch."""
    groups = draw(st.lists(graded_groups(max_size=8), min_size=1, max_size=5))
    if draw(st.booleans()):
        groups.append(degenerate_group(draw(st.integers(2, 4)), all_pass=True))
    if draw(st.booleans()):
        groups.append(degenerate_group(draw(st.integers(2, 4)), all_pass=False))
    id_style = draw(st.sampled_from(["int", "str", "list-str", "tuple"]))
    keys: list[object] = {
        "int": [10 * k + 3 for k in range(len(groups))],
        "str": [f"uid-{k}" for k in range(len(groups))],
        "list-str": [f"uid-{k}" for k in range(len(groups))],
        "tuple": [(k, "prompt") for k in range(len(groups))],
    }[id_style]
    flat_keys = [keys[k] for k, group in enumerate(groups) for _ in range(group.advantages.size)]
    permutation = np.array(draw(st.permutations(range(len(flat_keys)))))
    shuffled_keys = [flat_keys[i] for i in permutation]
    group_ids: np.ndarray | list[object]
    if id_style == "int":
        group_ids = np.array(shuffled_keys)
    elif id_style == "str":
        group_ids = np.array(shuffled_keys, dtype=object)
    else:
        group_ids = shuffled_keys
    batch = Batch(
        advantages=np.concatenate([g.advantages for g in groups])[permutation],
        group_ids=group_ids,
        passed=np.concatenate([g.passed for g in groups])[permutation],
        weights=np.concatenate([g.weights for g in groups])[permutation],
        lengths=np.concatenate([g.lengths for g in groups])[permutation],
    )
    return batch, keys


def per_group_reference(
    batch: Batch, keys: list[object], preserve: str
) -> tuple[np.ndarray, dict[object, str]]:
    expected = batch.advantages.copy()
    reasons: dict[object, str] = {}
    ids = list(batch.group_ids)
    for key in keys:
        members = np.array([i for i, group_id in enumerate(ids) if group_id == key])
        result = redistribute_group(
            batch.advantages[members],
            batch.passed[members],
            batch.weights[members],
            batch.lengths[members],
            preserve,
        )
        expected[members] = result.advantages
        if not result.applied:
            reasons[key] = result.reason
    return expected, reasons


def lengths_as_mask(lengths: np.ndarray, width: int, rng: np.random.Generator) -> np.ndarray:
    """A 0/1 mask with the given number of ones per row, at random positions."""
    mask = np.zeros((lengths.size, width))
    for row, length in enumerate(lengths.astype(int)):
        mask[row, rng.choice(width, size=length, replace=False)] = 1.0
    return mask


@given(batch_and_keys=batches(), preserve=st.sampled_from(["sequence", "none"]))
@PROPERTY_SETTINGS
def test_batch_equals_per_group_results(batch_and_keys: tuple[Batch, list[object]], preserve: str) -> None:
    batch, keys = batch_and_keys
    snapshot = batch.advantages.copy()
    result, reasons = redistribute_batch(
        batch.advantages, batch.group_ids, batch.passed, batch.weights, None, preserve
    )
    expected, expected_reasons = per_group_reference(batch, keys, preserve)
    np.testing.assert_array_equal(result, expected)
    assert reasons == expected_reasons
    np.testing.assert_array_equal(batch.advantages, snapshot)


@given(batch_and_keys=batches(), width=st.integers(1, 24), seed=st.integers(0, 2**32 - 1))
@PROPERTY_SETTINGS
def test_batch_token_mode_equals_per_group_with_mask_lengths(
    batch_and_keys: tuple[Batch, list[object]], width: int, seed: int
) -> None:
    batch, keys = batch_and_keys
    rng = np.random.default_rng(seed)
    batch.lengths = rng.integers(1, width + 1, size=batch.advantages.size).astype(np.float64)
    mask = lengths_as_mask(batch.lengths, width, rng)
    result, reasons = redistribute_batch(
        batch.advantages, batch.group_ids, batch.passed, batch.weights, mask, "token"
    )
    expected, expected_reasons = per_group_reference(batch, keys, "token")
    np.testing.assert_array_equal(result, expected)
    assert reasons == expected_reasons


@given(
    batch_and_keys=batches(),
    width=st.integers(1, 24),
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from([np.float32, np.float64]),
    preserve=st.sampled_from(PRESERVE_MODES),
)
@PROPERTY_SETTINGS
def test_token_level_input_matches_sequence_level_broadcast_over_mask(
    batch_and_keys: tuple[Batch, list[object]], width: int, seed: int, dtype: type, preserve: str
) -> None:
    batch, _ = batch_and_keys
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, width + 1, size=batch.advantages.size)
    mask = lengths_as_mask(lengths, width, rng)
    if rng.random() < 0.5:
        mask = mask.astype(np.int64)
    sequence_advantages = batch.advantages.astype(dtype)
    token_advantages = (sequence_advantages[:, None] * mask).astype(dtype)
    snapshot = token_advantages.copy()

    sequence_result, sequence_reasons = redistribute_batch(
        sequence_advantages, batch.group_ids, batch.passed, batch.weights, mask, preserve
    )
    token_result, token_reasons = redistribute_batch(
        token_advantages, batch.group_ids, batch.passed, batch.weights, mask, preserve
    )

    assert token_result.shape == token_advantages.shape
    assert token_result.dtype == np.dtype(dtype)
    assert sequence_result.dtype == np.dtype(dtype)
    assert token_reasons == sequence_reasons
    assert np.all(token_result[mask == 0] == 0)
    rtol = 1e-6 if dtype is np.float32 else 1e-12
    # Subnormal values carry no relative precision (hypothesis found 5e-324 against 1e-323), so below the
    # smallest normal number only an absolute bound means anything.
    atol = float(np.finfo(dtype).tiny)
    np.testing.assert_allclose(token_result, sequence_result[:, None] * mask, rtol=rtol, atol=atol)
    np.testing.assert_array_equal(token_advantages, snapshot)


def test_batch_reasons_name_each_unchanged_group() -> None:
    advantages = np.array([0.9, 0.9, -0.9, 0.0, 0.0, -0.5, 0.7, 0.7, -1.4])
    group_ids = ["mixed", "mixed", "mixed", "all-pass", "all-pass", "all-fail", "tied", "tied", "tied"]
    passed = np.array([True, True, False, True, True, False, True, True, False])
    weights = np.array([1.0, 0.5, 1.0, 1.0, 0.5, 1.0, 0.8, 0.8, 1.0])
    result, reasons = redistribute_batch(advantages, group_ids, passed, weights)
    assert reasons == {
        "all-pass": BAD_ADVANTAGE_REASON,
        "all-fail": "no passing trajectory",
        "tied": "uniform weights",
    }
    np.testing.assert_allclose(result[:2], [1.2, 0.6])
    np.testing.assert_array_equal(result[2:], advantages[2:])


def test_batch_keeps_int_and_string_ids_apart() -> None:
    # If ids were coerced to one type, group 1 and group "1" would merge into one uniform-weight group.
    advantages = np.array([1.0, -1.0, 1.0, -1.0])
    result, reasons = redistribute_batch(advantages, [1, 1, "1", "1"], [True, False, True, False], [0.5] * 4)
    assert reasons == {1: "uniform weights", "1": "uniform weights"}
    np.testing.assert_array_equal(result, advantages)


def test_batch_2d_rows_with_empty_mask_leave_their_group_unchanged() -> None:
    advantages = np.array([[0.5, 0.5], [0.0, 0.0], [-1.0, 0.0]], dtype=np.float32)
    mask = np.array([[1, 1], [0, 0], [1, 0]])
    result, reasons = redistribute_batch(advantages, [0, 0, 0], [True, True, False], [1.0, 0.5, 1.0], mask)
    assert reasons == {0: BAD_ADVANTAGE_REASON}
    np.testing.assert_array_equal(result, advantages)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"advantages": np.ones((3, 2))}, "response_mask is required"),
        ({"advantages": np.ones((3, 2)), "response_mask": np.ones((3, 3))}, "differs"),
        ({"response_mask": np.full((3, 2), 2.0)}, "0 and 1"),
        ({"response_mask": np.ones(3)}, "response_mask"),
        ({"preserve": "token"}, "response_mask"),
        ({"group_ids": [0, 0]}, "group_ids"),
        ({"passed": [True, False]}, "passed"),
        ({"weights": [1.0]}, "weights"),
        ({"advantages": np.ones((3, 2, 1))}, "advantages"),
        ({"preserve": "seq"}, "preserve"),
    ],
)
def test_batch_invalid_inputs_raise(kwargs: dict[str, object], match: str) -> None:
    valid = {
        "advantages": np.array([1.0, 1.0, -1.0]),
        "group_ids": [0, 0, 0],
        "passed": [True, True, False],
        "weights": [1.0, 0.5, 1.0],
    }
    _assert_refused(redistribute_batch, valid, kwargs, match)


# ------------------------------------------------------------------------------------------
# Contrast helpers
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("passed", "expected"),
    [
        ([True, False], True),
        ([False, False, True], True),
        ([True, True], False),
        ([False, False], False),
        ([True], False),
        ([], False),
    ],
)
def test_is_mixed_group(passed: list[bool], expected: bool) -> None:
    assert is_mixed_group(np.array(passed, dtype=bool)) is expected


def test_mixed_group_mask_marks_elements_of_mixed_groups() -> None:
    group_ids = ["a", "b", "a", "c", "b", "c"]
    passed = [True, True, False, False, True, False]
    np.testing.assert_array_equal(
        mixed_group_mask(group_ids, passed), [True, False, True, False, False, False]
    )


@given(
    group_ids=st.lists(st.integers(0, 5), min_size=1, max_size=40).flatmap(
        lambda ids: st.tuples(st.just(ids), st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
    )
)
@PROPERTY_SETTINGS
def test_mixed_group_mask_agrees_with_is_mixed_group(group_ids: tuple[list[int], list[bool]]) -> None:
    ids, passed = group_ids
    mask = mixed_group_mask(np.array(ids), np.array(passed))
    for i, group_id in enumerate(ids):
        members = [passed[j] for j, other in enumerate(ids) if other == group_id]
        assert mask[i] == is_mixed_group(np.array(members, dtype=bool))


def test_batch_lengths_give_the_same_token_preservation_as_a_mask():
    advantages = np.array([0.8, 0.8, 0.8, -1.2, 0.5, 0.5, -1.0])
    groups = [0, 0, 0, 0, 1, 1, 1]
    passed = [True, True, True, False, True, True, False]
    weights = [1.0, 0.75, 0.5, 1.0, 1.0, 0.5, 1.0]
    lengths = np.array([3, 5, 2, 4, 1, 6, 2])
    mask = (np.arange(6)[None, :] < lengths[:, None]).astype(float)
    by_mask, reasons_mask = redistribute_batch(advantages, groups, passed, weights, mask, preserve="token")
    by_lengths, reasons = redistribute_batch(
        advantages, groups, passed, weights, preserve="token", lengths=lengths
    )
    np.testing.assert_allclose(by_lengths, by_mask, rtol=0, atol=1e-15)
    assert reasons == reasons_mask == {}
    kept = (advantages * lengths)[[0, 1, 2]].sum()
    assert (by_lengths * lengths)[[0, 1, 2]].sum() == pytest.approx(kept, rel=1e-12)
    with pytest.raises(ValueError, match="not both"):
        redistribute_batch(advantages, groups, passed, weights, mask, preserve="token", lengths=lengths)
    with pytest.raises(ValueError, match="finite and positive"):
        redistribute_batch(advantages, groups, passed, weights, preserve="token", lengths=lengths * 0)
    with pytest.raises(ValueError, match="requires response_mask or lengths"):
        redistribute_batch(advantages, groups, passed, weights, preserve="token")
