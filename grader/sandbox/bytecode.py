"""Bytecode for a pristine tree from the copy of its package installed in the image, without compiling.

A task environment installs the repository into the image at some commit, and pip compiled it there. Every
command runs in a fresh copy of its target's tree, so without bytecode in the pristine tree each command
compiles every module it imports (sympy: `import sympy` took 1.5 to 2 times as long without it, measured on
the sandbox's tmpfs). `ADOPT_INSTALLED_BYTECODE` runs as root inside the container on one pristine tree: for
each `.py` file of a package at the tree's root or under `src/` whose bytes equal the installed file's, it
writes the installed `.pyc`'s code under a checked-hash header (the source's hash), so Python uses it only
while the source is byte for byte the one it was compiled from, and fixes its file names on loading. A file
a candidate changed has no such twin and is compiled by the command that imports it, as before. Nothing of
the tree is executed; each file is written beside the tree and renamed into it, so a command copying the
tree meanwhile finds each `.pyc` whole or not at all (and never a partial file that is gone when copied).

Argument: the tree. Exits 0 whatever it found (no python3, another interpreter, nothing installed).
"""

from __future__ import annotations

ADOPT_INSTALLED_BYTECODE = r"""
import importlib.util, os, sys, sysconfig
magic, tree = importlib.util.MAGIC_NUMBER, sys.argv[1].rstrip("/")
site = sysconfig.get_paths()["purelib"]
staging = tree + ".bytecode"  # beside the tree, on its filesystem: a copy of the tree never lists it
os.makedirs(staging, exist_ok=True)
for top in (tree, os.path.join(tree, "src")):
    names = os.listdir(top) if os.path.isdir(top) else []
    for name in names:
        package, twin = os.path.join(top, name), os.path.join(site, name)
        if not (os.path.isfile(os.path.join(package, "__init__.py")) and os.path.isdir(twin)):
            continue
        for folder, _, files in os.walk(package):
            for file in files:
                if not file.endswith(".py"):
                    continue
                source = os.path.join(folder, file)
                installed = os.path.join(site, os.path.relpath(source, top))
                try:
                    with open(source, "rb") as f:
                        data = f.read()
                    with open(installed, "rb") as f:
                        if f.read() != data:
                            continue
                    with open(importlib.util.cache_from_source(installed), "rb") as f:
                        compiled = f.read()
                except OSError:
                    continue
                if compiled[:4] != magic or len(compiled) < 16:
                    continue
                out = importlib.util.cache_from_source(source)
                os.makedirs(os.path.dirname(out), exist_ok=True)
                partial = os.path.join(staging, "partial")
                with open(partial, "wb") as f:
                    checked_hash = (3).to_bytes(4, "little") + importlib.util.source_hash(data)
                    f.write(magic + checked_hash + compiled[16:])
                os.replace(partial, out)
os.rmdir(staging)
"""
"""A Python program (`python3 -c PROGRAM TREE`); see the module docstring."""

ADOPT_COMMAND = 'command -v python3 >/dev/null || exit 0; exec nice -n 19 python3 -c "$0" "$1"'
"""`sh -c ADOPT_COMMAND ADOPT_INSTALLED_BYTECODE TREE`: the program at the lowest priority, if there is a
python3."""
