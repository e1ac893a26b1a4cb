"""What a grader's pairwise accuracy would be if it ranked each group's candidates in a random order.

    python benchmarks/tools/random_order.py RUN/results.jsonl --reference REFERENCES.jsonl [--draws 10000]

A grader that echoes the order its candidates were listed in (Gemma 3 270M does, every time) scores what a
random order scores: the labels and their order are drawn from the grading's seed. This reads a run's graded
groups, keeps each ranking's tiers (a tier is one class of equal patches, or a tie the grader chose) and puts
them in a random order, `--draws` times, scoring each draw exactly as `gagar eval` does (pairs pooled over
groups, ties half). For all pairs and for each category of the references' pairs it prints the run's figure,
the draws' mean, their 2.5th and 97.5th percentiles, and the share of draws at least as high as the run.
Nothing is graded and nothing is written.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from grader.evaluation.harness import score_result
from grader.groups.models import GroupResult
from grader.ranking.references import load_references


def pooled(results: list[GroupResult], references: dict) -> dict[str, tuple[float, int]]:
    """Pairwise credit and scored pairs over the graded groups, as `gagar eval` pools them: "all", and each
    category of the references' pairs."""
    sums: dict[str, tuple[float, int]] = {}
    for result in results:
        score = score_result(result, references[result.group_id])
        parts = {"all": (score.pairwise_credit, score.scored_pairs), **score.by_category}
        for name, (credit, pairs) in parts.items():
            total_credit, total_pairs = sums.get(name, (0.0, 0))
            sums[name] = (total_credit + credit, total_pairs + pairs)
    return sums


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", type=Path, help="a run's results.jsonl (gagar eval or gagar grade)")
    parser.add_argument("--reference", type=Path, required=True, help="the references the run was scored on")
    parser.add_argument("--draws", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    references = load_references(args.reference)
    lines = args.results.read_text().splitlines()
    results = [GroupResult.model_validate_json(line) for line in lines if line.strip()]
    graded = [r for r in results if r.status == "graded" and r.group_id in references]
    if not graded:
        print(f"{args.results}: no graded group has a reference in {args.reference}", file=sys.stderr)
        return 1
    actual = pooled(graded, references)
    observed = {name: credit / pairs for name, (credit, pairs) in actual.items() if pairs}
    if not observed:
        print(f"{args.results}: no reference pair is scored", file=sys.stderr)
        return 1
    rng = random.Random(args.seed)
    draws: dict[str, list[float]] = {name: [] for name in observed}
    for _ in range(args.draws):
        shuffled = []
        for result in graded:
            tiers = [list(tier) for tier in result.ranking]
            rng.shuffle(tiers)
            shuffled.append(result.model_copy(update={"ranking": tiers}))
        for name, (credit, pairs) in pooled(shuffled, references).items():
            if name in draws:
                draws[name].append(credit / pairs)
    _, all_pairs = actual["all"]
    print(
        f"{len(graded)} graded groups, {all_pairs} scored pairs;"
        f" {args.draws} random orders of each ranking's tiers:"
    )
    for name in ["all", *sorted(n for n in observed if n != "all")]:
        values = sorted(draws[name])
        low, high = values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1]
        at_least = sum(v >= observed[name] for v in values) / len(values)
        print(
            f"{name}: the run scores {observed[name]:.3f};"
            f" a random order {sum(values) / len(values):.3f} on average,"
            f" 95% of draws in [{low:.3f}, {high:.3f}], {at_least:.1%} of draws at least {observed[name]:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
