"""What degrade and eval print does not mislead (issue 37.5, 37.6): degrade writes into a new folder unless
--force and says where; eval names its wall time and the time summed over groups, and says nothing of double
labels on a track that has none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.evaluation import cli
from tests.conftest import EXAMPLE_GROUP


def test_degrade_writes_a_new_folder_and_overwrites_one_only_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "degraded"
    argv = [
        "degrade",
        str(EXAMPLE_GROUP),
        "--clean",
        "clean",
        "--kinds",
        "test_edit",
        "debug_output",
        "--out",
    ]
    assert cli.main([*argv, str(out)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        f"wrote 2 variants of 1 group to {out}: groups.jsonl, reference.json"
    )
    (out / "groups.jsonl").write_text("kept\n")
    (out / "notes.txt").write_text("mine\n")
    assert cli.main([*argv, str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out} already holds groups.jsonl, notes.txt, reference.json" in err and "--force" in err
    assert (out / "groups.jsonl").read_text() == "kept\n"  # nothing was written
    assert cli.main([*argv, str(out), "--force"]) == 0
    assert len((out / "groups.jsonl").read_text().splitlines()) == 1 and (out / "notes.txt").exists()


def test_verification_eval_names_both_times_and_no_double_labels(
    sources: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["bench", "prepare", str(sources["recipe"]), "--source-root", str(sources["root"])]) == 0
    capsys.readouterr()
    out = tmp_path / "run"
    argv = ["eval", "--bench", str(sources["recipe"]), "--track", "verification", "--out", str(out)]
    assert cli.main([*argv, "--bootstrap", "0", "--workers", "2"]) == 0
    printed = capsys.readouterr().out
    assert "double labels" not in printed  # labels from harness reports: none are double
    assert "benchmark tiny-recipe/verification, split all: 2 groups\n" in printed
    report = json.loads((out / "eval.json").read_text())
    wall, summed = report["overall"]["wall_seconds"], report["overall"]["seconds"]
    assert wall > 0 and summed > 0
    said = f"time: {wall:.2f} s wall for 2 groups (2 at a time); {summed:.2f} s of grading summed over"
    assert said in " ".join(printed.split())
    assert "overall (time summed)" in printed
