"""Grading through a Ray cluster of containers against grading in one process: groups per second and memory.

The same batch (`--groups` copies of the example group, heuristic grader, no model) is graded three ways in
this run: in one process with `--workers` threads (the baseline), then on a cluster of containers
(`grader.integrations.cluster`: a head and 1, then 2 worker nodes, two actors per worker, the repository
on the shared volume) through the Ray Client. It prints groups per second and each node's peak memory
(cgroup `memory.peak`), both as ratios to the in-process run (its peak RSS).

On a machine of 2 cores every node shares the same 2 cores as the baseline: the figures show what going
through the cluster costs (serialisation, the Ray Client hop, an object store and a raylet per node, one
mirror cache per actor), not a speed-up; more nodes only help where they bring their own cores.

    python bench/ray_cluster.py                 # 512 groups (about 4 min with the node image built)
    python bench/ray_cluster.py --groups 128    # quicker
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.args import parser_for  # noqa: E402
from grader.groups.formats import load_group_file  # noqa: E402
from grader.groups.models import Group  # noqa: E402
from grader.integrations.cluster import REPOS, build_node_image, start_cluster  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "inventory_group.json"
WARMUP = 8
"""Groups graded before the clock starts: actors starting, each actor's first mirror of the repository."""

_IN_PROCESS = """
import json, resource, sys, time
from grader.groups.formats import load_group_file
from grader.graders.heuristic import HeuristicGrader
from grader.pipeline import grade_groups
(group,) = load_group_file(sys.argv[1])
groups = [group.model_copy(update={"group_id": f"g{i}"}) for i in range(int(sys.argv[2]))]
grade_groups(groups[:8], HeuristicGrader(), workers=int(sys.argv[3]))
began = time.monotonic()
results = grade_groups(groups, HeuristicGrader(), workers=int(sys.argv[3]))
took = time.monotonic() - began
graded = sum(r.status == "graded" for r in results)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": took, "graded": graded, "peak": peak}))
"""


def copies(count: int, repo: str) -> list[Group]:
    (group,) = load_group_file(EXAMPLE)
    task = group.task.model_copy(update={"repo": repo})
    return [group.model_copy(update={"group_id": f"g{i}", "task": task}) for i in range(count)]


def in_process(groups: int, workers: int) -> dict[str, float]:
    """The baseline, in a fresh process so that its peak memory is its own."""
    done = subprocess.run(
        [sys.executable, "-c", _IN_PROCESS, str(EXAMPLE), str(groups), str(workers)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def on_cluster(groups: int, workers: int) -> tuple[dict[str, float], dict[str, int]]:
    """Grade on a fresh cluster of `workers` worker nodes; (rate figures, peak memory per node)."""
    import ray

    from grader.integrations.ray import RayGrader

    cluster = start_cluster(workers=workers, cpus_per_worker=2)
    try:
        cluster.put_repositories(EXAMPLE.parent)
        cluster.connect()
        remote = RayGrader(actors=2 * workers, per_actor=2, actor_options=cluster.actor_options)
        remote.grade(copies(WARMUP, f"{REPOS}/inventory.bundle"))
        began = time.monotonic()
        results = remote.grade(copies(groups, f"{REPOS}/inventory.bundle"))
        took = time.monotonic() - began
        nodes = {r.details.get("ray", {}).get("node", "?").split()[0] for r in results}
        peaks = cluster.memory_peaks()
        remote.shutdown()
        ray.shutdown()
        graded = sum(r.status == "graded" for r in results)
        return {"seconds": took, "graded": graded, "nodes": len(nodes)}, {
            ("head" if n == cluster.head.name else n.rsplit("-", 2)[-2] + "-" + n.rsplit("-", 1)[-1]): p
            for n, p in peaks.items()
        }
    finally:
        cluster.close()


def main() -> None:
    parser = parser_for(__doc__)
    parser.add_argument("--groups", type=int, default=512)
    parser.add_argument("--workers", type=int, default=2, help="threads of the in-process baseline")
    args = parser.parse_args()
    print("node image:", build_node_image(progress=lambda line: print("  ", line, flush=True)))
    base = in_process(args.groups, args.workers)
    base_rate = args.groups / base["seconds"]
    print(f"\n{args.groups} groups, heuristic grader")
    print(
        f"in-process ({args.workers} threads): {base_rate:7.1f} groups/s"
        f"  peak RSS {base['peak'] / 2**20:6.0f} MiB"
        f"  ({base['graded']:.0f} graded)"
    )
    for workers in (1, 2):
        figures, peaks = on_cluster(args.groups, workers)
        rate = args.groups / figures["seconds"]
        print(
            f"cluster, {workers} worker node(s): {rate:7.1f} groups/s = {rate / base_rate:.2f} x in-process"
            f"  ({figures['graded']:.0f} graded on {figures['nodes']:.0f} node(s))"
        )
        for node, peak in sorted(peaks.items()):
            print(
                f"   peak memory {node:>14}: {peak / 2**20:5.0f} MiB = {peak / base['peak']:.2f} x in-process"
            )
    print(
        "\nAll nodes share this machine's cores with the baseline: the ratios are the cost of the cluster"
        " (Ray Client hop, serialisation, a raylet and object store per node), not a speed-up."
    )


if __name__ == "__main__":
    main()
