"""Environment layers against the real engine, PyPI and the Debian mirror: built, reused, and failing cleanly.

The layers are small (one pinned pure-Python requirement and pytest on the bullseye interpreter) and keep
their tags between runs, so only the first run pays for the builds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.errors import EnvironmentBuildError, UnknownInterpreter
from grader.sandbox import open_sandbox
from grader.sandbox.environments import ENVIRONMENT_REPOSITORY, EnvironmentSpec, build_environment
from tests.conftest_sandbox import docker_marks, make_repo

pytestmark = docker_marks()

SMALL = EnvironmentSpec(
    repository="gagar-tests/small",
    version="1",
    python="3.9",
    pip_packages=("six==1.16.0", "pytest==7.4.4"),
    env=(("GAGAR_ENV_MARK", "small"),),
)


@pytest.fixture(scope="session")
def small_env():
    return build_environment(SMALL)


def _tags() -> set[str]:
    import docker

    return {t for image in docker.from_env().images.list() for t in image.tags}


def test_layer_runs_the_pinned_requirement_and_the_tests(small_env, tmp_path) -> None:
    assert small_env.tag == f"{ENVIRONMENT_REPOSITORY}:gagar-tests__small-1-py3.9"
    assert small_env.choice.exact and small_env.note == ""
    trees = make_repo(tmp_path)
    command = "python -m pytest -q -p no:cacheprovider tests/test_add.py"
    with open_sandbox(trees, image=small_env.tag, test_command=command) as sb:
        probe = sb.exec(
            "base",
            "python -c 'import sys, six, os, pkg; print(sys.version_info[:2], six.__version__, "
            'os.environ["GAGAR_ENV_MARK"], pkg.add(2, 3))\'',
        )
        assert probe.exit_code == 0, probe.stderr
        assert probe.stdout.strip() == "(3, 9) 1.16.0 small 5"
        tests = sb.run_tests("A")
        assert tests.exit_code == 0, tests.stdout + tests.stderr
        assert "1 passed" in tests.stdout


def test_second_build_reuses_the_layer(small_env) -> None:
    again = build_environment(SMALL)
    assert not again.built and again.tag == small_env.tag
    assert again.seconds < 30
    assert again.size_bytes == small_env.size_bytes > 0


def test_nonexistent_requirement_fails_with_its_name_and_leaves_no_tag() -> None:
    spec = EnvironmentSpec(
        repository="gagar-tests/missing",
        version="1",
        python="3.9",
        pip_packages=("gagar-no-such-package-on-pypi==0.0.1",),
    )
    with pytest.raises(EnvironmentBuildError, match="gagar-no-such-package-on-pypi") as caught:
        build_environment(spec, force=True)
    assert "not on PyPI" in str(caught.value) and "log: " in str(caught.value)
    log_path = str(caught.value).rsplit("log: ", 1)[1].rstrip(")")
    assert "No matching distribution" in Path(log_path).read_text()
    left = {t for t in _tags() if "gagar-tests__missing" in t}
    assert left == set(), left  # neither the final tag nor the temporary one


def test_build_past_its_time_limit_fails_and_leaves_no_tag() -> None:
    spec = EnvironmentSpec(
        repository="gagar-tests/hang", version="1", python="3.9", build_commands=("sleep 600",)
    )
    with pytest.raises(EnvironmentBuildError, match="longer than 20 s"):
        build_environment(spec, timeout=20, force=True)
    assert {t for t in _tags() if "gagar-tests__hang" in t} == set()


def test_unknown_interpreter_is_refused_before_any_build() -> None:
    with pytest.raises(UnknownInterpreter, match="2.7"):
        build_environment(EnvironmentSpec(repository="x/y", version="1", python="2.7"))


def _grade_probes(task_update: dict, probes: list[str], tmp_path: Path):
    """Grade the example group with a scripted model that runs `probes` on every target, then ranks."""
    from grader.formats import load_group_file
    from grader.graders.llm import Budgets, LLMGrader
    from grader.pipeline import grade_group_sync
    from grader.testing import ScriptedServer, labels_in, tool_calls
    from grader.transcript import read_transcript
    from tests.conftest import EXAMPLE_GROUP

    (group,) = load_group_file(EXAMPLE_GROUP)
    group = group.model_copy(update={"task": group.task.model_copy(update=task_update)})

    def policy(request, n):
        labels = labels_in(request)
        step = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if step < len(probes):
            return tool_calls(("run", {"command": probes[step], "timeout": 60}))
        order = [[label] for label in labels]
        reasons = {label: "probe" for label in labels}
        return tool_calls(("submit_ranking", {"ranking": order, "reasons": reasons, "confidence": 0.5}))

    budgets = Budgets(retry_wait_initial=0.01, retry_wait_max=0.05, request_timeout=600, retries=1, turns=6)
    with ScriptedServer(policy) as server:
        grader = LLMGrader(
            "scripted",
            base_url=server.url,
            transcript_dir=tmp_path,
            seed=7,
            sandbox="docker",
            budgets=budgets,
        )
        result = grade_group_sync(group, grader)
    events = read_transcript(result.transcript)
    return result, [e["content"] for e in events if e["type"] == "tool_result" and e["name"] == "run"]


SMALL_RECIPE = {
    "repo": "gagar-tests/small",
    "version": "1",
    "python": "3.9",
    "pip_packages": list(SMALL.pip_packages),
    "env": dict(SMALL.env),
}


def test_llm_run_probes_in_the_task_environment_and_names_the_stand_in(small_env, tmp_path) -> None:
    probes = [
        "python -c 'import sys, six; print(sys.version_info[:2], six.__version__)'",
        "python -c 'import no_such_module_here'",
    ]
    result, runs = _grade_probes({"python": "3.8", "environment": SMALL_RECIPE}, probes, tmp_path)
    assert result.status == "graded", result.reason
    first, broken = runs
    assert "[environment: Python 3.8 is not available offline; using 3.9" in first
    assert first.count("(3, 9) 1.16.0") == 5  # base and the four candidates
    # Every target fails the same import: one line, not five tracebacks.
    assert "== all targets (" in broken and "No module named 'no_such_module_here'" in broken
    assert "Traceback" not in broken and broken.count("\n") <= 1


def test_llm_run_says_why_the_environment_could_not_be_built(tmp_path) -> None:
    recipe = {
        "repo": "gagar-tests/missing",
        "version": "1",
        "pip_packages": ["gagar-no-such-package-on-pypi==0.0.1"],
    }
    result, runs = _grade_probes({"python": "3.9", "environment": recipe}, ["true"], tmp_path)
    assert result.status == "graded", result.reason  # the other tools still work; the grade goes on
    (only,) = runs
    assert "run is unavailable: EnvironmentBuildError" in only and "gagar-no-such-package-on-pypi" in only
