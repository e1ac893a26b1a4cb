"""Show one preference instance to a labeller: its statement and its distinct resolved patches, names hidden.

    python benchmarks/tools/show_pair.py INSTANCE --source-root DIR [--recipe benchmarks/swebench-lite]
        [--reveal]

Reads from local git copies at the recipe's pinned commits (nothing is written). Candidates are shown as
A, B, C... in an order drawn from the instance id, so a labeller sees neither system names nor a fixed order;
`--reveal` prints the run behind each letter (for writing the label down once decided).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from grader.evaluation.prepare import SourceLocator, preference_candidates, read_at
from grader.evaluation.recipe import load_recipe, parse_predictions, parse_row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("instance")
    parser.add_argument("--source-root", type=Path, action="append", required=True)
    parser.add_argument("--recipe", type=Path, default=Path(__file__).resolve().parents[1] / "swebench-lite")
    parser.add_argument("--reveal", action="store_true", help="print the run behind each letter")
    args = parser.parse_args(argv)
    recipe = load_recipe(args.recipe)
    locator = SourceLocator(roots=args.source_root)
    candidates = preference_candidates(recipe).get(args.instance)
    if not candidates:
        print(f"{args.instance}: not a preference instance (fewer than two distinct resolved patches)")
        return 2
    instance = recipe.instances[args.instance]
    row_source = locator.find(instance.row.repository)
    assert row_source is not None, instance.row.repository
    row = parse_row(
        read_at(row_source, instance.row.commit, instance.row.path).decode(),
        instance.row.format,
        instance.row.path,
    )
    print(
        f"# {args.instance} ({instance.repository} @ {instance.base_commit})\n\n{row['problem_statement']}\n"
    )
    order = sorted(candidates, key=lambda c: hashlib.sha256(f"{args.instance}:{c.run}".encode()).hexdigest())
    for letter, candidate in zip("ABCDEFGHIJKLMNOP", order, strict=False):
        f = recipe.files[candidate.predictions]
        source = locator.find(f.repository)
        assert source is not None, f.repository
        patch = parse_predictions(read_at(source, f.commit, f.path).decode(), f.format, f.path)[args.instance]
        shown = f" = {candidate.run}" if args.reveal else ""
        print(f"## candidate {letter}{shown}\n\n{patch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
