"""Ids are text wherever a command prints them, and a display that fails never costs a result (issue 34.5).

A group id such as `B[/x]` is a closing tag to rich's markup; one with an escape sequence would restyle the
terminal. Each command that prints ids runs here as on a terminal (`FORCE_COLOR=1` makes rich render its
progress bars and tables as it does on one) with such ids, and must finish, write its results and show the
ids spelled out.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from grader.cli.commands import build_parser, cmd_grade
from grader.evaluation import cli as evaluation_cli
from tests.conftest import EXAMPLE_GROUP, REPO_ROOT, run_gagar

MARKUP_ID = "B[/x]"
ESCAPE_ID = "C\x1b[31mred"
SPELLED = "C\\x1b[31mred"


def _hostile_groups(path: Path, ids: list[str]) -> Path:
    group = json.loads(EXAMPLE_GROUP.read_text())
    group["task"]["repo"] = str(REPO_ROOT / "examples" / "inventory.bundle")
    path.write_text("".join(json.dumps({**group, "group_id": gid}) + "\n" for gid in ids))
    return path


def _terminal_env() -> dict[str, str]:
    return {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "200"}


def test_grade_and_show_print_markup_and_escape_ids_as_text(tmp_path: Path) -> None:
    groups = _hostile_groups(tmp_path / "hostile.jsonl", ["A", MARKUP_ID, ESCAPE_ID])
    out = tmp_path / "run"
    graded = run_gagar("grade", str(groups), "--out", str(out), env=_terminal_env())
    assert graded.returncode == 0, graded.stderr
    assert "MarkupError" not in graded.stderr
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["group_id"] for r in results] == ["A", MARKUP_ID, ESCAPE_ID]
    assert all(r["status"] == "graded" for r in results)
    assert MARKUP_ID in graded.stdout and SPELLED in graded.stdout
    assert ESCAPE_ID not in graded.stdout + graded.stderr  # the id's own escape sequence never goes out raw
    summary = run_gagar("show", str(out), env=_terminal_env())
    assert summary.returncode == 0, summary.stderr
    assert MARKUP_ID in summary.stdout and SPELLED in summary.stdout and ESCAPE_ID not in summary.stdout
    one = run_gagar("show", str(out), MARKUP_ID, env=_terminal_env())
    assert one.returncode == 0 and MARKUP_ID in one.stdout, one.stderr


class _GoneTerminal(io.TextIOBase):
    """A stderr whose terminal went away: every write fails as a hung-up tty's does."""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(5, "Input/output error")


def test_a_display_that_fails_costs_no_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    groups = _hostile_groups(tmp_path / "groups.jsonl", ["first", "second"])
    out = tmp_path / "run"
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setattr("sys.stderr", _GoneTerminal())
    args = build_parser().parse_args(["grade", str(groups), "--out", str(out), "--workers", "1"])
    assert cmd_grade(args) == 0
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["group_id"], r["status"]) for r in results] == [("first", "graded"), ("second", "graded")]
    assert "2 groups: 2 graded, 0 skipped, 0 failed" in capsys.readouterr().out


def test_eval_tables_print_ids_as_text(tmp_path: Path) -> None:
    groups = _hostile_groups(tmp_path / "groups.jsonl", [MARKUP_ID, ESCAPE_ID])
    ranking = [["clean", "clean-respaced"], ["leftover-script"], ["reformats-report", "edits-tests"]]
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({MARKUP_ID: ranking, ESCAPE_ID: ranking}))
    out = tmp_path / "eval"
    argv = ["eval", str(groups), "--reference", str(reference), "--out", str(out), "--consistency", "2"]
    proc = run_gagar(*argv, "--bootstrap", "0", env=_terminal_env())
    assert proc.returncode == 0, proc.stderr
    assert "MarkupError" not in proc.stderr
    scored = json.loads((out / "eval.json").read_text())
    assert set(scored["groups"]) == {MARKUP_ID, ESCAPE_ID}
    assert proc.stdout.count(MARKUP_ID) >= 2 and proc.stdout.count(SPELLED) >= 2  # scores and consistency
    assert ESCAPE_ID not in proc.stdout


def test_bench_prepare_shows_hostile_instance_ids_as_text(
    sources: dict,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    recipe: Path = sources["recipe"]
    hostile = f"run{MARKUP_ID}"  # a run's name: file ids and candidate ids in the recipe, shown as read
    manifest = json.loads((recipe / "recipe.json").read_text())
    manifest["files"] = {k.replace("run-c", hostile): v for k, v in manifest["files"].items()}
    run_c = manifest["runs"].pop("run-c")
    manifest["runs"][hostile] = {k: v.replace("run-c", hostile) for k, v in run_c.items()}
    (recipe / "recipe.json").write_text(json.dumps(manifest))
    lines = [json.loads(line) for line in (recipe / "candidates.jsonl").read_text().splitlines()]
    for line in lines:
        line["run"] = hostile if line["run"] == "run-c" else line["run"]
    (recipe / "candidates.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    monkeypatch.setenv("FORCE_COLOR", "1")
    code = evaluation_cli.main(["bench", "prepare", str(recipe), "--source-root", str(sources["root"])])
    captured = capsys.readouterr()
    assert "MarkupError" not in captured.err and "Traceback" not in captured.err
    # A recipe may come to refuse such a name (then the error names it); it never breaks the display.
    assert code == 0 or (code == 2 and MARKUP_ID in captured.err), captured.err
    if code == 0:
        assert "prepared tiny-recipe in " in captured.out
