"""Removing what sandboxes of dead processes left behind: the owner labels, and the reaping on first use.

Each backend removes its own leftovers (`Sandbox.remove_leftovers`: containers by label, local temp dirs);
this module names owners and calls the backends through their registry, importing none of them.

A process that dies by SIGKILL (preemption, the OOM killer, `scancel`) cannot close its sandboxes. Two things
bound what it leaves: every container ends by itself once its lifetime has passed (`Limits.lifetime`), and
every process reaps the leftovers of dead owners before its first sandbox (`reap_dead_owners_once`), so the
next grading start on the machine removes them. A container's labels name its owner precisely enough to tell
a dead owner on the same host: host name, boot id, pid namespace, pid and the process's start time in clock
ticks (a reused pid has another start time).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable

from grader.sandbox.base import BACKENDS, SandboxUnavailable

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
    """Remove what every registered sandbox backend's dead sandboxes left; return what was removed.

    Each backend owns its cleanup (`Sandbox.remove_leftovers`, reached through `BACKENDS`), so this module
    imports none of them. A backend that cannot be reached here (no Docker engine, no docker SDK) is skipped.

    Args:
        everything: Remove every sandbox's leftovers, including those of running graders.
        docker_too: Also ask the "docker" backend (False: every backend but that one).

    Returns:
        The names of the removed containers and the paths of the removed dirs.
    """
    removed: list[str] = []
    for name in BACKENDS.names():
        if name == "docker" and not docker_too:
            continue
        try:
            removed += BACKENDS.get(name).factory.remove_leftovers(everything)  # type: ignore[attr-defined]
        except (SandboxUnavailable, ImportError):
            continue
    return removed


def reap_dead_owners_once(backend: str, remove: Callable[[], list[str]]) -> list[str]:
    """Run `remove` (a backend's removal of dead owners' leftovers) the first time this process asks for
    `backend`; later calls do nothing.

    Called before a process's first sandbox of each backend, so that every grading process and Ray actor
    cleans up after the ones that were killed before it.

    Args:
        backend: the backend's name (the key of "once").
        remove: removes that backend's dead owners' leftovers and returns what it removed.

    Returns:
        What was removed (empty on every call after the first).

    Raises:
        Whatever `remove` raises (SandboxUnavailable: no Docker engine answers); the next call tries again.
    """
    key = (os.getpid(), backend)
    with _reap_lock:
        if key in _reaped:
            return []
        removed = remove()
        _reaped.add(key)
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
]
