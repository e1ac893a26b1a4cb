"""`import grader` stays light, and the public names still resolve (lazily) to their modules."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings

import pytest

import grader

HEAVY = ("grader.evaluation", "grader.sandbox.images", "grader.sandbox.recipes", "grader.distill")


def _loaded_after(code: str) -> list[str]:
    listing = "print(json.dumps(sorted(m for m in sys.modules if m.startswith('grader'))))"
    script = f"import sys, json\n{code}\n{listing}"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_importing_a_package_loads_none_of_its_modules() -> None:
    assert _loaded_after("import grader") == ["grader", "grader.util", "grader.util.lazy"]
    packages = "import grader.evaluation, grader.inspect, grader.integrations"
    assert _loaded_after(packages) == [
        "grader",
        "grader.evaluation",
        "grader.inspect",
        "grader.integrations",
        "grader.util",
        "grader.util.lazy",
    ]
    assert [
        m for m in _loaded_after("import grader.evaluation.metrics") if m.startswith("grader.evaluation.")
    ] == ["grader.evaluation.metrics"]


@pytest.mark.parametrize(
    "code",
    [
        "from grader import grade_groups, get_grader, load_groups, GroupResult",
        "from grader import redistribute_advantages",
        "from grader.integrations import BatchGrader",
        "import grader.ranking.length",
        "from grader.integrations import BatchGrader, RowMapping, redistribute_advantages",
    ],
)
def test_what_a_trainer_imports_leaves_the_heavy_floors_unloaded(code: str) -> None:
    loaded = _loaded_after(code)
    assert [m for m in loaded if m.startswith(HEAVY)] == []


@pytest.mark.parametrize("package", ["grader", "grader.evaluation", "grader.inspect", "grader.integrations"])
def test_every_public_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        grader.nothing_here  # noqa: B018


def test_the_old_load_error_name_warns_and_is_load_failure() -> None:
    from grader.groups.formats import LoadFailure

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert grader.LoadError is LoadFailure
    assert any(issubclass(w.category, DeprecationWarning) and "LoadFailure" in str(w.message) for w in caught)


def test_version_comes_from_the_package_metadata() -> None:
    from importlib.metadata import version

    assert grader.__version__ == version("gagar")


def test_every_module_sits_on_a_floor_and_no_import_climbs() -> None:
    # bench/import_graph.py holds the floor list (docs/architecture.md, *Floors*): a new module must be placed
    # there, and an import that climbs a floor is a layering break, lazy ones included.
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "bench" / "import_graph.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    assert "not on any floor" not in done.stdout, done.stdout
    assert "upward arrows: 0 module-level, 0 lazy" in done.stdout, done.stdout
    assert "cycles (module-level): 0" in done.stdout, done.stdout
