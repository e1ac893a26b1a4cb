"""Removing what sandboxes of dead processes left behind: containers (by label) and local temp dirs."""

from __future__ import annotations

import contextlib
import os
import socket

from grader.sandbox.base import SandboxUnavailable


def cleanup_leftovers(everything: bool = False, docker_too: bool = True) -> list[str]:
    """Remove leftover sandbox containers and temp dirs; return what was removed (names and paths).

    A container is a leftover when it was made on this host by a process that is gone (its pid is dead, or
    was reused by a process started after the container); with `everything`, every sandbox container and
    dir counts, including those of running graders. An unreachable engine is skipped, not an error.
    """
    from grader.sandbox.local import remove_leftover_dirs

    removed = remove_leftover_dirs(everything)
    if docker_too:
        with contextlib.suppress(SandboxUnavailable):
            removed += remove_leftover_containers(everything)
    return removed


def remove_leftover_containers(everything: bool = False) -> list[str]:
    """Remove sandbox containers whose owner is gone (all with `everything`); their names.

    Raises `SandboxUnavailable` when no engine is reachable.
    """
    import docker.errors

    from grader.sandbox.docker import LABEL, LABEL_CREATED, LABEL_HOST, LABEL_PID, docker_client

    client = docker_client()
    removed = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        labels = container.labels or {}
        if not everything and _owner_alive(
            labels.get(LABEL_HOST), labels.get(LABEL_PID), labels.get(LABEL_CREATED)
        ):
            continue
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
            removed.append(container.name)
    return removed


def _owner_alive(host: str | None, pid_text: str | None, created_text: str | None) -> bool:
    if host != socket.gethostname():
        return True  # another machine's: we cannot tell, so we leave it
    try:
        pid, created = int(pid_text or ""), float(created_text or "")
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    started = _process_start(pid)
    # A process started after the container cannot have made it: the pid was reused.
    return started is None or started <= created + 1.0


def _process_start(pid: int) -> float | None:
    """Wall-clock start time of `pid` from /proc, or None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])
        with open("/proc/stat") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


__all__ = ["cleanup_leftovers", "remove_leftover_containers"]
