"""gagar on a real multi-node Ray cluster: a head and two worker containers, a node lost mid-batch.

The cluster (`grader.integrations.cluster`) runs on the local Docker engine; the test process is the driver
and connects through the Ray Client port. The node image is built on first use (minutes, with progress on
the terminal) and cached by content. Skipped where no Docker engine or base image is there.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from grader.graders.base import Grade
from grader.graders.heuristic import HeuristicGrader
from grader.groups.formats import load_group_file
from grader.groups.models import Group, GroupResult
from grader.groups.outcomes import Outcome
from grader.workspace.view import GradingView
from tests.conftest import EXAMPLE_GROUP

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'gagar[ray]')")
# The driver connects through Ray Client, which needs ray[client]'s packages: without them connect() fails.
CLIENT = "Ray Client needs the package grpcio: pip install 'gagar[ray]' (ray[client])"
pytest.importorskip("grpc", reason=CLIENT)
from grader.integrations.batch import BatchGrader  # noqa: E402
from grader.integrations.cluster import (  # noqa: E402
    REPOS,
    Cluster,
    ClusterError,
    Node,
    build_node_image,
    start_cluster,
    terminal_progress,
)
from grader.integrations.ray import RayGrader  # noqa: E402

pytestmark = pytest.mark.slow

# The nodes have gagar installed but not this test module: ship its classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

GROUPS = 64
BUNDLE = f"{REPOS}/inventory.bundle"


class Slow(HeuristicGrader):
    """The heuristic grader after `seconds` of sleep: a batch lasts long enough to lose a node in it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def grade(self, view: GradingView) -> Grade:
        time.sleep(self.seconds)
        return super().grade(view)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    from grader.sandbox.base import SandboxUnavailable
    from grader.sandbox.docker import docker_client

    try:
        docker_client()
    except SandboxUnavailable as exc:
        pytest.skip(f"no Docker engine: {exc}")
    try:
        build_node_image(progress=terminal_progress)
    except ClusterError as exc:
        if "is missing" in str(exc):
            pytest.skip(str(exc))
        raise
    running = start_cluster(workers=2)
    try:
        running.put_repositories(EXAMPLE_GROUP.parent)
        running.connect()
        yield running
    finally:
        ray.shutdown()
        running.close()


@pytest.fixture
def two_workers(cluster: Cluster) -> Cluster:
    """The cluster with two live workers again (a test before may have lost one)."""
    import docker.errors

    live = []
    for node in cluster.workers:
        try:
            node.container.reload()
        except docker.errors.NotFound:
            continue
        if node.container.status == "running" and _alive_in_ray(node):
            live.append(node)
        else:
            node.container.remove(force=True)
    cluster.workers = live
    while len(cluster.workers) < 2:
        cluster.add_worker()
    return cluster


def _alive_in_ray(node: Node) -> bool:
    return any(n["Alive"] and n["NodeManagerAddress"] == node.ip for n in ray.nodes())


def batch(count: int = GROUPS, repo: str = BUNDLE) -> list[Group]:
    (group,) = load_group_file(EXAMPLE_GROUP)
    task = group.task.model_copy(update={"repo": repo})
    return [group.model_copy(update={"group_id": f"g{i:02d}", "task": task}) for i in range(count)]


def grader_on(cluster: Cluster, seconds: float = 0.0, **kwargs: object) -> RayGrader:
    return RayGrader(
        grader_factory=lambda: Slow(seconds),
        actors=4,
        per_actor=2,
        actor_options=cluster.actor_options,
        **kwargs,  # type: ignore[arg-type]
    )


def counts(results: list[GroupResult]) -> dict[str, int]:
    """submitted / graded / regraded / failed by reason kind, for the report."""
    tally: collections.Counter[str] = collections.Counter(submitted=len(results))
    for r in results:
        if r.status == "graded":
            tally["graded"] += 1
            tally["regraded"] += r.details["ray"]["attempts"] > 1
        else:
            tally[f"failed/{r.outcome.value if r.outcome else '?'}"] += 1
    return dict(tally)


def grade_losing(cluster: Cluster, lose: str, retries: int = 1) -> tuple[list[GroupResult], Node]:
    """Grade `GROUPS` groups; after the 8th result, kill or cut off a worker that holds actors."""
    groups = batch()
    remote = grader_on(cluster, seconds=0.5, retries=retries)
    streamed: list[tuple[int, GroupResult]] = []
    victim: Node | None = None
    for index, result in remote.grade_indexed(groups):
        streamed.append((index, result))
        if len(streamed) == 8:
            where = {r.details["ray"]["node"].split()[0] for _, r in streamed}
            victim = next(w for w in cluster.workers if w.ip in where)
            if lose == "kill":
                cluster.kill(victim)
            else:
                cluster.disconnect(victim)
    assert victim is not None
    indices = [i for i, _ in streamed]
    assert sorted(indices) == list(range(GROUPS)), "a group is missing or came back twice"
    results = [r for _, r in sorted(streamed, key=lambda pair: pair[0])]
    assert [r.group_id for r in results] == [g.group_id for g in groups]
    before = {t.id: t.advantage for t in groups[0].trajectories}
    for r in results:
        if r.status == "graded":
            assert r.details["ray"]["node"].split()[0] in {w.ip for w in cluster.workers}
            if r.details["ray"]["attempts"] > 1:  # regraded: on a node that is still there
                assert not r.details["ray"]["node"].startswith(victim.ip + " ")
        else:
            assert r.outcome is Outcome.ACTOR_DIED, r.reason
            assert victim.ip in r.reason, r.reason
            assert r.advantages_after == r.advantages_before
            assert r.advantages_after == {k: before[k] for k in r.advantages_after}
    remote.shutdown()
    return results, victim


def test_groups_spread_over_both_worker_nodes_read_the_shared_repositories(two_workers: Cluster) -> None:
    remote = grader_on(two_workers)
    results = remote.grade(batch(8))
    remote.shutdown()
    assert [r.status for r in results] == ["graded"] * 8, [r.reason for r in results]
    nodes = {r.details["ray"]["node"].split()[0] for r in results}
    assert nodes == {w.ip for w in two_workers.workers}
    assert results[0].ranking[0] == ["clean", "clean-respaced"]


def test_a_worker_killed_mid_batch_every_group_ends_regraded_or_failed_naming_it(
    two_workers: Cluster,
) -> None:
    results, victim = grade_losing(two_workers, "kill")
    tally = counts(results)
    print(f"\nnode-loss run (docker kill {victim.ip}, 1 retry): {tally}")
    assert tally["regraded"] >= 1, tally


def test_without_retries_the_lost_nodes_groups_fail_naming_it(two_workers: Cluster) -> None:
    results, victim = grade_losing(two_workers, "kill", retries=0)
    tally = counts(results)
    print(f"\nnode-loss run (docker kill {victim.ip}, no retry): {tally}")
    assert tally.get("failed/actor_died", 0) >= 1 and tally["regraded"] == 0, tally
    failed = [r for r in results if r.status == "failed"]
    # Named as the actor's node, or, for an actor placed there as it died, among the nodes lost so far.
    assert all(victim.ip in r.reason for r in failed), [r.reason for r in failed]


def test_a_worker_cut_off_then_back_every_group_ends_regraded_or_failed(two_workers: Cluster) -> None:
    results, victim = grade_losing(two_workers, "disconnect")
    tally = counts(results)
    print(f"\nnode-loss run (network disconnect {victim.ip}): {tally}")
    assert tally["regraded"] >= 1, tally
    two_workers.reconnect(victim)
    # Back on the network, the cluster still grades (on whichever nodes it counts as alive).
    remote = grader_on(two_workers)
    assert [r.status for r in remote.grade(batch(4))] == ["graded"] * 4
    remote.shutdown()


def test_deadline_holds_while_a_node_is_gone(two_workers: Cluster) -> None:
    groups = batch(16)
    rows = [
        {"group_id": g.group_id, "trajectory_id": t.id, "passed": t.passed, "patch": t.patch,
         "repo": g.task.repo, "base_commit": g.task.base_commit}
        for g in groups for t in g.trajectories
    ]  # fmt: skip
    remote = grader_on(two_workers, seconds=2.0)
    grading = BatchGrader(ray_grader=remote)
    grading.submit(rows)
    two_workers.disconnect(two_workers.workers[0])  # its groups hang until the head gives the node up
    began = time.monotonic()
    step = grading.weights(rows, deadline=3.0)
    took = time.monotonic() - began
    # 16 groups of 2 s each on 8 slots, half of them on a node that went away, cannot finish in 3 s.
    assert took < 8.0, took
    late = {gid for gid, reason in step.group_reasons.items() if reason.startswith("late:")}
    assert late, step.group_reasons
    for row, weight, outcome, reason in zip(rows, step.weights, step.outcomes, step.reasons, strict=True):
        if row["group_id"] in late:
            assert weight == 1.0 and outcome is Outcome.DEADLINE and "3s deadline" in reason
    assert np.all(np.isfinite(step.weights))
    grading.close()
    remote.shutdown()
    two_workers.reconnect(two_workers.workers[0])


def test_a_repository_a_node_cannot_read_fails_its_group_with_the_reason(
    two_workers: Cluster, tmp_path: Path
) -> None:
    # Another repository at a path the nodes do read: its history lacks the task's commit.
    other = tmp_path / "repos"
    (other / "src").mkdir(parents=True)
    git = ["git", "-C", str(other / "src"), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(other / "src")], check=True)
    (other / "src" / "README").write_text("another tree\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "another"], check=True)
    subprocess.run(
        [*git, "bundle", "create", str(other / "other.bundle"), "HEAD"], check=True, capture_output=True
    )
    (other / "src" / "README").unlink()
    subprocess.run(["rm", "-rf", str(other / "src")], check=True)
    two_workers.put_repositories(other)
    missing = batch(1, repo=f"{REPOS}/absent.bundle")[0].model_copy(update={"group_id": "absent"})
    driver_only = batch(1, repo=str(EXAMPLE_GROUP.parent / "inventory.bundle"))[0]
    driver_only = driver_only.model_copy(update={"group_id": "driver-only"})
    wrong = batch(1, repo=f"{REPOS}/other.bundle")[0].model_copy(update={"group_id": "other-tree"})
    assert os.path.exists(driver_only.task.repo)  # it is there on the driver, not on the nodes
    remote = grader_on(two_workers)
    began = time.monotonic()
    results = {r.group_id: r for r in remote.grade([missing, driver_only, wrong, *batch(2)])}
    remote.shutdown()
    assert time.monotonic() - began < 120
    assert results["g00"].status == results["g01"].status == "graded"
    for gid, needle in (("absent", "absent.bundle"), ("driver-only", "inventory.bundle"), ("other-tree", "")):
        r = results[gid]
        assert r.status == "failed", (gid, r.status, r.reason)
        assert needle in r.reason and r.reason, (gid, r.reason)
        node = r.details["ray"][
            "node"
        ]  # where it failed, beside the reason (which in-process would give too)
        assert any(node.startswith(f"{w.ip} ") for w in two_workers.workers), node
        assert r.advantages_after == r.advantages_before
        assert not r.ranking
    print({gid: results[gid].reason for gid in ("absent", "driver-only", "other-tree")})


def test_a_dead_owners_cluster_network_and_volume_are_removed_a_live_ones_kept() -> None:
    from grader.integrations.cluster import _labels, remove_leftover_clusters
    from grader.sandbox.base import SandboxUnavailable
    from grader.sandbox.docker import docker_client

    try:
        client = docker_client()
    except SandboxUnavailable as exc:
        pytest.skip(f"no Docker engine: {exc}")
    dead = {k: v for k, v in _labels().items() if k != "gagar.start"}
    dead["gagar.pid"] = "999999999"  # no such process: its owner is gone
    tag = os.urandom(4).hex()
    network = client.networks.create(f"gagar-ray-{tag}", labels=dead, internal=True)
    volume = client.volumes.create(name=f"gagar-ray-{tag}-repos", labels=dead)
    live = client.volumes.create(name=f"gagar-ray-{tag}-live", labels=_labels())
    try:
        removed = remove_leftover_clusters(client)
        assert {network.name, volume.name} <= set(removed) and live.name not in removed
        assert [v.name for v in client.volumes.list(filters={"name": f"gagar-ray-{tag}"})] == [live.name]
    finally:
        live.remove()
