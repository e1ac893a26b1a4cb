"""Probes of examples/benchmark-tiny in the real Docker sandbox: each passes on the better patch of its pair
and fails on the worse; a probe that does not tell its pair apart is reported, and `bench check` fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader.evaluation import cli
from grader.evaluation.benchmark import load_benchmark
from grader.evaluation.probes import STARTED, ProbeResult, run_probes
from grader.sandbox.base import ExecResult
from tests.conftest import REPO_ROOT
from tests.support.conftest_sandbox import docker_marks

pytestmark = [*docker_marks(), pytest.mark.usefixtures("sandbox_images")]
TINY = REPO_ROOT / "examples" / "benchmark-tiny"


def test_every_probe_of_the_tiny_benchmark_holds_in_docker() -> None:
    results = run_probes(load_benchmark(TINY))
    assert [r.probe.pair for r in results] == [("clean", "returns-int"), ("clean", "clean+debug_output")]
    for r in results:
        assert r.holds, r.summary()
    by_pair = {r.probe.pair: r for r in results}
    returns_int = by_pair[("clean", "returns-int")]
    assert "= 0.0 (float)" in returns_int.better.stdout and "= 0 (int)" in returns_int.worse.stdout
    assert "DEBUG average_price" in by_pair[("clean", "clean+debug_output")].worse.stdout


def test_a_probe_that_does_not_tell_its_pair_apart_fails_the_check(tmp_path: Path) -> None:
    tiny = Path(shutil.copytree(TINY, tmp_path / "tiny"))
    # A probe that passes on both sides: it proves nothing about the pair.
    (tiny / "probes" / "average_prints_nothing.py").write_text("import inventory.stock\n")
    out = tmp_path / "out"
    assert cli.main(["bench", "check", str(tiny), "--out", str(out)]) == 1
    report = json.loads((out / "check.json").read_text())
    holds = {(p["better"], p["worse"]): p["holds"] for p in report["probes"]}
    assert holds == {("clean", "returns-int"): True, ("clean", "clean+debug_output"): False}
    failed = next(p for p in report["probes"] if not p["holds"])
    assert failed["result"] == "better pass (exit 0); worse pass (exit 0)"
    assert report["label_agreement"] == {"pairs": 6, "agreed": 4, "rate": 4 / 6}
    assert report["counts"]["category"]["correctness"] == 1


def test_a_probe_that_cannot_run_holds_on_neither_side(tmp_path: Path) -> None:
    tiny = Path(shutil.copytree(TINY, tmp_path / "tiny"))
    probes = json.loads((tiny / "probes.json").read_text())
    probes[0]["command"] = "no-such-interpreter {probe}"
    (tiny / "probes.json").write_text(json.dumps(probes))
    first, second = run_probes(load_benchmark(tiny))
    assert not first.holds and first.summary() == "better fail (exit 127); worse fail (exit 127)"
    assert second.holds


def test_a_side_where_the_probe_never_started_or_timed_out_proves_nothing() -> None:
    (probe, *_) = load_benchmark(TINY).probes

    def side(code: int, stderr: str = STARTED, timed_out: bool = False) -> ExecResult:
        return ExecResult(code, "", stderr, timed_out, False, 0.1, "docker")

    assert ProbeResult(probe, side(0), side(1)).holds
    assert not ProbeResult(probe, side(0), side(2, stderr="sh: cannot create")).holds
    assert (
        ProbeResult(probe, side(0), side(2, stderr="")).summary()
        == "better pass (exit 0); worse did not start (exit 2)"
    )
    assert not ProbeResult(probe, side(0), side(124, timed_out=True)).holds
    assert ProbeResult(probe, None, None, error="no tree").summary() == "not run: no tree"
