"""What a layer changes from its recipe so that it installs on the interpreter it gets, and can run tests.

A recipe's pins were chosen for the Python it asks for. When that Python is not available offline, another
stands in (`interpreters`), and pins of compiled packages older than the stand-in have no wheel for it:
pip then builds them from source, which for releases older than the interpreter fails (numpy 1.16 on
Python 3.9, numpy 1.23.0 on 3.11) or takes the whole build's time. Three changes, each named in the layer's
notes so `run` says what differs from the recipe:

- **Pins lifted to the stand-in's first installable release**: on a stand-in interpreter, a pin `name==X`
  older than the first release of `name` that installs there (`FIRST_INSTALLABLE`: for compiled packages
  the first with a Linux x86-64 wheel for that interpreter, checked with `pip download --only-binary=:all:
  --python-version V --platform manylinux2014_x86_64`; for setuptools the first that imports on it)
  becomes that release: the smallest change that installs. On the interpreter asked for, pins are kept.
- **The recipe's setuptools builds the tree**: a recipe that pins setuptools built its tree with that
  setuptools (and with the numpy and Cython it pins), as the pip of its time did for a tree without
  pyproject.toml. pip 26 builds such a tree in an isolated environment with today's setuptools instead,
  where old setup scripts fail (astropy 3.0's imports setuptools' `Feature`, removed in 46; its numpy is
  not there). So the install runs with `--no-build-isolation`, and a setuptools pin older than 40.8.0 (the
  first with the `build_meta:__legacy__` backend pip 26 needs for such a tree) is lifted to it.
- **Submodules from PyPI**: gagar's trees hold one repository, without its git submodules. A tree whose
  setup needs a submodule that PyPI has as a package gets that release installed before the tree
  (`SUBMODULE_PACKAGES`): astropy 3.0's setup.py bootstraps `astropy_helpers` from its empty submodule
  folder, then from PyPI through easy_install (which fails here), and takes an installed copy first.
- **Test tools**: every layer has pytest (a model's probes and most test commands use it), and a repository
  whose tests import optional packages gets them (`TEST_EXTRAS`: sympy's printing and lambdify tests import
  numpy), each installed only when the layer does not import it already, resolved as of the recipe's date.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from typing import TYPE_CHECKING

from grader.sandbox.layer_spec import EnvironmentSpec

if TYPE_CHECKING:
    from grader.sandbox.interpreters import InterpreterChoice

# The first release of each package that installs on an interpreter: a compiled package's first CPython
# wheel for Linux x86-64 (manylinux), setuptools' first that imports (before 41.1.0 it calls the
# HTMLParser.unescape that 3.9 removed), a pure-Python package's first that runs there. Names are PEP
# 503's (lower case, "-").
FIRST_INSTALLABLE: dict[str, dict[str, str]] = {
    "3.9": {
        "setuptools": "41.1.0",
        "numpy": "1.19.3",
        "cython": "0.29.21",
        "markupsafe": "1.1.1",
        "psutil": "5.8.0",
        "pyyaml": "5.4",
        "pyerfa": "1.7.1",
        # Pure Python, but before 4.18.2 it builds code objects with 3.7's signature (no posonlyargcount):
        # as a pytest plugin it fails every test run on 3.8+ with "an integer is required (got type bytes)".
        "hypothesis": "4.18.2",
    },
    "3.11": {"numpy": "1.23.2"},
    "3.13": {"numpy": "2.1.0"},
}
# setuptools' `build_meta:__legacy__`, which pip 26 builds a tree without pyproject.toml with.
SETUPTOOLS_LEGACY_BACKEND = "40.8.0"
# By (repository, environment version): the packages standing in for the tree's git submodules, pinned to
# the release of the submodule's commit (astropy 1.3's base trees point astropy_helpers at its 3.0 line).
SUBMODULE_PACKAGES: dict[tuple[str, str], tuple[str, ...]] = {
    ("astropy/astropy", "1.3"): ("astropy-helpers==3.0.2",)
}
# What the setuptools-scm the layer adds for trees that use it (`setuptools-scm<8`) needs: pins older than
# these break it, and with it every setup.py's egg_info (its file finder is a setuptools entry point, loaded
# for any tree, which fails on the conflict: astropy 1.3 pins packaging 16.8).
SETUPTOOLS_SCM_NEEDS = {"setuptools": "45", "packaging": "20.0"}
TEST_TOOLS = ("pytest",)
# Optional packages a repository's tests import (and skip without), as pip requirements, by the module
# that tells whether one is there. numpy before 2: the repository's releases here all predate numpy 2.
TEST_EXTRAS: dict[str, tuple[tuple[str, str], ...]] = {"sympy/sympy": (("numpy", "numpy<2"),)}

_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^]]*\])?\s*==\s*([0-9][^\s;,]*)\s*$")


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them: lower case, runs of "-", "_" and "." as one "-"."""
    return re.sub(r"[-_.]+", "-", name).lower()


def release(version: str) -> tuple[int, ...]:
    """A version's numeric release, for comparing pins: "1.19.3" -> (1, 19, 3), "0.0.0a0" -> (0, 0, 0)."""
    parts = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.group() != part:
            break
    return tuple(parts)


def lifted_pin(requirement: str, interpreter: str) -> str | None:
    """The pin `requirement` becomes on a stand-in `interpreter`, or None when it stays.

    Args:
        requirement: a pip requirement, e.g. "numpy==1.16.0".
        interpreter: the stand-in's version, e.g. "3.9".

    Returns:
        "name==floor" when `requirement` pins a release older than the first with a wheel for `interpreter`.
    """
    m = _PIN.match(requirement)
    if m is None:
        return None
    floor = FIRST_INSTALLABLE.get(interpreter, {}).get(canonical(m.group(1)))
    if floor is None or release(m.group(2)) >= release(floor):
        return None
    return f"{m.group(1)}=={floor}"


def pins_setuptools(packages: tuple[str, ...]) -> bool:
    """Whether `packages` pin setuptools exactly (the recipe says which setuptools builds its tree)."""
    return any((m := _PIN.match(p)) is not None and canonical(m.group(1)) == "setuptools" for p in packages)


def breaks_setuptools_scm(packages: tuple[str, ...]) -> bool:
    """Whether `packages` pin a setuptools or packaging older than the layer's setuptools-scm needs."""
    for requirement in packages:
        m = _PIN.match(requirement)
        needed = SETUPTOOLS_SCM_NEEDS.get(canonical(m.group(1))) if m else None
        if m is not None and needed is not None and release(m.group(2)) < release(needed):
            return True
    return False


def adjust(spec: EnvironmentSpec, choice: InterpreterChoice) -> tuple[EnvironmentSpec, list[str]]:
    """`spec` as the layer builds it on `choice`'s interpreter (see the module docstring), and what changed.

    Args:
        spec: the recipe's layer.
        choice: the interpreter picked for it.

    Returns:
        The spec to build, and one note per kind of change (empty when nothing changed).
    """
    notes: list[str] = []
    packages = list(spec.pip_packages)
    if not choice.exact:
        changes = []
        for i, requirement in enumerate(packages):
            lifted = lifted_pin(requirement, choice.interpreter.version)
            if lifted is not None:
                changes.append(f"{requirement} -> {lifted.split('==', 1)[1]}")
                packages[i] = lifted
        if changes:
            notes.append(
                f"pins that do not install or run on Python {choice.interpreter.version} lifted to the first "
                f"release that does: {', '.join(changes)}"
            )
    install = spec.install
    if install and pins_setuptools(spec.pip_packages) and re.search(r"\bpip\s+install\b", install):
        install = re.sub(r"\bpip\s+install\b", "pip install --no-build-isolation", install, count=1)
        for i, requirement in enumerate(packages):
            m = _PIN.match(requirement)
            old = m is not None and release(m.group(2)) < release(SETUPTOOLS_LEGACY_BACKEND)
            if m is not None and old and canonical(m.group(1)) == "setuptools":
                packages[i] = f"{m.group(1)}=={SETUPTOOLS_LEGACY_BACKEND}"
                notes.append(
                    f"the tree is built with the recipe's setuptools, {m.group(2)} lifted to "
                    f"{SETUPTOOLS_LEGACY_BACKEND} (the first pip 26 can build with)"
                )
    build_commands = spec.build_commands
    submodules = SUBMODULE_PACKAGES.get((spec.repository, spec.version), ())
    if submodules:
        install_them = "python -m pip install --no-input " + " ".join(shlex.quote(p) for p in submodules)
        build_commands = (install_them, *build_commands)
        notes.append(f"the tree's git submodules come from PyPI: {', '.join(submodules)}")
    if breaks_setuptools_scm(tuple(packages)):
        build_commands = (*build_commands, "python -m pip uninstall --no-input -y setuptools-scm")
        notes.append("setuptools-scm is left out: the recipe's pins predate it")
    extras = tuple(dict.fromkeys([*((t, t) for t in TEST_TOOLS), *TEST_EXTRAS.get(spec.repository, ())]))
    adjusted = replace(
        spec, pip_packages=tuple(packages), install=install, build_commands=build_commands, test_tools=extras
    )
    return adjusted, notes


__all__ = [
    "SETUPTOOLS_LEGACY_BACKEND",
    "SUBMODULE_PACKAGES",
    "TEST_EXTRAS",
    "TEST_TOOLS",
    "FIRST_INSTALLABLE",
    "adjust",
    "breaks_setuptools_scm",
    "canonical",
    "lifted_pin",
    "pins_setuptools",
    "release",
]
