"""What `pip install .` (not editable) ships: every package of the source tree, and the prompts."""

from __future__ import annotations

import tomllib

from tests.conftest import REPO_ROOT


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
