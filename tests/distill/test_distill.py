"""`gagar distill` against a scripted teacher: right on some samples, wrong or broken on others."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grader.distill.benchmarks import load_benchmarks
from grader.distill.run import DistillConfig, distill
from grader.errors import DistillError
from grader.graders.llm.budgets import Budgets
from grader.groups.formats import write_groups
from grader.servers.scripted import ScriptedServer, read_every_diff_then_rank
from grader.util.concurrency import Concurrency
from tests.conftest import REPO_ROOT
from tests.support.distill_support import (
    EXPECTED_CATEGORY,
    REQUEST_TIMEOUT,
    TEACHER_OPTIONS,
    behaviour,
    teacher,
    write_inputs,
)

SECRET = "secret 1\n"  # chosen so that every behaviour of the teacher occurs in 2 x 8 samples
BUDGETS = Budgets(turns=6, retries=0, request_timeout=REQUEST_TIMEOUT, repairs=1)


def records(out: Path) -> dict[tuple[str, int], dict]:
    found = {}
    for path in sorted((out / "records").glob("*/*.json")):
        record = json.loads(path.read_text())
        found[(record["group_id"], record["sample"])] = record
    return found


def run(inputs: Path, reference: Path, out: Path, url: str, **config) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    (out / "secret").write_text(SECRET)
    teacher_options = {"model": "scripted", "base_url": url, "sandbox": None, "budgets": BUDGETS}
    return distill([inputs], reference, teacher_options, out, DistillConfig(**config))


def test_exactly_the_agreeing_transcripts_are_kept(tmp_path: Path) -> None:
    inputs, reference, _ = write_inputs(tmp_path)
    with ScriptedServer(teacher) as server:
        manifest = run(inputs, reference, tmp_path / "out", server.url, samples=8, eval_fraction=0.5)
    found = records(tmp_path / "out")
    assert len(found) == 16 and manifest["counts"]["transcripts"] == 16
    seen = set()
    for entry in manifest["transcripts"]:
        record = found[(entry["group"], entry["sample"])]
        kind = behaviour(record["shown"])
        seen.add(kind)
        assert entry["why"] == EXPECTED_CATEGORY[kind], (kind, entry)
        assert entry["kept"] == (kind == "right")
        if kind in ("right", "wrong"):
            assert entry["agreement"] == (1.0 if kind == "right" else 0.0) and entry["pairs"] == 3
    assert seen == set(EXPECTED_CATEGORY), f"the secret should exercise every behaviour, saw {seen}"
    kept = sum(e["kept"] for e in manifest["transcripts"])
    rows = [
        json.loads(line)
        for name in ("sft.jsonl", "sft_eval.jsonl")
        for line in (tmp_path / "out" / name).open()
    ]
    assert len(rows) == kept == manifest["counts"]["kept"]
    # Split by task: each group's rows on one side only, one task each side.
    assert {g["split"] for g in manifest["groups"].values()} == {"train", "eval"}
    assert manifest["counts"]["rows"] == {
        split: sum(e.get("rows", 0) for e in manifest["transcripts"] if e.get("split") == split)
        for split in ("train", "eval")
    }
    assert manifest["tokens"]["total_tokens"] == sum(
        r["usage"].get("total_tokens", 0) for r in found.values()
    )
    for key in ("teacher", "fingerprints"):
        assert manifest[key]
    assert set(manifest["fingerprints"]) == {"prompts", "tools", "reference"}


def test_labels_and_markers_are_reproducible_from_the_secret(tmp_path: Path) -> None:
    inputs, reference, _ = write_inputs(tmp_path)
    with ScriptedServer(teacher) as server:
        run(inputs, reference, tmp_path / "a", server.url, samples=3)
        first = list(server.requests)
        server.requests.clear()
        run(inputs, reference, tmp_path / "b", server.url, samples=3)
        second = list(server.requests)

    def key(
        body: dict,
    ) -> str:  # what the grader sent: prompts and tool results (the teacher drew the call ids)
        shown = [m["content"] for m in body["messages"] if m["role"] != "assistant"]
        return json.dumps([shown, body["tools"]])

    assert sorted(map(key, first)) == sorted(map(key, second))  # the model was shown the same text
    assert "<<<DATA " in key(first[0])
    labels = {tuple(r["shown"]) for r in records(tmp_path / "a").values()}
    assert len(labels) > 1  # but each sample under its own labels


def test_each_example_carries_the_tools_its_grading_sent(tmp_path: Path) -> None:
    # Tool schemas are per grading (label arguments are enums of its labels): an example trained on other
    # schemas than those served would teach the model a prompt it never sees.
    inputs, reference, _ = write_inputs(tmp_path)
    with ScriptedServer(teacher) as server:
        run(inputs, reference, tmp_path / "a", server.url, samples=3, augment=1)
        sent = {body["messages"][1]["content"]: body["tools"] for body in server.requests if "tools" in body}
    rows = [
        json.loads(line)
        for name in ("sft.jsonl", "sft_eval.jsonl")
        for line in (tmp_path / "a" / name).read_text().splitlines()
    ]
    originals = [row for row in rows if row["messages"][1]["content"] in sent]
    assert originals and len(originals) < len(rows)  # the relabelled copies were shown nothing
    for row in originals:
        assert json.loads(row["tools"]) == sent[row["messages"][1]["content"]]
    for row in rows:
        (submit,) = [t for t in json.loads(row["tools"]) if t["function"]["name"] == "submit_ranking"]
        ranking = submit["function"]["parameters"]["properties"]["ranking"]
        labels = ranking["items"]["items"]["enum"]
        assert all(label in row["messages"][1]["content"] for label in labels)


def test_resume_after_kill_gives_the_same_files(tmp_path: Path) -> None:
    inputs, reference, _ = write_inputs(tmp_path)

    def policy(request: dict, n: int):
        reply = teacher(request, n)
        reply.delay = max(reply.delay, 0.05)
        return reply

    def command(out: Path, url: str) -> list[str]:
        out.mkdir(parents=True, exist_ok=True)
        (out / "secret").write_text(SECRET)
        return [
            sys.executable, "-m", "grader.cli", "distill", str(inputs), "--reference", str(reference),
            "--model", "scripted", "--base-url", url, "--out", str(out), "--samples", "8", "--workers", "2",
            "--augment", "1", "--eval-fraction", "0.5", "--no-default-benchmarks", *TEACHER_OPTIONS,
        ]  # fmt: skip

    with ScriptedServer(policy) as server:
        killed = tmp_path / "killed"
        process = subprocess.Popen(
            command(killed, server.url), cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while len(records(killed)) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        partial = len(records(killed))
        assert 5 <= partial < 16 and not (killed / "manifest.json").exists()
        resumed = subprocess.run(command(killed, server.url), cwd=REPO_ROOT, capture_output=True, text=True)
        assert resumed.returncode == 0, resumed.stderr
        whole = tmp_path / "whole"
        straight = subprocess.run(command(whole, server.url), cwd=REPO_ROOT, capture_output=True, text=True)
        assert straight.returncode == 0, straight.stderr
    assert "kept" in straight.stdout and "teacher tokens" in straight.stdout
    names = sorted(
        p.relative_to(whole).as_posix() for p in whole.rglob("*") if p.is_file() and p.name != ".lock"
    )
    assert names == sorted(
        p.relative_to(killed).as_posix() for p in killed.rglob("*") if p.is_file() and p.name != ".lock"
    )
    assert {"sft.jsonl", "sft_eval.jsonl", "manifest.json", "run.json"} <= set(names)
    for name in names:
        assert (whole / name).read_bytes() == (killed / name).read_bytes(), name
    manifest = json.loads((whole / "manifest.json").read_text())
    pairs = [(e["group"], e["sample"]) for e in manifest["transcripts"]]
    assert len(pairs) == len(set(pairs)) == 16  # never a (group, sample) twice


def test_unknown_trajectories_fail_that_group_only(tmp_path: Path) -> None:
    inputs, reference, _ = write_inputs(tmp_path)
    references = json.loads(reference.read_text())
    references["add-2"] = [["tidy"], ["ghost"], ["stray-files", "phantom"]]
    reference.write_text(json.dumps(references))
    with ScriptedServer(teacher) as server:
        manifest = run(inputs, reference, tmp_path / "out", server.url, samples=2)
    assert manifest["groups"]["add-2"] == {
        "status": "failed",
        "reason": "the reference names trajectories the group does not have: ghost, phantom",
    }
    assert (
        manifest["groups"]["add-1"]["status"] == "distilled" and manifest["groups"]["add-1"]["samples"] == 2
    )


def test_benchmark_groups_are_refused(tmp_path: Path) -> None:
    inputs, reference, groups = write_inputs(tmp_path)
    bench = tmp_path / "benchmarks" / "mini"
    (bench / "groups").mkdir(parents=True)
    (bench / "benchmark.json").write_text("{}")
    renamed = groups[1].model_copy(update={"group_id": "renamed-copy"})  # same task under another id
    write_groups([renamed], bench / "groups" / "mini.jsonl")
    with ScriptedServer(teacher) as server:
        out = tmp_path / "out"
        out.mkdir()
        (out / "secret").write_text(SECRET)
        options = {"model": "scripted", "base_url": server.url, "sandbox": None, "budgets": BUDGETS}
        manifest = distill(
            [inputs], reference, options, out, DistillConfig(samples=1), load_benchmarks([bench])
        )
    assert manifest["groups"]["add-2"]["status"] == "refused"
    assert (
        "is in the benchmark" in manifest["groups"]["add-2"]["reason"]
        and str(bench) in manifest["groups"]["add-2"]["reason"]
    )
    assert manifest["groups"]["add-1"]["status"] == "distilled"
    assert {e["group"] for e in manifest["transcripts"]} == {"add-1"}


def test_unwritable_output_is_an_error_before_any_teacher_call(tmp_path: Path) -> None:
    inputs, reference, _ = write_inputs(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with ScriptedServer(teacher) as server:
        with pytest.raises(DistillError, match="cannot write the output folder"):
            distill(
                [inputs],
                reference,
                {"model": "scripted", "base_url": server.url, "sandbox": None},
                blocker / "out",
            )
        cli = subprocess.run(
            [sys.executable, "-m", "grader.cli", "distill", str(inputs), "--reference", str(reference),
             "--model", "scripted", "--base-url", server.url, "--out", str(blocker / "out")],
            cwd=REPO_ROOT, capture_output=True, text=True,
        )  # fmt: skip
        assert server.requests == []
    assert cli.returncode == 2 and "cannot write the output folder" in cli.stderr


def test_a_resume_with_other_settings_is_refused(tmp_path: Path) -> None:
    inputs, reference, _ = write_inputs(tmp_path)
    with ScriptedServer(teacher) as server:
        run(inputs, reference, tmp_path / "out", server.url, samples=1)
        with pytest.raises(DistillError, match="settings"):
            run(inputs, reference, tmp_path / "out", server.url, samples=1, min_agreement=0.5)


def test_the_bundled_benchmark_is_refused_by_task(tmp_path: Path) -> None:
    # examples/degraded and examples/benchmark-tiny come from the same bundled task, under other group ids.
    with ScriptedServer(teacher) as server:
        cli = subprocess.run(
            [sys.executable, "-m", "grader.cli", "distill", "examples/degraded/groups.jsonl",
             "--reference", "examples/degraded/reference.json", "--model", "scripted",
             "--base-url", server.url, "--out", str(tmp_path / "out"), "--no-default-benchmarks",
             "--benchmark", "examples/benchmark-tiny"],
            cwd=REPO_ROOT, capture_output=True, text=True,
        )  # fmt: skip
        assert server.requests == []
    assert cli.returncode == 1 and "nothing distilled" in cli.stdout
    assert (
        "refused inventory-average-empty: its task (base commit and statement) is in the benchmark"
        in cli.stdout
    )
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["refused"] == 1 and manifest["transcripts"] == []


def test_gradings_stay_within_the_resources(tmp_path: Path) -> None:
    inputs, reference, _ = write_inputs(tmp_path)
    in_flight, peak = [0], [0]
    lock = threading.Lock()

    def counting(request: dict, n: int):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.05)
        with lock:
            in_flight[0] -= 1
        return read_every_diff_then_rank(request, [], lambda label, i, count: f"{label}: {i + 1} of {count}")

    options = {"model": "scripted", "sandbox": None, "budgets": BUDGETS}
    for calls in (1, 2):
        peak[0] = 0
        with ScriptedServer(counting) as server:
            out = tmp_path / f"out{calls}"
            config = DistillConfig(samples=2, workers=4)
            distill([inputs], reference, {**options, "base_url": server.url}, out, config,
                    resources=Concurrency(llm_calls=calls))  # fmt: skip
        assert peak[0] == calls  # two groups graded at once, never more requests than the slots


def test_exact_duplicates_are_removed(tmp_path: Path) -> None:
    inputs, reference, _ = write_inputs(tmp_path)
    out = tmp_path / "out"
    with ScriptedServer(teacher) as server:
        first = run(inputs, reference, out, server.url, samples=8)
        kept = [
            (e["group"], e["sample"]) for e in first["transcripts"] if e["kept"] and e["group"] == "add-2"
        ]
        assert len(kept) >= 2
        # A later sample that showed the teacher exactly what an earlier one did (same conversation, so the
        # same labels and the same tools):
        (a_group, a), (b_group, b) = kept[:2]
        original = json.loads((out / "records" / a_group / f"{a}.json").read_text())
        copy_path = out / "records" / b_group / f"{b}.json"
        copy = json.loads(copy_path.read_text())
        same = {key: original[key] for key in ("messages", "shown", "contrast")}
        copy_path.write_text(json.dumps({**copy, **same}))
        asked = len(server.requests)
        second = run(inputs, reference, out, server.url, samples=8)
        assert len(server.requests) == asked  # every sample was recorded: the rerun only assembles
    entry = next(e for e in second["transcripts"] if (e["group"], e["sample"]) == (b_group, b))
    assert entry["kept"] is False and entry["why"] == "duplicate"
    assert entry["reason"] == f"exact duplicate of {a_group}/{a}"
    assert second["counts"]["kept"] == first["counts"]["kept"] - 1
    assert second["counts"]["rows"]["train"] + second["counts"]["rows"]["eval"] == second["counts"]["kept"]
