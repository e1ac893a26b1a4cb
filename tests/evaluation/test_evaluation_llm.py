"""Evaluating the LLM grader against a scripted endpoint: figures, label-order consistency, consensus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader.evaluation import cli, harness
from grader.evaluation.consensus import ConsensusGrader, agreement_factor
from grader.graders.llm.agent import Budgets, LLMGrader
from grader.groups.formats import load_groups
from grader.pipeline import grade_group_sync
from grader.redistribution.redistribute import shrink_weights
from grader.servers.scripted import Reply, ScriptedServer, labels_in, tool_calls, tool_results
from tests.conftest import REPO_ROOT

DEGRADED = REPO_ROOT / "examples" / "degraded"
FAST = Budgets(retry_wait_initial=0.01, retry_wait_max=0.05, request_timeout=10, retries=1, turns=4)


def submit(order: list[list[str]]) -> Reply:
    reasons = {label: "scripted" for tier in order for label in tier}
    return tool_calls(("submit_ranking", {"ranking": order, "reasons": reasons, "confidence": 0.5}))


def smallest_diff_first(request: dict[str, Any], n: int) -> Reply:
    """Reads every diff, then ranks by diff size: a reviewer who only likes small patches."""
    labels = labels_in(request)
    diffs = tool_results(request)
    if not diffs:
        return tool_calls(*[("diff", {"candidate": label}) for label in labels])
    return submit([[label] for _, label in sorted(zip(map(len, diffs), labels, strict=True))])


def first_shown_first(request: dict[str, Any], n: int) -> Reply:
    """Ranks the candidates in the order they were shown: pure position bias."""
    return submit([[label] for label in labels_in(request)])


def factory(server: ScriptedServer, base_seed: int = 1):
    return lambda k: LLMGrader(
        "scripted", base_url=server.url, sandbox=None, seed=base_seed + k, budgets=FAST
    )


@pytest.fixture(scope="module")
def groups():
    return load_groups([DEGRADED / "groups.jsonl"])


@pytest.fixture(scope="module")
def references():
    return harness.load_reference(DEGRADED / "reference.json")


def test_scripted_llm_figures_and_cost(groups, references) -> None:
    with ScriptedServer(smallest_diff_first) as server:
        evaluation, (result,) = harness.evaluate(groups, references, factory(server)(0))
    overall = evaluation.overall()
    assert result.status == "graded" and overall["graded"] == 1
    assert overall["tokens"] == 2 * 120  # two scripted replies of 100 + 20 tokens
    # Size alone ranks the clean patch first and the reformatted file and reproduction script last.
    assert overall["top1_accuracy"] == 1.0
    assert 0.5 < overall["pairwise_accuracy"] < 1.0 and overall["kendall_tau"] > 0


def test_the_shown_order_is_read_from_the_recorded_labels(groups) -> None:
    with ScriptedServer(first_shown_first) as server:
        result = grade_group_sync(groups[0], factory(server)(0))
        shown = labels_in(server.requests[0])
    order = harness.shown_order(result)
    assert order == [result.details["labels"][label] for label in shown]
    assert order[0] == result.ranking[0]  # this policy ranks what it saw first, first


def test_consistency_of_a_content_driven_and_a_position_driven_model(groups) -> None:
    with ScriptedServer(smallest_diff_first) as server:
        (steady,) = harness.consistency(groups, factory(server), 3)
    assert steady.agreement == 1.0 and steady.bias.gradings == 3
    assert len({tuple(map(tuple, order)) for order in steady.shown}) == 3  # other labels, other orders
    with ScriptedServer(first_shown_first) as server:
        (biased,) = harness.consistency(groups, factory(server), 3)
    assert biased.bias.first_ranked_first == 1.0 and biased.bias.last_ranked_first == 0.0
    assert biased.agreement is not None and biased.agreement < 0.5
    summary = harness.consistency_summary([steady, biased])
    assert summary["gradings"] == 6 and summary["first_ranked_first"] >= 0.5


def test_consensus_shrinks_credit_as_agreement_falls(groups) -> None:
    with ScriptedServer(first_shown_first) as server:
        biased = grade_group_sync(groups[0], ConsensusGrader(factory(server), 3))
    with ScriptedServer(smallest_diff_first) as server:
        steady = grade_group_sync(groups[0], ConsensusGrader(factory(server), 3))
    assert biased.status == steady.status == "graded"
    assert biased.grader == "llm-consensus3"
    consensus = biased.details["consensus"]
    assert biased.details["weight_shrink"] == agreement_factor(consensus["rankings"]) < 0.5
    assert steady.details["weight_shrink"] == 1.0 and steady.usage["requests"] == 3 * 2
    assert [m["seed"] for m in consensus["members"]] == [
        m["seed"] for m in steady.details["consensus"]["members"]
    ]
    # What the pipeline should do with it: weights pulled toward uniform, the order kept.
    shrunk = shrink_weights(biased.weights, biased.details["weight_shrink"])
    assert min(shrunk.values()) > min(biased.weights.values())
    assert sorted(shrunk, key=shrunk.__getitem__) == sorted(biased.weights, key=biased.weights.__getitem__)


def test_a_consensus_without_quorum_fails_the_group(groups) -> None:
    def flaky(request: dict[str, Any], n: int) -> Reply:
        return submit([labels_in(request)[:1]])  # always incomplete: every grading fails

    budgets = Budgets(retries=0, repairs=0, turns=2, request_timeout=10)
    with ScriptedServer(flaky) as server:
        grader = ConsensusGrader(
            lambda k: LLMGrader("scripted", base_url=server.url, sandbox=None, seed=k, budgets=budgets), 3
        )
        result = grade_group_sync(groups[0], grader)
    assert result.status == "failed" and "0 of 3 gradings succeeded, quorum 2" in result.reason
    assert result.advantages_after == result.advantages_before and result.usage["requests"] == 3


def test_eval_cli_with_the_llm_grader_and_consensus(tmp_path: Path) -> None:
    with ScriptedServer(smallest_diff_first) as server:
        code = cli.main(
            [
                "eval",
                str(DEGRADED / "groups.jsonl"),
                "--reference",
                str(DEGRADED / "reference.json"),
                "--out",
                str(tmp_path),
                "--grader",
                "llm",
                "--model",
                "scripted",
                "--base-url",
                server.url,
                "--sandbox",
                "none",
                "--seed",
                "5",
                "--consensus",
                "2",
            ]
        )
    assert code == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["grader"] == "llm-consensus2" and report["consensus"] == 2
    assert report["overall"]["tokens"] == 2 * 2 * 120
    (line,) = (tmp_path / "results.jsonl").read_text().splitlines()
    details = json.loads(line)["details"]
    assert details["weight_shrink"] == 1.0
    assert len({m["seed"] for m in details["consensus"]["members"]}) == 2  # seed + k: other orders
