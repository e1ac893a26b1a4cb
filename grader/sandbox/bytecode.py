"""Bytecode for pristine trees, made once per container by root, so commands do not compile at each import.

Without bytecode in the pristine tree each command compiled every module it imported again (sympy: `import
sympy` took 1.5 to 2 times as long without it, measured on the sandbox's tmpfs), and wrote it into its
tree, which then could not be kept for the next command. `ADOPT_INSTALLED_BYTECODE` runs as root inside the
container on pristine trees, at the lowest priority: for each `.py` file of the tree (hidden folders
left out; not only a package's: a module a script imports from beside it, as sympy's `bin/test` does,
counts too), it writes a checked-hash `.pyc` (the source's hash in its header: Python uses it only while
the source is byte for byte the one it came from, and fixes its file names on loading). The code comes
from the image's installed copy of the package when the installed source is the same bytes (a task
environment installs the repository, and pip compiled it), else from compiling the source (compiling runs
nothing of it). Results are kept per container by the source's sha256 (root-only), so the trees of one
container (base and candidates share most files) pay for each distinct file once, one tree at a time; and
the sha256 of each source is kept by its inode (pristine files are never written, so an inode keeps its
bytes), so a file a tree shares with an earlier one by a hard link (the bundle's, a set-up tree's) is not
read again, and a `.pyc` already linked to the right code is left as it is.
Each `.pyc` is hard-linked beside the tree and renamed into it, so a command copying the tree meanwhile
finds each one whole or not at all; a command started before it is done compiles what it lacks.

Arguments: the trees, all in one folder (its `.bytecode` holds the results). Exits 0 whatever it found (no
python3 in the image: nothing is done).
"""

from __future__ import annotations

ADOPT_INSTALLED_BYTECODE = r"""
import fcntl, hashlib, importlib.util, marshal, os, sys, sysconfig
magic, trees = importlib.util.MAGIC_NUMBER, [t.rstrip("/") for t in sys.argv[1:]]
site = sysconfig.get_paths()["purelib"]
cache = os.path.join(os.path.dirname(trees[0]), ".bytecode")  # one per container: by the source's sha256
os.makedirs(cache, mode=0o700, exist_ok=True)
lock = open(os.path.join(cache, ".lock"), "w")
fcntl.flock(lock, fcntl.LOCK_EX)  # one pass at a time: the next finds what this one compiled

def bytecode(source, data, installed):
    # The installed twin's code (no compile) when its source is the same bytes, else a compile (no run).
    try:
        with open(installed, "rb") as f:
            if f.read() == data:
                with open(importlib.util.cache_from_source(installed), "rb") as f:
                    compiled = f.read()
                if compiled[:4] == magic and len(compiled) > 16:
                    return compiled[16:]
    except OSError:
        pass
    return marshal.dumps(compile(data, source, "exec", dont_inherit=True))

def place(data, path):
    partial = os.path.join(cache, ".partial")  # on the tree's filesystem, never inside the tree
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, path)

known = {}  # inode -> the sha256 of its bytes: pristine files are never written, so an inode keeps its bytes
inodes = os.path.join(cache, "inodes")
try:
    with open(inodes) as f:
        known = {int(i): h for i, h in (line.split() for line in f)}
except (OSError, ValueError):
    pass

def adopt(tree):
    src = os.path.join(tree, "src")
    for folder, folders, files in os.walk(tree):
        folders[:] = [d for d in folders if not d.startswith(".") and d != "__pycache__"]
        top = src if folder == src or folder.startswith(src + os.sep) else tree  # where imports see the tree
        for file in files:
            if not file.endswith(".py"):
                continue
            source = os.path.join(folder, file)
            try:
                inode, data = os.lstat(source).st_ino, None
                digest = known.get(inode)
                if digest is None:
                    with open(source, "rb") as f:
                        data = f.read()
                    digest = known[inode] = hashlib.sha256(data).hexdigest()
                kept = os.path.join(cache, digest)
                if not os.path.exists(kept):
                    if data is None:
                        with open(source, "rb") as f:
                            data = f.read()
                    body = bytecode(source, data, os.path.join(site, os.path.relpath(source, top)))
                    checked_hash = (3).to_bytes(4, "little") + importlib.util.source_hash(data)
                    place(magic + checked_hash + body, kept)
                out = importlib.util.cache_from_source(source)
                try:
                    if os.stat(out).st_ino == os.stat(kept).st_ino:
                        continue  # a tree linked from one done before (a set-up tree) has it already
                except OSError:
                    pass
                os.makedirs(os.path.dirname(out), exist_ok=True)
                partial = os.path.join(cache, ".link")
                if os.path.lexists(partial):
                    os.unlink(partial)
                os.link(kept, partial)
                os.replace(partial, out)
            except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
                continue  # a file Python cannot compile: the command that imports it says why

for tree in trees:
    adopt(tree)
    with open(inodes + ".partial", "w") as f:
        f.writelines(f"{i} {h}\n" for i, h in known.items())
    os.replace(inodes + ".partial", inodes)
"""
"""A Python program (`python3 -c PROGRAM TREE`); see the module docstring."""

BYTECODE_COMMAND = 'command -v python3 >/dev/null || exit 0; exec nice -n 19 python3 -c "$0" "$@"'
"""`sh -c BYTECODE_COMMAND ADOPT_INSTALLED_BYTECODE TREE...`: the program at the lowest priority, if
there is a python3."""
