"""What `import grader` costs a fresh interpreter: modules loaded and wall time, against a baseline checkout.

    python bench/import_cost.py [BASELINE_ROOT] [--runs N] [--code 'import grader']

Each run starts a new interpreter with the checkout first on sys.path, imports, and reports how many modules
(`grader.*` and all) it loaded and the import's own wall time (perf_counter around the statement). Runs of the
two checkouts alternate, so machine load hits both alike; the medians and their ratio are printed. Without a
baseline only this checkout is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

PROBE = """
import sys, time
before = set(sys.modules)
start = time.perf_counter()
{code}
elapsed = time.perf_counter() - start
import json
new = [m for m in sys.modules if m not in before]
print(json.dumps({{"seconds": elapsed, "grader": sum(m.startswith("grader") for m in sys.modules),
                  "new": len(new), "all": len(sys.modules)}}))
"""


def measure(root: Path, code: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(code=code)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=root,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("baseline", nargs="?", type=Path, help="another checkout to compare with (e.g. main)")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--code", default="import grader")
    args = parser.parse_args()
    roots = {"this": Path(__file__).resolve().parent.parent}
    if args.baseline:
        roots["baseline"] = args.baseline.resolve()
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in roots}
    for _ in range(args.runs):
        for name, root in roots.items():
            samples[name].append(measure(root, args.code))
    medians = {}
    for name, runs in samples.items():
        medians[name] = statistics.median(r["seconds"] for r in runs)
        last = runs[-1]
        print(
            f"{name:8} {roots[name]}: `{args.code}` loads {last['grader']} grader modules, {last['new']} new"
            f" ({last['all']} in sys.modules); median {medians[name] * 1000:.1f} ms over {len(runs)} runs"
        )
    if "baseline" in medians:
        print(f"time ratio this/baseline: {medians['this'] / medians['baseline']:.3f}")


if __name__ == "__main__":
    main()
