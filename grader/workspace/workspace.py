"""The shared git workspace of one group: the base commit and one branch per trajectory.

Built with plumbing only: every patch is applied to a private index file and committed with a fixed identity
and date, without a working tree, so the cost grows with the patch and not with the repository. The workspace
borrows objects from a cached mirror (alternates) and has no remotes or tags; its only refs are `base`, one
branch per passing trajectory (`refs/heads/candidates/...`) and one ref per failing trajectory
(`refs/failing/...`). It knows nothing of graders or sandboxes: it answers questions about trees and diffs.

Over 600 lines as one idea: building the branches and answering questions about them share one object
store and the base's index (each patch's own index starts as a copy of it); patch parsing, in-process
applying, mirrors and the read-only view are apart (grader.workspace.patches, .exactapply, .mirrors, .view).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path

from git import Repo
from git.objects import Blob, Tree
from unidiff import PatchSet

from grader.errors import BaseCommitMissing, WorkspaceError
from grader.groups.models import Group, PatchStats, Task, Trajectory
from grader.util.concurrency import Concurrency, default_resources
from grader.util.safenames import safe_name
from grader.workspace import archives, bare, exactapply, gitobjects, hunks, patches
from grader.workspace.gitcmd import COMMIT_EPOCH, COMMIT_IDENTITY, GitError, git, out
from grader.workspace.mirrors import MirrorCache, shared_cache
from grader.workspace.view import BASE, CandidateInfo, WorkspaceView

BASE_REF = "refs/heads/base"
CANDIDATE_NAMESPACE = "refs/heads/candidates/"
FAILING_NAMESPACE = "refs/failing/"
DEFAULT_MAX_FUZZ = 2


@dataclass
class Candidate:
    """One trajectory's place in the workspace."""

    trajectory_id: str
    passed: bool
    ref: str
    commit: str | None = None
    apply_method: str | None = None
    error: str | None = None
    stats: PatchStats | None = None
    patch_class: int | None = None
    equivalence_key: str | None = field(default=None, repr=False)
    parsed: PatchSet | None = field(default=None, repr=False)  # the patch as validated, reused by _verify
    applied_text: str = field(default="", repr=False)  # the text git applied (recounted, LF) when tolerant
    tolerated: list[str] = field(default_factory=list)
    """What a tolerant apply method had to tolerate, one sentence each (empty for a plain apply)."""

    @property
    def applied(self) -> bool:
        return self.commit is not None


def ref_name(trajectory_id: str) -> str:
    """A valid, bounded, collision-free ref component (and file name) for any id: `safenames.safe_name`."""
    return safe_name(trajectory_id)


def _apply_attempts(patch: str, max_fuzz: int) -> Iterator[tuple[str, list[str], str]]:
    """The apply chain, most faithful first: (method, git apply flags, patch text).

    Tolerant steps use gagar's own recount (checked against unidiff) rather than `git apply --recount`, and
    try line endings converted to LF when the patch has CRLF ones (a diff saved on Windows).
    """
    yield "plain", [], patch
    yield "3way", ["--3way"], patch
    recounted = patches.recount(patch)
    lf = recounted.replace("\r\n", "\n")
    if lf != recounted:
        yield "whitespace", [], lf
    tolerant = ["--ignore-whitespace"]  # not --inaccurate-eof: it joins lines at every hunk end
    yield "whitespace", tolerant, recounted
    if lf != recounted:
        yield "whitespace", tolerant, lf
    for fuzz in range(1, max_fuzz + 1):
        yield f"fuzz{fuzz}", [*tolerant, f"-C{3 - fuzz}"], lf


_NEEDS_GIT = "needs git"
"""What `Workspace._apply_in_process` returns for a patch that `exactapply` declines (never a tree id)."""


class _BaseIndex:
    """The base's index file, written when the first patch needs git (patches applied in process do not)."""

    def __init__(self, git_dir: Path, tree: str, index: Path) -> None:
        self.git_dir, self.tree, self._index = git_dir, tree, index
        self._lock = threading.Lock()
        self.written = False

    def path(self) -> Path:
        with self._lock:
            if not self.written:
                self._index.parent.mkdir(exist_ok=True)
                bare.base_memo.write_index(self.git_dir, self.tree, self._index)
                self.written = True
        return self._index


class Workspace:
    """A group's repository of branches. Use `open_workspace`, which removes it afterwards.

    It implements `GradingView` (the reading methods below); graders get `view()`, which exposes only those.
    """

    def __init__(self, group: Group, path: Path, mirror: Path, resources: Concurrency | None = None) -> None:
        self.group = group
        self.resources = resources or default_resources()
        self.path = path
        self.git_dir = path / "repo.git"
        self.mirror = mirror
        self.candidates: dict[str, Candidate] = {}
        self.classes: list[list[str]] = []
        self.base_commit = ""
        self._repo: Repo | None = None
        self._worktrees: dict[str, Path] = {}
        self._new_objects = gitobjects.ObjectBuffer()  # written as one pack before git reads the branches

    # -- building --------------------------------------------------------------------------------------

    def build(self, max_patch_bytes: int, max_fuzz: int, workers: int) -> None:
        """Lay out the bare repository and give every trajectory its branch (or its recorded error).

        Raises:
            WorkspaceError: the base commit cannot be read from the mirror (names the group and the commit).
        """
        self.path.mkdir(parents=True, exist_ok=True)
        # No git process: the layout of `git init --bare --template=` with the mirror's objects borrowed.
        bare.init_bare(self.git_dir, self.mirror / "objects", head=BASE_REF)
        try:
            self.base_commit, base_tree = bare.base_memo.resolve(
                self.git_dir, self.mirror, self.group.task.base_commit
            )
        except (GitError, ValueError) as exc:
            raise WorkspaceError(
                f"group {self.group.group_id!r}: base commit {self.group.task.base_commit!r} not found"
            ) from exc
        base = _BaseIndex(self.git_dir, base_tree, self.path / "tmp" / "base.index")

        for t in self.group.trajectories:
            namespace = CANDIDATE_NAMESPACE if t.passed else FAILING_NAMESPACE
            self.candidates[t.id] = Candidate(t.id, bool(t.passed), namespace + ref_name(t.id))

        # Rollouts that converged submit the same patch: it is applied once and its outcome shared.
        first: dict[str, int] = {}
        trajectories = self.group.trajectories
        unique = [(n, t) for n, t in enumerate(trajectories) if first.setdefault(t.patch, n) == n]

        # Applying in process is pure Python: threads would only take turns holding the GIL. Only the patches
        # it declines go to git, whose processes the shared pool overlaps.
        changes = self._read_exact(unique, base.tree)
        applied = {
            n: self._apply_in_process(t, changes.get(n), base.tree, max_patch_bytes) for n, t in unique
        }
        for_git = [(n, t) for n, t in unique if applied[n] == _NEEDS_GIT]

        def apply(item: tuple[int, Trajectory]) -> str | None:
            return self._apply_with_git(*item, base, max_fuzz)

        if workers <= 1 or len(for_git) <= 1:
            trees = [apply(item) for item in for_git]
        else:
            trees = bare.map_on_pool(apply, for_git, workers)  # threads started once per process
        applied |= dict(zip([n for n, _ in for_git], trees, strict=True))
        for n, t in enumerate(trajectories):
            if first[t.patch] != n:
                _share_outcome(self.candidates[trajectories[first[t.patch]].id], self.candidates[t.id])
        self._commit([applied[first[t.patch]] for t in trajectories], base_tree)
        self._verify(max_fuzz)
        self._classify()
        if base.written:
            bare.remover.remove(self.path / "tmp")  # index files: deleted off the grading's path

    def _read_exact(
        self, unique: list[tuple[int, Trajectory]], base_tree: str
    ) -> dict[int, list[exactapply.FileChange]]:
        """The patches `exactapply` can take, read; the base files they touch are fetched in one process."""
        if len(self.base_commit) != 40:  # SHA-256: git applies everything
            return {}
        changes: dict[int, list[exactapply.FileChange]] = {}
        for n, t in unique:
            with contextlib.suppress(exactapply.Declined):
                changes[n] = exactapply.read_patch(patches.ensure_final_newline(t.patch))
        wanted = sorted({p for c in changes.values() for p in exactapply.paths_read(c)})
        if wanted:
            with contextlib.suppress(GitError, ValueError):  # each apply reads again, or declines to git
                gitobjects.base_files.read(self.git_dir, base_tree, wanted)
        return changes

    def _apply_in_process(
        self,
        trajectory: Trajectory,
        changes: list[exactapply.FileChange] | None,
        base_tree: str,
        max_patch_bytes: int,
    ) -> str | None:
        """Validate the patch and apply it without git when it is exact (`exactapply`); returns the tree, ""
        for an empty patch, None for an invalid one (its error recorded), or `_NEEDS_GIT`."""
        candidate = self.candidates[trajectory.id]
        try:
            parsed = patches.validate(trajectory.patch, max_bytes=max_patch_bytes)
        except patches.PatchError as exc:
            candidate.error = f"invalid patch: {exc}"
            return None
        candidate.parsed = parsed
        candidate.stats = patches.stats(parsed)
        patch = patches.ensure_final_newline(trajectory.patch)
        if not patch.strip():
            candidate.apply_method = "empty"
            return ""
        if changes is None:  # outside what exactapply takes, or a SHA-256 repository
            return _NEEDS_GIT
        try:
            tree = exactapply.apply_patch(
                changes, self.git_dir, base_tree, gitobjects.base_files, self._new_objects.add
            )
        except (exactapply.Declined, GitError, ValueError):
            return _NEEDS_GIT  # git applies it, from its plain apply on
        candidate.apply_method = "plain"
        return tree

    def _apply_with_git(self, n: int, trajectory: Trajectory, base: _BaseIndex, max_fuzz: int) -> str | None:
        """Apply the patch with git's chain of methods, most faithful first; returns the tree, or None with
        the candidate's error recorded."""
        candidate = self.candidates[trajectory.id]
        patch = patches.ensure_final_newline(trajectory.patch)
        base_index = base.path()
        index = base_index.with_name(f"{n}.index")
        reasons: list[str] = []
        for method, flags, text in _apply_attempts(patch, max_fuzz):
            shutil.copyfile(base_index, index)
            env = {"GIT_INDEX_FILE": str(index)}
            proc = git(
                ["apply", "--cached", *flags, "-"],
                git_dir=self.git_dir,
                input=text.encode("utf-8", "surrogateescape"),
                env=env,
                check=False,
            )
            if proc.returncode == 0:
                candidate.apply_method = method
                if method != "plain":
                    candidate.applied_text = text
                    candidate.tolerated = _method_notes(method, patch, text)
                return out(["write-tree"], git_dir=self.git_dir, env=env)
            reasons.append(proc.stderr.decode("utf-8", "replace").strip().rpartition("\n")[2])
        first = next((r for r in reasons if r), "git apply failed")
        candidate.error = f"patch does not apply (tried {len(reasons)} methods): {first}"
        return None

    def _commit(self, trees: list[str | None], base_tree: str) -> None:
        """Write every commit object, then every ref, without a git process."""
        built = zip(self.candidates.values(), trees, strict=True)
        pending = [(c, tree) for c, tree in built if tree is not None]
        to_write = [(c, tree) for c, tree in pending if tree and tree != base_tree]
        for c, tree in pending:
            if not tree or tree == base_tree:
                c.commit = self.base_commit  # an empty patch changes nothing: its branch is the base
        for c, tree in to_write:
            body = (
                f"tree {tree}\nparent {self.base_commit}\nauthor {COMMIT_IDENTITY} {COMMIT_EPOCH}\n"
                f"committer {COMMIT_IDENTITY} {COMMIT_EPOCH}\n\ntrajectory {c.trajectory_id}\n"
            )
            c.commit = self._write_object("commit", body.encode())
        self._new_objects.flush(self.git_dir / "objects")
        refs = {BASE_REF: self.base_commit} | {c.ref: c.commit for c in self.candidates.values() if c.commit}
        bare.write_packed_refs(self.git_dir, refs)  # a new repository: one file, no `update-ref` process

    def _write_object(self, kind: str, body: bytes) -> str:
        """Store a loose object the way git does (zlib of "kind size\\0body", named by its SHA-1)."""
        if len(self.base_commit) != 40:  # a SHA-256 repository: let git hash it
            return out(["hash-object", "-t", kind, "-w", "--stdin"], git_dir=self.git_dir, input=body)
        return self._new_objects.add(kind, body)

    def _verify(self, max_fuzz: int = DEFAULT_MAX_FUZZ) -> None:
        """Check each branch: a plain apply for lines the patch never wrote, a tolerant one file by file."""
        changed = [c for c in self.candidates.values() if c.commit and c.commit != self.base_commit]
        if not changed:
            return
        # A move is a rename in one patch and a deletion plus an addition in another (`git diff --no-renames`,
        # `diff -ruN`): compare each patch with the branch diff in its own form, and key every class on the
        # rename-free form, so that the same tree is the same class however the patch spelled it.
        renaming = [c for c in changed if any(f.is_rename for f in c.parsed or ())]
        plain = self._branch_diffs([c.commit or "" for c in changed], ["--no-renames"])
        moved = self._branch_diffs([c.commit or "" for c in renaming], ["-M"]) if renaming else {}
        for c in changed:
            plain_diff = patches.parse(plain.get(c.commit or "", ""), exact_counts=True)  # git's diff-tree
            own_form = (
                patches.parse(moved[c.commit or ""], exact_counts=True) if c.commit in moved else plain_diff
            )
            if c.apply_method == "plain":
                # Every hunk's old lines matched exactly (git's plain apply, or exactapply at git's first
                # try): the tree follows from the patch, and only a foreign line can be wrong.
                problem = patches.foreign_lines(c.parsed or PatchSet(""), own_form)
            else:
                problem = self._check_post_images(c, plain_diff, max_fuzz)
            if problem is not None:
                c.error = (
                    f"branch diff differs from the patch as applied (plain): {problem}"
                    if c.apply_method == "plain"
                    else f"{c.apply_method} apply not confirmed by an independent hunk applier: {problem}"
                )
                c.commit = None
                continue
            c.equivalence_key = patches.equivalence_key(plain_diff) + self._binary_ids(c, plain_diff)

    def _check_post_images(self, c: Candidate, branch_diff: PatchSet, max_fuzz: int) -> str | None:
        """Compare every file a tolerant apply produced with the independent hunk applier's (`hunks`).

        Records on `c.tolerated` what the applier had to tolerate. Returns the first difference in words, or
        None when every touched file is what the applier makes of the base, and nothing else changed.
        """
        try:
            parsed = patches.parse(c.applied_text)
        except patches.PatchError as exc:
            return f"the applied patch does not parse: {exc}"
        specs: list[str] = []
        for f in parsed:
            if not f.is_added_file:
                specs.append(f"{self.base_commit}:{_source_path(f)}")
            if not f.is_removed_file:
                specs.append(f"{c.commit}:{patches.file_path(f)}")
        blobs = self._blobs(specs)
        touched = set()
        for f in parsed:
            path, source = patches.file_path(f), _source_path(f)
            touched.update({path, source})
            ours = None if f.is_removed_file else blobs.get(f"{c.commit}:{path}")
            if f.is_binary_file:
                c.tolerated.append(f"{path}: binary, git's result taken as is")
                continue
            base = None if f.is_added_file else blobs.get(f"{self.base_commit}:{source}")
            try:
                expected, tolerated = hunks.apply_file(base, f, max_fuzz)
            except patches.PatchError as exc:
                return f"the independent hunk applier cannot apply it: {exc}"
            c.tolerated += [f"{path}: {note}" for note in tolerated]
            if expected != ours:
                return _first_line_difference(path, expected, ours)
        changed = {patches.file_path(f) for f in branch_diff}
        if not changed <= touched:
            return f"the branch changes files the patch does not touch: {sorted(changed - touched)}"
        return None

    def _blobs(self, specs: list[str]) -> dict[str, str | None]:
        """The text of each `commit:path` (None where the path does not exist), from one git process."""
        if not specs:
            return {}
        proc = git(
            ["cat-file", "--batch"], git_dir=self.git_dir, input="".join(f"{s}\n" for s in specs).encode()
        )
        data, result, at = proc.stdout, {}, 0
        for spec in specs:
            header_end = data.index(b"\n", at)
            header = data[at:header_end].split()
            if header[-1] == b"missing" or len(header) < 3:
                result[spec], at = None, header_end + 1
                continue
            size = int(header[2])
            body = data[header_end + 1 : header_end + 1 + size]
            result[spec], at = body.decode("utf-8", "surrogateescape"), header_end + 1 + size + 1
        return result

    def _branch_diffs(self, commits: list[str], flags: list[str]) -> dict[str, str]:
        """Each commit's diff against its parent, from one `git diff-tree` process."""
        proc = git(
            ["diff-tree", "--stdin", "-p", *flags, "--full-index", "--no-color"],
            git_dir=self.git_dir,
            input="".join(f"{commit}\n" for commit in dict.fromkeys(commits)).encode(),
        )
        return _split_diff_tree(proc.stdout.decode("utf-8", "surrogateescape"), commits)

    def _binary_ids(self, c: Candidate, branch_diff) -> str:
        """A digest of the branch's binary blobs: their diffs carry no content to compare."""
        binaries = [patches.file_path(f) for f in branch_diff if f.is_binary_file]
        if not binaries:
            return ""
        listing = out(["ls-tree", "-r", c.commit or "", "--", *binaries], git_dir=self.git_dir)
        return hashlib.sha256(listing.encode()).hexdigest()

    def _classify(self) -> None:
        keys: dict[str, int] = {}
        for c in self.candidates.values():
            if not (c.passed and c.commit):
                continue
            key = c.equivalence_key or ("empty" if c.commit == self.base_commit else c.commit)
            if key not in keys:
                keys[key] = len(self.classes)
                self.classes.append([])
            c.patch_class = keys[key]
            self.classes[keys[key]].append(c.trajectory_id)

    # -- reading ---------------------------------------------------------------------------------------

    @property
    def repo(self) -> Repo:
        if self._repo is None:
            self._repo = Repo(self.git_dir)
        return self._repo

    def view(self) -> WorkspaceView:
        """The read-only `GradingView` graders receive."""
        return WorkspaceView(self)

    @property
    def group_id(self) -> str:
        return self.group.group_id

    @property
    def task(self) -> Task:
        return self.group.task.model_copy(deep=True)

    def candidate(self, trajectory_id: str) -> CandidateInfo:
        """What the view tells of one trajectory. Raises KeyError naming the group and the id."""
        c = self.candidates.get(trajectory_id)
        if c is None:
            raise KeyError(f"group {self.group.group_id!r} has no trajectory {trajectory_id!r}")
        return CandidateInfo(
            trajectory_id=c.trajectory_id,
            passed=c.passed,
            applied=c.commit is not None,
            apply_method=c.apply_method,
            error=c.error,
            patch_class=c.patch_class,
            stats=c.stats.model_copy() if c.stats is not None else None,
        )

    def candidate_infos(self) -> list[CandidateInfo]:
        return [self.candidate(tid) for tid in self.candidates]

    def patch(self, trajectory_id: str) -> str:
        return self.group.trajectory(trajectory_id).patch

    def gradable(self) -> list[str]:
        """Passing trajectories whose patch applied and verified: the ones a grader ranks."""
        return [c.trajectory_id for c in self.candidates.values() if c.passed and c.commit]

    def targets(self) -> list[str]:
        """`base` and every gradable trajectory: what a sandbox can run on."""
        return [BASE, *self.gradable()]

    def commit_of(self, target: str) -> str:
        """The commit of "base" or a trajectory's branch. Raises KeyError for an unknown id or a trajectory
        without a branch (with its error)."""
        if target == BASE:
            return self.base_commit
        candidate = self.candidates.get(target)
        if candidate is None:
            raise KeyError(f"group {self.group.group_id!r} has no trajectory {target!r}")
        if candidate.commit is None:
            raise KeyError(
                f"group {self.group.group_id!r}: trajectory {target!r} has no branch ({candidate.error})"
            )
        return candidate.commit

    def diff(self, target: str, against: str = BASE, paths: list[str] | None = None, context: int = 3) -> str:
        """The unified diff from `against` to `target`, optionally limited to paths."""
        args = [
            "diff",
            f"-U{context}",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            self.commit_of(against),
            self.commit_of(target),
        ]
        if paths:
            args += ["--", *paths]
        return git(args, git_dir=self.git_dir).stdout.decode("utf-8", "replace")

    def read_file(self, target: str, path: str) -> bytes:
        """A file's bytes at a target, read from git objects. Raises FileNotFoundError if it is not a file."""
        try:
            item = self.repo.commit(self.commit_of(target)).tree / path
        except KeyError:
            raise FileNotFoundError(f"{path!r} does not exist on {target!r}") from None
        if not isinstance(item, Blob):
            raise FileNotFoundError(f"{path!r} is not a file on {target!r}")
        return item.data_stream.read()

    def exists(self, target: str, path: str) -> bool:
        try:
            self.repo.commit(self.commit_of(target)).tree / path
        except KeyError:
            return False
        return True

    def list_files(self, target: str, under: str = "") -> list[str]:
        tree: Tree = self.repo.commit(self.commit_of(target)).tree
        if under:
            tree = tree / under.strip("/")
        return [item.path for item in tree.traverse() if isinstance(item, Blob)]

    def grep(self, target: str, pattern: str, path: str | None = None, max_count: int = 200) -> list[str]:
        """`path:line:text` for each line matching an extended regular expression on a target (git grep).

        Raises ValueError when git rejects the pattern.
        """
        commit = self.commit_of(target)
        args = ["grep", "-n", "-I", "-E", f"--max-count={max_count}", "-e", pattern, commit]
        if path:
            args += ["--", path]
        proc = git(args, git_dir=self.git_dir, check=False)
        if proc.returncode not in (0, 1):
            raise ValueError(proc.stderr.decode("utf-8", "replace").strip() or "git grep failed")
        prefix = f"{commit}:"
        lines = proc.stdout.decode("utf-8", "replace").splitlines()
        return [line.removeprefix(prefix) for line in lines]

    def archive(self, target: str) -> bytes:
        """The target's pristine tree as an uncompressed tar (what a sandbox copies in)."""
        return archives.archive(self.git_dir, self.commit_of(target))

    def changes(self, target: str) -> archives.TreeChanges | None:
        """How a candidate's tree differs from base's (see `archives.changes`); None for base itself, or
        when the candidate changed so much that its whole `archive` is the better way."""
        if target == BASE:
            return None
        return archives.changes(self.git_dir, self.base_commit, self.commit_of(target))

    def worktree(self, target: str) -> Path:
        """A checked-out working tree of one target, made on first request and removed with the workspace."""
        if target not in self._worktrees:
            path = self.path / "worktrees" / ref_name(target)
            git(
                ["worktree", "add", "--detach", "--quiet", str(path), self.commit_of(target)],
                git_dir=self.git_dir,
            )
            self._worktrees[target] = path
        return self._worktrees[target]

    def refs(self) -> list[str]:
        return out(["for-each-ref", "--format=%(refname)"], git_dir=self.git_dir).splitlines()

    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()
            self._repo = None


_IDENTITY_FIELDS = frozenset({"trajectory_id", "passed", "ref"})


def _share_outcome(source: Candidate, target: Candidate) -> None:
    """Give `target` (the same patch as `source`) what applying and validating it found. Its own copies of
    what verification goes on adding to (stats, tolerated); the parsed patch is read only and shared."""
    for f in fields(Candidate):
        if f.name not in _IDENTITY_FIELDS:
            value = getattr(source, f.name)
            if isinstance(value, PatchStats):
                value = value.model_copy(deep=True)
            elif isinstance(value, list):
                value = list(value)
            setattr(target, f.name, value)


def _split_diff_tree(text: str, commits: list[str]) -> dict[str, str]:
    wanted = set(commits)
    result: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in hunks.split_lines(text):  # at LF only: a form feed inside a file's line is no line end
        sha = line.strip()
        if sha in wanted and len(sha) == 40:
            current = result.setdefault(sha, [])
        elif current is not None:
            current.append(line)
    return {sha: "".join(lines) for sha, lines in result.items()}


def _source_path(patched_file) -> str:
    """The path a file had before the patch (its old name for a rename or copy)."""
    source = patched_file.source_file or ""
    return patches.file_path(patched_file) if source in ("", "/dev/null") else patches.strip_prefix(source)


def _first_line_difference(path: str, expected: str | None, actual: str | None) -> str:
    """Where git's file and the independent applier's part, in words."""
    if expected is None or actual is None:
        which = "git deleted it" if actual is None else "the patch deletes it"
        return f"{path}: {which}, the other did not"
    mine, gits = hunks.split_lines(expected), hunks.split_lines(actual)
    for number, (a, b) in enumerate(zip(mine, gits, strict=False), start=1):
        if a != b:
            return f"{path} line {number}: git has {b[:80]!r}, the hunks make {a[:80]!r}"
    return f"{path}: git's file has {len(gits)} lines, the hunks make {len(mine)}"


def _method_notes(method: str, patch: str, text: str) -> list[str]:
    """What an apply method tolerates by itself, before any hunk is placed."""
    notes = {
        "3way": ["applied by a 3-way merge with the blobs the patch names"],
        "whitespace": ["whitespace differences in context and removed lines ignored"],
    }.get(
        method, [f"whitespace ignored and up to {method.removeprefix('fuzz')} context line(s) per hunk end"]
    )
    if text != patch:
        if "\r\n" in patch and "\r\n" not in text:
            notes.append("CRLF line endings of the patch converted to LF")
        if patches.recount(patch).replace("\r\n", "\n") != patch.replace("\r\n", "\n"):
            notes.append("hunk line counts recomputed from the hunks")
    return notes


@contextmanager
def open_workspace(
    group: Group,
    root: Path | str | None = None,
    keep: bool = False,
    mirrors: MirrorCache | None = None,
    max_patch_bytes: int = patches.DEFAULT_MAX_PATCH_BYTES,
    max_fuzz: int = DEFAULT_MAX_FUZZ,
    workers: int = 4,
    resources: Concurrency | None = None,
) -> Iterator[Workspace]:
    """Build the workspace of a completed group (see `models.complete_group`) and remove it on exit.

    `root` is where it lives (by default a new temporary directory under `bare.workspace_parent()`: a tmpfs
    when one with room is available); with `keep` it stays for inspection.
    `resources` bound concurrent builds (`resources.workspace`, held while building) and are what graders
    of this workspace share (the process default when not given).
    Trajectory-level problems (a patch that is invalid or does not apply) are recorded on the trajectory's
    `Candidate.error`; group-level ones raise.

    Raises:
        BaseCommitMissing: the mirror has no such base commit (a WorkspaceError; names group and commit).
        WorkspaceError: the repository cannot be mirrored, `root` is not empty, or the build fails for the
            whole group (names the group and the cause).
    """
    mirrors = mirrors or shared_cache()
    try:
        mirror = mirrors.mirror(group.task.repo, group.task.base_commit)
    except LookupError as exc:
        raise BaseCommitMissing(f"group {group.group_id!r}: {exc}") from exc
    except (FileNotFoundError, GitError) as exc:
        raise WorkspaceError(f"group {group.group_id!r}: {exc}") from exc
    if root is None:
        parent = bare.workspace_parent()
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=f"gagar-{ref_name(group.group_id)}-", dir=parent))
    else:
        path = Path(root)
        if path.exists() and any(path.iterdir()):
            raise WorkspaceError(f"group {group.group_id!r}: workspace directory {str(path)!r} is not empty")
    workspace = Workspace(group, path, mirror, resources)
    try:
        with workspace.resources.workspace:
            workspace.build(max_patch_bytes=max_patch_bytes, max_fuzz=max_fuzz, workers=workers)
        yield workspace
    finally:
        workspace.close()
        if not keep:
            bare.remover.remove(path)  # gone from `path` now; its files are deleted off the grading's path
