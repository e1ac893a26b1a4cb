"""Removing what sandboxes of dead processes left behind: containers (by label) and local temp dirs.

A process that dies by SIGKILL (preemption, the OOM killer, `scancel`) cannot close its sandboxes. Two things
bound what it leaves: every container ends by itself once its lifetime has passed (`Limits.lifetime`), and
every process reaps the leftovers of dead owners before its first sandbox (`reap_dead_owners_once`), so the
next grading start on the machine removes them. A container's labels name its owner precisely enough to tell
a dead owner on the same host: host name, boot id, pid namespace, pid and the process's start time in clock
ticks (a reused pid has another start time).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import Any

from grader.sandbox.base import SandboxUnavailable

LABEL = "gagar.sandbox"
LABEL_PID = "gagar.pid"
LABEL_HOST = "gagar.host"
LABEL_CREATED = "gagar.created"
LABEL_BOOT = "gagar.boot"
LABEL_PIDNS = "gagar.pidns"
LABEL_START = "gagar.start"
LABEL_EXPIRES = "gagar.expires"

_reap_lock = threading.Lock()
_reaped: set[tuple[int, str]] = set()  # (pid, backend): a forked child reaps again, as a new process should


def cleanup_leftovers(everything: bool = False, docker_too: bool = True) -> list[str]:
    """Remove leftover sandbox containers and temp dirs; return what was removed (names and paths).

    Args:
        everything: Remove every sandbox container and dir, including those of running graders.
        docker_too: Also look at the Docker engine (an unreachable engine is skipped, not an error).

    Returns:
        The names of the removed containers and the paths of the removed dirs.
    """
    from grader.sandbox.local import remove_leftover_dirs

    removed = remove_leftover_dirs(everything)
    if docker_too:
        with contextlib.suppress(SandboxUnavailable):
            removed += remove_leftover_containers(everything)
    return removed


def reap_dead_owners_once(backend: str, client: Any = None) -> list[str]:
    """Remove dead owners' leftovers of `backend` the first time this process asks; later calls do nothing.

    Called before a process's first sandbox of each backend, so that every grading process and Ray actor
    cleans up after the ones that were killed before it.

    Args:
        backend: "docker" (containers) or "local" (temp dirs).
        client: The Docker client to use (a new one when None).

    Returns:
        What was removed (empty on every call after the first).

    Raises:
        SandboxUnavailable: No Docker engine answers (docker only).
    """
    key = (os.getpid(), backend)
    with _reap_lock:
        if key in _reaped:
            return []
        if backend == "docker":
            removed = remove_leftover_containers(client=client)
        else:
            from grader.sandbox.local import remove_leftover_dirs

            removed = remove_leftover_dirs()
        _reaped.add(key)
    return removed


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
    import docker.errors

    from grader.sandbox.docker import docker_client

    client = client or docker_client()
    removed = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        if not everything and owner_alive(container.labels or {}):
            continue
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            container.remove(force=True)  # APIError: already being removed (it ended by itself meanwhile)
            removed.append(container.name)
    return removed


def owner_labels() -> dict[str, str]:
    """The labels that name this process as a container's owner (see the module docstring).

    Returns:
        Label name to value; values that /proc cannot give here are left out.
    """
    labels = {LABEL_HOST: socket.gethostname(), LABEL_PID: str(os.getpid())}
    identity = {LABEL_BOOT: _boot_id(), LABEL_PIDNS: _pid_namespace(), LABEL_START: _start_ticks(os.getpid())}
    labels.update({k: v for k, v in identity.items() if v is not None})
    return labels


def owner_alive(labels: dict[str, str]) -> bool:
    """Whether the process these labels name may still be running.

    Args:
        labels: A container's labels (as `owner_labels` wrote them, or the older host/pid/created form).

    Returns:
        False only when the owner is known to be gone: on this host, in this boot and pid namespace, its pid
        is free or belongs to a process with another start time. True when it runs or cannot be told
        (another host, boot or pid namespace: the container's lifetime bounds those).
    """
    if labels.get(LABEL_HOST) != socket.gethostname():
        return True
    try:
        pid = int(labels.get(LABEL_PID, ""))
    except ValueError:
        return False
    if LABEL_START in labels:
        if labels.get(LABEL_BOOT) != _boot_id() or labels.get(LABEL_PIDNS) != _pid_namespace():
            return True
        return _start_ticks(pid) == labels[LABEL_START]
    return _alive_by_created_time(pid, labels.get(LABEL_CREATED))


def _alive_by_created_time(pid: int, created_text: str | None) -> bool:
    """The older labels' test: the pid runs and its process started before the container was made."""
    try:
        created = float(created_text or "")
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    started = _process_start(pid)
    return started is None or started <= created + 1.0


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _boot_id() -> str | None:
    return _read("/proc/sys/kernel/random/boot_id")


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _start_ticks(pid: int) -> str | None:
    """Start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat), or None if it is gone."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    try:
        return stat.rsplit(")", 1)[1].split()[19]
    except IndexError:
        return None


def _process_start(pid: int) -> float | None:
    """Wall-clock start time of `pid` from /proc, or None where /proc cannot tell."""
    ticks = _start_ticks(pid)
    stat = _read("/proc/stat") or ""
    boot = next((float(line.split()[1]) for line in stat.splitlines() if line.startswith("btime")), None)
    if ticks is None or boot is None:
        return None
    return boot + int(ticks) / os.sysconf("SC_CLK_TCK")


__all__ = [
    "cleanup_leftovers",
    "owner_alive",
    "owner_labels",
    "reap_dead_owners_once",
    "remove_leftover_containers",
]
