"""Reading a run directory back (the runs themselves are built in tests/support/inspect_runs.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.groups.models import TrajectoryReport
from grader.inspect.run import fired_signals, load_run, summarize
from grader.inspect.steps import to_steps
from tests.support.inspect_runs import GROUP, heuristic_run, hostile_run, llm_run

__all__ = ["heuristic_run", "hostile_run", "llm_run"]  # session fixtures, built once per process


# -- tests ---------------------------------------------------------------------------------------------------


def test_a_run_reads_back_with_patches_and_transcript(heuristic_run: Path, llm_run: Path) -> None:
    run = load_run(heuristic_run)
    (result,) = run.results
    assert result.group_id == GROUP and result.grader == "heuristic"
    assert "+        return 0.0" in (run.patch(GROUP, "clean") or "")
    assert run.patch_note(GROUP) == "" and run.transcript(result) is None

    llm = load_run(llm_run)
    events = llm.transcript(llm.results[0])
    assert events is not None and events[0]["type"] == "start" and events[-1]["type"] == "submitted"


def test_a_run_without_groups_says_patches_are_not_available(heuristic_run: Path, tmp_path: Path) -> None:
    shutil.copyfile(heuristic_run / "results.jsonl", tmp_path / "results.jsonl")
    run = load_run(tmp_path)
    assert run.groups is None and run.patch(GROUP, "clean") is None
    assert run.patch_note(GROUP).startswith("patch not available")


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="results.jsonl does not exist"):
        load_run(tmp_path)
    (tmp_path / "results.jsonl").write_text('{"group_id": "x"}\n')
    with pytest.raises(ValueError, match=r"results.jsonl:1 is not a result line"):
        load_run(tmp_path)


def test_a_moved_run_still_finds_its_transcripts(llm_run: Path, tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    shutil.copytree(llm_run, moved)
    run = load_run(moved)
    (result,) = run.results
    assert Path(result.transcript).parent == llm_run / "transcripts"  # the recorded, absolute path
    assert run.transcript_path(result) == moved / "transcripts" / f"{GROUP}.jsonl"


def test_the_summary_counts_statuses_spread_and_flags(heuristic_run: Path, hostile_run: Path) -> None:
    summary = summarize(load_run(heuristic_run).results)
    assert summary.statuses == {"graded": 1} and summary.graders == {"heuristic": 1}
    assert summary.spreads == [pytest.approx(0.5)]
    names = {name: (candidates, groups) for name, candidates, groups in summary.top_flags()}
    assert names == {
        "leftover_files": (1, 1),
        "test_files_modified": (1, 1),
        "out_of_scope_files": (1, 1),
        "formatting_only_files": (1, 1),
    }
    hostile = summarize(load_run(hostile_run).results)
    assert hostile.injected == 1 and hostile.top_flags()[0] == ("injection", 1, 1)


def test_fired_signals_are_objections_not_descriptions() -> None:
    report = TrajectoryReport(
        passed=True,
        signals={
            "files": ["a.py"],
            "changed_lines": 4,
            "equivalent_to": ["b"],
            "size_ratio": 3.0,
            "penalty": 2.5,
            "leftover_files": ["reproduce.py"],
            "debug_lines": 2,
            "commented_code_lines": 0,
            "test_files_modified": [],
            "custom_check": True,
        },
    )
    assert fired_signals(report) == ["leftover_files", "debug_lines", "custom_check"]


def test_transcript_steps_pair_calls_with_results_and_decode_labels(llm_run: Path) -> None:
    run = load_run(llm_run)
    (result,) = run.results
    steps = to_steps(run.transcript(result) or [])
    kinds = [s.kind for s in steps]
    assert kinds[:3] == ["start", "system", "user"] and kinds[-1] == "submitted"
    diffs = [c for s in steps for c in s.calls if c.name == "diff"]
    assert len(diffs) == 4 and all(c.result and "diff --git" in c.result for c in diffs)
    submit = next(c for s in steps for c in s.calls if c.name == "submit_ranking")
    assert submit.result == "accepted"
    assert "(clean, clean-respaced)" in steps[-1].body  # labels decoded back to trajectory ids
    for label, ids in result.details["labels"].items():
        assert f"{label} = {', '.join(ids)}" in steps[0].body
