"""Regenerate examples/benchmark-tiny: a format example of a grader benchmark, from gagar's own example data.

    PYTHONPATH=. python examples/make_benchmark.py

It is NOT the public benchmark of issue 14 (real passing patches of public systems): it is one small task,
our own, laid out in the benchmark format (docs/benchmark.md) so that every part of the format has an
instance the tests can run. The task is examples/inventory_group.json's (the bundle of
examples/make_example.py); its patches are that file's, `gagar degrade`'s variants in examples/degraded, and
one written here (`returns-int`). The same task appears as four groups, one per kind of reference, each
declared its own "instance" so that the dev/test split has something to split; in a real benchmark an
instance is one upstream task and its groups never straddle the split.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from grader.evaluation.harness import permuted
from grader.graders.heuristic import HeuristicGrader
from grader.groups.formats import load_groups
from grader.groups.models import Group
from grader.pipeline import GradingOptions, grade_group_sync
from grader.ranking.references import (
    Preference,
    Reference,
    consensus_reference,
    reference_from_degrade,
    reference_from_ranking,
)

HERE = Path(__file__).resolve().parent
OUT = HERE / "benchmark-tiny"
sys.path.insert(0, str(HERE))
import make_example  # noqa: E402 - the example's own generator, beside this file

# The gagar commits that last changed examples/inventory_group.json and examples/degraded/groups.jsonl: the
# patches' provenance. Written down rather than asked of git, so a shallow clone regenerates the same files.
EXAMPLE_COMMIT = "c9b8177ea8b4140de3be2dca471f532e1d762664"
DEGRADED_COMMIT = "e1fd0aa82bc08a6ea179d84aa030eb4d3eafb940"
BUNDLE = "bundles/inventory.bundle"
REPO_FROM_GROUPS = f"../{BUNDLE}"
PAIRS_KEPT = ("clean", "clean-respaced", "leftover-script", "edits-tests", "reformats-report", "wrong-value")
VARIANTS_KEPT = ("clean+debug_output", "clean+swallowed_exception")
RETURNS_INT_NOTE = "The guard, returning the int 0 where the docstring promises 0.0."

# (better, worse, category, reason): the pairs of inv-pairs. Correctness and behaviour pairs carry a probe.
PROBED_PAIRS = [
    (
        "clean",
        "returns-int",
        "correctness",
        "average_price([]) returns the int 0, not the float 0.0 the docstring and annotation promise.",
        "probes/average_of_nothing_is_float.py",
    ),
    (
        "clean",
        "clean+debug_output",
        "behaviour",
        "Library code that prints its argument on every call of average_price.",
        "probes/average_prints_nothing.py",
    ),
]
# Two labellers' verdicts ("a", "b" or "tie") on the other pairs, with the category and reason each gave.
LABELLED_PAIRS = [
    ("clean", "leftover-script", "a", "a", "hygiene", "Leaves a reproduction script at the repository root."),
    ("clean", "edits-tests", "a", "a", "tests", "Loosens an existing assertion to accept None."),
    ("clean", "reformats-report", "a", "a", "scope", "Restyles report.py, which the fix does not concern."),
    (
        "clean",
        "clean+swallowed_exception",
        "a",
        "a",
        "design",
        "Wraps the guard in try/except Exception: pass, which would hide a future error.",
    ),
    # Disagreed: left out of the references.
    ("clean", "clean-respaced", "a", "tie", "hygiene", "A double space and a trailing space in the guard."),
    ("leftover-script", "reformats-report", "a", "b", "hygiene", "A stray file against a restyled one."),
]
# The probes are hand-written and live in the benchmark folder; regenerating keeps them as they are.
PROBES = OUT / "probes"
LABELLERS = {
    "author": "The example's author: the notes examples/make_example.py gives each trajectory.",
    "reviewer": "A second, separate pass by a gagar developer session reading each pair's diff; not an "
    "independent human labeller (this is a format example).",
}


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def returns_int_patch() -> str:
    """The guard returning `0`, as git's diff against the example's base."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "inventory"
        git("clone", "--quiet", "--branch", "main", str(HERE / "inventory.bundle"), str(repo))
        stock = make_example.GUARDED.replace("return 0.0", "return 0")
        return make_example.diff(repo, {"inventory/stock.py": stock})


def heuristic_rankings(group: Group, k: int) -> list[list[list[str]]]:
    """K gradings of the group by the heuristic, each with the candidates in another order (the group as
    loaded from its file: a relative repository path resolves there)."""
    options = GradingOptions(grade_all_pass=True)
    return [grade_group_sync(permuted(group, i), HeuristicGrader(), options).ranking for i in range(k)]


def main(out: Path = OUT) -> None:
    """Write the benchmark folder (replacing what is there).

    Args:
        out: the folder; examples/benchmark-tiny by default.
    """
    (original,) = load_groups([HERE / "inventory_group.json"])
    (degraded,) = load_groups([HERE / "degraded" / "groups.jsonl"])
    assert isinstance(original, Group) and isinstance(degraded, Group)

    def bare(t, **metadata):  # advantages are recomputed on load
        return t.model_copy(update={"advantage": None, "metadata": metadata or dict(t.metadata)})

    task = original.task.model_copy(update={"repo": REPO_FROM_GROUPS})
    returns_int = original.trajectory("clean").model_copy(
        update={"id": "returns-int", "patch": returns_int_patch(), "metadata": {"note": RETURNS_INT_NOTE}}
    )
    pairs_group = Group(
        group_id="inv-pairs",
        task=task,
        trajectories=[bare(original.trajectory(t)) for t in PAIRS_KEPT]
        + [bare(degraded.trajectory(t), note=degraded.trajectory(t).metadata["note"]) for t in VARIANTS_KEPT]
        + [bare(returns_int)],
    )
    degrade_group = degraded.model_copy(
        update={
            "group_id": "inv-degrade",
            "task": task,
            "trajectories": [bare(t) for t in degraded.trajectories],
        }
    )
    ranking_group = original.model_copy(
        update={
            "group_id": "inv-ranking",
            "task": task,
            "trajectories": [bare(t) for t in original.trajectories],
        }
    )
    consensus_group = ranking_group.model_copy(update={"group_id": "inv-consensus"})
    groups = [pairs_group, degrade_group, ranking_group, consensus_group]

    references: list[Reference] = [
        Reference("inv-pairs", "pairwise", tuple(_pairwise_preferences())),
        reference_from_degrade(degrade_group, equivalent=["clean-respaced"]),
        reference_from_ranking(
            "inv-ranking",
            [["clean", "clean-respaced"], ["reformats-report"], ["leftover-script"], ["edits-tests"]],
            details={"source": "the example's author: a restyled file < a stray script < a weakened test"},
        ),
        consensus_reference("inv-consensus", heuristic_rankings(original, 5), 0.8),
    ]

    scripts = {f"probes/{p.name}": p.read_bytes() for p in sorted(PROBES.glob("*.py"))}
    if out.exists():
        shutil.rmtree(out)
    for folder in ("groups", "bundles", "probes"):
        (out / folder).mkdir(parents=True)
    shutil.copyfile(HERE / "inventory.bundle", out / BUNDLE)
    with open(out / "groups" / "inventory.jsonl", "w", encoding="utf-8") as handle:
        for group in groups:
            handle.write(group.model_dump_json(exclude_none=True) + "\n")
    with open(out / "references.jsonl", "w", encoding="utf-8") as handle:
        for reference in references:
            if reference.kind == "pairwise":
                for pref in reference.preferences:
                    handle.write(json.dumps({"group_id": reference.group_id, **pref.to_dict()}) + "\n")
            else:
                handle.write(json.dumps({"group_id": reference.group_id, **reference.to_dict()}) + "\n")
    _write_json(
        out / "split.json",
        {
            "dev": ["inventory/ranking", "inventory/consensus"],
            "test": ["inventory/pairs", "inventory/degrade"],
        },
    )
    base = original.task.base_commit
    assert git("bundle", "list-heads", str(out / BUNDLE)).split()[0] == base
    with tempfile.TemporaryDirectory() as tmp:
        git("init", "--quiet", "--bare", tmp)
        git("-C", tmp, "fetch", "--quiet", str(out / BUNDLE), "+refs/*:refs/*")
        tree_hash = git("-C", tmp, "rev-parse", f"{base}^{{tree}}").strip()
    patches: dict[str, dict[str, dict[str, str]]] = {}
    for reference in references:
        group = next(g for g in groups if g.group_id == reference.group_id)
        for tid in sorted(reference.ids()):
            trajectory = group.trajectory(tid)
            if tid == "returns-int":
                record = {
                    "repository": ".",
                    "path": "groups/inventory.jsonl",
                    "note": "written by examples/make_benchmark.py",
                }
            elif "degradation" in trajectory.metadata or tid in VARIANTS_KEPT:
                record = {
                    "repository": "gagar",
                    "commit": DEGRADED_COMMIT,
                    "path": "examples/degraded/groups.jsonl",
                }
            else:
                record = {
                    "repository": "gagar",
                    "commit": EXAMPLE_COMMIT,
                    "path": "examples/inventory_group.json",
                }
            patches.setdefault(reference.group_id, {})[tid] = record
    _write_json(
        out / "provenance.json",
        {
            "bundles": {
                BUNDLE: {
                    "repository": "gagar",
                    "commit": base,
                    "tree": tree_hash,
                    "path": "examples/inventory.bundle",
                    "note": "made by examples/make_example.py; already a single root commit",
                }
            },
            "patches": patches,
            "labellers": LABELLERS,
        },
    )
    with open(out / "labels.jsonl", "w", encoding="utf-8") as handle:
        for a, b, first, second, category, reason in LABELLED_PAIRS:
            for labeller, verdict in (("author", first), ("reviewer", second)):
                record = {"group_id": "inv-pairs", "a": a, "b": b, "labeller": labeller, "verdict": verdict}
                if verdict != "tie":
                    record.update(category=category, reason=reason)
                handle.write(json.dumps(record) + "\n")
    probes = []
    for better, worse, _, _, script in PROBED_PAIRS:
        (out / script).write_bytes(scripts[script])
        probes.append(
            {
                "group_id": "inv-pairs",
                "better": better,
                "worse": worse,
                "script": script,
                "command": "PYTHONPATH=$PWD python {probe}",
            }
        )
    _write_json(out / "probes.json", probes)
    _write_json(
        out / "benchmark.json",
        {
            "name": "inventory-tiny",
            "format": 1,
            "example": True,
            "description": "A FORMAT EXAMPLE, not the public benchmark: gagar's own one-task example laid "
            "out in the benchmark format, one group per kind of reference (pairwise, degrade, ranking, "
            "consensus). Made by examples/make_benchmark.py.",
            "instances": {
                "inv-pairs": "inventory/pairs",
                "inv-degrade": "inventory/degrade",
                "inv-ranking": "inventory/ranking",
                "inv-consensus": "inventory/consensus",
            },
            "sources": [
                {
                    "repository": "gagar",
                    "licence": "Apache-2.0",
                    "what": "examples/inventory.bundle, examples/inventory_group.json, examples/degraded "
                    "(examples/make_example.py and gagar degrade)",
                }
            ],
        },
    )
    print(f"wrote {out}")


def _pairwise_preferences() -> Iterator[Preference]:
    """The probed pairs, and the labelled pairs both labellers agreed on (ties and disagreements left out)."""
    for better, worse, category, reason, _ in PROBED_PAIRS:
        yield Preference(better, worse, reason, category)
    for a, b, first, second, category, reason in LABELLED_PAIRS:
        if first == second and first != "tie":
            better, worse = (a, b) if first == "a" else (b, a)
            yield Preference(better, worse, reason, category)


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
