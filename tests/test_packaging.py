"""What `pip install .` (not editable) ships: every package of the source tree, and the prompts."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import tomllib

from tests.conftest import REPO_ROOT
from tests.support.inspect_runs import heuristic_run

__all__ = ["heuristic_run"]


def test_every_package_of_the_tree_is_installed() -> None:
    # setuptools installs exactly the listed packages: one left out imports in an editable install and in
    # the tests, and is missing for a user who ran `pip install .`.
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(config["packages"])
    in_tree = {
        ".".join(init.parent.relative_to(REPO_ROOT).parts)
        for init in (REPO_ROOT / "grader").rglob("__init__.py")
    }
    assert in_tree - listed == set(), "add these packages to [tool.setuptools] packages in pyproject.toml"
    assert config["package-dir"]["grader._prompts"] == "prompts"
    assert (REPO_ROOT / "prompts" / "__init__.py").exists()


def test_an_installed_wheel_writes_the_report_with_its_stylesheet_and_script(
    heuristic_run: Path, tmp_path: Path
) -> None:
    # A wheel, not the editable install: the report's CSS and JS are package data, which an editable install
    # finds in the source tree whether or not pyproject ships them.
    source = tmp_path / "source"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("grader", "prompts"):
        shutil.copytree(REPO_ROOT / name, source / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # Built as `pip install .` builds: in isolation, with the setuptools pyproject asks for (from PyPI).
    build = [*pip, "wheel", "--no-deps", "-w", str(wheels), str(source)]
    subprocess.run(build, check=True, capture_output=True)
    (wheel,) = wheels.glob("gagar-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # The dependencies from the environment running the tests, which may itself be a venv (whose packages
    # `--system-site-packages` would not reach: it adds the base interpreter's). Plain path lines, so the
    # editable install's finder there is not loaded and the wheel's copy is the one imported.
    (site_packages,) = (venv / "lib").glob("python*/site-packages")
    ours = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site_packages / "test_dependencies.pth").write_text("".join(f"{path}\n" for path in ours))
    install = [str(venv / "bin" / "python"), "-m", "pip", "-q", "install", "--no-deps", str(wheel)]
    subprocess.run(install, check=True, capture_output=True)
    out = tmp_path / "report.html"
    report = [str(venv / "bin" / "gagar"), "report", str(heuristic_run), "-o", str(out)]
    done = subprocess.run(report, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import grader.inspect.assets as a; print(a.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(venv), where  # the wheel's copy, not the source tree
    page = out.read_text(encoding="utf-8")
    for name in ("report.css", "report.js"):
        shipped = (REPO_ROOT / "grader" / "inspect" / name).read_text(encoding="utf-8")
        assert shipped.strip() and shipped in page, name
