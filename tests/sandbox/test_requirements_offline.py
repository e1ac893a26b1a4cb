"""What a layer installs, decided without building it: requirement lines an offline build cannot honour are
left out and listed (the rest is kept); the interpreter a recipe gets and the pins, build settings and test
tools it is built with there (`pins`); and a failed build's cause as a model is told it."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.errors import EnvironmentBuildError
from grader.sandbox.builds import FailureMemory, failure_of
from grader.sandbox.environments import plan_layer, spec_for_task
from grader.sandbox.requirements import honour, included_files, unhonourable


@pytest.mark.parametrize(
    "line",
    [
        "git+https://github.com/sphinx-doc/sphinx.git@abc123#egg=sphinx",
        "-e git+https://github.com/a/b.git#egg=b",
        "sphinx @ git+https://github.com/sphinx-doc/sphinx",
        "hg+https://example.org/repo",
        "pkg @ https://example.com/pkg-1.0.tar.gz",
        "https://github.com/a/b/archive/main.zip",
        "--extra-index-url https://example.com/simple",
        "-i https://example.com/simple",
        "--find-links https://example.com/wheels",
    ],
)
def test_lines_needing_more_than_pypi_are_unhonourable(line: str) -> None:
    assert unhonourable(line)


@pytest.mark.parametrize(
    "line",
    [
        "pytest>=6",
        "numpy==1.21.0  # pinned for the tests",
        "# git+https://github.com/a/b.git in a comment",
        "-r docs.txt",
        "pkg @ https://files.pythonhosted.org/packages/pkg-1.0-py3-none-any.whl",
        "",
        "requests[socks]>=2; python_version >= '3.8'",
    ],
)
def test_pypi_lines_are_honoured(line: str) -> None:
    assert not unhonourable(line)


def test_a_file_and_its_includes_are_rewritten_without_the_unhonourable_lines(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "requirements").mkdir(parents=True)
    dev = tree / "requirements" / "dev.txt"
    dev.write_text("-r docs.txt\n--requirement=tests.txt\npytest==7.4.4\n")
    (tree / "requirements" / "docs.txt").write_text(
        "git+https://github.com/sphinx-doc/sphinx.git@abc#egg=sphinx\nsix==1.16.0\n"
    )
    (tree / "requirements" / "tests.txt").write_text("-r dev.txt\n--extra-index-url https://example.com/s\n")
    (tmp_path / "outside.txt").write_text("git+https://example.com/x.git\n")
    (tree / "requirements" / "escape.txt").write_text("")
    with dev.open("a") as handle:
        handle.write("-r ../../outside.txt\n")
    left_out = honour(dev, tree)
    assert left_out == [
        "requirements/docs.txt:1: git+https://github.com/sphinx-doc/sphinx.git@abc#egg=sphinx",
        "requirements/tests.txt:2: --extra-index-url https://example.com/s",
    ]
    docs = (tree / "requirements" / "docs.txt").read_text().splitlines()
    assert docs[1] == "six==1.16.0" and docs[0].startswith("# left out by gagar")
    assert "pytest==7.4.4" in dev.read_text()
    assert (tmp_path / "outside.txt").read_text() == "git+https://example.com/x.git\n"  # outside the tree


def test_the_files_a_requirements_file_includes_are_found_as_honour_visits_them() -> None:
    files = {
        "requirements.txt": b"-r reqs/dev.txt\nsix\n",
        "reqs/dev.txt": b"--requirement=base.txt  # base\n-c ../constraints.txt\ngit+https://x/y -r no.txt\n",
        "reqs/base.txt": b"-r dev.txt\n-r ../../outside.txt\n-r missing.txt\n",
        "constraints.txt": b"six<2\n",
        "no.txt": b"never read: its only include is on a line honour leaves out\n",
    }
    found = included_files(files.get, ["requirements.txt", "absent.txt"])
    assert found == {"requirements.txt", "reqs/dev.txt", "reqs/base.txt", "constraints.txt"}


def test_a_local_editable_install_is_made_plain_and_the_rest_kept(tmp_path: Path) -> None:
    # pylint 2.15's requirements_test.txt ends in "-e .": its setuptools has no PEP 660 hook, so pip failed
    # the whole layer on that line ("missing the 'build_editable' hook").
    tree = tmp_path / "tree"
    tree.mkdir()
    requirements = tree / "requirements_test.txt"
    requirements.write_text(
        "pytest~=7.1\n-e .\n--editable=./sub[test]  # extras\n-e git+https://x.org/y.git\n"
    )
    left_out = honour(requirements, tree)
    assert left_out == ["requirements_test.txt:4: -e git+https://x.org/y.git"]
    kept = [line for line in requirements.read_text().splitlines() if not line.startswith("#")]
    assert kept == ["pytest~=7.1", ".", "./sub[test]"]


# A few of SWE-bench's pins (swebench 4.1.0's tables) for the two environments that did not build.
ASTROPY_13 = {
    "repo": "astropy/astropy",
    "version": "1.3",
    "python": "3.6",
    "pip_packages": [
        "setuptools==38.2.4",
        "cython==0.27.3",
        "hypothesis==3.44.2",
        "MarkupSafe==1.0",
        "numpy==1.16.0",
        "packaging==16.8",
        "pytest==3.3.1",
    ],
    "install": "python -m pip install -e .[test] --verbose",
}
XARRAY_012 = {
    "repo": "pydata/xarray",
    "version": "0.12",
    "python": "3.10",
    "pip_packages": ["numpy==1.23.0", "pandas==1.5.3", "pytest==7.4.0", "setuptools==68.0.0"],
    "install": "python -m pip install -e .",
}


def test_astropy_13_builds_on_3_9_with_pins_that_have_wheels_and_its_own_setuptools() -> None:
    choice, spec, notes = plan_layer(spec_for_task("https://github.com/astropy/astropy", "3.6", ASTROPY_13))
    assert choice.interpreter.version == "3.9" and not choice.exact
    # numpy 1.16.0, Cython 0.27.3 and MarkupSafe 1.0 have no wheel for 3.9 (MarkupSafe 1.0's setup.py imports
    # setuptools' Feature, so its sdist cannot build either): each becomes its first release with one.
    # setuptools 38.2.4 does not import on 3.9: its first release that does (and still has Feature).
    assert spec.pip_packages == (
        "setuptools==41.1.0",
        "cython==0.29.21",
        "hypothesis==4.18.2",
        "MarkupSafe==1.1.1",
        "numpy==1.19.3",
        "packaging==16.8",
        "pytest==3.3.1",
    )
    # The tree's setup.py needs the recipe's setuptools and numpy, not an isolated build with today's.
    assert spec.install == "python -m pip install --no-build-isolation -e .[test] --verbose"
    assert notes[0].startswith("Python 3.6 is not available offline; using 3.9")
    assert "numpy==1.16.0 -> 1.19.3" in notes[1] and "setuptools==38.2.4 -> 41.1.0" in notes[1]
    # hypothesis 3.44.2 installs on 3.9 but, as a pytest plugin, fails every test run there: its code objects
    # have 3.7's signature. 4.18.2 is its first release with 3.8's.
    assert "hypothesis==3.44.2 -> 4.18.2" in notes[1]
    # Its setup.py bootstraps astropy_helpers from a git submodule, which a tree here does not have.
    # Its packaging 16.8 breaks the setuptools-scm the layer adds, and setup.py's egg_info with it.
    assert spec.build_commands == (
        "python -m pip install --no-input astropy-helpers==3.0.2",
        "python -m pip uninstall --no-input -y setuptools-scm",
    )
    assert notes[2] == "the tree's git submodules come from PyPI: astropy-helpers==3.0.2"
    assert notes[3] == "setuptools-scm is left out: the recipe's pins predate it"
    assert len(notes) == 4


def test_xarray_012_gets_3_9_where_its_numpy_pin_has_a_wheel() -> None:
    choice, spec, notes = plan_layer(spec_for_task("https://github.com/pydata/xarray", "3.10", XARRAY_012))
    # 3.10 is as far from 3.9 as from 3.11; numpy 1.23.0 has wheels for 3.9 and none for 3.11.
    assert choice.interpreter.version == "3.9"
    assert spec.pip_packages == tuple(XARRAY_012["pip_packages"])  # kept: each has a wheel for 3.9
    assert notes == ("Python 3.10 is not available offline; using 3.9 (Debian bullseye), the nearest",)


def test_an_unpinned_task_on_a_tie_still_gets_the_newer_interpreter() -> None:
    choice, spec, notes = plan_layer(spec_for_task("me/lib", "3.10", {"pip_packages": ["six"]}))
    assert choice.interpreter.version == "3.11"


def test_pins_on_the_interpreter_asked_for_are_kept() -> None:
    recipe = {"repo": "me/lib", "version": "1", "pip_packages": ["numpy==1.16.0"]}
    choice, spec, notes = plan_layer(spec_for_task("me/lib", "3.9", recipe))
    assert choice.exact and spec.pip_packages == ("numpy==1.16.0",) and notes == ()


def test_every_layer_gets_pytest_and_sympy_layers_numpy() -> None:
    sympy = {"repo": "sympy/sympy", "version": "1.1", "pip_packages": ["mpmath==1.3.0", "flake8"]}
    _, spec, _ = plan_layer(spec_for_task("https://github.com/sympy/sympy", "3.9", sympy))
    assert spec.test_tools == (("pytest", "pytest"), ("numpy", "numpy<2"))
    _, other, _ = plan_layer(spec_for_task("me/lib", "3.9", {"repo": "me/lib", "version": "1"}))
    assert other.test_tools == (("pytest", "pytest"),)


FEATURE_FAILURE = "\n".join(
    [
        "  Getting requirements to build wheel: finished with status 'error'",
        "  error: subprocess-exited-with-error",
        "  ImportError: cannot import name 'Feature' from 'setuptools' "
        "(/tmp/pip-build-env-gm2zmm6d/overlay/lib/python3.9/site-packages/setuptools/__init__.py)",
        "ERROR: Failed to build 'MarkupSafe' when getting requirements to build wheel",
        "The command '/bin/sh -euc /opt/gagar-env/bin/python -m pip install MarkupSafe==1.0' "
        "returned a non-zero code: 1",
    ]
)


def test_a_failed_build_is_told_to_a_model_in_task_terms() -> None:
    failure = failure_of(FEATURE_FAILURE, timed_out=False, timeout=1800)
    assert failure.model_cause == (
        "requirement MarkupSafe does not build from source: "
        "ImportError: cannot import name 'Feature' from 'setuptools'"
    )
    assert "/tmp/" not in failure.model_cause and "/bin/sh" not in failure.model_cause
    missing = failure_of("ERROR: No matching distribution found for numpy==1.23.0\n", False, 1800)
    assert missing.model_cause == "requirement numpy==1.23.0 cannot be installed on this Python"
    assert missing.cause == "requirement numpy==1.23.0 is not on PyPI for this Python"


def test_a_remembered_failure_keeps_both_wordings(tmp_path: Path) -> None:
    memory = FailureMemory(tmp_path)
    message = (
        "x-1-py3.9: requirement nope is not on PyPI for this Python [PyPI as of 2025-01-01] (log: /r/x.log)"
    )
    reason = "the task's environment (x 1's dependencies on Python 3.9) could not be built: nope"
    memory.remember("gagar/env:x-1-py3.9", "aaaa", message, reason)
    error = memory.recall_error("gagar/env:x-1-py3.9", "aaaa")
    assert isinstance(error, EnvironmentBuildError)
    assert error.reason == reason
    assert str(error).startswith(message) and "--retry" in str(error)
    # Across processes (a grading worker's error reaches the batch): both parts survive pickling.
    import pickle

    again = pickle.loads(pickle.dumps(error))
    assert again.reason == reason and str(again) == str(error)


def test_compiled_modules_of_the_trees_packages_are_copied_where_the_tree_lacks_them(tmp_path: Path) -> None:
    from grader.sandbox.compiled import copy_compiled

    site, tree = tmp_path / "site-packages", tmp_path / "tree"
    for path in ("pkg/_a.so", "pkg/sub/_b.so", "pkg/gone/_c.so", "other/_d.so", "pkg/_e.so", "pkg/mod.py"):
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(f"built {path}")
    (tree / "pkg" / "sub").mkdir(parents=True)
    (tree / "pkg" / "__init__.py").write_text("")
    (tree / "pkg" / "_e.so").write_text("the candidate's own")
    (tree / "other").mkdir()  # not a package of the tree: no __init__.py
    assert copy_compiled(tree, site) == ["pkg/_a.so", "pkg/sub/_b.so"]
    assert (tree / "pkg" / "sub" / "_b.so").read_text() == "built pkg/sub/_b.so"
    assert (tree / "pkg" / "_e.so").read_text() == "the candidate's own"  # never overwritten
    assert not (tree / "pkg" / "gone").exists() and not (tree / "pkg" / "mod.py").exists()
    # A src layout gets them under src/.
    src_tree = tmp_path / "src-tree"
    (src_tree / "src" / "pkg" / "sub").mkdir(parents=True)
    (src_tree / "src" / "pkg" / "__init__.py").write_text("")
    assert copy_compiled(src_tree, site) == ["src/pkg/_a.so", "src/pkg/_e.so", "src/pkg/sub/_b.so"]
