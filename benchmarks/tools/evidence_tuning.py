"""Tune the heuristic's execution-evidence weights on one split of a prepared benchmark track (dev only).

For every group of the split it grades once with the heuristic (the evidence stage runs, or reads its cache),
keeps each candidate's penalty without the execution signals and its signal counts, then for each weight set
of a grid re-ranks the classes and scores the ranking against the references as `gagar eval` does
(`reference_credit`, pooled over pairs). It prints each signal's right:wrong counts over the reference pairs
where the signal differs (right: the worse candidate has more of it) and the grid's figures.

    python benchmarks/tools/evidence_tuning.py --track verification --split dev --out runs/tuning-ver.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from grader.evaluation.benchmark import load_benchmark
from grader.graders.evidence import SIGNALS
from grader.graders.heuristic import EVIDENCE_PENALTIES, LINE_SIGNAL_CAP, HeuristicGrader
from grader.ranking.references import reference_credit
from grader.workspace.workspace import open_workspace

GRID = (0.0, 0.5, 1.0, 2.0, 3.0)


def collect(track: str, split: str, budget: float) -> list[dict[str, Any]]:
    """Grade every group of the split; per group its references' pairs and per class its penalties."""
    from grader.evaluation.prepare import prepared_root

    bench = load_benchmark(prepared_root() / "swebench-lite" / track)
    wanted = set(bench.group_ids(split))
    grader = HeuristicGrader(evidence_budget=budget)
    rows = []
    for group_id, group in sorted(bench.groups.items()):
        if group_id not in wanted:
            continue
        reference = bench.references[group_id]
        with open_workspace(group) as workspace:
            view = workspace.view()
            grade = grader.grade(view)
            classes = {members[0]: list(members) for members in view.classes}
        penalties = {}
        for representative, members in classes.items():
            signals = grade.signals[representative]
            execution = signals.get("execution", {})
            ran = sum(EVIDENCE_PENALTIES[n] * min(LINE_SIGNAL_CAP, execution.get(n, 0)) for n in SIGNALS)
            penalties[representative] = {
                "members": members,
                "static": signals["penalty"] - ran,
                "execution": {n: execution.get(n, 0) for n in SIGNALS},
            }
        rows.append(
            {
                "group_id": group_id,
                "classes": penalties,
                "pairs": [[better, worse] for better, worse in _pairs(reference)],
                "reference": reference,
                "evidence": grade.details.get("evidence", {}),
            }
        )
        print(f"{group_id}: {grade.details.get('evidence', {}).get('seconds')} s", file=sys.stderr)
    return rows


def _pairs(reference: Any) -> list[tuple[str, str]]:
    return [(p.better, p.worse) for p in reference.preferences]


def ranking(row: dict[str, Any], weights: dict[str, float]) -> list[list[str]]:
    scored: dict[float, list[str]] = {}
    for entry in row["classes"].values():
        penalty = entry["static"] + sum(
            weights[n] * min(LINE_SIGNAL_CAP, entry["execution"][n]) for n in SIGNALS
        )
        scored.setdefault(round(penalty, 6), []).extend(entry["members"])
    return [scored[p] for p in sorted(scored)]


def score(rows: list[dict[str, Any]], weights: dict[str, float]) -> float:
    credit = total = 0.0
    for row in rows:
        got, counted = reference_credit(ranking(row, weights), row["reference"])
        credit += got
        total += counted
    return credit / total if total else float("nan")


def right_wrong(rows: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    counts = {n: [0, 0] for n in SIGNALS}
    for row in rows:
        of = {m: e["execution"] for e in row["classes"].values() for m in e["members"]}
        for better, worse in row["pairs"]:
            if better not in of or worse not in of:
                continue
            for n in SIGNALS:
                b, w = min(LINE_SIGNAL_CAP, of[better][n]), min(LINE_SIGNAL_CAP, of[worse][n])
                if b != w:
                    counts[n][0 if w > b else 1] += 1
    return {n: (r, w) for n, (r, w) in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--track", choices=("verification", "preference"), required=True)
    parser.add_argument(
        "--split", choices=("dev",), default="dev", help="dev only: test is read once, by eval"
    )
    parser.add_argument("--budget", type=float, default=300.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = collect(args.track, args.split, args.budget)
    print(f"{len(rows)} groups, {sum(len(r['pairs']) for r in rows)} pairs")
    for name, (right, wrong) in right_wrong(rows).items():
        print(f"  {name}: {right}:{wrong}")
    zero = {n: 0.0 for n in SIGNALS}
    print(f"no execution signal: {score(rows, zero):.3f}")
    results = []
    for values in itertools.product(GRID, repeat=len(SIGNALS)):
        weights = dict(zip(SIGNALS, values, strict=True))
        results.append((score(rows, weights), values))
    results.sort(key=lambda item: (-item[0], sum(item[1])))
    for value, weights in results[:15]:
        print(f"{value:.3f}  " + "  ".join(f"{n}={w:g}" for n, w in zip(SIGNALS, weights, strict=True)))
    for name in SIGNALS:
        for w in GRID[1:]:
            weights = dict(zero, **{name: w})
            print(f"only {name}={w:g}: {score(rows, weights):.3f}")
    if args.out:
        serialisable = [{k: v for k, v in r.items() if k != "reference"} for r in rows]
        args.out.write_text(json.dumps(serialisable, indent=1))


if __name__ == "__main__":
    main()
