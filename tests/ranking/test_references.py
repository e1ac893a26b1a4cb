"""References of every kind: reading, checking (contradictions and cycles named), making, scoring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.errors import InputFileError, InvalidReference
from grader.groups.formats import load_groups
from grader.ranking.references import (
    Preference,
    Reference,
    consensus_reference,
    load_references,
    reference_credit,
    reference_from_degrade,
    reference_from_ranking,
    write_references,
)
from tests.conftest import REPO_ROOT

DEGRADED = REPO_ROOT / "examples" / "degraded"


def test_the_old_reference_file_reads_as_rankings() -> None:
    (reference,) = load_references(DEGRADED / "reference.json").values()
    assert reference.kind == "ranking" and reference.ranking is not None
    # 2 + 3 + 2 + 2 ids in four tiers: every pair across tiers, none within one.
    assert len(reference.preferences) == 2 * 7 + 3 * 4 + 2 * 2 == 30
    assert Preference("clean-respaced", "clean+test_edit") in reference.preferences
    assert not any({p.better, p.worse} == {"clean", "clean-respaced"} for p in reference.preferences)


def test_degrade_output_is_a_reference_by_construction() -> None:
    (group,) = load_groups([DEGRADED / "groups.jsonl"])
    made = reference_from_degrade(group, equivalent=["clean-respaced"])
    (written,) = load_references(DEGRADED / "reference.json").values()
    assert made.kind == "degrade" and made.ranking == written.ranking
    assert {p.pair for p in made.preferences} == {p.pair for p in written.preferences}
    worst = next(p for p in made.preferences if p.pair == ("clean+dead_code", "clean+test_edit"))
    assert worst.category == "tests" and "loosens the assertion" in worst.reason
    with pytest.raises(InvalidReference, match="no trajectory carries degradation"):
        reference_from_degrade(load_groups([REPO_ROOT / "examples" / "inventory_group.json"])[0])


def test_contradictory_and_cyclic_references_are_refused_with_the_pair_named(tmp_path: Path) -> None:
    path = tmp_path / "refs.jsonl"
    lines = [
        {"group_id": "g", "better": "a", "worse": "b", "category": "correctness"},
        {"group_id": "g", "better": "b", "worse": "c", "reason": "c skips the check"},
        {"group_id": "g", "better": "c", "worse": "a"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(
        InvalidReference, match=r"refs.jsonl: group 'g': cyclic .*a > b > c > a.*c > a closes"
    ):
        load_references(path)
    both_ways = [{"better": "a", "worse": "b"}, {"better": "b", "worse": "a"}]
    path.write_text(json.dumps({"g": {"kind": "pairwise", "preferences": both_ways}}))
    with pytest.raises(InvalidReference, match="contradictory pair: a > b and b > a"):
        load_references(path)
    with pytest.raises(InvalidReference, match="listed twice"):
        Reference("g", "pairwise", (Preference("a", "b"), Preference("a", "b", "again")))
    with pytest.raises(InvalidReference, match="unknown category 'style'"):
        Reference("g", "pairwise", (Preference("a", "b", category="style"),))  # type: ignore[arg-type]
    with pytest.raises(InvalidReference, match="preferred to itself"):
        Reference("g", "pairwise", (Preference("a", "a"),))


def test_jsonl_mixes_whole_references_and_preference_lines(tmp_path: Path) -> None:
    path = tmp_path / "refs.jsonl"
    path.write_text(
        json.dumps({"group_id": "r", "kind": "ranking", "ranking": [["x"], ["y", "z"]]})
        + "\n\n"
        + json.dumps({"group_id": "p", "better": "a", "worse": "b", "reason": "b drops the guard"})
        + "\n"
        + json.dumps({"group_id": "p", "better": "a", "worse": "c", "category": "behaviour"})
        + "\n"
    )
    references = load_references(path)
    assert list(references) == ["r", "p"]
    assert references["r"].ranking == [["x"], ["y", "z"]] and len(references["r"].preferences) == 2
    assert references["p"].kind == "pairwise" and references["p"].ranking is None
    assert references["p"].ids() == {"a", "b", "c"}
    assert set(references["p"].categories()) == {"uncategorised", "behaviour"}
    path.write_text(path.read_text() + json.dumps({"group_id": "r", "better": "x", "worse": "q"}) + "\n")
    with pytest.raises(InvalidReference, match=r"refs.jsonl:5: group 'r' is already defined whole at line 1"):
        load_references(path)
    path.write_text("{not json\n")
    with pytest.raises(InputFileError, match="neither a JSON object"):
        load_references(path)


def test_a_ranking_and_its_preferences_must_agree() -> None:
    with pytest.raises(InvalidReference, match="not the ranking's strict pairs"):
        Reference("g", "ranking", (Preference("b", "a"),), ranking=[["a"], ["b"]])
    with pytest.raises(InvalidReference, match="more than once"):
        reference_from_ranking("g", [["a"], ["a"]])
    with pytest.raises(InvalidReference, match="needs its ranking"):
        Reference("g", "ranking", (Preference("a", "b"),))


def test_consensus_keeps_only_pairs_agreed_above_the_threshold() -> None:
    rankings = [[["a"], ["b"], ["c"]], [["a"], ["c"], ["b"]], [["a"], ["b", "c"]], [["b"], ["a"], ["c"]]]
    reference = consensus_reference("g", rankings, threshold=0.75)
    # a > b in 3 of 4, a > c in 4 of 4; b > c in only 2 of 4 (one ties it, one reverses it): left out.
    assert {p.pair for p in reference.preferences} == {("a", "b"), ("a", "c")}
    assert reference.details == {"k": 4, "threshold": 0.75} and reference.ranking is None
    assert consensus_reference("g", rankings, threshold=1.0).preferences == (
        Preference("a", "c", "4 of 4 gradings agree"),
    )
    condorcet = [[["a"], ["b"], ["c"]], [["b"], ["c"], ["a"]], [["c"], ["a"], ["b"]]]
    with pytest.raises(InvalidReference, match="cyclic preferences"):
        consensus_reference("g", condorcet, threshold=0.6)
    with pytest.raises(InvalidReference, match="outside"):
        consensus_reference("g", rankings, threshold=0.5)


def test_agreement_scores_the_references_pairs_with_half_credit_for_ties() -> None:
    reference = Reference("g", "pairwise", (Preference("a", "b"), Preference("a", "c"), Preference("d", "b")))
    # (a, b) tied: 0.5; (a, c) right: 1; (d, b): d not ranked, not scored.
    assert reference_credit([["a", "b"], ["c"]], reference) == (1.5, 2)
    assert reference_credit([["c"], ["b"], ["a"]], reference) == (0.0, 2)
    assert reference_credit([["x"]], reference) == (0.0, 0)


def test_references_round_trip_through_a_file(tmp_path: Path) -> None:
    (group,) = load_groups([DEGRADED / "groups.jsonl"])
    references = {
        group.group_id: reference_from_degrade(group),
        "c": consensus_reference("c", [[["a"], ["b"]]], 1.0),
        "p": Reference("p", "pairwise", (Preference("a", "b", "b swallows errors", "behaviour"),)),
    }
    path = write_references(references, tmp_path / "out" / "refs.json")
    assert load_references(path) == references


def test_a_failed_grading_counts_as_not_agreeing() -> None:
    rankings = [[["a"], ["b"]], [["a"], ["b"]], [["b"], ["a"]]]
    assert consensus_reference("g", rankings, 0.6).preferences == (
        Preference("a", "b", "2 of 3 gradings agree"),
    )
    # Two more gradings were asked for and failed: 2 of 5 is below the threshold.
    assert consensus_reference("g", rankings, 0.6, k=5).preferences == ()
    with pytest.raises(InvalidReference, match="k=2 is below the 3 rankings"):
        consensus_reference("g", rankings, 0.6, k=2)


def test_reference_consensus_command_writes_a_reference_eval_reads(tmp_path: Path) -> None:
    from grader.evaluation import cli

    groups, out = str(DEGRADED / "groups.jsonl"), tmp_path / "consensus.json"
    assert (
        cli.main(["reference", "consensus", groups, "--k", "3", "--threshold", "0.9", "--out", str(out)]) == 0
    )
    (reference,) = load_references(out).values()
    assert reference.kind == "consensus" and reference.details == {"k": 3, "threshold": 0.9}
    assert all(p.reason == "3 of 3 gradings agree" for p in reference.preferences)
    # The heuristic is deterministic: its consensus is every pair it orders, and it agrees with all of them.
    assert cli.main(["eval", groups, "--reference", str(out), "--out", str(tmp_path / "eval")]) == 0
    overall = json.loads((tmp_path / "eval" / "eval.json").read_text())["overall"]
    assert overall["pairwise_accuracy"] == 1.0 and overall["scored_pairs"] == len(reference.preferences) > 40
    assert overall["kendall_tau"] is None  # a partial order: no tau


def test_eval_refuses_a_cyclic_reference_naming_the_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from grader.evaluation import cli

    path = tmp_path / "cyclic.jsonl"
    pairs = [("clean", "edits-tests"), ("edits-tests", "leftover-script"), ("leftover-script", "clean")]
    path.write_text(
        "".join(
            json.dumps({"group_id": "inventory-average-empty", "better": b, "worse": w}) + "\n"
            for b, w in pairs
        )
    )
    group = str(REPO_ROOT / "examples" / "inventory_group.json")
    assert cli.main(["eval", group, "--reference", str(path), "--out", str(tmp_path / "o")]) == 2
    error = capsys.readouterr().err
    assert "cyclic preferences clean > edits-tests > leftover-script > clean" in error
    assert "the pair leftover-script > clean closes it" in error and not (tmp_path / "o").exists()
