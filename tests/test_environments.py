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
from tests.conftest_sandbox import make_repo

pytestmark = pytest.mark.docker


def _engine_reason() -> str | None:
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine to test against
        return f"no Docker engine reachable: {exc}"
    return None


_REASON = _engine_reason()
if _REASON:
    pytestmark = [pytest.mark.docker, pytest.mark.skip(reason=_REASON)]

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
