"""A Ray cluster of containers on one Docker engine, for tests and benchmarks: head, workers, shared repos.

Every node is a container of the node image (`build_node_image`): the debootstrapped `gagar/debian-python`
base with this checkout of gagar and the driver's Ray version pip-installed from PyPI at build time, cached
by a content key (gagar's source and the Ray version; rebuilt only when one changes). The nodes sit on their
own Docker network; the task repositories on a volume every node mounts at `REPOS`, as a shared filesystem
would be in a real cluster. Worker nodes offer the custom resource `WORKER_RESOURCE`, so actors that ask for
it never land on the head. The driver connects through the Ray Client port (`Cluster.address`, `ray://...`):
the base image's Python is 3.11 like the host's but another patch release, which a Ray Client accepts and
a driver joining as a node does not.

Containers, network and volume carry the sandbox labels (`grader.sandbox.leftovers`), so the leftover checks
and `gagar` cleanup see them; every container also ends by itself after `LIFETIME` seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from grader.errors import GagarError
from grader.sandbox.images import HASH_LABEL
from grader.sandbox.leftovers import LABEL, LABEL_CREATED, LABEL_EXPIRES, owner_labels
from grader.util.cachedirs import machine_cache
from grader.util.filelock import file_lock

NODE_IMAGE = "gagar/ray-node:latest"
BASE_IMAGE = "gagar/debian-python:bookworm"
REPOS = "/repos"
"""Where every node mounts the shared repositories volume."""
WORKER_RESOURCE = "gagar_worker"
CLIENT_PORT = 10001
LIFETIME = 3600.0
"""Seconds after which a node container stops by itself, should its owner die without closing it."""
SOURCE_ROOT = Path(__file__).resolve().parents[2]
_SOURCES = ("grader", "prompts", "pyproject.toml", "README.md")
# Fast failure detection so that a lost node costs seconds, not the default half minute.
_HEAD_ENV = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "2000",
    "RAY_health_check_failure_threshold": "5",
    # A driver's Ray Client server process may take long to start on a busy machine (default 30 s).
    "RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S": "180",
}


class ClusterError(GagarError, RuntimeError):
    """The node image could not be built or the cluster did not come up (the message says which and why)."""


def _ray_version() -> str:
    import ray

    return ray.__version__


def _source_files() -> list[Path]:
    files: list[Path] = []
    for name in _SOURCES:
        path = SOURCE_ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            )
    return files


def _dependencies() -> list[str]:
    """gagar's own requirements, as pyproject.toml states them."""
    with open(SOURCE_ROOT / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def node_image_key(ray_version: str | None = None) -> str:
    """The node image's content key: gagar's source files, the Ray version, the base image's id.

    Args:
        ray_version: the Ray to install (default: the driver's, as Ray requires).
    Returns:
        A hex digest; the image is rebuilt when it changes.
    """
    digest = hashlib.sha256(f"ray={ray_version or _ray_version()}\nbase={_base_id()}\n".encode())
    for path in _source_files():
        digest.update(str(path.relative_to(SOURCE_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _base_id() -> str:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", BASE_IMAGE], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise ClusterError(f"the base image {BASE_IMAGE} is missing: build it with `gagar images build`")
    return done.stdout.strip()


def _image_label(tag: str) -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{HASH_LABEL}"}}}}', tag],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def build_node_image(progress: Callable[[str], None] | None = None, timeout: float = 1800.0) -> str:
    """Build the node image unless one with the same content key is there; return its tag.

    Args:
        progress: called with each line of the build's output (None: quiet).
        timeout: seconds the build may take.
    Returns:
        `NODE_IMAGE`.
    Raises:
        ClusterError: no base image, or the build failed (the last lines of its output say why).
    """
    lock = machine_cache() / "ray-node.lock"
    with file_lock(lock):
        key = node_image_key()
        if _image_label(NODE_IMAGE) == key:
            return NODE_IMAGE
        with tempfile.TemporaryDirectory(prefix="gagar-ray-node-") as context:
            src = Path(context) / "gagar"
            for path in _source_files():
                target = src / path.relative_to(SOURCE_ROOT)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
            # The host's CA bundle: PyPI is reached through a TLS-intercepting proxy on some networks.
            ca = Path("/etc/ssl/certs/ca-certificates.crt")
            (Path(context) / "host-ca.crt").write_bytes(ca.read_bytes() if ca.exists() else b"")
            cert = "PIP_CERT=/tmp/host-ca.crt" if ca.exists() else ""
            requirements = " ".join(
                shlex.quote(r) for r in [f"ray[client]=={_ray_version()}", *_dependencies()]
            )
            pip = "pip3 install --no-cache-dir --break-system-packages --root-user-action=ignore"
            pip += " --progress-bar off"
            (Path(context) / "Dockerfile").write_text(
                f"FROM {BASE_IMAGE}\n"
                "COPY host-ca.crt /tmp/host-ca.crt\n"
                # Debian marks its Python externally managed; this image is made for gagar and Ray alone.
                # Dependencies first, gagar alone after: an edit to gagar rebuilds one small layer.
                f"RUN {cert} {pip} {requirements}\n"
                "COPY gagar /tmp/gagar\n"
                f"RUN {cert} {pip} --no-deps /tmp/gagar && rm -rf /tmp/gagar /tmp/host-ca.crt\n"
                "ENV LANG=C.UTF-8 RAY_USAGE_STATS_ENABLED=0\n",
                encoding="utf-8",
            )
            argv = ["docker", "build", "--network=host", "--label", f"{HASH_LABEL}={key}", "-t", NODE_IMAGE]
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
                if os.environ.get(name):
                    argv += ["--build-arg", f"{name}={os.environ[name]}"]
            proc = subprocess.Popen(
                [*argv, context],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                env={**os.environ, "DOCKER_BUILDKIT": "0"},
            )
            tail: list[str] = []
            started = time.monotonic()
            assert proc.stdout is not None
            for line in proc.stdout:
                tail = (tail + [line])[-30:]
                if progress is not None:
                    progress(line.rstrip("\n"))
                if time.monotonic() - started > timeout:
                    proc.kill()
            if proc.wait() != 0:
                raise ClusterError(f"building {NODE_IMAGE} failed:\n{''.join(tail)}")
    return NODE_IMAGE


@dataclass
class Node:
    """One node container: its name on the network and its address there."""

    container: Any
    ip: str
    role: str

    @property
    def name(self) -> str:
        return str(self.container.name)


@dataclass
class Cluster:
    """A running cluster; `close()` removes every container, the network and the volume.

    `address` is the Ray Client address to give `ray.init`; `actor_options` makes actors land on workers.
    """

    client: Any
    network: Any
    volume: Any
    head: Node
    workers: list[Node] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"ray://{self.head.ip}:{CLIENT_PORT}"

    @property
    def actor_options(self) -> dict[str, Any]:
        return {"resources": {WORKER_RESOURCE: 1}, "scheduling_strategy": "SPREAD"}

    def connect(self, attempts: int = 3, timeout: float = 120.0) -> None:
        """`ray.init(address=self.address)` in this process, once a throwaway connection has worked.

        On a loaded machine the per-driver server the head starts for a Ray Client sometimes dies on the way
        up ("Starting Ray client server failed"), and Ray's client then hangs closing its half-open stream.
        So a connection is first tried in a child process (killed after `timeout`), up to `attempts` times,
        and the real one is made in a thread given `timeout` seconds: a failure is an error, never a hang.

        Raises:
            ClusterError: no trial connection worked, or the real one failed or did not finish in time.
        """
        import ray

        probe = f"import ray; ray.init(address={self.address!r}, logging_level='ERROR'); ray.shutdown()"
        last = ""
        for _ in range(attempts):
            try:
                done = subprocess.run(
                    [sys.executable, "-c", probe], capture_output=True, text=True, timeout=timeout
                )
            except subprocess.TimeoutExpired:
                last = f"a trial connection took more than {timeout:g}s"
                continue
            if done.returncode == 0:
                break
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
        else:
            raise ClusterError(f"cannot connect to {self.address}: {last}")
        failure: list[BaseException] = []

        def init() -> None:
            try:
                ray.init(address=self.address, logging_level="ERROR")
            except BaseException as exc:  # handed to the caller below
                failure.append(exc)

        thread = threading.Thread(target=init, name="gagar-ray-connect", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise ClusterError(f"connecting to {self.address} did not finish in {timeout:g}s")
        if failure:
            raise ClusterError(f"cannot connect to {self.address}: {failure[0]}") from failure[0]

    def put_repositories(self, folder: Path) -> None:
        """Copy `folder`'s contents into the shared volume at `REPOS` (through the head, which mounts it).

        Raises:
            ClusterError: the engine refused the copy.
        """
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for child in sorted(folder.iterdir()):
                tar.add(child, arcname=child.name)
        if not self.head.container.put_archive(REPOS, buffer.getvalue()):
            raise ClusterError(f"could not copy {folder} into the repositories volume")

    def kill(self, node: Node) -> None:
        """`docker kill` the node: its raylet, object store and actors die at once."""
        node.container.kill()

    def disconnect(self, node: Node) -> None:
        """Cut the node off the cluster network (its processes keep running)."""
        self.network.disconnect(node.container, force=True)

    def reconnect(self, node: Node) -> None:
        """Put the node back on the network (the engine may give it another address; `node.ip` follows)."""
        self.network.connect(node.container)
        node.container.reload()
        node.ip = node.container.attrs["NetworkSettings"]["Networks"][self.network.name]["IPAddress"]

    def add_worker(self, cpus: int = 1) -> Node:
        """Start one more worker node and wait until the head counts it."""
        node = _start_node(self, "worker", cpus)
        self.workers.append(node)
        _wait_for_nodes(self, len([w for w in self.workers if _running(w)]))
        return node

    def memory_peaks(self) -> dict[str, int]:
        """Each running node's peak memory in bytes (cgroup v2 `memory.peak`, else v1's max usage)."""
        peaks = {}
        for node in [self.head, *self.workers]:
            if not _running(node):
                continue
            code, out = node.container.exec_run(
                [
                    "sh",
                    "-c",
                    "cat /sys/fs/cgroup/memory.peak 2>/dev/null || "
                    "cat /sys/fs/cgroup/memory/memory.max_usage_in_bytes",
                ]
            )
            with contextlib.suppress(ValueError):
                peaks[node.name] = int(out.decode().strip()) if code == 0 else -1
        return peaks

    def close(self) -> None:
        """Remove the containers, then the network and the volume; what is already gone is skipped."""
        import docker.errors

        for node in [*self.workers, self.head]:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                node.container.remove(force=True)
        for thing in (self.network, self.volume):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                thing.remove()


def _labels() -> dict[str, str]:
    now = time.time()
    return {
        LABEL: "1",
        **owner_labels(),
        LABEL_CREATED: f"{now:.3f}",
        LABEL_EXPIRES: f"{now + LIFETIME:.3f}",
    }


def _running(node: Node) -> bool:
    import docker.errors

    try:
        node.container.reload()
    except docker.errors.NotFound:
        return False
    return node.container.status == "running"


def _start_node(cluster: Cluster, role: str, cpus: int) -> Node:
    suffix = secrets.token_hex(3)
    name = f"{cluster.network.name}-{role}-{suffix}"
    common = "--disable-usage-stats --block --node-ip-address=$(hostname -i)"
    if role == "head":
        command = (
            f"ray start --head --port=6379 --ray-client-server-port={CLIENT_PORT} --num-cpus=0"
            f" --include-dashboard=false {common}"
        )
    else:
        command = (
            f"ray start --address={cluster.head.ip}:6379 --num-cpus={cpus}"
            f" --resources='{{\"{WORKER_RESOURCE}\": 1000}}' {common}"
        )
    container = cluster.client.containers.run(
        NODE_IMAGE,
        ["timeout", str(int(LIFETIME)), "sh", "-c", command],
        name=name,
        hostname=name,
        detach=True,
        labels=_labels(),
        network=cluster.network.name,
        volumes={cluster.volume.name: {"bind": REPOS, "mode": "rw"}},
        environment=_HEAD_ENV,
        shm_size="256m",
        init=True,
    )
    container.reload()
    ip = container.attrs["NetworkSettings"]["Networks"][cluster.network.name]["IPAddress"]
    return Node(container=container, ip=ip, role=role)


def _ray_status(cluster: Cluster) -> tuple[int, str]:
    code, out = cluster.head.container.exec_run(
        [
            "python3",
            "-c",
            "import ray; ray.init(address='auto', logging_level='ERROR');"
            "print(sum(1 for n in ray.nodes() if n['Alive']))",
        ]
    )
    return code, out.decode(errors="replace")


def _wait_for_nodes(cluster: Cluster, workers: int, timeout: float = 120.0) -> None:
    """Wait until the head counts 1 + `workers` live nodes. Raises `ClusterError` with the head's log."""
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        if not _running(cluster.head):
            break
        code, out = _ray_status(cluster)
        if code == 0 and out.strip().splitlines() and out.strip().splitlines()[-1] == str(1 + workers):
            return
        time.sleep(1.0)
    logs = cluster.head.container.logs(tail=30).decode(errors="replace")
    raise ClusterError(f"the cluster did not reach {workers} workers in {timeout:g}s: {out}\n{logs}")


def remove_leftover_clusters(client: Any) -> list[str]:
    """Remove the networks and volumes of clusters whose owner died without closing them.

    Their containers are the sandbox reaper's (`grader.sandbox.leftovers`); removed here first, so that the
    network and volume they held can go too.

    Args:
        client: a Docker client.
    Returns:
        The names of what was removed.
    """
    import docker.errors

    from grader.sandbox.leftovers import owner_alive

    removed = []
    selector = {"label": f"{LABEL}=1", "name": "gagar-ray-"}
    for container in client.containers.list(all=True, filters=selector):
        if not owner_alive(container.labels or {}):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                container.remove(force=True)
                removed.append(container.name)
    for thing in [*client.networks.list(filters=selector), *client.volumes.list(filters=selector)]:
        labels = thing.attrs.get("Labels") or {}
        if thing.name.startswith("gagar-ray-") and not owner_alive(labels):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                thing.remove()
                removed.append(thing.name)
    return removed


def start_cluster(workers: int = 2, cpus_per_worker: int = 1) -> Cluster:
    """Start a head and `workers` worker nodes on a new network, with a new repositories volume.

    Args:
        workers: worker nodes to start.
        cpus_per_worker: the CPUs each worker offers Ray.
    Returns:
        The running cluster (close it).
    Raises:
        ClusterError: the node image is missing or the nodes did not come up (the head's log says why).
        grader.sandbox.base.SandboxUnavailable: no Docker engine answers.
    """
    from grader.sandbox.docker import docker_client

    client = docker_client()
    remove_leftover_clusters(client)
    if _image_label(NODE_IMAGE) is None:
        raise ClusterError(f"{NODE_IMAGE} is missing: build it with build_node_image()")
    name = f"gagar-ray-{secrets.token_hex(4)}"
    network = client.networks.create(name, driver="bridge", internal=True, labels=_labels())
    volume = client.volumes.create(name=f"{name}-repos", labels=_labels())
    cluster = Cluster(client=client, network=network, volume=volume, head=None)  # type: ignore[arg-type]
    try:
        cluster.head = _start_node(cluster, "head", 0)
        cluster.workers = [_start_node(cluster, "worker", cpus_per_worker) for _ in range(workers)]
        _wait_for_nodes(cluster, workers)
    except BaseException:
        cluster.close()
        raise
    return cluster


def terminal_progress(line: str) -> None:
    """Print a build's line to the real terminal (past pytest's capture), for `build_node_image`."""
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(f"[gagar ray-node image] {line}\n")
    except OSError:
        sys.__stderr__.write(f"[gagar ray-node image] {line}\n")  # type: ignore[union-attr]


__all__ = [
    "Cluster",
    "ClusterError",
    "Node",
    "build_node_image",
    "node_image_key",
    "remove_leftover_clusters",
    "start_cluster",
    "terminal_progress",
]
