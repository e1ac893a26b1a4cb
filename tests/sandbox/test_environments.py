"""Environment layers against the real engine, PyPI and the Debian mirror: built, reused, and failing cleanly.

The layers are small (one pinned pure-Python requirement and pytest on the bullseye interpreter) and keep
their tags between runs, so only the first run pays for the builds.
"""

from __future__ import annotations

import io
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from grader.errors import EnvironmentBuildError, UnknownInterpreter
from grader.sandbox import open_sandbox
from grader.sandbox.environments import (
    ENVIRONMENT_REPOSITORY,
    EnvironmentSpec,
    FailureMemory,
    build_environment,
    environment_for,
)
from tests.conftest import llm_grader
from tests.support.conftest_sandbox import docker_marks, make_repo

pytestmark = [*docker_marks(), pytest.mark.usefixtures("sandbox_images", "interpreter_image")]

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


def _spec(name: str, **fields) -> EnvironmentSpec:
    """A test layer's spec: `gagar-tests/<name>` version 1 on Python 3.9."""
    return EnvironmentSpec(repository=f"gagar-tests/{name}", version="1", python="3.9", **fields)


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
    spec = _spec("missing", pip_packages=("gagar-no-such-package-on-pypi==0.0.1",))
    with pytest.raises(EnvironmentBuildError, match="gagar-no-such-package-on-pypi") as caught:
        build_environment(spec, force=True)
    assert "not on PyPI" in str(caught.value) and "log: " in str(caught.value)
    # What a model is told: the environment and the cause, in the task's terms, and nothing of the host.
    assert caught.value.reason == (
        "the task's environment (gagar-tests/missing 1's dependencies on Python 3.9) could not be built: "
        "requirement gagar-no-such-package-on-pypi==0.0.1 cannot be installed on this Python"
    )
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


def _containers_mentioning(token: str) -> list[str]:
    """Containers, in any state, whose command mentions `token` (a failed build step leaves its own)."""
    import docker

    found = docker.from_env().containers.list(all=True, sparse=False)
    command = {c.short_id: " ".join(c.attrs["Config"].get("Cmd") or []) for c in found}
    return [cid for cid, text in command.items() if token in text]


def test_a_failed_build_leaves_no_container() -> None:
    """The engine keeps the container of a failed build step unless told otherwise; a unique token in the
    step tells this test's containers from those of anything else on the engine."""
    token = f"gagar-failing-step-{uuid.uuid4().hex}"
    spec = _spec(f"fails-{token[-8:]}", build_commands=(f"echo {token}; exit 3",))
    with pytest.raises(EnvironmentBuildError, match="non-zero code: 3"):
        build_environment(spec, retry=True)
    assert _containers_mentioning(token) == []


def test_unknown_interpreter_is_refused_before_any_build() -> None:
    with pytest.raises(UnknownInterpreter, match="2.7"):
        build_environment(EnvironmentSpec(repository="x/y", version="1", python="2.7"))


def _grade_probes(task_update: dict, probes: list[str], tmp_path: Path, sandbox: str = "docker"):
    """Grade the example group with a scripted model that runs `probes` on every target, then ranks."""
    from grader.graders.llm.agent import Budgets
    from grader.graders.transcript import read_transcript
    from grader.groups.formats import load_group_file
    from grader.pipeline import grade_group_sync
    from grader.servers.scripted import ScriptedServer, labels_in, tool_calls
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
        grader = llm_grader(server.url, tmp_path, sandbox=sandbox, budgets=budgets)
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
    # The first run also says, once, which Python the layer's venv has and which image it is.
    assert "python3 is Python 3.9." in first and "/opt/gagar-env/bin/python3, a venv)" in first
    assert f"image {small_env.tag};" in first
    # Base and the four candidates ran it: base's output once, each candidate's the same as base's.
    assert first.count("(3, 9) 1.16.0") == 1 and first.count("the same exit and output as base") == 4
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
    # The model hears the reason in task terms (the requirement, no host path); people get the whole
    # message, with the build log, in the result's details.
    assert "run is unavailable: " in only and "gagar-no-such-package-on-pypi" in only
    assert "/root/" not in only and ".log" not in only and "the other tools still work" in only
    assert "gagar-no-such-package-on-pypi" in result.details["sandbox_unavailable"]


def test_failed_build_is_remembered_and_fails_fast_until_retried() -> None:
    spec = _spec("remembered", build_commands=("echo gagar-remembered-failure >&2; exit 7",))
    with pytest.raises(EnvironmentBuildError, match="returned a non-zero code: 7") as first:
        build_environment(spec, retry=True)
    assert "remembered from" not in str(first.value)
    started = time.monotonic()
    with pytest.raises(EnvironmentBuildError, match="remembered from the build at") as again:
        build_environment(spec)
    assert time.monotonic() - started < 10  # no docker build: the recorded reason comes back at once
    assert "non-zero code: 7" in str(again.value) and "--retry" in str(again.value)
    with pytest.raises(EnvironmentBuildError) as retried:
        build_environment(spec, retry=True)
    assert "remembered from" not in str(retried.value)
    # A changed recipe is another layer: the old failure does not answer for it.
    fixed = _spec("remembered", build_commands=("true",))
    assert build_environment(fixed).tag.endswith("gagar-tests__remembered-1-py3.9")


def test_failure_memory_answers_only_for_its_digest(tmp_path) -> None:
    memory = FailureMemory(tmp_path)
    assert memory.recall("gagar/env:x-1-py3.9", "aaaa") is None
    memory.remember("gagar/env:x-1-py3.9", "aaaa", "x-1: requirement nope is not on PyPI")
    recalled = memory.recall("gagar/env:x-1-py3.9", "aaaa")
    assert recalled is not None and recalled.startswith("x-1: requirement nope is not on PyPI [remembered")
    assert memory.recall("gagar/env:x-1-py3.9", "bbbb") is None
    assert memory.recall("gagar/env:y-1-py3.9", "aaaa") is None
    memory.forget("gagar/env:x-1-py3.9")
    assert memory.recall("gagar/env:x-1-py3.9", "aaaa") is None
    assert [p.name for p in (tmp_path / "failures").iterdir()] == []  # no temporary file left behind


def _tree(root: Path, requirements: str, module: str) -> Path:
    root.mkdir()
    (root / "requirements.txt").write_text(requirements)
    (root / "mod.py").write_text(module)
    return root


def test_one_layer_serves_every_tree_of_an_environment_version(tmp_path) -> None:
    spec = EnvironmentSpec(
        repository="gagar-tests/shared", version="1", python="3.9", requirements_files=("requirements.txt",)
    )
    first = build_environment(spec, _tree(tmp_path / "a", "six==1.16.0\n", "X = 1\n"))
    # Another base commit of the same version: other sources, same requirements -> the same layer.
    other = build_environment(spec, _tree(tmp_path / "b", "six==1.16.0\n", "X = 2  # changed\n"))
    assert not other.built and other.tag == first.tag
    # Different requirements are a different layer under the same tag: built again.
    changed = build_environment(spec, _tree(tmp_path / "c", "six==1.15.0\n", "X = 1\n"))
    assert changed.built and changed.tag == first.tag
    with open_sandbox(make_repo(tmp_path), image=changed.tag) as sb:
        probe = sb.exec("base", "python -c 'import six; print(six.__version__)'")
    assert probe.stdout.strip() == "1.15.0", probe.stderr


def test_a_vcs_requirement_is_left_out_listed_and_the_rest_installs(tmp_path) -> None:
    # flask 2.0's requirements/dev.txt names sphinx by git URL: offline, that one line failed the layer.
    spec = EnvironmentSpec(
        repository="gagar-tests/unhonoured",
        version="1",
        python="3.9",
        requirements_files=("requirements.txt",),
    )
    tree = _tree(
        tmp_path / "t",
        "-r docs.txt\nsix==1.16.0\n",
        "X = 1\n",
    )
    (tree / "docs.txt").write_text("git+https://github.com/sphinx-doc/sphinx.git@v4.0.0#egg=sphinx\n")
    layer = build_environment(spec, tree, force=True)
    assert layer.unhonoured == ("docs.txt:1: git+https://github.com/sphinx-doc/sphinx.git@v4.0.0#egg=sphinx",)
    assert "unhonoured" in layer.note
    assert "git+" in (tree / "docs.txt").read_text()  # the caller's tree is not touched, only the staged copy
    with open_sandbox(make_repo(tmp_path), image=layer.tag) as sb:
        probe = sb.exec("base", "python -c 'import six; print(six.__version__)'")
    assert probe.stdout.strip() == "1.16.0", probe.stderr


class _FolderTrees:
    """A `TreeSource` whose one target, base, is a folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def targets(self) -> list[str]:
        return ["base"]

    def archive(self, target: str) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for path in sorted(self.root.rglob("*")):
                tar.add(path, arcname=path.relative_to(self.root).as_posix(), recursive=False)
        return buf.getvalue()


def test_a_layer_found_up_to_date_from_the_requirements_files_says_what_a_full_check_says(tmp_path) -> None:
    spec = _spec("unhonoured", requirements_files=("requirements.txt",))
    tree = _tree(tmp_path / "t", "-r docs.txt\nsix==1.16.0\n", "X = 1\n")
    (tree / "docs.txt").write_text("git+https://github.com/sphinx-doc/sphinx.git@v4.0.0#egg=sphinx\n")
    full = build_environment(spec, tree)  # the layer of the test before: reused, or built once
    reused = environment_for(_FolderTrees(tree), spec)
    assert not reused.built and reused.tag == full.tag
    assert (reused.notes, reused.unhonoured) == (full.notes, full.unhonoured)
    # An include's lines are not part of the layer's key, but what it leaves out is still said.
    (tree / "docs.txt").write_text("six\nhg+https://example.org/repo#egg=other\n")
    changed = environment_for(_FolderTrees(tree), spec)
    assert not changed.built and changed.unhonoured == ("docs.txt:2: hg+https://example.org/repo#egg=other",)


def _group_file(tmp_path: Path, name: str, tasks: list[dict]) -> Path:
    from grader.groups.formats import load_group_file, write_groups
    from tests.conftest import EXAMPLE_GROUP

    (group,) = load_group_file(EXAMPLE_GROUP)
    groups = [
        group.model_copy(update={"group_id": f"g{i}", "task": group.task.model_copy(update=update)})
        for i, update in enumerate(tasks)
    ]
    path = tmp_path / name
    write_groups(groups, path)
    return path


def test_env_build_cli_builds_each_layer_once_and_reports_failures(small_env, tmp_path, capsys) -> None:
    from grader.cli.commands import main

    missing = {
        "repo": "gagar-tests/missing",
        "version": "1",
        "pip_packages": ["gagar-no-such-package-on-pypi==0.0.1"],
    }
    path = _group_file(
        tmp_path,
        "groups.jsonl",
        [
            {"python": "3.9", "environment": SMALL_RECIPE},
            {"python": "3.9", "environment": SMALL_RECIPE},  # the same layer: built (here reused) once
            {"python": "3.9", "environment": missing},
            {},  # no environment: needs no layer
            {"python": "3.9", "environment": SMALL_RECIPE, "image": "gagar/python"},  # its own image wins
        ],
    )
    code = main(["env", "build", str(path), "--retry"])
    out = capsys.readouterr().out
    assert code == 1, out  # one layer failed; the other was still checked
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"reused  {small_env.tag}") and lines[0].endswith("2 groups"), lines
    assert (
        lines[1].startswith("failed  gagar-tests__missing-1") and "gagar-no-such-package-on-pypi" in lines[1]
    )
    assert lines[-1] == "2 layer(s) for 3 group(s): 0 built, 1 reused, 1 failed; 2 group(s) need no layer"
    # Without --retry the failure is the remembered one, at once.
    assert main(["env", "build", str(path), "--group", "g2"]) == 1
    assert "remembered from the build at" in capsys.readouterr().out


def test_llm_run_on_the_local_backend_says_the_environment_is_not_built(tmp_path) -> None:
    probes = ["python3 -c 'print(40 + 2)'"]
    result, runs = _grade_probes({"python": "3.9", "environment": SMALL_RECIPE}, probes, tmp_path, "local")
    assert result.status == "graded", result.reason
    (only,) = runs
    first = only.splitlines()[0]
    assert first.startswith("[environment: the local backend does not build task environments: Python 3.9")
    # Still run, on the host's interpreter, on base and the four candidates (each the same as base). Whole
    # lines: the random data markers around each output are hex and may hold "42" too.
    assert only.splitlines().count("42") == 1 and only.count("the same exit and output as base") == 4


def test_layer_resolves_unpinned_requirements_as_of_its_date(tmp_path) -> None:
    # six 1.16.0 was uploaded in May 2021: as of 2021-01-01 the newest six is 1.15.0.
    spec = _spec("dated", pip_packages=("six",), uploaded_prior_to="2021-01-01T00:00:00Z")
    layer = build_environment(spec)
    with open_sandbox(make_repo(tmp_path), image=layer.tag) as sb:
        probe = sb.exec("base", "python -c 'import six; print(six.__version__)'")
    assert probe.stdout.strip() == "1.15.0", probe.stderr


def test_sandbox_exec_cli_runs_in_the_task_layer(small_env, tmp_path, capsys) -> None:
    import json

    from grader.cli.commands import main

    path = _group_file(tmp_path, "one.jsonl", [{"python": "3.9", "environment": SMALL_RECIPE}])
    code = main(
        ["sandbox", "exec", str(path), "base", "--", "python -c 'import six; print(six.__version__)'"]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["exit_code"] == 0 and result["stdout"].strip() == "1.16.0", result


def test_a_stand_in_interpreter_gets_installable_pins_and_the_tree_the_recipes_setuptools(tmp_path) -> None:
    """astropy 1.3's failure in small: on 3.9 (3.8 asked) MarkupSafe 1.0 has no wheel and its sdist imports
    setuptools' Feature, and a tree whose setup.py imports it built in pip's isolated environment (today's
    setuptools, which has none); both failed the layer. Now the pins are lifted to releases that install on
    3.9 and the tree is built with the recipe's setuptools, lifted to the first that imports on 3.9."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "setup.py").write_text(
        "from setuptools import Feature, setup  # gone in setuptools 46\n"
        "setup(name='gagar-old-tree', version='1.0', py_modules=['gagar_old_tree'])\n"
    )
    (tree / "gagar_old_tree.py").write_text("BUILT = 'with the recipe setuptools'\n")
    spec = EnvironmentSpec(
        repository="gagar-tests/old-setuptools",
        version="1",
        python="3.8",
        pip_packages=("setuptools==38.2.4", "MarkupSafe==1.0"),
        install="python -m pip install -e .",
        uploaded_prior_to="2025-01-01T00:00:00Z",
    )
    layer = build_environment(spec, tree, retry=True)
    assert layer.tag.endswith("gagar-tests__old-setuptools-1-py3.9")
    assert "MarkupSafe==1.0 -> 1.1.1" in layer.note and "setuptools==38.2.4 -> 41.1.0" in layer.note
    with open_sandbox(make_repo(tmp_path), image=layer.tag) as sb:
        probe = sb.exec(
            "base",
            "python -c 'import markupsafe, setuptools, pytest, gagar_old_tree as t; "
            "print(markupsafe.__version__, setuptools.__version__, t.BUILT)'",
        )
    assert probe.stdout.strip() == "1.1.1 41.1.0 with the recipe setuptools", probe.stderr
