"""A target's set-up tree made pristine: a root-owned copy of what its setup left, in the Docker backend.

A setup runs as the target's uid in a fresh copy of the target's pristine tree, which then is the uid's:
root copies it into /pristine, where no command can change it, and later commands start from that copy.
A setup changes few files (`setup.py egg_info` writes an egg-info folder), so `ADOPT_SET_UP_TREE` links
every regular file the setup left as it found it to the pristine tree's own file (root-owned, never
written) and copies only the rest: adopting a sympy tree costs a walk instead of a copy of its bytes, and
the new tree shares the pristine one's inodes, so its bytecode (see `bytecode`) is already there.

A file counts as left as it was when its status did not change after the setup's stamp (its ctime, which
no process can set back, is not newer than the stamp's mtime), and its size, mtime and mode are the
pristine file's at the same path; anything else is copied (bytes, mode without set-id bits, times). The
stamp is the box's, touched by the wrapper after the fresh copy and before the setup command: a setup
that touches it again can make root link a file it changed back to the pristine bytes, which affects only
its own target (whose code runs in every one of its commands anyway), never another's. Symlinks are made
again as symlinks (never followed); FIFOs and sockets are left out. Nothing runs in the box meanwhile: the
wrapper killed every process of the uid before it ended, and the slot runs one command at a time.

Arguments: the target's pristine tree, the set-up tree, the stamp, the new tree (not there yet). Exits
non-zero, leaving a partial new tree, when anything could not be read or written; `ADOPT_COMMAND` then
removes it and falls back to a plain copy, as it does when the image has no python3.
"""

from __future__ import annotations

ADOPT_SET_UP_TREE = r"""
import os, shutil, stat, sys
pristine, tree, stamp, dest = sys.argv[1:5]
since = os.stat(stamp).st_mtime_ns

def unchanged(st, old):
    try:
        was = os.lstat(old)
    except OSError:
        return False
    return (
        stat.S_ISREG(was.st_mode) and st.st_ctime_ns <= since and was.st_size == st.st_size
        and was.st_mtime_ns == st.st_mtime_ns and was.st_mode == st.st_mode
    )

def fail(error):
    raise error  # a folder that cannot be listed: no partial tree passes for the set-up one

folders_made = []
for folder, folders, files in os.walk(tree, onerror=fail):
    rel = os.path.relpath(folder, tree)
    out = os.path.normpath(os.path.join(dest, rel))
    os.mkdir(out, 0o700)
    folders_made.append((out, os.lstat(folder)))
    for name in list(folders):
        if os.path.islink(os.path.join(folder, name)):  # a symlink to a folder: not walked into
            folders.remove(name)
            files.append(name)
    for name in files:
        path, copy = os.path.join(folder, name), os.path.join(out, name)
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(path), copy)
        elif stat.S_ISREG(st.st_mode):
            old = os.path.join(pristine, rel, name)
            if unchanged(st, old):
                os.link(old, copy)
            else:
                shutil.copyfile(path, copy, follow_symlinks=False)
                os.chmod(copy, stat.S_IMODE(st.st_mode) & 0o777)
                os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
for out, st in reversed(folders_made):  # deepest first: setting a folder's times after its entries
    os.chmod(out, stat.S_IMODE(st.st_mode) & 0o777)
    os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
"""
"""A Python program (`python3 -c PROGRAM PRISTINE TREE STAMP NEW`); see the module docstring."""

ADOPT_COMMAND = r"""
umask 022
command -v python3 >/dev/null && python3 -c "$0" "$@" && exit 0
rm -rf "$4"
cp -R --preserve=mode,timestamps,links "$2" "$4" 2>/dev/null || { rm -rf "$4"; cp -R "$2" "$4"; }
"""
"""`sh -c ADOPT_COMMAND ADOPT_SET_UP_TREE PRISTINE TREE STAMP NEW`, as root: the program, or else a plain copy
(modes and times kept where the engine lets root keep them)."""
