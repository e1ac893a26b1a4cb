"""`gagar bench prepare` on the terminal: what it is doing while it works, a closing summary, and source
roots in one layout (OWNER/NAME documented, OWNER__NAME accepted) checked when the command starts (issue 37.2,
37.4).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.evaluation import cli
from grader.evaluation.prepare import SourceLocator, prepare
from grader.evaluation.recipe import load_recipe


def test_progress_names_each_step_as_it_starts(sources: dict) -> None:
    seen: list[tuple[str, int, int]] = []
    prepare(
        load_recipe(sources["recipe"]),
        SourceLocator(roots=[sources["root"]]),
        progress=lambda *a: seen.append(a),
    )
    started = [what for what, done, total in seen]
    # Files read, each instance, the mirror seeded, the tracks written: each announced before it runs.
    assert "reading run-a/predictions" in started
    assert "instance acme__widget-1" in started and "instance acme__widget-2" in started
    assert "seeding the mirror of acme/widget (2 base commits)" in started
    assert "writing the tracks" in started
    assert seen[-1][1] == seen[-1][2]  # ends with every step done
    announced = next(
        done for what, done, _ in seen if what == "seeding the mirror of acme/widget (2 base commits)"
    )
    assert announced == next(done for what, done, _ in seen if what == "mirror acme/widget") - 1


def test_the_command_ends_with_a_summary_line(sources: dict, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "prepare", str(sources["recipe"]), "--source-root", str(sources["root"])]
    assert cli.main(argv) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("prepared tiny-recipe in ") and ": 2 of 2 instances; verification -> " in last
    assert cli.main(argv) == 0  # a second run finds every step done
    assert "steps were already done (resumed)" in capsys.readouterr().out.strip().splitlines()[-1]


def test_a_source_root_in_another_layout_is_named_when_the_command_starts(
    sources: dict,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    flat = tmp_path / "flat"  # NAME only: the layout no command reads
    flat.mkdir()
    for repository in ("acme/runs", "acme/widget"):
        (flat / repository.split("/")[1]).symlink_to(sources["root"] / repository)
    argv = ["bench", "prepare", str(sources["recipe"]), "--offline", "--source-root"]
    assert cli.main([*argv, str(flat)]) == 2
    err = capsys.readouterr().err
    assert f"--source-root {flat}: holds none of the 2 repositories needed (acme/runs, acme/widget)" in err
    assert "DIR/OWNER/NAME" in err and "holds: runs, widget" in err
    assert cli.main([*argv, str(tmp_path / "nowhere")]) == 2
    assert f"--source-root {tmp_path / 'nowhere'}: no such folder" in capsys.readouterr().err
    underscored = tmp_path / "underscored"  # SWE-bench's OWNER__NAME: accepted as well
    underscored.mkdir()
    for repository in ("acme/runs", "acme/widget"):
        (underscored / repository.replace("/", "__")).symlink_to(sources["root"] / repository)
    assert cli.main([*argv, str(underscored)]) == 0, capsys.readouterr().err
