"""Compiled extension modules, copied from the layer's install into a target's tree (stdlib only).

A layer installs the repository's base tree (not editable: the sandbox is read-only) so that its dependencies
are there; each command then runs in its own copy of a target's tree, which imports first (`PYTHONPATH`).
A tree whose package has C extensions (astropy's `utils/_compiler`, `io/fits/compression`, `wcs/_wcs`)
imports from source only once they are built in place, which takes minutes per target (astropy 3.0 then
tries to build them itself). The layer's install built them already: this script, the layer's part of each
target's setup, copies every compiled extension module of a package the tree has from the venv's
site-packages into the tree, where the tree has the module's folder and not the module. A candidate that
changes a C source is still run against the base's build of it (noted in docs/environments.md).

Run as `python gagar-compiled.py` in the tree (the layer copies this file into the venv); prints how many
modules it copied, and never fails the setup (exit 0).
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import sys
import sysconfig
from pathlib import Path


def copy_compiled(tree: Path, site_packages: Path) -> list[str]:
    """Copy the compiled extension modules of the tree's packages from `site_packages` into `tree`.

    Args:
        tree: a target's tree (flat, or with its packages under `src/`).
        site_packages: the venv's site-packages, where the layer installed the base tree.

    Returns:
        The copied modules' paths relative to `tree`, sorted. A module already in the tree, or whose folder
        the tree does not have (a candidate moved or deleted it), is left alone.
    """
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    copied = []
    for root in (tree, tree / "src"):
        if not root.is_dir():
            continue
        for package in sorted(site_packages.iterdir()):
            if not package.is_dir() or not (root / package.name / "__init__.py").is_file():
                continue
            # os.walk, not Path.rglob: a sympy install is 3,000 entries, and this runs in every target's
            # setup (rglob took 250 ms of it, os.walk 30 to 60 ms); bytecode folders hold no extension.
            for folder, folders, files in os.walk(package):
                folders[:] = sorted(d for d in folders if d != "__pycache__")
                for name in sorted(files):
                    module = Path(folder, name)
                    if not name.endswith(suffixes) or not module.is_file():
                        continue
                    destination = root / module.relative_to(site_packages)
                    if destination.parent.is_dir() and not destination.exists():
                        shutil.copy2(module, destination)
                        copied.append(destination.relative_to(tree).as_posix())
    return sorted(copied)


def main() -> int:
    try:
        copied = copy_compiled(Path.cwd(), Path(sysconfig.get_paths()["purelib"]))
    except OSError as exc:  # a tree we cannot write leaves the tree as it was: its imports will say why
        print(f"gagar: compiled modules not copied: {exc}", file=sys.stderr)
        return 0
    if copied:
        print(f"gagar: {len(copied)} compiled module(s) copied from the environment's build of the base tree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
