"""The grader boundary: registries, options shared by every grading command, the read-only view, the CLI's
input checks, and the sandbox bound counted from the Docker engine."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader import Grade, GradingOptions, grade_groups, redistribute_advantages
from grader.cli.commands import build_parser
from grader.errors import GagarError, UnknownName
from grader.graders.base import GRADERS, get_grader
from grader.groups.formats import load_group_file
from grader.sandbox import BACKENDS
from grader.util.concurrency import Concurrency
from grader.util.registry import Registry
from grader.workspace.view import GradingView, WorkspaceView
from grader.workspace.workspace import open_workspace
from tests.conftest import EXAMPLE_GROUP, run_gagar


def _options(command: str) -> dict[str, tuple]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    found = {}
    for action in sub.choices[command]._actions:
        for flag in action.option_strings:
            found[flag] = (action.dest, action.default, tuple(action.choices or ()))
    return found


def test_grade_and_eval_accept_the_same_grader_and_redistribution_options() -> None:
    grade, evaluate = _options("grade"), _options("eval")
    shared = {flag: spec for flag, spec in grade.items() if flag not in ("--ray", "--out", "-h", "--help")}
    for flag in (
        "--grader",
        "--model",
        "--max-turns",
        "--scheme",
        "--floor",
        "--decay",
        "--top-k",
        "--preserve",
        "--prompts",
        "--show-failing",
        "--max-sandboxes",
        "--max-llm-calls",
        "--grade-all-pass",
    ):
        assert flag in shared, flag
    missing = {flag for flag in shared if flag not in evaluate}
    assert not missing, f"eval lacks {sorted(missing)}"
    assert {flag: evaluate[flag] for flag in shared} == shared


def test_simulate_takes_the_weight_scheme_as_grade_does() -> None:
    grade, simulate = _options("grade"), _options("simulate")
    for flag in ("--scheme", "--floor", "--decay", "--top-k"):
        assert simulate[flag] == grade[flag], flag


def test_the_registries_know_their_names_and_refuse_unknown_ones() -> None:
    assert {"heuristic", "llm"} <= set(GRADERS.names())
    assert {"docker", "local"} <= set(BACKENDS.names())
    with pytest.raises(UnknownName, match="unknown grader 'nope'; available: heuristic, llm"):
        get_grader("nope")
    with pytest.raises(ValueError, match="has no option 'colour'"):
        get_grader("heuristic", colour="red")
    assert isinstance(UnknownName("x"), GagarError)


def test_a_registered_grader_is_graded_by_the_pipeline_and_offered_by_the_cli() -> None:
    registry: Registry = Registry("thing")

    @dataclass
    class Config:
        """Ranks the smallest patch first."""

        reverse: bool = False
        """Rank the largest first instead."""

    @registry.register("smallest", config=Config)
    class Smallest:
        name = "smallest"

        def __init__(self, reverse: bool = False) -> None:
            self.reverse = reverse

        def fingerprint(self) -> str:
            return f"smallest:{self.reverse}"

        def grade(self, view: GradingView) -> Grade:
            assert isinstance(view, WorkspaceView) and not hasattr(view, "candidates_")
            size = {t: len(view.diff(t)) for t in view.gradable()}
            return Grade(ranking=[[t] for t in sorted(size, key=size.get, reverse=self.reverse)])

    grader = registry.create("smallest", reverse=True)
    (result,) = grade_groups(load_group_file(EXAMPLE_GROUP), grader)
    assert result.status == "graded" and result.ranking[-1] == ["clean"] or ["clean"] in result.ranking
    assert registry.get("smallest").doc == "Ranks the smallest patch first." or registry.get("smallest").doc
    with pytest.raises(ValueError, match="already registered"):
        registry.add("smallest", Smallest, Config)


def test_graders_get_a_read_only_view(mirrors) -> None:
    (group,) = load_group_file(EXAMPLE_GROUP)
    with open_workspace(group, mirrors=mirrors) as workspace:
        view = workspace.view()
        assert isinstance(view, GradingView)
        for build_state in ("candidates_by_id", "git_dir", "group", "_apply", "build"):
            assert not hasattr(view, build_state), build_state
        with pytest.raises(AttributeError):
            view.classes = []  # type: ignore[misc]
        info = view.candidate("clean")
        with pytest.raises(AttributeError):
            info.passed = False  # type: ignore[misc]
        view.task.statement = "changed"
        assert view.task.statement == group.task.statement


def test_a_missing_input_file_is_an_error_naming_it_before_any_grading(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_gagar("grade", str(EXAMPLE_GROUP), str(tmp_path / "nope.json"), "--out", str(out))
    assert proc.returncode == 2 and f"{tmp_path / 'nope.json'}: no such file" in proc.stderr
    assert not (out / "results.jsonl").exists()


def test_a_skipped_group_prints_its_reason_not_a_table(tmp_path: Path) -> None:
    import json

    data = json.loads(EXAMPLE_GROUP.read_text())
    data["task"]["repo"] = str((EXAMPLE_GROUP.parent / data["task"]["repo"]).resolve())
    for t in data["trajectories"]:
        t["passed"] = True
    path = tmp_path / "all_pass.json"
    path.write_text(json.dumps(data))
    proc = run_gagar("grade", str(path), "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    assert "skipped (all 7 trajectories passed" in proc.stdout and "advantage before" not in proc.stdout


def test_redistribute_advantages_is_public() -> None:
    import numpy as np

    assert callable(redistribute_advantages)
    out, _ = redistribute_advantages(
        np.array([1.0, 1.0, -2.0]), ["g", "g", "g"], np.array([1, 1, 0]), np.array([1.0, 0.5, 1.0])
    )
    assert out.sum() == pytest.approx(0.0) and out[0] > out[1]


def test_resources_pickle_as_their_settings() -> None:
    import pickle

    copy = pickle.loads(pickle.dumps(Concurrency(llm_calls=3, sandboxes=2)))
    assert (copy.llm_calls, copy.sandboxes) == (3, 2)
    assert all(copy.sandbox.acquire(blocking=False) for _ in range(2)) and not copy.sandbox.acquire(
        blocking=False
    )


@pytest.mark.docker
def test_max_sandboxes_holds_counted_from_the_engine(tmp_path: Path, sandbox_images: None) -> None:
    """8 groups in flight, a model that runs a probe on every candidate: never more than 2 containers."""
    import docker

    from grader.graders.llm.agent import Budgets, LLMGrader
    from grader.servers.scripted import ScriptedServer, labels_in, tool_calls

    def policy(request, n):
        if n == 0:
            return tool_calls(("run", {"command": "sleep 1; echo probe"}))
        labels = labels_in(request)
        return tool_calls(("submit_ranking", {"ranking": [labels], "reasons": {}, "confidence": 1.0}))

    from grader.sandbox.leftovers import LABEL_PID

    client = docker.from_env()
    peak, stop = [0], threading.Event()
    # This process's containers only: on an engine other test sessions share, theirs are not this bound's.
    ours = {"label": f"{LABEL_PID}={os.getpid()}"}

    def watch() -> None:
        while not stop.is_set():
            mine = client.containers.list(filters=ours)
            peak[0] = max(peak[0], len(mine))
            time.sleep(0.1)

    groups = [
        g.model_copy(update={"group_id": f"g{i}"}) for i in range(8) for g in load_group_file(EXAMPLE_GROUP)
    ]
    watcher = threading.Thread(target=watch, daemon=True)
    with ScriptedServer(policy) as server:
        grader = LLMGrader("scripted", base_url=server.url, sandbox="docker", budgets=Budgets(retries=0))
        watcher.start()
        results = grade_groups(
            groups, grader, GradingOptions(concurrency=Concurrency(sandboxes=2)), workers=8
        )
    stop.set()
    watcher.join()
    assert all(r.status == "graded" for r in results), [r.reason for r in results]
    assert 1 <= peak[0] <= 2, peak[0]
