"""Local backend, for machines without Docker: one subprocess per command in a fresh temp copy of its tree.

Isolation levels, best first (`isolation="auto"` takes the best that works here; a named one that does not
work raises `SandboxUnavailable`, never falls back to less). At "bubblewrap" and "namespaces" every place a
command can write is its own and goes when it ends: its tree, its HOME and TMPDIR (all in its box, removed
after it), and a private /tmp, /var/tmp and /dev/shm; the rest of the host is read-only to it.
- "bubblewrap": `bwrap` with every namespace unshared (no network), the host filesystem read-only, a private
  /tmp, /var/tmp and /dev (with its /dev/shm; host /tmp is invisible), the box at /tmp/gagar.
- "namespaces": `unshare` of the user, mount, network, pid, ipc and uts namespaces (no network, no host
  processes); in the new mount namespace every mount is made read-only, /tmp, /var/tmp and /dev/shm get a
  tmpfs of their own (each `Limits.scratch_bytes // 4`), and the box stays writable at its own path, so HOME,
  TMPDIR and PYTHONPATH keep meaning what they say. Host files stay visible (read-only). Where a mount cannot
  be made read-only here, the level is unavailable (with the mount named), never silently weaker.
- "none": a plain subprocess: it promises no isolation (the command can write wherever the user can, and
  reach the network); must be asked for by name, `auto` never picks it.

A command starts at its tree's root. Every PYTHONPATH entry it sees is absolute: the tree's root first, then
the caller's entries, a relative one resolved against the tree's root (never the command's current
directory). `tests` (the task's test command, run from the tree's root) and `git` (which says there is no
repository: the tree is an export) are executables first on PATH. At every level: rlimits (address space,
processes, file size, CPU time, no core files), a new session killed as a group at the timeout, a minimal
environment (nothing of the host's leaks in), output capped like Docker's. Run as root, each command gets a
uid of its own, so RLIMIT_NPROC bounds that command alone and every process it left behind is killed when it
ends. Run as another user, RLIMIT_NPROC counts all that user's processes.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
from functools import cache
from pathlib import Path

from grader.sandbox import lifecycle
from grader.sandbox.base import (
    ExecResult,
    Limits,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    TreeSource,
    absolute_pythonpath,
    helper_files,
)
from grader.sandbox.leftovers import reap_dead_owners_once
from grader.sandbox.output import CappedBuffer
from grader.workspace.gitcmd import git_identity

LEVELS = ("bubblewrap", "namespaces", "none")
DIR_PREFIX = "gagar-sandbox-"
_INSIDE = "/tmp/gagar"  # where bubblewrap shows the box
# Inside the new mount namespace ($1: the size of each private tmpfs). The box is bound onto itself first, so
# it stays writable when every other mount goes read-only; /tmp, /var/tmp and /dev/shm then get a tmpfs of
# their own, and where that hides the box (the host's temp dir is /tmp) it is bound back at its own path.
_PRIVATE_MOUNTS = r"""
size=$1; shift
box=$(cd .. && pwd)
mount --bind "$box" "$box" || exit 125
while read -r _ _ _ _ mp options _; do
  case "$mp" in "$box"|/proc|/proc/*) continue ;; esac
  case "$options" in ro|ro,*) continue ;; esac
  case "$mp" in *\\*) mp=$(printf '%b' "$(printf '%s' "$mp" | sed 's/\\\([0-7][0-7][0-7]\)/\\0\1/g')") ;; esac
  # A mount the command cannot even reach (under a directory it may not search) needs nothing.
  if ! mount -o remount,bind,ro "$mp" 2>/dev/null && (cd "$mp") 2>/dev/null; then
    echo "gagar-sandbox: cannot make $mp read-only" >&2
    exit 125
  fi
done < /proc/self/mountinfo
for dir in /tmp /var/tmp /dev/shm; do
  [ -d "$dir" ] || continue
  mount -t tmpfs -o "mode=1777,nosuid,nodev,size=$size" gagar-tmp "$dir" || exit 125
done
if ! [ -d "$box/t" ]; then
  mkdir -p "$box" && mount --bind /proc/self/cwd/.. "$box" || exit 125
fi
cd "$box/t" || exit 125
exec "$@"
"""
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ENV = {
    "PATH": _PATH,
    "LANG": "C.UTF-8",
    **git_identity(),
}


def _is_root() -> bool:
    return os.geteuid() == 0


def _wrap(level: str, argv: list[str], box: Path, scratch_bytes: int) -> tuple[list[str], Path, str]:
    """(argv to run, host cwd, the box's path as the command sees it) for one isolation level."""
    if level == "bubblewrap":
        wrapped = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/"]
        for private in ("/tmp", "/var/tmp"):
            wrapped += ["--size", str(scratch_bytes // 4), "--perms", "1777", "--tmpfs", private]
        wrapped += ["--dev", "/dev", "--proc", "/proc"]
        wrapped += ["--bind", str(box), _INSIDE, "--chdir", f"{_INSIDE}/t", "--"]
        return wrapped + argv, box, _INSIDE
    if level == "namespaces":
        wrapped = ["unshare", "--user", "--map-root-user", "--net", "--ipc", "--uts", "--pid", "--fork"]
        wrapped += ["--kill-child", "--mount", "--mount-proc", "--", "sh", "-c", _PRIVATE_MOUNTS, "gagar-ns"]
        return [*wrapped, str(scratch_bytes // 4), *argv], box / "t", str(box)
    return argv, box / "t", str(box)


@cache
def available(level: str) -> str | None:
    """None when `level` works here, else why not. Tried once per process, as the uid commands will use."""
    if level not in LEVELS:
        return f"unknown isolation {level!r}; use one of {', '.join(LEVELS)} or 'auto'"
    if level == "none":
        return None
    tool, package = ("bwrap", "bubblewrap") if level == "bubblewrap" else ("unshare", "util-linux")
    if shutil.which(tool) is None:
        return f"{tool} is not installed (Debian: apt-get install {package})"
    with tempfile.TemporaryDirectory(prefix=DIR_PREFIX + "probe-") as tmp:
        box = Path(tmp)
        (box / "t").mkdir()
        os.chmod(box, 0o777)
        os.chmod(box / "t", 0o777)
        argv, cwd, _ = _wrap(level, ["sh", "-c", "exit 0"], box, Limits().scratch_bytes)
        user = 65534 if _is_root() else None
        try:
            done = subprocess.run(
                argv,
                cwd=cwd,
                user=user,
                group=user,
                extra_groups=[] if user else None,
                capture_output=True,
                text=True,
                timeout=10,
                env=dict(_ENV),
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{tool} did not run: {exc}"
        if done.returncode != 0:
            return f"{tool} failed here (exit {done.returncode}): {done.stderr.strip()[-500:]}"
    return None


def best_isolation() -> str:
    """The strongest level that works here. Raises `SandboxUnavailable` when none but "none" does."""
    reasons = []
    for level in ("bubblewrap", "namespaces"):
        why = available(level)
        if why is None:
            return level
        reasons.append(f"{level}: {why}")
    raise SandboxUnavailable(
        "no isolation available (pass isolation='none' to run unisolated): " + "; ".join(reasons)
    )


class LocalSandbox(Sandbox):
    """Sandbox made of subprocesses; see the module docstring for what each isolation level gives.

    Raises `SandboxUnavailable` when the isolation asked for does not work here.
    """

    backend = "local"

    def __init__(
        self,
        trees: TreeSource,
        *,
        isolation: str | None = "auto",
        image: str | None = None,
        setup: str | None = None,
        test_command: str | None = None,
        limits: Limits | None = None,
    ) -> None:
        if image is not None:
            raise SandboxUnavailable("the local backend cannot run an image; use backend='docker'")
        if isolation in (None, "auto"):
            level = best_isolation()
        else:
            why = available(isolation)
            if why is not None:
                raise SandboxUnavailable(f"isolation {isolation!r} is not available: {why}")
            level = isolation
        super().__init__(trees, setup=setup, test_command=test_command, limits=limits)
        self._level = level
        self._archives = {t: trees.archive(t) for t in self._targets}
        self._prepared: dict[str, Path] = {}
        reap_dead_owners_once("local", remove_leftover_dirs)
        self._root = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))
        os.chmod(self._root, 0o711)  # each command's own uid must reach its box, and list nothing
        self._uid_base = 1_000_000 + secrets.randbelow(2_000) * 1_000_000 if _is_root() else None
        self._uids = itertools.count(1)
        self._nproc_extra = 0 if _is_root() else _count_processes(os.getuid())
        lifecycle.track(self)

    @classmethod
    def remove_leftovers(cls, everything: bool = False) -> list[str]:
        """The sandbox folders whose owning process is gone (all of them with `everything`), removed."""
        return remove_leftover_dirs(everything)

    @property
    def isolation(self) -> str:
        return self._level

    def _exec_in(
        self, target: str, argv: list[str], timeout: float, env: dict[str, str], *, setup: bool
    ) -> ExecResult:
        if not self._root.exists():
            raise SandboxError("sandbox directory is gone")
        uid = self._uid_base + next(self._uids) if self._uid_base is not None else None
        box = Path(tempfile.mkdtemp(dir=self._root))
        keep = False
        try:
            self._fill(target, box / "t")
            for name in ("home", "tmp", "bin"):
                (box / name).mkdir()
            for name, (text, mode) in helper_files(self.test_command).items():
                (box / "bin" / name).write_text(text)
                os.chmod(box / "bin" / name, mode)
            if uid is not None:
                _chown_tree(box, uid)
            wrapped, cwd, seen = _wrap(self._level, argv, box, self.limits.scratch_bytes)
            dirs = {
                "HOME": f"{seen}/home",
                "TMPDIR": f"{seen}/tmp",
                "PATH": f"{seen}/bin:{env.get('PATH', _PATH)}",
                "PYTHONPATH": absolute_pythonpath(f"{seen}/t", env.get("PYTHONPATH")),
            }
            full_env = {**_ENV, **env, **dirs}
            result = self._run(wrapped, cwd, full_env, uid, timeout, target)
            if setup and cwd.exists():
                self._prepared[target] = box / "t"
                keep = True
            return result
        finally:
            if not keep:
                _remove(box)

    def _fill(self, target: str, dest: Path) -> None:
        prepared = self._prepared.get(target)
        if prepared is not None:
            shutil.copytree(prepared, dest, symlinks=True)
            return
        dest.mkdir()
        with tarfile.open(fileobj=io.BytesIO(self._archives[target]), mode="r:") as tar:
            try:
                tar.extractall(dest, filter="data")
            except tarfile.FilterError as exc:
                raise SandboxError(f"archive of {target!r} has an unsafe member: {exc}") from exc

    def _run(
        self, argv: list[str], cwd: Path, env: dict[str, str], uid: int | None, timeout: float, target: str
    ) -> ExecResult:
        lim = self.limits
        cpu = int(timeout + lim.kill_after) + 1
        nproc = lim.pids + self._nproc_extra

        def limit_child() -> None:
            # Runs in the child between fork and exec, after the uid switch: only async-safe calls here.
            resource.setrlimit(resource.RLIMIT_AS, (lim.memory_bytes, lim.memory_bytes))
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            resource.setrlimit(resource.RLIMIT_FSIZE, (lim.file_size_bytes, lim.file_size_bytes))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        out, err = CappedBuffer(lim.output_bytes), CappedBuffer(lim.output_bytes)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=limit_child,
                user=uid, group=uid, extra_groups=[] if uid is not None else None,
            )  # fmt: skip
        except OSError as exc:
            raise SandboxError(f"could not start {argv[0]}: {exc}") from exc
        timed_out = False
        try:
            timed_out = _pump(proc, {proc.stdout: out, proc.stderr: err}, timeout, lim)  # type: ignore[dict-item]
        finally:
            _kill_group(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            if uid is not None:
                _kill_uid(uid)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        code = 128 - code if code < 0 else code
        if timed_out:
            # As GNU timeout reports it (and so the Docker backend): 137 when it took a KILL, else 124.
            code = 137 if code == 137 else 124
        return ExecResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
            seconds=time.monotonic() - started,
            isolation=self._level,
            target=target,
        )

    def _close(self) -> None:
        _remove(self._root)
        lifecycle.untrack(self)


def _pump(
    proc: subprocess.Popen[bytes], sinks: dict[object, CappedBuffer], timeout: float, lim: Limits
) -> bool:
    """Feed the pipes into their buffers until both close; kill the group at the timeout. True if it did."""
    timed_out = False
    deadline = time.monotonic() + timeout
    hard_deadline = deadline + lim.kill_after + lim.watchdog_grace
    with selectors.DefaultSelector() as sel:
        for pipe in sinks:
            sel.register(pipe, selectors.EVENT_READ)  # type: ignore[arg-type]
        while sel.get_map():
            now = time.monotonic()
            if not timed_out and now >= deadline:
                timed_out = True
                _kill_group(proc.pid, signal.SIGTERM)
                threading.Timer(lim.kill_after, _kill_group, args=(proc.pid,)).start()
            if now >= hard_deadline:
                break  # something outside the group holds the pipes open; the caller kills by uid
            for key, _ in sel.select(timeout=max(0.0, (deadline if not timed_out else hard_deadline) - now)):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    sinks[key.fileobj].feed(chunk)
                else:
                    sel.unregister(key.fileobj)
    if not timed_out:
        remaining = max(0.0, deadline - time.monotonic())
        try:
            proc.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            timed_out = True
    return timed_out


def _kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill_uid(uid: int) -> None:
    """SIGKILL every process whose real uid is `uid` (root only), until none is left."""
    for _ in range(10):
        pids = _processes(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _processes(uid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                for line in f:
                    if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                        break  # a zombie is already dead; its parent reaps it
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            found.append(int(entry.name))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return found


def _count_processes(uid: int) -> int:
    return len(_processes(uid))


def _chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def _remove(path: Path) -> None:
    def unlock(func: object, failed: str, exc: object) -> None:
        # A command may have taken write permission off its own directories.
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
            os.chmod(failed, 0o700)
        with contextlib.suppress(OSError):
            if os.path.isdir(failed) and not os.path.islink(failed):
                shutil.rmtree(failed, ignore_errors=True)
            else:
                os.unlink(failed)

    if path.exists():
        shutil.rmtree(path, onerror=unlock)


def remove_leftover_dirs(everything: bool = False) -> list[str]:
    """Remove sandbox temp dirs whose owning process is gone (all of them with `everything`); their paths."""
    removed = []
    for entry in Path(tempfile.gettempdir()).glob(DIR_PREFIX + "*"):
        pid_text = entry.name[len(DIR_PREFIX) :].split("-", 1)[0]
        if not everything and pid_text.isdigit() and _pid_alive(int(pid_text)):
            continue
        _remove(entry)
        removed.append(str(entry))
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
