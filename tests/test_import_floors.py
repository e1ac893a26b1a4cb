"""`import grader` stays light, the public names still resolve (lazily) to their modules, and the imports keep
to the floors of docs/architecture.md, with no two modules importing each other."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import grader
from tests.conftest import REPO_ROOT
from tests.support.import_graph import (
    Arrow,
    Floor,
    climbing,
    cycles,
    import_arrows,
    label,
    misplaced,
    read_floors,
    source_files,
)

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


def _graph(root: Path = REPO_ROOT) -> tuple[list[Arrow], list[Floor]]:
    return import_arrows(root), read_floors(root / "docs" / "architecture.md")


def test_the_doc_places_every_module_on_one_floor() -> None:
    # docs/architecture.md's table is the floor list: a new module must be placed there, and a module that
    # moved or went away must leave it, so the doc and the code cannot drift apart.
    arrows, floors = _graph()
    assert misplaced(floors, set(source_files(REPO_ROOT))) == []
    assert [f.name for f in floors][:3] == ["0 foundations", "1 input", "2 boundary"]


def test_no_import_climbs_a_floor() -> None:
    arrows, floors = _graph()
    where = {m: f.name for f in floors for m in f.modules}
    up = [
        f"{a.kind} import at {label(a.source)}:{a.line} ({where[label(a.source)]}) -> {label(a.target)} "
        f"({where[label(a.target)]})"
        for a in climbing(arrows, floors)
    ]
    assert up == []


def test_no_modules_import_each_other() -> None:
    arrows, _ = _graph()
    found = cycles(arrows)
    assert found == []


def test_the_walker_sees_imports_in_functions_and_for_type_checkers(tmp_path: Path) -> None:
    # A tree of four modules: a <-> b only through a function's import, c <-> d only through TYPE_CHECKING,
    # and a relative import; the floors put b and d above a and c.
    package = tmp_path / "grader"
    (package / "p").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "p/__init__.py": "",
        "p/a.py": "def f():\n    from grader.p import b\n",
        "p/b.py": "from . import a\n",
        "p/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from grader.p.d import D\n",
        "p/d.py": "import grader.p.c\nclass D: ...\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(
        "## Floors\n\n| floor | modules |\n|---|---|\n| 0 low | `grader`, `p`, `p.a`, `p.c` |\n"
        "| 1 high | `p.b`, `p.d` |\n\n## Next\n"
    )
    arrows, floors = _graph(tmp_path)
    assert {(a.source, a.target, a.kind) for a in arrows} == {
        ("p.a", "p.b", "lazy"),
        ("p.b", "p.a", "module"),
        ("p.c", "p.d", "typing"),
        ("p.d", "p.c", "module"),
    }
    assert cycles(arrows) == [["p.a", "p.b"], ["p.c", "p.d"]]
    assert [(a.source, a.target) for a in climbing(arrows, floors)] == [("p.a", "p.b"), ("p.c", "p.d")]
    (package / "p" / "e.py").write_text("")
    assert misplaced(floors, set(source_files(tmp_path))) == ["p.e is on no floor"]


def test_no_test_module_imports_another() -> None:
    # What tests share lives in tests/support/ (and tests/conftest.py): a test module importing another
    # runs that module's tests' imports, and ties the two files' helpers together where nobody looks.
    found = []
    for path in sorted((REPO_ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                # `from tests.inspect import test_x` imports a test module too; a test function imported
                # from a support module (tests/support/sandbox_contract.py) is a shared contract, not one.
                support = node.module.startswith("tests.support")
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names if not support)]
            if any(re.search(r"(^|\.)test_\w+$", name) and name.startswith("tests.") for name in names):
                found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert found == []
