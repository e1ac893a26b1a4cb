"""Known-worse variants of a clean passing patch, and the reference order they imply.

Given a group and one clean passing trajectory (a gold patch, say), each degradation edits the clean patch's
tree the way agents spoil good fixes (see `KINDS`) while keeping it passing, and becomes a new passing
trajectory of the group. The result is labelled evaluation data for free: the clean patch first, then the
degradations by severity (`SEVERITY`).

How variants become patches: the clean candidate's files are read from git objects in its workspace, edited
as text (`grader.evaluation.edits`), written back as blobs into a private index seeded from the clean
commit (`read-tree`, `hash-object`, `update-index --cacheinfo`, `write-tree`), and the patch is
`git diff base <tree>`. So every patch is git's own unified diff against the base commit, byte for byte what
the files hold (no checkout, so no line-ending conversion, filters or hooks), at the cost of the edited files
only. Each variant is then checked the way real trajectories are: the enlarged group's workspace is built and
every variant must apply plainly, verify, and form a patch class of its own.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from grader.errors import DegradeError
from grader.evaluation import edits
from grader.evaluation.edits import NotApplicable
from grader.groups.formats import load_group_file, write_groups
from grader.groups.models import Group, Trajectory, complete_group
from grader.util.atomic import write_text_atomic
from grader.workspace import patches
from grader.workspace.gitcmd import git, out
from grader.workspace.mirrors import MirrorCache
from grader.workspace.workspace import BASE, Workspace, open_workspace

# Severity tiers of the reference, 1 the mildest. Within a tier variants tie: the order between, say, a
# needless rename and a reformatted file is a matter of taste, and a reference should not score taste.
#   1  noise a reviewer has to read past; behaviour, tests and the repository's contents are unchanged
#   2  junk that ships: output on every call of library code, a stray script in the repository
#   3  weakened guarantees: an error now silently ignored, or a test that no longer checks what it did;
#      these hide future bugs, which is worse than anything cosmetic
SEVERITY: dict[str, int] = {
    "reformat_unrelated": 1,
    "needless_refactor": 1,
    "dead_code": 1,
    "debug_output": 2,
    "leftover_script": 2,
    "swallowed_exception": 3,
    "test_edit": 3,
}
KINDS: tuple[str, ...] = tuple(SEVERITY)
DESCRIPTIONS: dict[str, str] = {
    "reformat_unrelated": "a Python file the fix did not touch, restyled (imports expanded, quotes flipped)",
    "needless_refactor": "a local variable of the changed function renamed",
    "dead_code": "commented-out code left above the change (the replaced lines, or a copy of the new ones)",
    "debug_output": "a print of a local variable at the start of the changed function",
    "leftover_script": "a reproduction script left at the repository root",
    "swallowed_exception": "the changed statements wrapped in try/except Exception: pass",
    "test_edit": "an existing assertion loosened (== also accepts None) or commented out",
}
SCRIPT_NAMES = ("reproduce.py", "reproduce_issue.py", "repro.py")


@dataclass(frozen=True)
class Variant:
    kind: str
    trajectory_id: str
    patch: str
    note: str

    @property
    def severity(self) -> int:
        return SEVERITY[self.kind]


@dataclass
class Degradation:
    """The enlarged group, its reference ranking, the variants made and the kinds skipped (with why)."""

    group: Group
    clean_id: str
    reference: list[list[str]]
    variants: list[Variant] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


class _CleanTree:
    """The clean candidate's tree in a workspace: its files, what its patch changed, patches from edits."""

    def __init__(self, workspace: Workspace, clean_id: str) -> None:
        self.workspace = workspace
        self.clean_id = clean_id
        self.commit = workspace.commit_of(clean_id)
        parsed = patches.parse(workspace.diff(clean_id))
        self.touched = {patches.file_path(f) for f in parsed}
        self.added: dict[str, list[int]] = {}
        self.hunks: dict[str, list[tuple[range, list[str]]]] = {}  # target line span -> lines removed there
        for patched_file in parsed:
            path = patches.file_path(patched_file)
            self.added[path] = [ln.target_line_no for hunk in patched_file for ln in hunk if ln.is_added]
            self.hunks[path] = [
                (
                    range(hunk.target_start, hunk.target_start + max(1, hunk.target_length)),
                    [ln.value.rstrip("\r\n") for ln in hunk if ln.is_removed],
                )
                for hunk in patched_file
            ]
        self.files = workspace.list_files(clean_id)

    def text(self, path: str) -> str | None:
        try:
            return self.workspace.read_file(self.clean_id, path).decode("utf-8")
        except (FileNotFoundError, UnicodeDecodeError):
            return None

    def focus(self) -> Iterator[tuple[str, str, list[int]]]:
        """(path, text, added lines) of each Python file the clean patch adds lines to, tests last."""
        paths = [p for p in self.added if p.endswith(".py") and self.added[p] and p in self.files]
        for path in sorted(paths, key=patches.is_test_path):
            text = self.text(path)
            if text is not None:
                yield path, text, self.added[path]

    def removed_near(self, path: str, line: int) -> list[str]:
        return next((removed for span, removed in self.hunks.get(path, []) if line in span), [])

    def mode(self, path: str) -> str:
        listing = out(["ls-tree", self.commit, "--", path], git_dir=self.workspace.git_dir)
        return listing.split()[0] if listing else "100644"

    def patch_with(self, changed: dict[str, str]) -> str:
        """The unified diff from base to the clean tree with `changed` files (path -> new text) replaced."""
        git_dir = self.workspace.git_dir
        with tempfile.TemporaryDirectory(prefix="gagar-degrade-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            git(["read-tree", self.commit], git_dir=git_dir, env=env)
            for path, text in sorted(changed.items()):
                blob = out(["hash-object", "-w", "--stdin"], git_dir=git_dir, input=text.encode("utf-8"))
                entry = f"{self.mode(path)},{blob},{path}"
                git(["update-index", "--add", "--cacheinfo", entry], git_dir=git_dir, env=env)
            tree = out(["write-tree"], git_dir=git_dir, env=env)
        args = ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames"]
        proc = git([*args, self.workspace.commit_of(BASE), tree], git_dir=git_dir)
        return proc.stdout.decode("utf-8", "surrogateescape")


Maker = Callable[[_CleanTree], tuple[dict[str, str], str]]


def _each_focus(tree: _CleanTree, edit: Callable[[str, str, list[int]], edits.Edit]) -> tuple[dict, str]:
    """The first changed source file the edit applies to: ({path: new text}, note)."""
    reasons = []
    for path, text, added in tree.focus():
        try:
            result = edit(path, text, added)
        except NotApplicable as exc:
            reasons.append(f"{path}: {exc}")
            continue
        return {path: result.source}, f"{path}: {result.note}"
    raise NotApplicable("; ".join(reasons) or "the clean patch changes no existing Python file")


def _debug_output(tree: _CleanTree) -> tuple[dict[str, str], str]:
    return _each_focus(tree, lambda path, text, added: edits.insert_debug_print(text, added))


def _swallowed_exception(tree: _CleanTree) -> tuple[dict[str, str], str]:
    return _each_focus(tree, lambda path, text, added: edits.swallow_exceptions(text, added))


def _needless_refactor(tree: _CleanTree) -> tuple[dict[str, str], str]:
    return _each_focus(tree, lambda path, text, added: edits.rename_local(text, added))


def _dead_code(tree: _CleanTree) -> tuple[dict[str, str], str]:
    return _each_focus(
        tree,
        lambda path, text, added: edits.comment_out_code(text, added, tree.removed_near(path, added[0])),
    )


def module_name(path: str) -> str:
    """The dotted module a file is imported as, assuming `src/` or `lib/` layouts are installed."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if len(parts) > 1 and parts[0] in ("src", "lib"):
        parts = parts[1:]
    if len(parts) > 1 and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _leftover_script(tree: _CleanTree) -> tuple[dict[str, str], str]:
    focus = next((f for f in tree.focus() if not patches.is_test_path(f[0])), None)
    if focus is None:
        raise NotApplicable("the clean patch changes no existing Python source file to reproduce")
    path, text, added = focus
    name = edits.top_level_name(text, added[0])
    script = next((n for n in SCRIPT_NAMES if n not in tree.files), None)
    if script is None:
        raise NotApplicable(f"the repository already has {', '.join(SCRIPT_NAMES)}")
    module = module_name(path)
    source = edits.reproduction_script(module, name)
    return {script: source}, f"leaves {script}, which imports {name or module}"


def _test_edit(tree: _CleanTree) -> tuple[dict[str, str], str]:
    prefer = []
    for path, text, added in tree.focus():
        name = edits.top_level_name(text, added[0])
        prefer += [n for n in (name, module_name(path).rsplit(".", 1)[-1]) if n]
    tests = [
        p for p in tree.files if p.endswith(".py") and patches.is_test_path(p) and _in_base(tree.workspace, p)
    ]
    texts = {p: t for p in tests if (t := tree.text(p)) is not None}
    ordered = sorted(texts, key=lambda p: (not any(n in texts[p] for n in prefer), p))
    reasons = []
    for path in ordered:
        try:
            result = edits.weaken_assertion(texts[path], prefer, tree.added.get(path, []))
        except NotApplicable as exc:
            reasons.append(f"{path}: {exc}")
            continue
        return {path: result.source}, f"{path}: {result.note}"
    raise NotApplicable("; ".join(reasons[:3]) or "no existing test file")


def _reformat_unrelated(tree: _CleanTree) -> tuple[dict[str, str], str]:
    near = next((PurePosixPath(p).parent for p, _, _ in tree.focus()), PurePosixPath("."))
    others = [
        p
        for p in tree.files
        if p.endswith(".py")
        and p not in tree.touched
        and not patches.is_test_path(p)
        and _in_base(tree.workspace, p)
    ]

    def closeness(path: str) -> tuple[int, str]:
        # Files next to the fix first: that is where an agent's formatter run lands.
        shared = len(os.path.commonprefix([PurePosixPath(path).parent.parts, near.parts]))
        return (-shared, path)

    reasons = []
    for path in sorted(others, key=closeness):
        text = tree.text(path)
        if text is None:
            continue
        try:
            result = edits.reformat(text)
        except NotApplicable as exc:
            reasons.append(f"{path}: {exc}")
            continue
        return {path: result.source}, f"{path}: {result.note}"
    raise NotApplicable("; ".join(reasons[:3]) or "no Python file outside the patch to reformat")


def _in_base(workspace: Workspace, path: str) -> bool:
    return workspace.exists(BASE, path)


MAKERS: dict[str, Maker] = {
    "reformat_unrelated": _reformat_unrelated,
    "needless_refactor": _needless_refactor,
    "dead_code": _dead_code,
    "debug_output": _debug_output,
    "leftover_script": _leftover_script,
    "swallowed_exception": _swallowed_exception,
    "test_edit": _test_edit,
}


def degrade_group(
    group: Group, clean_id: str, kinds: Sequence[str] = KINDS, mirrors: MirrorCache | None = None
) -> Degradation:
    """Make one passing variant per kind from the clean trajectory, verified to apply; see the module doc.

    Kinds that do not apply to this code (no test file to edit, say) are skipped with the reason. The
    group's advantages are dropped so they are recomputed GRPO-style over the enlarged group.

    Raises:
        DegradeError: a kind is unknown, `clean_id` is not in the group, or it is not a passing, non-empty
            patch, or it does not apply at the base.
    """
    unknown = [k for k in kinds if k not in MAKERS]
    if unknown:
        raise DegradeError(f"unknown kinds {', '.join(unknown)}; known: {', '.join(KINDS)}")
    try:
        clean = group.trajectory(clean_id)
    except KeyError as exc:
        raise DegradeError(str(exc.args[0])) from None
    if not clean.passed or not clean.patch.strip():
        raise DegradeError(f"group {group.group_id!r}: {clean_id!r} must be a passing, non-empty patch")
    variants: list[Variant] = []
    skipped: dict[str, str] = {}
    taken = {t.id for t in group.trajectories}
    with open_workspace(group, mirrors=mirrors) as workspace:
        candidate = workspace.candidates[clean_id]
        if candidate.commit is None:
            raise DegradeError(f"group {group.group_id!r}: {clean_id!r} does not apply: {candidate.error}")
        equivalent = next(members for members in workspace.classes if clean_id in members)
        tree = _CleanTree(workspace, clean_id)
        for kind in dict.fromkeys(kinds):
            try:
                changed, note = MAKERS[kind](tree)
            except NotApplicable as exc:
                skipped[kind] = str(exc)
                continue
            variant_id = _fresh_id(f"{clean_id}+{kind}", taken)
            variants.append(Variant(kind, variant_id, tree.patch_with(changed), note))
    enlarged = _with_variants(group, clean, variants)
    _verify(enlarged, clean_id, variants, mirrors)
    tiers = sorted({v.severity for v in variants})
    reference = [list(equivalent)] + [
        [v.trajectory_id for v in variants if v.severity == tier] for tier in tiers
    ]
    return Degradation(enlarged, clean_id, reference, variants, skipped)


def _fresh_id(wanted: str, taken: set[str]) -> str:
    name, n = wanted, 2
    while name in taken:
        name, n = f"{wanted}-{n}", n + 1
    taken.add(name)
    return name


def _with_variants(group: Group, clean: Trajectory, variants: list[Variant]) -> Group:
    originals = [t.model_copy(update={"advantage": None}) for t in group.trajectories]
    added = [
        Trajectory(
            id=v.trajectory_id,
            patch=v.patch,
            passed=True,
            reward=clean.reward,
            response_length=clean.response_length,
            metadata={
                "degradation": v.kind,
                "severity": v.severity,
                "derived_from": clean.id,
                "note": v.note,
            },
        )
        for v in variants
    ]
    return complete_group(group.model_copy(update={"trajectories": [*originals, *added]}))


def _verify(group: Group, clean_id: str, variants: list[Variant], mirrors: MirrorCache | None) -> None:
    """Every variant applies as is, verifies, and is not the clean patch up to whitespace."""
    with open_workspace(group, mirrors=mirrors) as workspace:
        clean_class = workspace.candidates[clean_id].patch_class
        for v in variants:
            c = workspace.candidates[v.trajectory_id]
            if c.commit is None or c.apply_method != "plain":
                raise DegradeError(f"variant {v.trajectory_id!r} does not apply plainly: {c.error}")
            if c.patch_class == clean_class:
                raise DegradeError(f"variant {v.trajectory_id!r} equals the clean patch up to whitespace")


def degrade_file(
    path: Path | str, clean_id: str, kinds: Sequence[str] = KINDS, mirrors: MirrorCache | None = None
) -> list[Degradation]:
    """Degrade every group of a file that has the clean trajectory; raises DegradeError if none has it."""
    groups = [g for g in load_group_file(path) if any(t.id == clean_id for t in g.trajectories)]
    if not groups:
        raise DegradeError(f"no group in {path} has a trajectory {clean_id!r}")
    return [degrade_group(g, clean_id, kinds, mirrors=mirrors) for g in groups]


def write_degradations(degradations: Sequence[Degradation], out_dir: Path | str) -> tuple[Path, Path]:
    """`out_dir/groups.jsonl` and `out_dir/reference.json`; local repository paths are made relative to
    `out_dir`, so the folder can move along with the repository (as `examples/degraded/` does)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    groups = []
    for d in degradations:
        repo = d.group.task.repo
        if _shares_a_folder(repo, out):
            relative = Path(os.path.relpath(repo, out.resolve())).as_posix()
            d_task = d.group.task.model_copy(update={"repo": relative})
            groups.append(d.group.model_copy(update={"task": d_task}))
        else:
            groups.append(d.group)
    # Advantages are left out: whoever loads the file recomputes them over the enlarged group.
    bare = [
        g.model_copy(
            update={"trajectories": [t.model_copy(update={"advantage": None}) for t in g.trajectories]}
        )
        for g in groups
    ]
    groups_path = out / "groups.jsonl"
    write_groups(bare, groups_path)
    reference_path = out / "reference.json"
    reference = {d.group.group_id: d.reference for d in degradations}
    write_text_atomic(reference_path, json.dumps(reference, indent=2) + "\n")
    return groups_path, reference_path


def _shares_a_folder(repo: str, out: Path) -> bool:
    """A local repository under the same top folder as `out`: a relative path then survives moving both."""
    if "://" in repo or not Path(repo).is_absolute() or not Path(repo).exists():
        return False
    common = os.path.commonpath([Path(repo).resolve(), out.resolve()])
    return len(Path(common).parts) > 2  # more than `/` or `/tmp`: a project folder
