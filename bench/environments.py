"""Environment layers: cold build, layer size and warm start per repository, against the base image start.

For each repository checkout given, the SWE-bench recipe of its version (swebench's tables) is built cold
(`--no-cache`, the interpreter image already there), its size read from the engine, and then the warm start
measured: the cache check (`build_environment` finding the layer) plus a sandbox opened on the layer running
one command, against the same sandbox on the default image (`gagar/python`) in the same run.

Run: python bench/environments.py OWNER/NAME:VERSION:CHECKOUT [...] [--runs 3] [--warm-only]
e.g. pytest-dev/pytest:5.4:/work/data/env/repos/pytest-dev__pytest-wt (a checkout at a base commit).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from bench.args import parser_for  # noqa: E402
from grader.sandbox import open_sandbox  # noqa: E402
from grader.sandbox.environments import build_environment, spec_for_task  # noqa: E402
from grader.sandbox.recipes import recipe_for  # noqa: E402
from tests.support.conftest_sandbox import make_repo  # noqa: E402


def warm_start(image: str | None, trees: object) -> float:
    started = time.perf_counter()
    with open_sandbox(trees, image=image) as sb:  # type: ignore[arg-type]
        result = sb.exec("base", "python3 -c 'import sys'")
        assert result.exit_code == 0, result.stderr
    return time.perf_counter() - started


def main() -> None:
    parser = parser_for(__doc__)
    parser.add_argument("cases", nargs="+", help="OWNER/NAME:VERSION:CHECKOUT")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--warm-only", action="store_true", help="skip the cold builds (layers already there)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        trees = make_repo(Path(tmp))
        baseline = statistics.median(warm_start(None, trees) for _ in range(args.runs))
        print(f"baseline: sandbox on the default image, open + one command: {baseline:.2f} s")
        head = f"{'cold build':>11} {'layer MB':>9} {'cache hit':>10} {'warm start':>11} {'ratio':>6}"
        print(f"{'repository':28} {head}")
        for case in args.cases:
            repo, version, checkout = case.split(":", 2)
            recipe = recipe_for(repo, version)
            spec = spec_for_task(repo, None, recipe.to_dict())
            cold = "-"
            if not args.warm_only:
                layer = build_environment(spec, Path(checkout), force=True, no_cache=True, timeout=3600)
                cold = f"{layer.seconds:.0f} s"
            hit = build_environment(spec, Path(checkout))
            assert not hit.built, "the layer should have been reused"
            warm = statistics.median(warm_start(hit.tag, trees) for _ in range(args.runs))
            print(
                f"{repo + ' ' + version:28} {cold:>11} {hit.size_bytes / 1e6:>9.0f} {hit.seconds:>9.2f}s "
                f"{warm:>10.2f}s {warm / baseline:>6.2f}"
            )


if __name__ == "__main__":
    main()
