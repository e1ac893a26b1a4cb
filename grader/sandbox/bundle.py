"""The trees one Docker slot holds, as the one tar it loads into its /pristine (see `grader.sandbox.docker`).

Each tree sits under an unguessable top-level name. A tree comes whole (its archive), or, when the tree
source says how it differs from base's (`TreeChanges`, as the workspace does), as those changes: the
container then makes it from base's tree (`LOAD`: hard links to base's files, the changed paths removed,
the changed files unpacked), so neither `git archive` nor the bundle handles the files a candidate shares
with base. A slot whose targets do not include base holds base's tree too, under a name no target has.

Among whole trees, a file that an earlier one holds at the same path with the same bytes and mode is a
hard link to it. Nothing writes to a pristine file (commands copy it; a set-up tree is a new copy), so no
command's tree changes through a link.

What the bundle refuses (`SandboxError`), as `git archive` never makes it: a member or a changed path that
is absolute, climbs out with `..`, or lies under a symlink of base's tree that stays; a member other than a
file, a folder or a symlink (a hard link or a FIFO could point into another tree or block the load).
"""

from __future__ import annotations

import io
import secrets
import tarfile
import time
from dataclasses import dataclass, field

from grader.errors import SandboxError
from grader.sandbox.base import BASE_TARGET as BASE
from grader.workspace.archives import TreeChanges

# Root, inside the container, reading the bundle on stdin; $1: the manifest's name ("" when there is none).
# Each manifest line names a tree to make, the tree it is made from, its changes as a tar, and two lists
# (NUL-separated, relative to the tree): every changed path, to remove first, and the removed ones, whose
# folders go too when that leaves them empty (git keeps no empty folder). Every name in the manifest is a
# hex token; the lists' paths were checked by `bundle`.
LOAD = r"""
umask 022
chmod 711 /pristine && chmod 1777 /scratch /tmp || exit 1
cd /pristine && tar -x --no-same-owner --no-same-permissions -f - || exit 1
[ -n "$1" ] || exit 0
while read -r tree base changes changed removed; do
  cp -al "$base" "$tree" && cd "$tree" &&
    xargs -0 -r rm -rf -- < "/pristine/$changed" &&
    tar -x --no-same-owner --no-same-permissions -f "/pristine/$changes" || exit 1
  xargs -0 -r sh -c '
    for path; do
      case $path in */*) rmdir -p --ignore-fail-on-non-empty -- "${path%/*}" 2>/dev/null ;; esac
    done' gagar-tidy < "/pristine/$removed"
  cd /pristine && rm -f "$changes" "$changed" "$removed"
done < "/pristine/$1"
rm -f "/pristine/$1"
"""


@dataclass
class Bundle:
    """A slot's trees as one tar (`data`), and where each lands in /pristine."""

    data: bytes = b""
    names: dict[str, str] = field(default_factory=dict)
    """Each target's tree's top-level name."""
    trees: list[str] = field(default_factory=list)
    """Every tree's top-level name, base's first when it is there (a hidden one included)."""
    manifest: str = ""
    """The name of the list of trees `LOAD` makes from changes ("" when none)."""


def bundle(whole: dict[str, bytes], changes: dict[str, TreeChanges], base: bytes | None = None) -> Bundle:
    """The bundle of `whole` trees (archives by target) and of trees given by their `changes` from base's.

    Args:
        whole: archives by target, in order.
        changes: changes from base's tree by target.
        base: base's archive, when `changes` is not empty and base is not among `whole`.

    Returns:
        The bundle.

    Raises:
        SandboxError: a member or a path the bundle refuses (see the module docstring), or changes without
            base's tree.
    """
    made = Bundle(names={t: secrets.token_hex(12) for t in [*whole, *changes]})
    trees = dict(whole)
    if changes and BASE not in whole:
        if base is None:
            raise SandboxError("trees given by their changes need base's tree")
        trees = {BASE: base, **trees}
    tops = {t: made.names.get(t) or secrets.token_hex(12) for t in trees}
    made.trees = [*tops.values(), *(made.names[t] for t in changes)]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        symlinks = _add_whole(out, trees, tops)
        if changes:
            made.manifest = secrets.token_hex(12)
            lines = []
            for target, change in changes.items():
                files, removed = _checked(target, change, symlinks)
                parts = [secrets.token_hex(12) for _ in range(3)]
                for part, data in zip(parts, [files, *_nul_lists(change.paths, removed)], strict=True):
                    _add_file(out, part, data)
                lines.append(" ".join([made.names[target], tops[BASE], *parts]) + "\n")
            _add_file(out, made.manifest, "".join(lines).encode())
    made.data = buf.getvalue()
    return made


def _add_whole(out: tarfile.TarFile, trees: dict[str, bytes], tops: dict[str, str]) -> set[str]:
    """Add each tree under its top-level name, linking files an earlier tree holds; base's symlinks."""
    seen: dict[str, list[tuple[int, bytes, str]]] = {}  # path -> (mode, bytes, where the bundle holds it)
    symlinks: set[str] = set()
    for target, data in trees.items():
        top = tarfile.TarInfo(tops[target])
        top.type, top.mode, top.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
        out.addfile(top)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as source:
            for member in source:
                path = _checked_member(target, member)
                if member.issym() and target == BASE:
                    symlinks.add(path)
                member.name = f"{tops[target]}/{path}"
                if not member.isfile():
                    out.addfile(member)
                    continue
                content = source.extractfile(member).read()  # type: ignore[union-attr]
                versions = seen.setdefault(path, [])
                held = next((n for m, c, n in versions if m == member.mode and c == content), None)
                if held is not None:
                    member.type, member.linkname, member.size = tarfile.LNKTYPE, held, 0
                    out.addfile(member)
                else:
                    versions.append((member.mode, content, member.name))
                    out.addfile(member, io.BytesIO(content))
    return symlinks


def _checked_member(target: str, member: tarfile.TarInfo) -> str:
    """The member's path, once it is safe; its owner made root and its per-member pax header dropped."""
    if _unsafe(member.name.rstrip("/")):
        raise SandboxError(f"archive of {target!r} has an unsafe member {member.name!r}")
    if not (member.isfile() or member.isdir() or member.issym()):
        raise SandboxError(f"archive of {target!r} has an unsupported member {member.name!r}")
    member.uid = member.gid = 0
    member.uname = member.gname = "root"
    # git archive's global header (the commit id) would otherwise be repeated per member.
    member.pax_headers = {}
    return member.name.rstrip("/")


def _checked(target: str, change: TreeChanges, symlinks: set[str]) -> tuple[bytes, list[str]]:
    """The changes' archive, its members checked and made root's, and the paths it removes."""
    changed = set(change.paths)
    # A symlink of base's tree that stays: nothing may be removed or unpacked through it.
    kept_links = symlinks - changed
    buf = io.BytesIO()
    present: set[str] = set()
    with (
        tarfile.open(fileobj=io.BytesIO(change.archive), mode="r:") as source,
        tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as files,
    ):
        for member in source:
            path = _checked_member(target, member)
            _refuse_under(target, path, kept_links)
            present.add(path)
            files.addfile(member, source.extractfile(member) if member.isfile() else None)
    for path in change.paths:
        if _unsafe(path):
            raise SandboxError(f"changes of {target!r} name an unsafe path {path!r}")
        _refuse_under(target, path, kept_links)
    return buf.getvalue(), [path for path in change.paths if path not in present]


def _refuse_under(target: str, path: str, links: set[str]) -> None:
    parts = path.split("/")
    for depth in range(1, len(parts) + 1):
        if "/".join(parts[:depth]) in links:
            raise SandboxError(f"changes of {target!r} reach {path!r} through a symlink of base's tree")


def _unsafe(path: str) -> bool:
    return not path or path.startswith("/") or ".." in path.split("/") or "\0" in path


def _nul_lists(*lists: tuple[str, ...] | list[str]) -> list[bytes]:
    return [b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths) for paths in lists]


def _add_file(out: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
    out.addfile(info, io.BytesIO(data))
