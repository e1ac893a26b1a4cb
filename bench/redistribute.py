"""Batch redistribution speed: `redistribute_batch` over a flat batch against a per-group Python loop.

A trainer calls `redistribute_batch` once per step on the whole rollout batch, so it must cost little next to
the step. The baseline, measured in the same run, is the obvious loop: split the batch by group and call
`redistribute_group` on each. Same random batch for both (`--seed`), and the outputs are checked equal.

    python bench/redistribute.py                 # 100,000 rows in groups of about 8, 5 repeats
    python bench/redistribute.py --rows 1000000 --repeats 3

Target: the batch call at least 10x faster than the loop.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.args import parser_for  # noqa: E402
from grader.redistribution.redistribute import redistribute_batch, redistribute_group  # noqa: E402

TARGET = 10.0


def per_group_loop(
    advantages: np.ndarray, group_ids: np.ndarray, passed: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """The baseline: one `redistribute_group` call per group, results scattered back into place."""
    out = advantages.copy()
    order = np.argsort(group_ids, kind="stable")
    bounds = np.flatnonzero(np.diff(group_ids[order])) + 1
    for rows in np.split(order, bounds):
        result = redistribute_group(advantages[rows], passed[rows], weights[rows])
        out[rows] = result.advantages
    return out


def best_of(repeats: int, call: Callable[[], object]) -> float:
    """The fastest of `repeats` timed calls: the least disturbed by other work on the machine."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    group_ids = rng.integers(0, max(1, args.rows // args.group_size), args.rows)
    passed = rng.random(args.rows) < 0.5
    advantages = np.where(passed, 1.0, -1.0) + rng.normal(0, 0.1, args.rows)
    weights = rng.choice([1.0, 0.75, 0.5], args.rows)

    batch, _ = redistribute_batch(advantages, group_ids, passed, weights)
    loop = per_group_loop(advantages, group_ids, passed, weights)
    if not np.allclose(batch, loop, atol=1e-12):
        print("FAIL the batch call and the per-group loop disagree")
        return 1
    batch_s = best_of(args.repeats, lambda: redistribute_batch(advantages, group_ids, passed, weights))
    loop_s = best_of(
        max(1, args.repeats // 2), lambda: per_group_loop(advantages, group_ids, passed, weights)
    )
    ratio = loop_s / batch_s
    print(f"{'rows':>10} {'batch s':>9} {'loop s':>9} {'speed-up':>9}")
    print(f"{args.rows:>10,} {batch_s:>9.4f} {loop_s:>9.4f} {ratio:>8.1f}x")
    verdict = "PASS" if ratio >= TARGET else "FAIL"
    print(f"{verdict} batch call {ratio:.1f}x the per-group loop (target >= {TARGET:.0f}x)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
