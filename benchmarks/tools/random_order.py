"""What a grader's pairwise accuracy would be if it ranked each group's candidates in a random order.

    python benchmarks/tools/random_order.py RUN/results.jsonl --reference REFERENCES.jsonl [--draws 10000]

A grader that echoes the order its candidates were listed in (Gemma 3 270M does, every time) scores what a
random order scores: the labels and their order are drawn from the grading's seed. This reads a run's graded
groups, keeps each ranking's tiers (a tier is one class of equal patches, or a tie the grader chose) and puts
them in a random order, `--draws` times, scoring each draw exactly as `gagar eval` does (pairs pooled over
groups, ties half). It prints the mean, the 2.5th and 97.5th percentiles of the pooled accuracy, and where the
run's own figure falls among the draws. Nothing is graded and nothing is written.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from grader.evaluation.harness import score_result
from grader.models import GroupResult
from grader.references import load_references


def pooled(results: list[GroupResult], references: dict) -> tuple[float, int]:
    """Pairwise credit and scored pairs over the graded groups, as `gagar eval` pools them."""
    credit, pairs = 0.0, 0
    for result in results:
        score = score_result(result, references[result.group_id])
        credit += score.pairwise_credit
        pairs += score.scored_pairs
    return credit, pairs


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
    credit, pairs = pooled(graded, references)
    if not pairs:
        print(f"{args.results}: no reference pair is scored", file=sys.stderr)
        return 1
    observed = credit / pairs
    rng = random.Random(args.seed)
    draws = []
    for _ in range(args.draws):
        shuffled = []
        for result in graded:
            tiers = [list(tier) for tier in result.ranking]
            rng.shuffle(tiers)
            shuffled.append(result.model_copy(update={"ranking": tiers}))
        draw_credit, _ = pooled(shuffled, references)
        draws.append(draw_credit / pairs)
    draws.sort()
    low, high = draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]
    at_least = sum(d >= observed for d in draws) / len(draws)
    print(
        f"{len(graded)} graded groups, {pairs} scored pairs: the run scores {observed:.3f};"
        f" a random order of the same tiers scores {sum(draws) / len(draws):.3f} on average,"
        f" 95% of {len(draws)} draws in"
        f" [{low:.3f}, {high:.3f}], {at_least:.1%} of draws at least {observed:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
