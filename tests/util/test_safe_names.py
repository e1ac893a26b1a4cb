"""Ids on disk and on the terminal: unique, bounded, safe file names; control and bidi characters escaped.

The runs are real: `gagar grade` in a subprocess, the LLM grader against the scripted OpenAI-compatible
server over real HTTP.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from grader.graders.transcript import read_transcript
from grader.groups.formats import write_groups
from grader.servers.scripted import ScriptedServer, read_every_diff_then_rank
from grader.util.safenames import safe_name
from tests.conftest import EXAMPLE_GROUP, run_gagar
from tests.support.distill_support import TEACHER_OPTIONS, known_groups, teacher

RLO = "\u202e"  # right-to-left override: "evil\u202egnp.exe" reads as "evilexe.png"
ESC = "\x1b"
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def _example(group_id: str, ids: dict[str, str] | None = None) -> dict:
    group = json.loads(EXAMPLE_GROUP.read_text())
    group["group_id"] = group_id
    group["task"]["repo"] = str(EXAMPLE_GROUP.parent / group["task"]["repo"])
    for trajectory in group["trajectories"]:
        trajectory["id"] = (ids or {}).get(trajectory["id"], trajectory["id"])
    return group


def _write(path: Path, groups: list[dict]) -> Path:
    path.write_text("".join(json.dumps(g) + "\n" for g in groups))
    return path


def test_names_are_unique_bounded_and_plain() -> None:
    ids = [
        "inventory-average-empty",
        "a\0b",
        "a-b-4a3dec2d",
        "a/b",
        "a b",
        "../../etc/passwd",
        ".hidden",
        "x.lock",
        "x" * 300,
        "x" * 301,
        "\ud800",
        "",
        "é",
        "e",
        "evil" + RLO + "gnp.exe",
        safe_name("a/b"),  # an id shaped like a hashed name is hashed too
    ]
    names = [safe_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    for name in names:
        assert NAME.fullmatch(name) and len(name) <= 80 and ".." not in name and not name.endswith(".lock")
    assert safe_name("inventory-average-empty") == "inventory-average-empty"  # plain ids stay readable
    assert safe_name("x" * 300).startswith("x" * 60 + "-")


def test_a_group_id_of_300_characters_is_graded(tmp_path: Path) -> None:
    group_id = "g" * 300
    inputs = _write(tmp_path / "long.jsonl", [_example(group_id, {"clean": "t" * 300})])

    proc = run_gagar("grade", str(inputs), "--out", str(tmp_path / "run"))

    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (result,) = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert result["group_id"] == group_id and result["status"] == "graded", result["reason"][-300:]
    assert "t" * 300 in result["advantages_after"]


def test_ids_that_once_shared_a_transcript_file_each_keep_their_own(tmp_path: Path) -> None:
    ids = ["a\0b", "a-b-4a3dec2d"]  # both were "a-b-4a3dec2d.jsonl"
    inputs = _write(tmp_path / "groups.jsonl", [_example(gid) for gid in ids])
    policy = lambda request, n: read_every_diff_then_rank(request, [], lambda label, i, count: "size")  # noqa: E731

    with ScriptedServer(policy) as server:
        proc = run_gagar(
            "grade", str(inputs), "--out", str(tmp_path / "run"), "--grader", "llm", "--model", "scripted",
            "--base-url", server.url, "--sandbox", "none", "--workers", "1",
        )  # fmt: skip

    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert [r["group_id"] for r in results] == ids
    paths = [r["transcript"] for r in results]
    assert len(set(paths)) == 2
    for result, path in zip(results, paths, strict=True):
        starts = [e for e in read_transcript(path) if e["type"] == "start"]
        assert [e["group_id"] for e in starts] == [result["group_id"]]


def test_control_and_bidi_characters_are_escaped_on_the_terminal(tmp_path: Path) -> None:
    group_id = f"evil{RLO}gnp.exe{ESC}[2J"
    inputs = _write(tmp_path / "groups.jsonl", [_example(group_id, {"clean": f"t{RLO}1{ESC}]0;title\a"})])
    run = tmp_path / "run"

    graded = run_gagar("grade", str(inputs), "--out", str(run))
    summary = run_gagar("show", str(run))
    detail = run_gagar("show", str(run), group_id)
    missing = run_gagar("show", str(run), f"no{RLO}such{ESC}[2J")

    assert graded.returncode == 0, graded.stderr[-2000:]
    for proc in (graded, summary, detail, missing):
        shown = proc.stdout + proc.stderr
        assert RLO not in shown and ESC not in shown and "\a" not in shown, shown[-2000:]
    assert "evil\\u202egnp.exe\\x1b[2J" in graded.stdout
    assert "t\\u202e1\\x1b]0;title\\x07" in graded.stdout
    assert "evil\\u202egnp.exe" in summary.stdout and "evil\\u202egnp.exe" in detail.stdout
    assert missing.returncode == 2 and "no\\u202esuch\\x1b[2J" in missing.stderr


def test_distill_records_of_ids_that_once_shared_a_file_are_kept_apart(tmp_path: Path) -> None:
    groups, references = known_groups(tmp_path)
    ids = ["a\0b", "a-b-4a3dec2d"]  # both were records/a-b-4a3dec2d/0.json: the second was never graded
    groups = [group.model_copy(update={"group_id": gid}) for group, gid in zip(groups, ids, strict=True)]
    write_groups(groups, tmp_path / "groups.jsonl")
    (tmp_path / "reference.json").write_text(json.dumps(dict(zip(ids, references.values(), strict=True))))
    out = tmp_path / "out"

    with ScriptedServer(teacher) as server:
        proc = run_gagar(
            "distill", str(tmp_path / "groups.jsonl"), "--reference", str(tmp_path / "reference.json"),
            "--model", "scripted", "--base-url", server.url, "--out", str(out), "--samples", "1",
            "--no-default-benchmarks", *TEACHER_OPTIONS,
        )  # fmt: skip

    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    records = [json.loads(path.read_text()) for path in sorted((out / "records").glob("*/0.json"))]
    assert sorted(r["group_id"] for r in records) == sorted(ids)
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(entry["group"] for entry in manifest["transcripts"]) == sorted(ids)
