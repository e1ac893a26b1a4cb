"""`gagar eval` with the heuristic grader on the degraded example: figures, consistency, files written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.evaluation import cli, harness
from grader.evaluation.degrade import KINDS, degrade_file
from grader.graders.heuristic import HeuristicGrader
from grader.groups.formats import load_groups
from grader.groups.models import GroupResult
from tests.conftest import EXAMPLE_GROUP, REPO_ROOT

DEGRADED = REPO_ROOT / "examples" / "degraded"
FIGURES = ("pairwise_accuracy", "kendall_tau", "top1_accuracy", "inversions")


def heuristic_eval(kinds=KINDS) -> harness.Evaluation:
    degradations = degrade_file(EXAMPLE_GROUP, "clean", kinds)
    references = {d.group.group_id: d.reference for d in degradations}
    evaluation, _ = harness.evaluate([d.group for d in degradations], references, HeuristicGrader())
    return evaluation


def test_the_heuristic_grader_on_every_kind() -> None:
    overall = heuristic_eval().overall()
    assert overall["pairwise_accuracy"] >= 0.9 and overall["top1_accuracy"] == 1.0
    assert overall["scored_pairs"] == 30 and overall["graded"] == 1
    assert overall["inversions"] <= 0.1


def test_the_heuristic_grader_is_consistent_under_other_orders() -> None:
    items = load_groups([DEGRADED / "groups.jsonl"])
    (group,) = harness.consistency(items, lambda k: HeuristicGrader(), 3)
    assert group.agreement == 1.0 and not group.failures
    # The three orders really differed: each grading saw the candidates in another order.
    assert len({tuple(map(tuple, order)) for order in group.shown}) == 3
    assert group.bias.chance == pytest.approx(1 / 11)  # 11 classes of passing patches


def test_eval_cli_writes_figures_and_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["eval", str(DEGRADED / "groups.jsonl"), "--reference", str(DEGRADED / "reference.json")]
    assert cli.main([*args, "--out", str(tmp_path), "--consistency", "2"]) == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    group = report["groups"]["inventory-average-empty"]
    for key in FIGURES:
        assert report["overall"][key] == group[key] and group[key] is not None
    assert report["grader"] == "heuristic" and report["overall"]["scored_pairs"] == 30
    assert set(report["by_kind"]) == set(KINDS)
    assert report["consistency"]["agreement"] == 1.0 and report["consistency"]["k"] == 2
    (line,) = (tmp_path / "results.jsonl").read_text().splitlines()
    assert GroupResult.model_validate_json(line).status == "graded"
    printed = capsys.readouterr().out
    assert "pairwise" in printed and "by degradation kind" in printed and "consistency over 2" in printed


def test_a_reference_group_missing_from_the_input_fails_the_run(tmp_path: Path) -> None:
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"inventory-average-empty": [["clean"], ["edits-tests"]], "other": []}))
    code = cli.main(["eval", str(EXAMPLE_GROUP), "--reference", str(reference), "--out", str(tmp_path / "o")])
    report = json.loads((tmp_path / "o" / "eval.json").read_text())
    assert code == 1 and report["missing"] == ["other"]
    assert report["overall"]["pairwise_accuracy"] == 1.0 and report["overall"]["inversions"] == 0.0


def test_a_failed_group_is_counted_not_scored() -> None:
    result = GroupResult(group_id="g", status="failed", reason="boom", grader="x", usage={"total_tokens": 7})
    score = harness.score_result(result, [["a"], ["b"]])
    assert score.pairwise_accuracy is None and score.tokens == 7
    overall = harness.Evaluation("x", [score]).overall()
    assert overall["failed"] == 1 and overall["pairwise_accuracy"] is None


def test_reference_files_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "ref.json"
    path.write_text(json.dumps({"g": [["a", "b"], "c"]}))
    with pytest.raises(ValueError, match="list of lists"):
        harness.load_reference(path)
    path.write_text(json.dumps({"g": [["a"], ["a"]]}))
    with pytest.raises(ValueError, match="more than once"):
        harness.load_reference(path)
    assert cli.main(["eval", str(EXAMPLE_GROUP), "--reference", str(path), "--out", str(tmp_path)]) == 2


def test_register_adds_both_commands_to_a_parser() -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="gagar")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", "g.json", "--reference", "r.json", "--out", "o", "--grader", "llm"])
    assert args.func is cli.cmd_eval and args.sandbox == "docker" and args.consensus == 1
    args = parser.parse_args(["degrade", "g.json", "--clean", "c", "--out", "o", "--kinds", "test_edit"])
    assert args.func is cli.cmd_degrade and args.kinds == ["test_edit"]
