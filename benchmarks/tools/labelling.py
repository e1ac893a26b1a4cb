"""Blind double labelling of a recipe's preference pairs that carry no probe (hygiene, scope, design, tests).

    python benchmarks/tools/labelling.py pairs [--recipe DIR] [--seed 26] [--per-instance 10]
    python benchmarks/tools/labelling.py show PAIR_ID --source-root DIR [--recipe DIR]
    python benchmarks/tools/labelling.py agree [--recipe DIR]

`pairs` draws the pairs to label into `labelling/pairs.jsonl`: for each preference instance of a repository
whose sources are usable here, one representative per `same_code` class (the runs whose fixes are the same
code, ignoring whitespace, comments and new top-level files) and every pair between classes, at most
`--per-instance` of them (a seeded choice), each shown in a seeded orientation as A and B. Pairs already in
`references.jsonl` (the probed correctness and behaviour pairs) are left out. Same recipe and seed: the same
file. Labels refer to pair ids, so a draw that differs from an existing `pairs.jsonl` (a probe added since
changes it) is refused unless `--force`.

`show` prints one pair as a labeller sees it: the task statement and the two patches as A and B, never a run
name. A labeller reads pairs only through `show` and writes `labelling/labeller-X.jsonl`, one line per pair:
`{"pair", "verdict": "A" | "B" | "none", "category", "reason"}` (labelling/README.md gives the instructions).

`agree` reads both labellers' files, writes `labelling/agreement.json` (counts, raw agreement, Cohen's kappa
over verdicts, per category), writes every doubly labelled pair's two records into `labels.jsonl` (the
benchmark format's double-labelling records) and the pairs both labellers call the same side better with the
same category into `references.jsonl`; disagreements and "none" are left out. A pair a probe has ordered
since the draw counts in the agreement but is neither recorded nor kept (it belongs to the probe track).
Rerunning it replaces what an earlier run wrote, nothing else. The pairs were drawn before the recipe was
split: `agree` writes every pair's lines here, and `make_swebench_lite.py` then moves those of an instance now
in swebench-lite-large there (tests/evaluation/test_bench_prepare.py checks that each recipe's labels name its
own instances).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from show_pair import patch_text, task_header  # noqa: E402

from grader.errors import GagarError, InvalidReference  # noqa: E402
from grader.evaluation.benchmark import PROBED  # noqa: E402
from grader.evaluation.prepare import SourceLocator, preference_candidates  # noqa: E402
from grader.evaluation.recipe import BenchmarkRecipeError, load_recipe  # noqa: E402
from grader.ranking.references import CATEGORIES, load_references  # noqa: E402

DEFAULT_RECIPE = Path(__file__).resolve().parents[1] / "swebench-lite"
AVAILABLE_REPOSITORIES = (
    "astropy/astropy",
    "mwaskom/seaborn",
    "pylint-dev/pylint",
    "pytest-dev/pytest",
    "sphinx-doc/sphinx",
    "sympy/sympy",
)
"""Task repositories whose sources could be fetched where the pairs were drawn (django, scikit-learn and
matplotlib were over the snapshot limit)."""
LABELLED_CATEGORIES = tuple(c for c in CATEGORIES if c not in PROBED)
VERDICTS = ("A", "B", "none")
LABELLERS = ("labeller-a", "labeller-b")
FOLDER = "labelling"


class LabellingError(BenchmarkRecipeError):
    """A pairs or labeller file that breaks its format; the message names the file, the line and the cause."""


@dataclass(frozen=True)
class Pair:
    """One pair to label: candidate `a` is shown as A, `b` as B."""

    id: str
    instance: str
    repository: str
    split: str
    a: str
    b: str

    def to_json(self) -> dict[str, str]:
        return {
            "pair": self.id,
            "instance": self.instance,
            "repository": self.repository,
            "split": self.split,
            "A": self.a,
            "B": self.b,
        }


@dataclass(frozen=True)
class Verdict:
    """One labeller's line: which side is clearly better ("none": neither), the category and why."""

    pair: str
    verdict: str
    category: str | None
    reason: str


def draw_pairs(
    recipe_root: Path,
    seed: int = 26,
    per_instance: int = 10,
    repositories: tuple[str, ...] = AVAILABLE_REPOSITORIES,
) -> list[Pair]:
    """The pairs to label, in labelling order (by instance, then the seeded draw).

    Args:
        recipe_root: the recipe folder (holding preference.jsonl and references.jsonl).
        seed: seeds the choice and the orientation of each instance's pairs (per instance, so adding an
            instance changes no other instance's pairs).
        per_instance: at most this many pairs of one instance.
        repositories: the task repositories whose instances are drawn from.

    Returns:
        The pairs, numbered p001, p002...

    Raises:
        BenchmarkRecipeError: the recipe does not load, or a class representative is not a deduplicated
            resolved candidate of its instance.
    """
    recipe = load_recipe(recipe_root)
    resolved = {i: {c.run for c in cs} for i, cs in preference_candidates(recipe).items()}
    decided = _decided_pairs(recipe_root / "references.jsonl")
    pairs: list[Pair] = []
    for line in (recipe_root / "preference.jsonl").read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        instance = item["instance"]
        if item["repository"] not in repositories or len(item["same_code"]) < 2:
            continue
        classes = [sorted(runs) for runs in item["same_code"]]
        for runs in classes:
            if runs[0] not in resolved.get(instance, set()):
                raise BenchmarkRecipeError(f"{instance}: {runs[0]} is not a distinct resolved candidate")
        between = [
            (first, second)
            for i, first in enumerate(classes)
            for second in classes[i + 1 :]
            if not any(frozenset((x, y)) in decided.get(instance, set()) for x in first for y in second)
        ]
        rng = random.Random(f"{seed}:{instance}")
        chosen = rng.sample(between, min(per_instance, len(between)))
        for first, second in chosen:
            a, b = (first[0], second[0]) if rng.random() < 0.5 else (second[0], first[0])
            split = recipe.split[instance]
            pairs.append(Pair(f"p{len(pairs) + 1:03d}", instance, item["repository"], split, a, b))
    return pairs


def _decided_pairs(path: Path) -> dict[str, set[frozenset[str]]]:
    """The pairs references.jsonl already orders with a probe (correctness or behaviour), per instance."""
    decided: dict[str, set[frozenset[str]]] = {}
    if not path.is_file():
        return decided
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            if item.get("category") in PROBED:
                decided.setdefault(item["group_id"], set()).add(frozenset((item["better"], item["worse"])))
    return decided


def write_pairs(pairs: list[Pair], path: Path) -> None:
    """Write `pairs` as JSONL (one pair a line, keys sorted)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p.to_json(), sort_keys=True) + "\n" for p in pairs), encoding="utf-8")


def read_pairs(path: Path) -> dict[str, Pair]:
    """Pair id -> pair, from a pairs.jsonl.

    Raises:
        LabellingError: the file is missing, a line is not a pair, or an id repeats.
    """
    if not path.is_file():
        raise LabellingError(f"{path}: missing; run `labelling.py pairs` first")
    pairs: dict[str, Pair] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            pair = Pair(
                item["pair"], item["instance"], item["repository"], item["split"], item["A"], item["B"]
            )
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise LabellingError(f"{path}:{number}: not a pair ({exc})") from exc
        if pair.id in pairs:
            raise LabellingError(f"{path}:{number}: pair {pair.id} listed twice")
        pairs[pair.id] = pair
    return pairs


def read_verdicts(path: Path, pairs: dict[str, Pair]) -> dict[str, Verdict]:
    """Pair id -> verdict, from one labeller's file (missing file: nothing labelled yet).

    Raises:
        LabellingError: a line is not JSON, names an unknown pair or a pair twice, has a verdict other than
            A, B or none, a category outside hygiene/scope/design/tests on an A or B verdict, or no reason.
    """
    verdicts: dict[str, Verdict] = {}
    if not path.is_file():
        return verdicts
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path.name}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LabellingError(f"{where}: not JSON ({exc})") from exc
        pair, verdict = item.get("pair"), item.get("verdict")
        category, reason = item.get("category"), str(item.get("reason") or "").strip()
        if pair not in pairs:
            raise LabellingError(f"{where}: unknown pair {pair!r}")
        if pair in verdicts:
            raise LabellingError(f"{where}: pair {pair} labelled twice")
        if verdict not in VERDICTS:
            raise LabellingError(f"{where}: pair {pair}: verdict is one of A, B, none, found {verdict!r}")
        if verdict != "none" and category not in LABELLED_CATEGORIES:
            raise LabellingError(
                f"{where}: pair {pair}: category is one of {', '.join(LABELLED_CATEGORIES)}, "
                f"found {category!r}"
            )
        if not reason:
            raise LabellingError(f"{where}: pair {pair}: no reason")
        verdicts[pair] = Verdict(pair, verdict, category if verdict != "none" else None, reason)
    return verdicts


def cohen_kappa(first: list[str], second: list[str], labels: tuple[str, ...] = VERDICTS) -> float | None:
    """Cohen's kappa of two labellers' labels on the same items; None when undefined (no items, or both
    labellers used one same label throughout, so chance agreement is 1)."""
    n = len(first)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(first, second, strict=True)) / n
    a, b = Counter(first), Counter(second)
    expected = sum(a[label] * b[label] for label in labels) / (n * n)
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def agreement_report(
    pairs: dict[str, Pair],
    first: dict[str, Verdict],
    second: dict[str, Verdict],
    superseded: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Counts, raw agreement, kappa over verdicts and per-category figures over the pairs both labelled.

    `superseded`: pairs a probe has ordered since they were drawn; they count in the agreement (it measures
    the labellers) but are not kept.
    """
    both = sorted(set(first) & set(second))
    va, vb = [first[p].verdict for p in both], [second[p].verdict for p in both]
    kept = [p for p in both if _agreed(first[p], second[p]) and p not in superseded]
    same_side = [p for p in both if first[p].verdict == second[p].verdict and first[p].verdict != "none"]
    kappa = cohen_kappa(va, vb)
    per_category = {
        c: {
            "labeller_a": sum(first[p].category == c for p in both),
            "labeller_b": sum(second[p].category == c for p in both),
            "both": sum(first[p].category == c == second[p].category for p in both),
            "kept": sum(first[p].category == c for p in kept),
        }
        for c in LABELLED_CATEGORIES
    }
    return {
        "pairs": len(pairs),
        "labelled": {"labeller_a": len(first), "labeller_b": len(second), "both": len(both)},
        "verdicts": {
            "labeller_a": {v: va.count(v) for v in VERDICTS},
            "labeller_b": {v: vb.count(v) for v in VERDICTS},
        },
        "same_verdict": sum(x == y for x, y in zip(va, vb, strict=True)),
        "raw_agreement": round(sum(x == y for x, y in zip(va, vb, strict=True)) / len(both), 4)
        if both
        else None,
        "cohen_kappa": round(kappa, 4) if kappa is not None else None,
        "same_side_better": len(same_side),
        "same_side_other_category": sum(first[p].category != second[p].category for p in same_side),
        "opposite_sides": sum({first[p].verdict, second[p].verdict} == {"A", "B"} for p in both),
        "one_none": sum((first[p].verdict == "none") != (second[p].verdict == "none") for p in both),
        "both_none": sum(first[p].verdict == "none" == second[p].verdict for p in both),
        "superseded_by_probe": sorted(set(both) & superseded),
        "kept": len(kept),
        "per_category": per_category,
    }


def _agreed(first: Verdict, second: Verdict) -> bool:
    return first.verdict == second.verdict != "none" and first.category == second.category


def agree(recipe_root: Path) -> dict[str, Any]:
    """Write agreement.json, the double-labelling records and the agreed references (see the module doc).

    Returns:
        The agreement report.

    Raises:
        LabellingError: a pairs or labeller file breaks its format.
        InvalidReference: the kept pairs with the references already there form a cycle or contradict one;
            nothing is written then (the message names the group and the pair).
    """
    folder = recipe_root / FOLDER
    pairs = read_pairs(folder / "pairs.jsonl")
    first = read_verdicts(folder / "labeller-a.jsonl", pairs)
    second = read_verdicts(folder / "labeller-b.jsonl", pairs)
    references_path = recipe_root / "references.jsonl"
    # A pair a probe has ordered since the draw belongs to the probe track: no label record, no label
    # reference (the benchmark format would otherwise see it both probed and labelled).
    probed = _decided_pairs(references_path)
    superseded = frozenset(
        p for p, pair in pairs.items() if frozenset((pair.a, pair.b)) in probed.get(pair.instance, set())
    )
    report = agreement_report(pairs, first, second, superseded)
    both = sorted((set(first) & set(second)) - superseded)
    ours = {(pairs[p].instance, frozenset((pairs[p].a, pairs[p].b))) for p in pairs}

    labels_path = recipe_root / "labels.jsonl"
    labels = [line for line in _jsonl_lines(labels_path) if json.loads(line).get("labeller") not in LABELLERS]
    for p in both:
        for labeller, verdict in zip(LABELLERS, (first[p], second[p]), strict=True):
            record = {
                "group_id": pairs[p].instance,
                "a": pairs[p].a,
                "b": pairs[p].b,
                "labeller": labeller,
                "verdict": {"A": "a", "B": "b", "none": "tie"}[verdict.verdict],
                "category": verdict.category,
                "reason": verdict.reason,
            }
            labels.append(json.dumps(record))

    references = []
    for line in _jsonl_lines(references_path):
        item = json.loads(line)
        mine = (item.get("group_id"), frozenset((item.get("better"), item.get("worse")))) in ours
        if not (mine and item.get("category") not in PROBED):
            references.append(line)
    for p in both:
        if _agreed(first[p], second[p]):
            pair = pairs[p]
            better, worse = (pair.a, pair.b) if first[p].verdict == "A" else (pair.b, pair.a)
            reason = f"{first[p].reason.rstrip('.')}; {second[p].reason.rstrip('.')}"
            item = {
                "group_id": pair.instance,
                "better": better,
                "worse": worse,
                "category": first[p].category,
                "reason": reason,
            }
            references.append(json.dumps(item))

    staged = references_path.with_name("references.jsonl.new")
    staged.write_text("".join(line + "\n" for line in references), encoding="utf-8")
    try:
        load_references(staged)  # a cycle or contradiction stops here, before anything is replaced
    except InvalidReference:
        staged.unlink()
        raise
    staged.replace(references_path)
    labels_path.write_text("".join(line + "\n" for line in labels), encoding="utf-8")
    _describe_labellers(recipe_root / "recipe.json")
    (folder / "agreement.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _jsonl_lines(path: Path) -> list[str]:
    if not path.is_file():
        return []
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _describe_labellers(path: Path) -> None:
    """Record who the two labellers are in recipe.json (`prepare` copies it into the provenance)."""
    manifest = json.loads(path.read_text(encoding="utf-8"))
    described = manifest.setdefault("labellers", {})
    for labeller in LABELLERS:
        described[labeller] = (
            "an independent labeller (an AI session of the project) who saw only the task statement and the "
            "two patches as A and B through benchmarks/tools/labelling.py show, never the run names nor the "
            "other labeller's labels; protocol in labelling/README.md"
        )
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")  # make_swebench_lite.py layout


def show(recipe_root: Path, pair_id: str, source_roots: list[Path]) -> str:
    """The text a labeller sees for one pair: statement, then patch A and patch B, no run name.

    Raises:
        LabellingError: unknown pair id.
        BenchmarkRecipeError: a source is not under `source_roots`, or does not parse.
    """
    pairs = read_pairs(recipe_root / FOLDER / "pairs.jsonl")
    if pair_id not in pairs:
        raise LabellingError(f"unknown pair {pair_id!r} (pairs.jsonl has {len(pairs)} pairs)")
    pair = pairs[pair_id]
    recipe = load_recipe(recipe_root)
    locator = SourceLocator(roots=source_roots)
    parts = [f"# pair {pair.id} of {len(pairs)}\n", task_header(recipe, locator, pair.instance)]
    for letter, run in (("A", pair.a), ("B", pair.b)):
        parts.append(f"## patch {letter}\n\n{patch_text(recipe, locator, pair.instance, run)}")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE)
    sub = parser.add_subparsers(dest="command", required=True)
    draw = sub.add_parser("pairs", help="draw the pairs into labelling/pairs.jsonl")
    draw.add_argument("--seed", type=int, default=26)
    draw.add_argument("--per-instance", type=int, default=10)
    draw.add_argument("--force", action="store_true", help="replace a pairs.jsonl that differs")
    one = sub.add_parser("show", help="print one pair as a labeller sees it")
    one.add_argument("pair")
    one.add_argument("--source-root", type=Path, action="append", required=True)
    sub.add_parser("agree", help="agreement report, double-labelling records and agreed references")
    args = parser.parse_args(argv)
    try:
        if args.command == "pairs":
            pairs = draw_pairs(args.recipe, args.seed, args.per_instance)
            target = args.recipe / FOLDER / "pairs.jsonl"
            if target.is_file() and not args.force and read_pairs(target) != {p.id: p for p in pairs}:
                # labels refer to pair ids: a redraw (new probes change it) must not renumber silently
                raise LabellingError(f"{target}: exists and differs from this draw; --force replaces it")
            write_pairs(pairs, target)
            by_repo = Counter(p.repository for p in pairs)
            print(
                f"{len(pairs)} pairs over {len({p.instance for p in pairs})} instances: "
                f"{dict(sorted(by_repo.items()))}"
            )
        elif args.command == "show":
            print(show(args.recipe, args.pair, args.source_root))
        else:
            report = agree(args.recipe)
            print(json.dumps({k: report[k] for k in ("labelled", "raw_agreement", "cohen_kappa", "kept")}))
    except GagarError as exc:
        print(f"labelling: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
