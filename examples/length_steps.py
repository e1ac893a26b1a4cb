"""Group files for trying `gagar trend`: the bundled example over several training steps, with lengths.

The patches, task and pass flags are the bundled example's (`inventory_group.json`); only `response_length`
(tokens) is made up, seeded. In a *neutral* step each trajectory's length is drawn independently of anything
the grader sees. From step `--rewarding-from` on, the trajectories the heuristic grader prefers (the clean
fix first, the one that edits tests last) are made the longer ones, and lengths grow from step to step: what a
run looks like when the grader's credit follows length. Grade each step, then read the trend:

    python examples/length_steps.py /tmp/length --steps 6 --rewarding-from 4
    for i in 1 2 3 4 5 6; do gagar grade /tmp/length/step-$i.jsonl --out /tmp/length/run-$i; done
    gagar trend /tmp/length/run-{1,2,3,4,5,6}
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parent / "inventory_group.json"
# The heuristic grader's order of the example's passing trajectories, best first (see README).
PREFERRED = ["clean", "clean-respaced", "leftover-script", "reformats-report", "edits-tests"]


def step_groups(step: int, groups: int, rewarding: bool, seed: int = 0) -> list[dict]:
    """The groups of one step: copies of the example with `response_length` set on every trajectory.

    Args:
        step: the step number (1-based); it names the groups and, when rewarding, sets how long they are.
        groups: how many groups.
        rewarding: make the grader's preferred trajectories the long ones (else lengths are independent).
        seed: the seed; the same arguments give the same lengths.

    Returns:
        The groups as JSON-able dicts, with the example's repository given as an absolute path.
    """
    example = json.loads(EXAMPLE.read_text())
    example["task"]["repo"] = str((EXAMPLE.parent / example["task"]["repo"]).resolve())
    rng = np.random.default_rng([seed, step])
    out = []
    for g in range(groups):
        group = json.loads(json.dumps(example))
        group["group_id"] = f"step{step}-group{g}"
        for t in group["trajectories"]:
            if rewarding and t["id"] in PREFERRED:
                quality = len(PREFERRED) - PREFERRED.index(t["id"])  # 5 for the best, 1 for the worst
                t["response_length"] = int((900 + 350 * quality) * 1.15**step + rng.integers(0, 200))
            else:
                t["response_length"] = int(rng.integers(600, 3000))
        out.append(group)
    return out


def write_steps(directory: Path, steps: int, groups: int, rewarding_from: int, seed: int = 0) -> list[Path]:
    """Write `step-1.jsonl` .. `step-N.jsonl` into `directory`.

    Args:
        directory: where to write (created if needed).
        steps: how many steps.
        groups: groups per step.
        rewarding_from: the first rewarding step (beyond `steps`: none).
        seed: the seed.

    Returns:
        The files written, in step order.
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for step in range(1, steps + 1):
        path = directory / f"step-{step}.jsonl"
        rows = step_groups(step, groups, rewarding=step >= rewarding_from, seed=seed)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("directory", type=Path)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--groups", type=int, default=4, help="groups per step")
    parser.add_argument(
        "--rewarding-from", type=int, default=4, help="first step whose lengths follow credit"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for path in write_steps(args.directory, args.steps, args.groups, args.rewarding_from, args.seed):
        print(path)


if __name__ == "__main__":
    main()
