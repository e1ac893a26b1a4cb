"""Docker backend: locked-down containers ("slots"), one `docker exec` per command, targets in parallel.

A sandbox runs its targets in up to `slots` containers at once (by default one per core the container's CPU
quota fits in, at most one per target). Each target belongs to one slot (targets are dealt round-robin in
the order given), so its trees, its setup and every command on it live in that container; a slot runs one
command at a time, so each command finds the shared places of its container (/tmp, /dev/shm, /scratch)
holding nothing of another's. Without capabilities there is no mount namespace to give a command its own
/tmp inside one container; a container per concurrently running command gives it instead.

Layout inside a slot (root filesystem read-only, no network, no capabilities, no new privileges):
- /pristine (tmpfs, root-owned, mode 711): each of the slot's targets' trees (and, after `setup`, its set-up
  tree, see `adoption`), written by root under an unguessable name; nobody else can list or write there.
  The trees arrive as one tar (`bundle`): a candidate's as its changes from base's where the tree source
  tells them (the workspace does), made in the container from hard links to base's files, so loading 11
  sympy trees moves one tree's bytes and a few changed files.
- /scratch (tmpfs, 1733): one private box (mode 700) per target: its tree `t`, `home`, `tmp` and `bin`.
- /tmp (tmpfs, 1777). A command's own leftovers in /scratch, /tmp and /dev/shm go when it ends.

Each target's commands run under a uid of its own (used for nothing else in the container's life), each in a
tree equal to its target's pristine one: a fresh copy, or the tree the target's last command left when
nothing in it changed (no entry's ctime, which no process can set back, is newer than that command's start;
any write, removal, rename, mode or time change means a fresh copy). The copy or the check, the command
(under `timeout -k`), the killing of everything the uid left running, and the tidying of the box are all
one `docker exec`. So a command that only reads (a probe, most test runs) costs a `find` over the tree
instead of a copy of it, and the next command on that target starts at once. Kept trees stay in /scratch,
at most a quarter of it per slot (`_kept_trees`); a target over that gets a fresh copy each time. A host
watchdog kills the uid's processes and removes its box (then the container) should a command outlive its
timeout. The source paths travel in the exec's environment, which other uids cannot read, and are unset
before the command starts. A command starts at its tree's root; every PYTHONPATH entry it sees is absolute
(the root first, then the image's entries, a relative one resolved against the root: the image's `src:.`
means the tree from any directory), HOME and TMPDIR are in its box (empty at each start), and its `bin`
(first on PATH) holds `tests` and `git` (see `base.helper_files`).

Bytecode: a tree's bytecode is written into its pristine copy before the slot's first command, for up to
`_BYTECODE_WAIT` seconds a slot (and again after a target's setup), so a copy has it and importing writes
nothing into a kept tree; what is left then goes on detached (see `bytecode`). A target's setup leaves its
tree in its box as the kept tree, so the first command after it needs no copy either.

Limits: `Limits.memory_bytes` and the CPU quota are each slot's; `Limits.pids` bounds each command
(RLIMIT_NPROC per uid) and a slot gets four times that. `Limits.lifetime` bounds each container's life.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import secrets
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
import docker.errors

from grader.errors import SandboxError, SandboxUnavailable
from grader.sandbox import lifecycle
from grader.sandbox.adoption import ADOPT_COMMAND, ADOPT_SET_UP_TREE
from grader.sandbox.base import (
    BASE_TARGET,
    DEFAULT_IMAGE,
    ExecResult,
    Limits,
    Sandbox,
    TreeSource,
    helper_files,
)
from grader.sandbox.bundle import LOAD, Bundle, bundle
from grader.sandbox.bytecode import ADOPT_INSTALLED_BYTECODE, BYTECODE_COMMAND
from grader.sandbox.leftovers import (
    LABEL,
    LABEL_CREATED,
    LABEL_EXPIRES,
    owner_alive,
    owner_labels,
    reap_dead_owners_once,
)
from grader.sandbox.output import CappedBuffer
from grader.workspace.archives import TreeChanges
from grader.workspace.gitcmd import git_identity

# A container needs this long from `run` to a first command; a command is started only in a container with at
# least its own bound plus this margin left to live.
_START_MARGIN = 5.0

# Runs as the target's uid. $GAGAR_SRC: tree to copy; $GAGAR_BOX: the target's box; $GAGAR_SETUP=1 stamps
# the box (`.setup`) between the copy and the setup command and leaves what the setup changed readable (not
# writable) by all, for root to adopt the tree as the target's new pristine one (see `adoption`);
# $GAGAR_KEEP=1 keeps the tree in the box for the next command, which uses it only if nothing in it changed
# since the command before started, or since the setup ended (no entry's ctime, which no process can set
# back, newer than the box's `.started`: the sleep after touching it puts every later change at least one
# clock tick past it); a `find` or `sleep` that cannot tell means a fresh copy. $GAGAR_TESTS, $GAGAR_GIT,
# $GAGAR_TEST_COMMAND: the box's bin/ (see base.helper_files).
_WRAPPER = r"""
src=$GAGAR_SRC box=$GAGAR_BOX limit=$GAGAR_TIMEOUT grace=$GAGAR_KILL_AFTER setup=$GAGAR_SETUP keep=$GAGAR_KEEP
tests=$GAGAR_TESTS git=$GAGAR_GIT test_command=$GAGAR_TEST_COMMAND
unset GAGAR_SRC GAGAR_BOX GAGAR_TIMEOUT GAGAR_KILL_AFTER GAGAR_SETUP GAGAR_KEEP GAGAR_TESTS GAGAR_GIT
unset GAGAR_TEST_COMMAND
umask 077
kill -9 -1 2>/dev/null
fresh=1
if [ "$keep" = 1 ] && [ "$setup" != 1 ] && [ -d "$box/t" ] && [ -f "$box/.started" ] &&
  changed=$(find "$box/t" -cnewer "$box/.started" -print -quit 2>/dev/null) && [ -z "$changed" ]; then
  fresh=0
fi
if [ $fresh = 1 ]; then
  rm -rf "$box"
  mkdir -p "$box" && cd "$src" && cp -R -p . "$box/t"
else
  chmod 700 "$box" && rm -rf "$box/home" "$box/tmp" "$box/bin"
fi
if [ $? != 0 ] || ! mkdir "$box/home" "$box/tmp" "$box/bin"; then
  echo "gagar-sandbox: could not prepare a fresh tree" >&2
  cd / && rm -rf "$box"
  exit 125
fi
umask 022
printf '%s' "$tests" > "$box/bin/tests" && printf '%s' "$git" > "$box/bin/git"
printf '%s\n' "$test_command" > "$box/bin/test-command" && chmod 755 "$box/bin/tests" "$box/bin/git"
cd "$box/t"
pythonpath=$box/t
set -f
saved_ifs=$IFS IFS=:
for entry in ${PYTHONPATH-}; do
  case "$entry" in
    ""|.|./) ;;
    /*) pythonpath=$pythonpath:$entry ;;
    *) pythonpath=$pythonpath:$box/t/${entry%/} ;;
  esac
done
IFS=$saved_ifs
set +f
export PYTHONPATH="$pythonpath" PATH="$box/bin:$PATH"
if [ "$setup" = 1 ] && ! { touch "$box/.setup" && sleep 0.01; } 2>/dev/null; then
  rm -f "$box/.setup"
fi
if [ "$keep" = 1 ]; then
  { touch "$box/.started" && sleep 0.01; } 2>/dev/null || { rm -f "$box/.started"; keep=0; }
fi
HOME=$box/home TMPDIR=$box/tmp timeout -k "$grace" "$limit" "$@"
rc=$?
cd /
kill -9 -1 2>/dev/null
for f in /scratch/* /scratch/.[!.]* /tmp/* /tmp/.[!.]* /dev/shm/* /dev/shm/.[!.]*; do
  [ "$f" != "$box" ] && [ -O "$f" ] && rm -rf "$f"
done
if [ "$setup" = 1 ]; then
  rm -rf "$box/home" "$box/tmp" "$box/bin"
  if [ -f "$box/.setup" ]; then
    find "$box/t" -cnewer "$box/.setup" ! -type l -exec chmod a+rX,go-w {} +
  else
    chmod -R a+rX,go-w "$box/t"
  fi
  chmod 711 "$box"
  if [ "$keep" = 1 ]; then
    { touch "$box/.started" && sleep 0.01; } 2>/dev/null || rm -f "$box/.started"
  fi
elif [ "$keep" = 1 ]; then
  rm -rf "$box/home" "$box/tmp" "$box/bin"
else
  rm -rf "$box"
fi
exit $rc
"""

# How long opening a slot (or setting up a target) waits for its trees' bytecode: the installed twin's code
# takes about a second for a sympy tree, a candidate sharing most files with one done before a quarter of it.
_BYTECODE_WAIT = 10.0

# Commands run under a uid with no passwd entry: git would refuse to commit without an identity.
_COMMAND_ENV = {**git_identity(), "LANG": "C.UTF-8"}


def docker_client() -> docker.DockerClient:
    """A client for the engine in the environment. Raises `SandboxUnavailable` when none answers."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxUnavailable(f"no Docker engine reachable: {exc}") from exc
    return client


class _Slot:
    """One container of a sandbox and what lives in it: its targets' trees, one command at a time."""

    def __init__(self, index: int, targets: list[str]) -> None:
        self.index, self.targets = index, targets
        self.bundle = Bundle()  # made by `load`
        self.keep: set[str] = set()  # targets whose tree is kept between commands
        self.container: Any = None
        self.started = 0.0  # monotonic time just before the current container was asked for
        self.sources: dict[str, str] = {}  # target -> its pristine tree in the container
        self.boxes: dict[str, tuple[int, str]] = {}  # target -> its uid and box in the current container
        self.retired: list[Any] = []  # aged-out containers: they end by themselves, or at close
        self.restart_lock = threading.Lock()
        self.one_at_a_time = threading.Lock()

    def load(self, trees: TreeSource, limits: Limits) -> None:
        """Archive the slot's trees (a candidate's as its changes from base's, where the source tells them:
        see `bundle`), one `git archive` at a time (the slots load at once), and bundle them."""
        changes_of = getattr(trees, "changes", None)
        whole: dict[str, bytes] = {}
        changes: dict[str, TreeChanges] = {}
        for target in self.targets:
            change = changes_of(target) if changes_of is not None and target != BASE_TARGET else None
            if change is None:
                whole[target] = trees.archive(target)
            else:
                changes[target] = change
        base = None
        if changes and BASE_TARGET not in whole:
            base = trees.archive(BASE_TARGET)
        self.bundle = bundle(whole, changes, base)
        base_size = len(whole.get(BASE_TARGET) or base or b"")
        sizes = {
            t: len(whole[t]) if t in whole else base_size + len(changes[t].archive) for t in self.targets
        }
        self.keep = _kept_trees(sizes, limits)


def default_slots(limits: Limits, targets: int) -> int:
    """How many containers a sandbox of `targets` targets runs at once: one per core that a container's CPU
    quota (`limits.cpus`) fits in, at least one, at most one per target.

    Args:
        limits: the sandbox's limits.
        targets: how many targets the sandbox has.

    Returns:
        The number of slots.
    """
    cores = os.cpu_count() or 1
    return max(1, min(targets, int(cores / limits.cpus) or 1))


class DockerSandbox(Sandbox):
    """Sandbox backed by containers ("slots"); see the module docstring for the layout and its limits.

    `slots` caps how many containers run commands at once (default: `default_slots`); 1 runs every target
    in one container, one command after another.

    Raises `SandboxUnavailable` when no engine answers or the image is missing (build it with
    `gagar images build`), `SandboxError` when a container cannot be started or loaded, `ValueError` for
    `slots` below 1.
    """

    backend = "docker"

    def __init__(
        self,
        trees: TreeSource,
        *,
        image: str | None = None,
        isolation: str | None = None,
        setup: str | None = None,
        test_command: str | None = None,
        limits: Limits | None = None,
        client: docker.DockerClient | None = None,
        slots: int | None = None,
    ) -> None:
        if isolation not in (None, "docker"):
            raise SandboxUnavailable(f"the docker backend has no isolation {isolation!r}")
        if slots is not None and slots < 1:
            raise ValueError("slots must be at least 1")
        super().__init__(trees, setup=setup, test_command=test_command, limits=limits)
        self.image = image or DEFAULT_IMAGE
        self._client = client or docker_client()
        try:
            self._client.images.get(self.image)
        except docker.errors.ImageNotFound as exc:
            raise SandboxUnavailable(
                f"image {self.image!r} is not on this engine; build it with `gagar images build`"
            ) from exc
        count = min(len(self._targets), slots or default_slots(self.limits, len(self._targets)))
        self._slots = [_Slot(i, self._targets[i::count]) for i in range(count)]
        self._slot_of = {t: slot for slot in self._slots for t in slot.targets}
        # uids never repeat within a container; a random base keeps two sandboxes' RLIMIT_NPROC counts apart.
        self._uid_base = 1_000_000 + secrets.randbelow(2_000) * 1_000_000
        self._uids = itertools.count(1)
        self._uid_lock = threading.Lock()
        self._helpers = helper_files(test_command)
        with contextlib.suppress(docker.errors.DockerException):  # best effort: never keeps a sandbox shut
            reap_dead_owners_once("docker", lambda: remove_leftover_containers(client=self._client))
        lifecycle.track(self)
        try:
            # The slots open at once: one slot's Python work (bundling) overlaps the other's `git archive`
            # processes and engine calls.
            with ThreadPoolExecutor(len(self._slots), thread_name_prefix="sandbox-open") as pool:
                for opened in [pool.submit(self._open_slot, slot) for slot in self._slots]:
                    opened.result()
        except BaseException:
            self.close()
            raise

    @property
    def commands_at_once(self) -> int:
        """One command at a time in each container: its `slots`."""
        return self.slots

    @classmethod
    def remove_leftovers(cls, everything: bool = False) -> list[str]:
        """The sandbox containers whose owner is gone (all of them with `everything`), removed.

        Raises:
            SandboxUnavailable: no Docker engine answers.
        """
        return remove_leftover_containers(everything)

    @property
    def isolation(self) -> str:
        return "docker"

    @property
    def slots(self) -> int:
        """How many containers this sandbox runs commands in at once."""
        return len(self._slots)

    @property
    def container_id(self) -> str | None:
        """The first slot's current container (None between a container's end and the next command)."""
        return self.container_ids[0]

    @property
    def container_ids(self) -> list[str | None]:
        """Each slot's current container, in slot order."""
        return [slot.container.id if slot.container is not None else None for slot in self._slots]

    def _open_slot(self, slot: _Slot) -> None:
        # The container starts while the slot's trees are archived and bundled.
        with ThreadPoolExecutor(1, thread_name_prefix="sandbox-run") as pool:
            running = pool.submit(self._run_container, slot)
            try:
                slot.load(self.trees, self.limits)
            finally:
                slot.container = running.result()  # `close` removes it should loading have failed
        slot.boxes = {}
        self._load(slot, slot.container)

    def _start(self, slot: _Slot) -> None:
        """Start a new container for `slot` and load its trees (after the one before aged out)."""
        slot.container = self._run_container(slot)
        slot.boxes = {}
        self._load(slot, slot.container)

    def _run_container(self, slot: _Slot) -> Any:
        """A new locked-down container for `slot` (see the module docstring), with nothing loaded yet.

        Raises `SandboxError` when the engine refuses to start it.
        """
        lim = self.limits
        # What root writes there (the trees, their set-up copies, bytecode) is bounded by the container's
        # memory, as every tmpfs of it is: the trees' size is not known yet when the container starts.
        pristine_size = lim.memory_bytes
        now = time.time()
        slot.started = time.monotonic()
        try:
            container = self._client.containers.run(
                self.image,
                # The container ends by itself when its lifetime is over, and is then removed (auto_remove):
                # a killed owner cannot leak it for longer (see `leftovers`).
                command=["sleep", str(math.ceil(lim.lifetime))],
                auto_remove=True,
                detach=True,
                init=True,
                user="65534:65534",
                network_mode="none",
                read_only=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                mem_limit=lim.memory_bytes,
                memswap_limit=lim.memory_bytes,
                nano_cpus=int(lim.cpus * 1e9),
                pids_limit=lim.pids * 4,
                ulimits=[
                    docker.types.Ulimit(name="fsize", soft=lim.file_size_bytes, hard=lim.file_size_bytes),
                    docker.types.Ulimit(name="nproc", soft=lim.pids, hard=lim.pids),
                    docker.types.Ulimit(name="core", soft=0, hard=0),
                ],
                tmpfs={
                    "/pristine": f"rw,nosuid,nodev,size={pristine_size},mode=711",
                    "/scratch": f"rw,exec,nosuid,nodev,size={lim.scratch_bytes},mode=1733",
                    "/tmp": f"rw,exec,nosuid,nodev,size={lim.scratch_bytes // 4},mode=1777",
                },
                labels={
                    LABEL: "1",
                    **owner_labels(),
                    LABEL_CREATED: f"{now:.3f}",
                    LABEL_EXPIRES: f"{now + lim.lifetime:.3f}",
                },
                name=f"gagar-sandbox-{os.getpid()}-{secrets.token_hex(4)}",
            )
        except docker.errors.DockerException as exc:
            raise SandboxError(f"could not start a container from {self.image!r}: {exc}") from exc
        return container

    def _load(self, slot: _Slot, container: Any) -> None:
        made = slot.bundle
        argv = ["sh", "-c", LOAD, "gagar-load", made.manifest]
        code, out = _exec_with_stdin(self._client, container.id, argv, made.data, user="0:0")
        if code != 0:
            raise SandboxError(f"could not load the trees into the container: {out[-2000:]!r}")
        slot.sources = {t: f"/pristine/{made.names[t]}" for t in slot.targets}
        # Before any setup too: a setup's copy then has the bytecode, and so has the set-up tree it leaves
        # (kept for the next command) and its adopted copy (`_adopt`).
        trees = [f"/pristine/{name}" for name in made.trees]
        self._adopt_bytecode(container, trees, time.monotonic() + _BYTECODE_WAIT)

    def _adopt_bytecode(self, container: Any, trees: list[str], deadline: float) -> None:
        """Write bytecode into the pristine `trees` from the image's installed copy of its package (see
        `bytecode`), waiting for it until `deadline` (monotonic): a command's first copy of a tree then
        has it, and its tree is kept (importing writes nothing). What is left by then goes on detached:
        commands meanwhile compile what they lack."""
        api = self._client.api
        argv = ["sh", "-c", BYTECODE_COMMAND, ADOPT_INSTALLED_BYTECODE, *trees]
        with contextlib.suppress(docker.errors.DockerException):  # an optimisation: never fails a command
            wait = deadline - time.monotonic()
            if wait > 0.1:
                waited = container.exec_run(["timeout", "-s", "KILL", f"{wait:.1f}", *argv], user="0:0")
                if waited.exit_code == 0:
                    return
            api.exec_start(api.exec_create(container.id, argv, user="0:0")["Id"], detach=True)

    def _live_container(self, slot: _Slot, timeout: float) -> Any:
        """The container to run a command of `timeout` seconds in: one that will live past its end."""
        bound = timeout + self.limits.kill_after + self.limits.watchdog_grace + _START_MARGIN
        if bound >= self.limits.lifetime:
            raise SandboxError(
                f"a {timeout:g}s command cannot fit in the sandbox's {self.limits.lifetime:g}s lifetime"
            )
        with slot.restart_lock:
            self._check_open()
            ends = slot.started + self.limits.lifetime
            if slot.container is not None and time.monotonic() + bound > ends:
                # Commands still running in it end before it does; it goes by itself, or at close.
                slot.retired.append(slot.container)
                slot.container = None
            if slot.container is None:
                for target in slot.targets:
                    self._setup[target].result = None
                self._start(slot)
            return slot.container

    def _exec_in(
        self, target: str, argv: list[str], timeout: float, env: dict[str, str], *, setup: bool
    ) -> ExecResult:
        slot = self._slot_of[target]
        with slot.one_at_a_time:
            return self._exec_alone(slot, target, argv, timeout, env, setup=setup)

    def _exec_alone(
        self, slot: _Slot, target: str, argv: list[str], timeout: float, env: dict[str, str], *, setup: bool
    ) -> ExecResult:
        container = self._live_container(slot, timeout)
        state = self._setup[target]
        for _ in range(3):
            if not self.setup or setup or state.result is not None:
                break
            # A new container replaced the one this target was set up in: set it up again first (and again
            # should that one too be too old for the command by the time its setup is done).
            state.result = self._exec_alone(
                slot, target, ["sh", "-c", self.setup], self.limits.timeout, {}, setup=True
            )
            container = self._live_container(slot, timeout)
        if self.setup and not setup and state.result is None:
            raise SandboxError(
                f"could not set up {target!r} in a container young enough for a {timeout:g}s command "
                f"(lifetime {self.limits.lifetime:g}s)"
            )
        uid, box = self._box_of(slot, target)
        environment = {
            **_COMMAND_ENV,
            **env,
            "GAGAR_SRC": slot.sources[target],
            "GAGAR_BOX": box,
            "GAGAR_TIMEOUT": f"{timeout:g}",
            "GAGAR_KILL_AFTER": f"{self.limits.kill_after:g}",
            "GAGAR_SETUP": "1" if setup else "0",
            "GAGAR_KEEP": "1" if target in slot.keep else "0",
            "GAGAR_TESTS": self._helpers["tests"][0],
            "GAGAR_GIT": self._helpers["git"][0],
            "GAGAR_TEST_COMMAND": self.test_command or "",
        }
        api = self._client.api
        started = time.monotonic()
        try:
            exec_id = api.exec_create(
                container.id,
                ["sh", "-c", _WRAPPER, "gagar-sandbox", *argv],
                user=f"{uid}:{uid}",
                environment=environment,
                workdir="/",
            )["Id"]
            stream = api.exec_start(exec_id, stream=True, demux=True)
        except docker.errors.DockerException as exc:
            raise SandboxError(f"docker exec failed: {exc}") from exc
        watchdog = _Watchdog(
            self, container, uid, box, timeout + self.limits.kill_after + self.limits.watchdog_grace
        )
        out, err = CappedBuffer(self.limits.output_bytes), CappedBuffer(self.limits.output_bytes)
        try:
            for chunk_out, chunk_err in stream:
                out.feed(chunk_out or b"")
                err.feed(chunk_err or b"")
        except Exception as exc:  # noqa: BLE001 - a stream cut by the watchdog ends like any other
            if not watchdog.fired:
                raise SandboxError(f"lost the output stream of a command: {exc}") from exc
        finally:
            watchdog.cancel()
        seconds = time.monotonic() - started
        exit_code = -9 if watchdog.fired else _exit_code(api, exec_id)
        if setup and exit_code != 125 and not watchdog.fired:
            self._adopt(slot, container, uid, box, target)
        timed_out = watchdog.fired or (exit_code in (124, 137) and seconds >= timeout)
        stderr = err.text()
        if exit_code == 137 and not timed_out:
            # Nothing else in the container sends SIGKILL to a running command but the kernel's OOM killer.
            mib = self.limits.memory_bytes // 1024**2
            stderr += f"\n[gagar-sandbox: killed by SIGKILL, most likely at the {mib} MiB memory limit]\n"
        return ExecResult(
            exit_code=exit_code,
            stdout=out.text(),
            stderr=stderr,
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
            seconds=seconds,
            isolation=self.isolation,
            target=target,
        )

    def _box_of(self, slot: _Slot, target: str) -> tuple[int, str]:
        """The uid and box of `target`'s commands in the slot's current container, made on its first."""
        if target not in slot.boxes:
            with self._uid_lock:
                uid = self._uid_base + next(self._uids)
            slot.boxes[target] = (uid, f"/scratch/{secrets.token_hex(12)}")
        return slot.boxes[target]

    def _adopt(self, slot: _Slot, container: Any, uid: int, box: str, target: str) -> None:
        """Make the set-up tree in `box` the target's pristine one: a copy in /pristine (as root: nobody
        else can change it there) sharing what the setup left unchanged with the old one (see `adoption`).
        The box stays as the target's kept tree when it is one (`_Slot.keep`: it equals the new pristine
        tree, so the next command need not copy it), else it goes."""
        dest = f"/pristine/{secrets.token_hex(12)}"
        argv = [ADOPT_SET_UP_TREE, slot.sources[target], f"{box}/t", f"{box}/.setup", dest]
        copy = container.exec_run(["sh", "-c", ADOPT_COMMAND, *argv], user="0:0", environment={"LANG": "C"})
        if copy.exit_code != 0 or target not in slot.keep:
            container.exec_run(["rm", "-rf", box], user=f"{uid}:{uid}")
        if copy.exit_code != 0:
            raise SandboxError(f"could not keep the set-up tree of {target!r}: {copy.output[-2000:]!r}")
        slot.sources[target] = dest
        self._adopt_bytecode(container, [dest], time.monotonic() + _BYTECODE_WAIT)

    def _kill_uid(self, container: Any, uid: int, box: str) -> None:
        """Kill every process of `uid` and remove its box; kill the container if even that fails."""
        try:
            result = container.exec_run(
                ["sh", "-c", 'kill -9 -1; rm -rf "$1"', "gagar-kill", box], user=f"{uid}:{uid}"
            )
            if result.exit_code == 0:
                return
        except docker.errors.DockerException:
            pass
        self._drop_container(container)

    def _drop_container(self, container: Any) -> None:
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True)
        for slot in self._slots:
            if slot.container is container:
                slot.container = None

    def _close(self) -> None:
        containers = []
        for slot in getattr(self, "_slots", []):
            containers += [*slot.retired, slot.container]
            slot.retired, slot.container = [], None
        try:
            for container in containers:
                if container is not None:
                    _remove_container(container)
        finally:
            lifecycle.untrack(self)


class _Watchdog:
    """Kills a command from the host if it outlives its deadline; then, if its stream still flows, the
    container (the next command starts a new one)."""

    def __init__(self, sandbox: DockerSandbox, container: Any, uid: int, box: str, deadline: float) -> None:
        self.fired = False
        self._sandbox, self._container, self._uid, self._box = sandbox, container, uid, box
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(deadline,), daemon=True, name="sandbox-watchdog"
        )
        self._thread.start()

    def _run(self, deadline: float) -> None:
        if self._done.wait(deadline):
            return
        self.fired = True
        self._sandbox._kill_uid(self._container, self._uid, self._box)
        if not self._done.wait(5.0):
            self._sandbox._drop_container(self._container)

    def cancel(self) -> None:
        self._done.set()


def remove_leftover_containers(everything: bool = False, client: Any = None) -> list[str]:
    """Remove sandbox containers whose owner is gone (all with `everything`).

    Args:
        everything: Remove every sandbox container, including those of live owners.
        client: The Docker client to use (a new one when None).

    Returns:
        The names of the removed containers.

    Raises:
        SandboxUnavailable: No Docker engine answers.
    """
    client = client or docker_client()
    removed = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        if not everything and owner_alive(container.labels or {}):
            continue
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            container.remove(force=True)  # APIError: already being removed (it ended by itself meanwhile)
            removed.append(container.name)
    return removed


def _remove_container(container: Any) -> None:
    """Remove `container`; one that is gone, or already being removed because it ended, is fine.

    Raises `SandboxError` when the engine refuses for another reason.
    """
    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        if exc.status_code == 409 and "already in progress" in str(exc):
            return
        raise SandboxError(f"could not remove container {container.name}: {exc}") from exc
    except docker.errors.DockerException as exc:
        raise SandboxError(f"could not remove container {container.name}: {exc}") from exc


def _kept_trees(sizes: dict[str, int], limits: Limits) -> set[str]:
    """The targets whose tree a slot keeps between commands: as many as fit, in order, in a quarter of the
    scratch space (kept trees live there, beside what commands write); `sizes` are their archives'."""
    kept, room = set(), limits.scratch_bytes // 4
    for target, size in sizes.items():
        if size > room:
            break
        kept.add(target)
        room -= size
    return kept


def _exec_with_stdin(
    client: docker.DockerClient, container_id: str, argv: list[str], data: bytes, *, user: str
) -> tuple[int, bytes]:
    """Run argv with `data` on its stdin; its exit code and its (multiplexed, raw) output."""
    api = client.api
    exec_id = api.exec_create(container_id, argv, stdin=True, user=user)["Id"]
    sock = api.exec_start(exec_id, socket=True)
    raw = getattr(sock, "_sock", sock)
    try:
        raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := raw.recv(65536):
            chunks.append(chunk)
    finally:
        sock.close()
    return _exit_code(api, exec_id), b"".join(chunks)


def _exit_code(api: Any, exec_id: str) -> int:
    """The exit code of a finished exec. Raises `SandboxError` if the engine never records one."""
    # The output stream can end a moment before the engine records the exit code.
    for _ in range(50):
        code = api.exec_inspect(exec_id).get("ExitCode")
        if code is not None:
            return int(code)
        time.sleep(0.02)
    raise SandboxError("the engine never reported the command's exit code")
