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
from grader.evaluation.recipe import (
    BenchmarkRecipe,
    BenchmarkRecipeError,
    load_recipe,
    parse_predictions,
    parse_row,
)


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
    print(task_header(recipe, locator, args.instance))
    order = sorted(candidates, key=lambda c: hashlib.sha256(f"{args.instance}:{c.run}".encode()).hexdigest())
    for letter, candidate in zip("ABCDEFGHIJKLMNOP", order, strict=False):
        shown = f" = {candidate.run}" if args.reveal else ""
        print(f"## candidate {letter}{shown}\n\n{patch_text(recipe, locator, args.instance, candidate.run)}")
    return 0


def task_header(recipe: BenchmarkRecipe, locator: SourceLocator, instance_id: str) -> str:
    """The instance's title line and problem statement, read from its dataset row at its pinned commit.

    Raises:
        BenchmarkRecipeError: the row's source is not here, or it does not parse.
    """
    instance = recipe.instances[instance_id]
    row_source = locator.find(instance.row.repository)
    if row_source is None:
        raise BenchmarkRecipeError(
            f"{instance_id}: source {instance.row.repository} not found under --source-root"
        )
    row = parse_row(
        read_at(row_source, instance.row.commit, instance.row.path).decode(),
        instance.row.format,
        instance.row.path,
    )
    return f"# {instance_id} ({instance.repository} @ {instance.base_commit})\n\n{row['problem_statement']}\n"


def patch_text(recipe: BenchmarkRecipe, locator: SourceLocator, instance_id: str, run: str) -> str:
    """The patch `run` published for `instance_id`, read from its predictions file at its pinned commit.

    Raises:
        BenchmarkRecipeError: no such candidate, its source is not here, or the file does not parse.
    """
    found = [c for c in recipe.candidates if c.instance == instance_id and c.run == run]
    if not found:
        raise BenchmarkRecipeError(f"{instance_id}: no candidate of run {run!r}")
    f = recipe.files[found[0].predictions]
    source = locator.find(f.repository)
    if source is None:
        raise BenchmarkRecipeError(f"{instance_id}: source {f.repository} not found under --source-root")
    return parse_predictions(read_at(source, f.commit, f.path).decode(), f.format, f.path)[instance_id]


if __name__ == "__main__":
    sys.exit(main())
