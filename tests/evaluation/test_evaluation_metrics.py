"""Evaluation metrics on hand-computed cases: ties, unlisted ids, half credit, undefined values."""

from __future__ import annotations

import pytest

from grader.evaluation import metrics
from grader.evaluation.consensus import agreement_factor
from grader.redistribution.redistribute import shrink_weights

# The reference ties b and c (that pair is not scored); e is not listed at all.
REFERENCE = [["a"], ["b", "c"], ["d"]]
# The grader ties a with b, puts the unlisted e in between, and swaps c and d.
GRADED = [["b", "a"], ["e"], ["d"], ["c"]]


def test_scored_pairs_skip_reference_ties_and_unlisted_ids() -> None:
    assert metrics.scored_pairs(REFERENCE) == [("a", "b"), ("a", "c"), ("a", "d"), ("b", "d"), ("c", "d")]
    assert metrics.scored_pairs(REFERENCE, among={"a", "c", "e"}) == [("a", "c")]


def test_pairwise_accuracy_gives_half_credit_for_a_tie() -> None:
    # (a,b) tied: 0.5; (a,c), (a,d), (b,d) right: 3; (c,d) swapped: 0. 3.5 of 5 pairs.
    assert metrics.pairwise_credit(GRADED, REFERENCE) == (3.5, 5)
    assert metrics.pairwise_accuracy(GRADED, REFERENCE) == pytest.approx(0.7)
    # Only pairs involving c: (a,c) right, (c,d) wrong.
    assert metrics.pairwise_credit(GRADED, REFERENCE, involving={"c"}) == (1.0, 2)


def test_pairwise_accuracy_leaves_out_ids_the_grader_did_not_rank() -> None:
    assert metrics.pairwise_credit([["a"], ["d"]], REFERENCE) == (1.0, 1)
    assert metrics.pairwise_accuracy([["e"]], REFERENCE) is None
    assert metrics.pairwise_accuracy(GRADED, [["a", "b", "c", "d"]]) is None  # all tied: nothing scored


def test_kendall_tau_b_over_common_ids() -> None:
    # Common ids a, b, c, d; 6 pairs: concordant (a,c) (a,d) (b,d); discordant (c,d); (a,b) tied in the
    # grader's, (b,c) tied in the reference. tau-b = (3 - 1) / sqrt((6 - 1) * (6 - 1)) = 0.4.
    assert metrics.kendall_tau(GRADED, REFERENCE) == pytest.approx(0.4)
    assert metrics.kendall_tau([["a"], ["b"], ["c"]], [["c"], ["b"], ["a"]]) == pytest.approx(-1.0)
    assert metrics.kendall_tau([["a"], ["b"]], [["a", "b"]]) is None  # one side ties everything
    assert metrics.kendall_tau([["a"]], [["a"], ["b"]]) is None  # one common id


def test_top1_accuracy_splits_credit_across_a_tied_top() -> None:
    assert metrics.top1_accuracy(GRADED, REFERENCE) == pytest.approx(0.5)  # picks a or b, a is right
    assert metrics.top1_accuracy([["e"], ["a"], ["d"]], REFERENCE) == 1.0  # e is not listed: a is the pick
    assert metrics.top1_accuracy([["d"], ["c"]], REFERENCE) == 0.0  # best listed one ranked: c, not d
    assert metrics.top1_accuracy([["c"], ["d"]], [["a"], ["c"], ["d"]]) == 1.0  # a not ranked: c is best
    assert metrics.top1_accuracy([["e"]], REFERENCE) is None


def test_inversions_count_a_worse_candidate_holding_more_advantage() -> None:
    advantages = {"a": 1.0, "b": 1.0, "c": 0.5, "d": 0.8, "e": 2.0}
    assert metrics.inversions(advantages, REFERENCE) == (1, 5)  # (c, d): d is worse but gets more
    assert metrics.inversions({**advantages, "d": None}, REFERENCE) == (0, 2)  # no advantage: not scored
    assert metrics.inversions({"a": 1.0, "d": 1.0}, REFERENCE) == (0, 1)  # equal is not inverted


def test_agreement_is_the_mean_pairwise_tau() -> None:
    a = [["a"], ["b"], ["c"]]
    b = [["a"], ["c"], ["b"]]
    c = [["c"], ["b"], ["a"]]
    # tau(a,b) = 1/3, tau(a,c) = -1, tau(b,c) = -1/3: mean -1/3.
    assert metrics.mean_tau([a, b, c]) == pytest.approx(-1 / 3)
    assert metrics.mean_tau([a, a]) == 1.0
    assert metrics.mean_tau([[["b", "a"]], [["a", "b"]]]) == 1.0  # identical up to order within a tie
    assert metrics.mean_tau([[["a", "b"]], a[:2]]) == 0.0  # tau undefined: no agreement
    assert metrics.mean_tau([a]) is None


def test_borda_sums_points_and_ties_equal_totals() -> None:
    a, b, c = [["a"], ["b"], ["c"]], [["a"], ["c"], ["b"]], [["c"], ["b"], ["a"]]
    assert metrics.borda_scores([a, b, c]) == {"a": 4.0, "b": 2.0, "c": 3.0}
    assert metrics.borda([a, b, c]) == [["a"], ["c"], ["b"]]
    assert metrics.borda_scores([[["a", "b"], ["c"]]]) == {"a": 1.5, "b": 1.5, "c": 0.0}
    assert metrics.borda([[["a"], ["b"]], [["b"], ["a"]]]) == [["a", "b"]]


def test_position_bias_against_chance() -> None:
    shown = [[["a"], ["b"], ["c"]], [["c"], ["a"], ["b"]]]
    bias = metrics.position_bias(shown, [[["a"], ["b"], ["c"]], [["a", "b"], ["c"]]])
    # Grading 1: a shown first, ranked first: 1. Grading 2: top tier {a, b}: a (2nd) and b (last) share it.
    assert bias.first_ranked_first == pytest.approx(0.5)
    assert bias.last_ranked_first == pytest.approx(0.25)
    assert bias.chance == pytest.approx(1 / 3)
    assert bias.gradings == 2
    # An equivalence class is shown once; its members tie.
    classes = metrics.position_bias([[["a", "a2"], ["b"]]], [[["a", "a2"], ["b"]]])
    assert classes.first_ranked_first == 1.0 and classes.chance == 0.5


def test_a_ranking_with_an_id_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="more than once"):
        metrics.pairwise_accuracy([["a"], ["a"]], REFERENCE)


def test_shrink_pulls_weights_toward_uniform() -> None:
    weights = {"x": 1.0, "y": 0.5}
    assert shrink_weights(weights, 1.0) == weights
    assert shrink_weights(weights, 0.5) == {"x": 1.0, "y": 0.75}
    assert shrink_weights(weights, 0.0) == {"x": 1.0, "y": 1.0}
    with pytest.raises(ValueError):
        shrink_weights(weights, 1.5)
    assert agreement_factor([[["a"], ["b"]], [["b"], ["a"]]]) == 0.0  # contradiction floors at uniform
    assert agreement_factor([[["a"], ["b"]]]) == 1.0  # one grading: nothing to disagree with
