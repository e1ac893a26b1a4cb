"""The sandbox interface: run commands on a group's pristine trees (base and candidates), isolated.

A sandbox is opened once per group over a `TreeSource` and closed as a context manager. Every `exec` starts
from the target's pristine tree (after the task's optional `setup`): nothing a command does can change another
target's files or what a later command starts from. Graders know the sandbox only through this module.
"""

from __future__ import annotations

import posixpath
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from grader.errors import SandboxError, SandboxUnavailable
from grader.util.registry import Registry

BASE_TARGET = "base"
DEFAULT_IMAGE = "gagar/python:latest"
"""The image a docker sandbox runs when the task names none (`gagar images build` makes it)."""

Command = str | Sequence[str]
"""A shell command line (run by `sh -c`) or an argv list (run as is)."""


TESTS_SCRIPT = r"""#!/bin/sh
# tests: the task's test command, run from the root of this command's tree; arguments are added to it.
bin=$(cd "$(dirname "$0")" && pwd)
command=$(cat "$bin/test-command" 2>/dev/null)
if [ -z "$command" ]; then
  echo "tests: this task has no test command; run the test runner yourself (e.g. python -m pytest PATH)" >&2
  exit 127
fi
cd "$bin/../t" || exit 125
exec sh -c "$command"' "$@"' tests "$@"
"""
"""The `tests` executable first on every command's PATH (at `<box>/bin/tests`, its command in
`<box>/bin/test-command`, the tree at `<box>/t`): a real file, so `tests 2>&1 | tail` works in a shell
line."""

GIT_SCRIPT = r"""#!/bin/sh
# git: each target's tree is an export of its files, not a checkout, so it has no repository of its own.
real=
for dir in /usr/local/bin /usr/bin /bin; do
  if [ -x "$dir/git" ]; then real=$dir/git; break; fi
done
case "$1" in
  -C|-C*|--git-dir|--git-dir=*|--work-tree|--work-tree=*|--version|--help|-h|--exec-path|--exec-path=*|\
  version|help|init|clone|config|ls-remote|"")
    if [ -n "$real" ]; then exec "$real" "$@"; fi ;;
esac
if [ -n "$real" ] && "$real" rev-parse --git-dir >/dev/null 2>&1; then exec "$real" "$@"; fi
echo "git: there is no git repository here: each target's tree is an export of its files (no .git, no" \
  "history, no branches, no git diff). Compare targets with the diff tool; git init or git clone in" \
  "\$TMPDIR work if git is installed." >&2
exit 128
"""
"""The `git` first on every command's PATH: the real git where a repository is (one a command made, or
`git -C`, `init`, `clone`), else a plain message that the trees are exports, not checkouts."""


def helper_files(test_command: str | None) -> dict[str, tuple[str, int]]:
    """The files of a command's `bin` directory (first on its PATH): name -> (text, mode).

    Args:
        test_command: the task's test command (None or empty: `tests` says there is none).

    Returns:
        `tests` and `git` (executables) and `test-command` (the command `tests` runs).
    """
    return {
        "tests": (TESTS_SCRIPT, 0o755),
        "git": (GIT_SCRIPT, 0o755),
        "test-command": ((test_command or "") + "\n", 0o644),
    }


def absolute_pythonpath(root: str, inherited: str | None) -> str:
    """The PYTHONPATH a command sees: its tree's `root` first, then each inherited entry, a relative one
    resolved against `root` (a command that changes directory, or a subprocess started elsewhere, still
    imports the target's tree, never a copy installed in the image). Empty entries are dropped.

    Args:
        root: the absolute path of the command's tree.
        inherited: the PYTHONPATH the command would get (the caller's, or the image's), or None.

    Returns:
        Entries joined by ":", every one absolute.
    """
    entries = [root]
    for entry in (inherited or "").split(":"):
        if not entry:
            continue
        resolved = posixpath.normpath(posixpath.join(root, entry))
        if resolved not in entries:
            entries.append(resolved)
    return ":".join(entries)


@runtime_checkable
class TreeSource(Protocol):
    """Where pristine trees come from (the workspace implements it with `git archive`).

    A source may also have `changes(target) -> grader.workspace.archives.TreeChanges | None`: how a
    candidate's tree differs from base's (None: take its whole `archive`). The Docker backend then makes
    that tree from base's instead of loading it whole; the workspace has it.
    """

    def targets(self) -> list[str]:
        """Every target name: always includes "base", then the candidate ids."""
        ...

    def archive(self, target: str) -> bytes:
        """An uncompressed tar of the target's pristine tree, as `git archive` produces it."""
        ...


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to every command of a sandbox.

    Defaults suit a test run of a mid-sized Python project on a small machine: 2 GiB of memory, one CPU,
    256 processes, 256 MiB per written file, 1 MiB kept of each of stdout and stderr, 120 s per command, and
    1 GiB of scratch space (Docker: a tmpfs, counted against memory).
    """

    memory_bytes: int = 2 * 1024**3
    cpus: float = 1.0
    pids: int = 256
    file_size_bytes: int = 256 * 1024**2
    output_bytes: int = 1024**2
    timeout: float = 120.0
    scratch_bytes: int = 1024**3
    # Time between the polite TERM and the KILL when a command overruns, and the host watchdog's extra grace.
    kill_after: float = 2.0
    watchdog_grace: float = 5.0
    lifetime: float = 3600.0
    """Seconds a sandbox's container lives (Docker): it then ends and is removed by itself, even if its owner
    was killed by SIGKILL or runs on another host. A sandbox used longer starts a new container (setup runs
    again) before a command that could outlive the current one."""

    @property
    def command_bound(self) -> float:
        """Longest a command with the default timeout can hold a container: timeout, kill grace, watchdog."""
        return self.timeout + self.kill_after + self.watchdog_grace

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "pids", "file_size_bytes", "output_bytes", "scratch_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be positive")
        if self.cpus <= 0 or self.timeout <= 0 or self.kill_after < 0 or self.watchdog_grace < 0:
            raise ValueError("Limits.cpus and Limits.timeout must be positive, the graces non-negative")
        if self.lifetime <= self.command_bound:
            raise ValueError("Limits.lifetime must exceed timeout + kill_after + watchdog_grace")


@dataclass(frozen=True)
class ExecResult:
    """What one command did. Output is decoded with replacement and capped (see `Limits.output_bytes`).

    `timed_out` means the command was stopped at its timeout (its exit code is then 124 or 137, or -9 when
    the host watchdog had to step in). `truncated` means some output was cut; the cut is marked in the text.
    `isolation` names what was in force: "docker", "bubblewrap", "namespaces" or "none".
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    seconds: float
    isolation: str
    target: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def to_dict(self) -> dict[str, object]:
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "timed_out": self.timed_out,
            "truncated": self.truncated,
            "seconds": round(self.seconds, 3),
            "isolation": self.isolation,
        }


@dataclass
class _SetupState:
    lock: threading.Lock = field(default_factory=threading.Lock)
    result: ExecResult | None = None


class Sandbox(ABC):
    """Runs commands on the pristine trees of one group.

    Thread-safe: `exec` may be called from several threads (that is how `exec_many` works). After `close`
    every call raises `SandboxError`. Backends fill in `_exec_in` and may override `_open`/`_close`.
    """

    backend: str = ""
    parallel_commands: bool = True
    """Whether commands may run at the same time (False: `exec_many` runs its targets one after another)."""
    environment_note: str = ""
    """What the environment could not honour (e.g. the interpreter standing in); shown once with `run`."""

    def __init__(
        self,
        trees: TreeSource,
        *,
        setup: str | None = None,
        test_command: str | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.trees = trees
        self.setup = setup
        self.test_command = test_command
        self.limits = limits or Limits()
        names = list(trees.targets())
        if BASE_TARGET not in names:
            raise SandboxError(f"tree source has no {BASE_TARGET!r} target")
        if len(set(names)) != len(names):
            raise SandboxError("tree source lists a target twice")
        self._targets = names
        self._setup = {t: _SetupState() for t in names}
        self._closed = False
        self._close_lock = threading.Lock()

    @classmethod
    def remove_leftovers(cls, everything: bool = False) -> list[str]:
        """Remove what this backend's sandboxes left when their owning process died without closing them
        (SIGKILL, preemption). `leftovers.cleanup_leftovers` calls every registered backend's.

        Args:
            everything: Remove every sandbox's leftovers of this backend, including those of live owners.

        Returns:
            What was removed (container names, folder paths); the default removes nothing.

        Raises:
            SandboxUnavailable: the backend cannot be reached here (e.g. no Docker engine answers).
        """
        return []

    @property
    @abstractmethod
    def isolation(self) -> str:
        """Which isolation every command of this sandbox runs under."""

    def targets(self) -> list[str]:
        return list(self._targets)

    @property
    def setup_results(self) -> dict[str, ExecResult]:
        """The setup run of every target that has had one so far (setup runs lazily, on first use)."""
        return {t: s.result for t, s in self._setup.items() if s.result is not None}

    def exec(
        self,
        target: str,
        command: Command,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run `command` in a tree equal to `target`'s pristine one and return what it did (the backend may
        hand on the tree an earlier command left unchanged, see `DockerSandbox`).

        Never raises for what the command does (failure, timeout, kill by a limit: all are in the result).
        Raises `SandboxError` for an unknown target, a closed sandbox or a backend failure.
        """
        self._check_open()
        if target not in self._setup:
            raise SandboxError(f"unknown target {target!r}; known: {', '.join(self._targets)}")
        seconds = self.limits.timeout if timeout is None else float(timeout)
        if seconds <= 0:
            raise SandboxError("timeout must be positive")
        argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise SandboxError("empty command")
        self._ensure_setup(target)
        result = self._exec_in(target, argv, seconds, dict(env or {}), setup=False)
        return result

    def exec_many(
        self,
        targets: Sequence[str],
        command: Command,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        max_parallel: int | None = None,
    ) -> dict[str, ExecResult]:
        """Run one probe on several targets; results keyed by target, in the order given.

        Targets run in parallel (up to `max_parallel`) where the backend allows it (`parallel_commands`),
        else one after another in the order given. Raises as `exec` does.
        """
        order = list(dict.fromkeys(targets))
        if not order:
            return {}
        workers = max(1, min(len(order), max_parallel or len(order)))
        if not self.parallel_commands:
            return {t: self.exec(t, command, timeout, env) for t in order}
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox-exec") as pool:
            futures = {t: pool.submit(self.exec, t, command, timeout, env) for t in order}
            return {t: futures[t].result() for t in order}

    @property
    def commands_at_once(self) -> int | None:
        """How many commands run at the same time: 1 where they run one after another, else the backend's
        own bound (the Docker backend's containers), or None where it has none (`exec_many` then starts
        every target at once). A caller sharing a time budget over targets divides it by this."""
        return None if self.parallel_commands else 1

    def run_tests(self, target: str, timeout: float | None = None) -> ExecResult:
        """Run the task's `test_command` on `target`. Raises `SandboxError` when the task has none."""
        if not self.test_command:
            raise SandboxError("this task has no test_command")
        return self.exec(target, self.test_command, timeout=timeout)

    def close(self) -> None:
        """Stop everything this sandbox started and remove what it created. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("sandbox is closed")

    def _ensure_setup(self, target: str) -> None:
        if not self.setup:
            return
        state = self._setup[target]
        with state.lock:
            if state.result is None:
                self._check_open()
                state.result = self._exec_in(
                    target, ["sh", "-c", self.setup], self.limits.timeout, {}, setup=True
                )

    @abstractmethod
    def _exec_in(
        self, target: str, argv: list[str], timeout: float, env: dict[str, str], *, setup: bool
    ) -> ExecResult:
        """Run argv on target. With `setup=True` the resulting tree becomes the target's pristine tree."""

    @abstractmethod
    def _close(self) -> None: ...


BACKENDS: Registry[Sandbox] = Registry("sandbox backend")
"""Every sandbox backend by name (imported when first used: the docker SDK is not needed for `local`)."""
BACKENDS.add("docker", "grader.sandbox.docker:DockerSandbox", doc="One hardened container per group.")
BACKENDS.add("local", "grader.sandbox.local:LocalSandbox", doc="bubblewrap or unshare namespaces, rlimits.")


def open_sandbox(
    trees: TreeSource,
    backend: str = "docker",
    image: str | None = None,
    setup: str | None = None,
    test_command: str | None = None,
    limits: Limits | None = None,
    isolation: str | None = None,
    slots: int | None = None,
) -> Sandbox:
    """Open a sandbox over `trees`; use it as a context manager.

    `image` (docker only) is used as is when given (e.g. a task's own image); otherwise the `gagar/python`
    image made by `build_images`. `isolation` (local only) is "auto" (the best available), "bubblewrap",
    "namespaces" or "none" (no isolation at all: must be asked for by name). `slots` (docker only) caps the
    containers that run targets at once (default: one per core, at most one per target). Raises
    `SandboxUnavailable` when the backend or isolation cannot be had here, `SandboxError` when starting
    fails, `TypeError` for `slots` on a backend without them.
    """
    if backend not in BACKENDS.names():
        known = ", ".join(repr(name) for name in BACKENDS.names())
        raise SandboxUnavailable(f"unknown sandbox backend {backend!r}; use {known}")
    # Each backend refuses what it cannot honour (an image for local, an isolation other than its own).
    return BACKENDS.get(backend).factory(
        trees,
        image=image,
        isolation=isolation,
        setup=setup,
        test_command=test_command,
        limits=limits or Limits(),
        **({} if slots is None else {"slots": slots}),
    )
