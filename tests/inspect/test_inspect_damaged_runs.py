"""`gagar show` and `gagar report` over run folders that are damaged or hostile.

The run is real: two groups graded by `gagar grade --grader llm` against the scripted OpenAI-compatible
server (real HTTP, real transcripts); each test copies it and damages the copy as a disk, a hand edit or a
hostile sender would: a `transcript` field pointing outside the run, a transcript symlinked out, a cut
transcript, a NaN advantage.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from grader.servers.scripted import ScriptedServer, read_every_diff_then_rank
from tests.conftest import EXAMPLE_GROUP, run_gagar

SECRET = "TOP-SECRET-7f3a9c"  # in a file outside the run: must never reach the report


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("damaged")
    example = json.loads(EXAMPLE_GROUP.read_text())
    example["task"]["repo"] = str(EXAMPLE_GROUP.parent / example["task"]["repo"])
    inputs = root / "groups.jsonl"
    inputs.write_text("".join(json.dumps(dict(example, group_id=gid)) + "\n" for gid in ("g1", "g2")))
    policy = lambda request, n: read_every_diff_then_rank(request, [], lambda label, i, count: "size")  # noqa: E731
    with ScriptedServer(policy) as server:
        proc = run_gagar(
            "grade", str(inputs), "--out", str(root / "run"), "--grader", "llm", "--model", "scripted",
            "--base-url", server.url, "--sandbox", "none",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return root / "run"


@pytest.fixture
def run(graded: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(graded, copy)
    results = _results(copy)
    for row in results:  # as a moved run records them: paths relative to the run
        row["transcript"] = f"transcripts/{Path(row['transcript']).name}"
    _write_results(copy, results)
    return copy


def _results(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def _write_results(run: Path, rows: list[dict[str, Any]]) -> None:
    # json.dumps writes NaN as the bare token NaN, which Python's and pydantic's readers accept
    (run / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def _report_groups(run: Path) -> dict[str, dict[str, Any]]:
    proc = run_gagar("report", str(run))
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = (run / "report.html").read_text()
    payloads = re.findall(r'<script type="application/json" id="gagar-group-\d+">(.*?)</script>', page)
    groups = [json.loads(payload) for payload in payloads]
    return {group["id"]: group for group in groups}


def _show(run: Path, group: str) -> str:
    proc = run_gagar("show", str(run), group)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("where", ["relative", "absolute", "symlink"])
def test_a_transcript_outside_the_run_is_refused_and_named(run: Path, where: str) -> None:
    secret = run.parent / "secret.jsonl"
    secret.write_text(json.dumps({"t": 0, "type": "message", "role": "user", "content": SECRET}) + "\n")
    rows = _results(run)
    if where == "symlink":
        (run / "transcripts" / "g1.jsonl").unlink()
        (run / "transcripts" / "g1.jsonl").symlink_to(secret)
    else:
        rows[0]["transcript"] = "../secret.jsonl" if where == "relative" else str(secret)
        (run / "transcripts" / "g1.jsonl").unlink()  # nothing of that name inside to fall back on
    _write_results(run, rows)

    groups = _report_groups(run)

    assert SECRET not in (run / "report.html").read_text()
    assert groups["g1"]["transcript"] is None
    note = groups["g1"]["transcript_note"]
    assert note.startswith("transcript refused") and str(secret.resolve()) in note
    assert groups["g2"]["transcript"]  # the other group keeps its detail
    shown = _show(run, "g1")
    assert SECRET not in shown and "transcript refused" in shown


def test_a_cut_transcript_costs_its_group_detail_and_is_named(run: Path) -> None:
    damaged = run / "transcripts" / "g2.jsonl"
    damaged.write_bytes(damaged.read_bytes()[:1000])

    groups = _report_groups(run)

    assert groups["g1"]["transcript"] and groups["g1"]["transcript_note"] == ""
    assert groups["g2"]["transcript"] is None
    assert groups["g2"]["transcript_note"].startswith(f"transcript damaged: {damaged}:")
    assert "transcript damaged" in _show(run, "g2") and str(damaged) in _show(run, "g2").replace("\n", "")
    assert "submitted ranking" in _show(run, "g1")


def test_a_transcript_of_the_wrong_shape_is_named(run: Path) -> None:
    damaged = run / "transcripts" / "g2.jsonl"
    damaged.write_text('[1, 2]\n{"type": "response", "seconds": "soon"}\n')

    assert "not a JSON object" in _report_groups(run)["g2"]["transcript_note"]
    damaged.write_text('{"type": "response", "seconds": "soon"}\n')
    note = _report_groups(run)["g2"]["transcript_note"]
    assert note.startswith(f"transcript damaged: {damaged}: an event cannot be read")


def test_a_nan_advantage_shows_as_nan(run: Path) -> None:
    rows = _results(run)
    tid = next(iter(rows[0]["advantages_after"]))
    rows[0]["advantages_after"][tid] = float("nan")
    _write_results(run, rows)

    groups = _report_groups(run)

    (candidate,) = [c for c in groups["g1"]["candidates"] if c["id"] == tid]
    assert candidate["after"] == {"$float": "NaN"}
    assert groups["g2"]["candidates"][0]["after"] is not None
    shown = _show(run, "g1")
    assert re.search(rf"{re.escape(tid)}\s.*NaN", shown), shown
