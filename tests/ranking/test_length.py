"""The length-growth monitor: Kendall's tau-b, the per-group signal in results, `gagar show`, the report's
payload, and `gagar trend` warning (and not warning) on runs graded here by the real CLI."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from grader.graders.heuristic import HeuristicGrader
from grader.groups.formats import load_group_file
from grader.groups.models import Group
from grader.inspect.report import group_payload, length_payload
from grader.inspect.run import load_run
from grader.pipeline import grade_group_sync
from grader.ranking.length import RewardingLength, StepReading, rank_correlation, read_step, sign_test_p
from tests.conftest import REPO_ROOT, run_gagar

sys.path.insert(0, str(REPO_ROOT / "examples"))
from length_steps import write_steps  # noqa: E402

EXAMPLE = REPO_ROOT / "examples" / "inventory_group.json"
# The heuristic grader's ranking of the example: clean = clean-respaced > leftover-script > reformats-report >
# edits-tests, with patch sizes (changed lines) 2, 2, 7, 12, 4.
LENGTHS = {
    "clean": 500,
    "clean-respaced": 400,
    "leftover-script": 300,
    "reformats-report": 200,
    "edits-tests": 100,
}


def tau(x: list[float], y: list[float]) -> float | None:
    ids = [f"t{k}" for k in range(len(x))]
    return rank_correlation(dict(zip(ids, x, strict=True)), dict(zip(ids, y, strict=True)))


def test_kendall_tau_b_by_hand() -> None:
    assert tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert tau([1, 2, 3], [30, 20, 10]) == -1.0
    # 6 pairs: 4 concordant, one tied in x only, one tied in y only: 4 / sqrt(5 * 5).
    assert tau([1, 2, 2, 3], [1, 2, 3, 3]) == pytest.approx(0.8)
    assert tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)  # 5 concordant, 1 discordant
    assert tau([1, 1, 1], [1, 2, 3]) is None  # all ties: nothing to say
    assert tau([1], [2]) is None
    assert rank_correlation({"a": 1, "b": 2, "c": 3}, {"a": 5, "b": 6}) == 1.0  # over the ids both give


def test_sign_test() -> None:
    assert sign_test_p(12, 0) == pytest.approx(0.5**12)
    assert sign_test_p(3, 3) == pytest.approx(42 / 64)
    assert sign_test_p(0, 0) == 1.0


def example(lengths: dict[str, int | None]) -> Group:
    (group,) = load_group_file(EXAMPLE)
    trajectories = [
        t.model_copy(update={"response_length": lengths.get(t.id, 800)}) for t in group.trajectories
    ]
    return group.model_copy(update={"trajectories": trajectories})


def test_a_graded_group_carries_its_length_signal_in_tokens() -> None:
    result = grade_group_sync(example(LENGTHS), HeuristicGrader())
    assert result.status == "graded"
    signal = result.length
    assert signal is not None and signal.source == "response_length" and signal.n == 5
    # Longer always ranked at least as high; only clean and clean-respaced tie (in weight): 9 / sqrt(9 * 10).
    assert signal.weight_vs_length == pytest.approx(9 / math.sqrt(90), abs=1e-4)
    assert signal.advantage_vs_length == pytest.approx(9 / math.sqrt(90), abs=1e-4)
    assert signal.weight_vs_patch_size == pytest.approx(-0.5556, abs=1e-4)
    assert signal.patch_sizes == {
        "clean": 2,
        "clean-respaced": 2,
        "leftover-script": 7,
        "reformats-report": 12,
        "edits-tests": 4,
    }
    assert signal.top_length == 450 and signal.bottom_length == 100
    assert signal.lengths == {k: float(v) for k, v in LENGTHS.items()}
    # It is written to results.jsonl with the rest of the result.
    assert json.loads(result.model_dump_json())["length"]["weight_vs_length"] == signal.weight_vs_length


def test_without_response_length_patch_size_stands_in_and_says_so() -> None:
    result = grade_group_sync(example({**LENGTHS, "leftover-script": None}), HeuristicGrader())
    signal = result.length
    assert signal is not None and signal.source == "patch_size"
    assert signal.weight_vs_length == signal.weight_vs_patch_size == pytest.approx(-0.5556, abs=1e-4)
    assert signal.top_length == 2 and signal.bottom_length == 4


def test_groups_not_graded_have_no_length_signal(tmp_path: Path) -> None:
    (group,) = load_group_file(EXAMPLE)
    all_fail = group.model_copy(
        update={"trajectories": [t.model_copy(update={"passed": False}) for t in group.trajectories]}
    )
    assert grade_group_sync(all_fail, HeuristicGrader()).length is None
    missing_repo = group.model_copy(update={"task": group.task.model_copy(update={"repo": str(tmp_path)})})
    failed = grade_group_sync(missing_repo, HeuristicGrader())
    assert failed.status == "failed" and failed.length is None


def test_the_rule_needs_both_a_clear_mean_and_enough_groups() -> None:
    rule = RewardingLength(window=3, min_mean_tau=0.2, max_p=0.05)
    strong_but_few = StepReading("s1", graded=3, sources={"response_length": 3}, taus=[0.9, 0.9, 0.9])
    strong_but_few.top_lengths, strong_but_few.bottom_lengths = [900.0], [300.0]
    assert rule.check([strong_but_few]) is None  # 3 of 3 positive: p = 0.125, not below 0.05
    many_weak = StepReading("s2", graded=12, sources={"response_length": 12}, taus=[0.1] * 12)
    many_weak.top_lengths, many_weak.bottom_lengths = [900.0], [800.0]
    assert rule.check([many_weak]) is None  # p tiny, but a mean of 0.1 is below 0.2
    many_strong = StepReading("s3", graded=12, sources={"response_length": 12}, taus=[0.5] * 12)
    many_strong.top_lengths, many_strong.bottom_lengths = [1200.0], [600.0]
    warning = rule.check([many_strong])
    assert warning is not None and "12 of 12 groups" in warning and "1200 tokens" in warning
    # The window looks at the last steps only: a strong step long ago does not warn today.
    assert rule.check([many_strong, many_weak, many_weak, many_weak]) is None
    assert RewardingLength(window=2).check([many_strong, many_weak]) is not None
    assert RewardingLength(window=0).check([many_strong, many_weak]) is not None  # all steps: mean 0.3


@pytest.fixture(scope="module")
def length_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Six steps of four groups graded by `gagar grade`: lengths independent of credit in steps 1-3, made to
    follow the heuristic grader's preference (and grow) in steps 4-6 (`examples/length_steps.py`)."""
    root = tmp_path_factory.mktemp("length-runs")
    runs = []
    for n, path in enumerate(write_steps(root, steps=6, groups=4, rewarding_from=4, seed=0), start=1):
        run = root / f"run-{n}"
        proc = run_gagar("grade", str(path), "--out", str(run), "--workers", "4")
        assert proc.returncode == 0, proc.stderr
        runs.append(run)
    return runs


def test_trend_warns_when_credit_follows_length(length_runs: list[Path]) -> None:
    proc = run_gagar("trend", *map(str, length_runs), "--strict")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())
    assert "WARNING: the grader is rewarding length over steps 4-6" in out
    assert "credit rose with length in 12 of 12 groups and fell in 0" in out
    rows = [line.split("│") for line in proc.stdout.splitlines() if "│" in line and "run-" in line]
    assert [row[0].strip() for row in rows] == ["1", "2", "3", "4", "5", "6"]
    top = [float(row[4]) for row in rows]
    tau = [float(row[6]) for row in rows]
    assert all(abs(t) < 0.2 for t in tau[:3]) and all(t > 0.9 for t in tau[3:])
    assert top[3] < top[4] < top[5]  # top-ranked trajectories grow longer step by step
    # The same command without --strict reports the warning but exits 0.
    assert run_gagar("trend", *map(str, length_runs)).returncode == 0


def test_trend_does_not_warn_when_lengths_are_independent_of_credit(length_runs: list[Path]) -> None:
    proc = run_gagar("trend", *map(str, length_runs[:3]), "--strict")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())
    assert "WARNING" not in out and "not rewarding length over steps 1-3" in out
    assert "sign test p=0.613" in out


def test_show_and_report_carry_the_length_signal(length_runs: list[Path]) -> None:
    run = length_runs[-1]
    summary = " ".join(run_gagar("show", str(run)).stdout.split())
    assert "credit vs length: mean Kendall tau of weight with length +0.95" in summary
    assert "rose/fell with length in 4/0 of 4 graded groups (4 in tokens)" in summary
    one = " ".join(run_gagar("show", str(run), "step6-group0").stdout.split())
    assert "credit vs length: Kendall tau with length in tokens: weight +0.95" in one
    loaded = load_run(run)
    payload = length_payload(loaded)
    assert payload is not None and payload["rose"] == 4 and payload["histogram"][9] == 4
    assert group_payload(loaded, loaded.results[0])["length"]["source"] == "response_length"
    assert read_step("x", loaded.results).graded == 4
