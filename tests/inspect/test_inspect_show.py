"""`gagar show`: the run summary and one group in full, as a reader piping it to a file would see them."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from grader.inspect import show
from grader.inspect.run import load_run
from tests.conftest import REPO_ROOT
from tests.support.inspect_runs import (
    GROUP,
    HOSTILE_GROUP,
    SNEAKY,
    heuristic_run,
    hostile_run,
    inspect_cli,
    llm_run,
)

__all__ = ["heuristic_run", "hostile_run", "llm_run"]  # session fixtures shared with the other inspect tests


def test_the_run_summary_piped_is_plain_text(heuristic_run: Path) -> None:
    proc = inspect_cli("show", str(heuristic_run))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out
    assert "groups: 1 (1 graded, 0 skipped, 0 failed)" in out
    assert "grader: heuristic (1)" in out
    assert "weight spread (best - worst weight) over 1 graded group(s): min 0.500" in out
    for flag in ("leftover_files", "test_files_modified", "out_of_scope_files", "formatting_only_files"):
        assert f"{flag}: 1 candidate(s) in 1 group(s)" in out
    assert GROUP in out and "clean, clean-respaced" in out
    assert all(line == line.rstrip() for line in out.splitlines())  # no padding left for a file or a diff


def test_one_group_in_full(heuristic_run: Path) -> None:
    proc = inspect_cli("show", str(heuristic_run), GROUP)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out
    assert out.startswith(f"{GROUP}: graded by heuristic in ")
    candidates = out[out.index("Candidates") : out.index("Ranking")]
    assert "leftover-script" in candidates and "reproduce.py" in candidates and "leftover_files" in candidates
    assert (
        "gave-up" in candidates and "empty" in candidates
    )  # failing ones are listed too, with how they applied
    ranking = out[out.index("Ranking") : out.index("Advantages")]
    assert "1. clean  weight 1.000" in ranking and "4. edits-tests  weight 0.500" in ranking
    assert "penalty 2.90: leaves reproduce.py" in ranking
    advantages = out[out.index("Advantages") : out.index("Patches")]
    assert "+0.5855 │ +0.7319 │ +0.1464" in advantages and "-1.4638 │ -1.4638 │ +0.0000" in advantages
    patches = out[out.index("Patches") :]
    assert "── reformats-report" in patches and "+from inventory.stock import (" in patches
    assert "Transcript" not in out  # the heuristic grader keeps none


def test_an_llm_group_shows_its_transcript_step_by_step(llm_run: Path) -> None:
    proc = inspect_cli("show", str(llm_run), GROUP)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out
    assert "graded by llm" in out and "model scripted, seed " in out and "confidence 0.7" in out
    transcript = out[out.index("Transcript") :]
    assert "start: model scripted" in transcript
    assert "system message (" in transcript and "--full shows everything" in transcript
    assert "assistant, turn 2: diff, diff, diff, diff" in transcript
    assert '→ diff({"candidate": "C-' in transcript and "+        return 0.0" in transcript
    assert "submitted ranking, confidence 0.7" in transcript
    result = load_run(llm_run).results[0]
    for label, ids in result.details["labels"].items():
        assert f"{label} = {', '.join(ids)}" in transcript  # the legend: what each label stands for
        assert f"{label} ({', '.join(ids)})" in transcript  # and the submitted ranking, decoded
    full = inspect_cli("show", str(llm_run), GROUP, "--full").stdout
    assert "--full shows everything" not in full and len(full) > len(out)


def test_diffs_are_highlighted_on_a_terminal(llm_run: Path) -> None:
    # What piping removes: on a terminal the same view is coloured, diffs by rich's diff lexer.
    buffer = io.StringIO()
    show.render_group(Console(file=buffer, force_terminal=True, width=120), load_run(llm_run), GROUP)
    coloured = buffer.getvalue()
    assert "\x1b[" in coloured
    line = next(x for x in coloured.splitlines() if "return 0.0" in x and "+" in x)
    assert line.count("\x1b[") >= 1  # an added line is styled


def test_hostile_text_is_printed_as_text(hostile_run: Path) -> None:
    proc = inspect_cli("show", str(hostile_run), HOSTILE_GROUP)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b" not in out  # the patch's escape sequence is spelled out, never sent to the terminal
    assert r"\x1b[31mred\x1b[0m" in out
    assert "[bold red]markup[/]" in out and "[red]x[/]" in out  # rich markup in data stays literal
    assert SNEAKY in out and "injection flagged in sneaky <b>bold</b>" in out
    # The same on a terminal: the data's escapes are still neutralised, only rich's own styling is there.
    buffer = io.StringIO()
    show.render_group(
        Console(file=buffer, force_terminal=True, width=120), load_run(hostile_run), HOSTILE_GROUP
    )
    assert "\x1b[31mred" not in buffer.getvalue() and r"\x1b[31mred" in buffer.getvalue()


def test_a_run_without_groups_jsonl_still_shows(heuristic_run: Path, tmp_path: Path) -> None:
    shutil.copyfile(heuristic_run / "results.jsonl", tmp_path / "results.jsonl")
    summary = inspect_cli("show", str(tmp_path))
    assert summary.returncode == 0 and "patches: not available" in summary.stdout
    group = inspect_cli("show", str(tmp_path), GROUP)
    assert group.returncode == 0, group.stderr
    assert f"patch not available: {tmp_path / 'groups.jsonl'} does not exist" in group.stdout
    assert "penalty 2.90: leaves reproduce.py" in group.stdout  # everything else is still there


def test_an_llm_transcript_that_is_gone(llm_run: Path, tmp_path: Path) -> None:
    result = json.loads((llm_run / "results.jsonl").read_text())
    result["transcript"] = str(tmp_path / "elsewhere" / "gone.jsonl")
    (tmp_path / "results.jsonl").write_text(json.dumps(result) + "\n")
    proc = inspect_cli("show", str(tmp_path), GROUP)
    assert proc.returncode == 0, proc.stderr
    assert "transcript not found" in proc.stdout


def test_errors_name_the_problem(heuristic_run: Path, tmp_path: Path) -> None:
    proc = inspect_cli("show", str(heuristic_run), "no-such-group")
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"has no group 'no-such-group'; it has {GROUP}" in proc.stderr
    proc = inspect_cli("show", str(tmp_path))
    assert proc.returncode == 2 and "results.jsonl does not exist" in proc.stderr


def test_many_groups_list_failures_first_and_cut(tmp_path: Path, llm_run: Path) -> None:
    from tests.support.inspect_runs import synthetic_run

    run = synthetic_run(tmp_path / "run", llm_run, 60)
    out = inspect_cli("show", str(run), "--limit", "5").stdout
    assert "groups: 60 (51 graded, 6 skipped, 3 failed)" in out
    assert "3 x llm grader failed: turn budget exhausted …" in out
    rows = [line.split()[0] for line in out.splitlines() if line.startswith("g0")]
    assert rows == ["g0007", "g0032", "g0057", "g0000", "g0001"]  # failed groups first: what a reader wants
    assert "… 55 more groups (--limit 0 lists all)" in out
    everything = inspect_cli("show", str(run), "--limit", "0").stdout
    assert sum(line.startswith("g0") for line in everything.splitlines()) == 60


def test_gagar_itself_has_the_inspect_commands(heuristic_run: Path) -> None:
    def gagar(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "grader.cli", *args], cwd=REPO_ROOT, capture_output=True, text=True
        )

    if "invalid choice: 'show'" in gagar("show", "--help").stderr:
        pytest.skip("grader/cli/commands.py does not call grader.inspect.cli.register yet")
    proc = gagar("show", str(heuristic_run))
    assert proc.returncode == 0 and "groups: 1 (1 graded" in proc.stdout
