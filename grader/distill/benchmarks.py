"""Keeping benchmark groups out of training data, so a distilled grader is never measured on what it learnt.

A benchmark is a folder holding a `benchmark.json` (the format of docs/benchmark.md); its groups are those
of its `groups/` files. A group offered for distillation is refused when its id, or its task (base commit
and statement, whatever the repository is called or where it lives), appears in any benchmark named on the
command line or found where `gagar eval --bench` looks for them (`$GAGAR_BENCHMARKS`, ./benchmarks, the
repository's benchmarks/, ../shared/benchmarks beside it, and the prepared recipes in the cache), outside the
benchmark's dev split. Deliberately coarse: a task the benchmark measures is off limits whichever candidates
a training group holds for it; the dev split is where a grader is tuned and taught, so it may be distilled.
Only the groups are read (no bundle, probe or label checks), so refusing never depends on a benchmark being
otherwise complete.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from grader.evaluation.benchmark import find_benchmark
from grader.groups.formats import load_groups
from grader.groups.models import Group

MANIFEST = "benchmark.json"


def task_hash(group: Group) -> str:
    """What identifies a group's task across copies: its base commit and its statement.

    Args:
        group: the group.

    Returns:
        16 hex digits.
    """
    text = f"{group.task.base_commit}\n{group.task.statement.strip()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Benchmarks:
    """The group ids and task hashes of every benchmark found, each with the benchmark's folder."""

    folders: list[Path] = field(default_factory=list)
    group_ids: dict[str, Path] = field(default_factory=dict)
    tasks: dict[str, Path] = field(default_factory=dict)

    def refusal(self, group: Group) -> str | None:
        """Why `group` may not be training input, or None when it may.

        Args:
            group: a group offered for distillation.

        Returns:
            A sentence naming the benchmark, or None.
        """
        if group.group_id in self.group_ids:
            return f"group id is in the benchmark {self.group_ids[group.group_id]}"
        found = self.tasks.get(task_hash(group))
        if found is not None:
            return f"its task (base commit and statement) is in the benchmark {found}"
        return None


def benchmark_folders(given: list[str | Path], search: list[Path]) -> list[Path]:
    """The benchmark folders: those given (by path or name), and every one under the search roots.

    Args:
        given: benchmarks named on the command line (a folder or a name `find_benchmark` resolves).
        search: roots to look under (missing ones are skipped), e.g. `evaluation.benchmark.benchmark_roots()`.

    Returns:
        The folders, each once, sorted.

    Raises:
        InputFileError: a benchmark given cannot be found (the message lists the places searched).
    """
    folders = {find_benchmark(name).resolve() for name in given}
    for root in search:
        if root.is_dir():
            folders.update(manifest.parent.resolve() for manifest in root.rglob(MANIFEST))
    return sorted(folders)


def load_benchmarks(folders: list[Path]) -> Benchmarks:
    """Index the groups of the benchmark folders.

    Args:
        folders: benchmark folders (see `benchmark_folders`).

    Returns:
        Their group ids and task hashes (from each folder's `groups/` files), less the groups of each
        benchmark's dev split.
    """
    found = Benchmarks(folders=list(folders))
    for folder in folders:
        files = sorted(p for p in (folder / "groups").glob("*") if p.suffix in (".json", ".jsonl"))
        dev = _dev_split(folder)
        for item in load_groups(files):
            if isinstance(item, Group) and item.group_id not in dev:
                found.group_ids.setdefault(item.group_id, folder)
                found.tasks.setdefault(task_hash(item), folder)
    return found


def _dev_split(folder: Path) -> set[str]:
    """The group ids of a benchmark's dev split (split.json), which distillation may use: dev is where a
    grader is tuned and taught (`gagar distill --reference references.dev.jsonl` of a prepared track), test is
    what its figures are measured on. An unreadable split.json frees nothing."""
    try:
        split = json.loads((folder / "split.json").read_text(encoding="utf-8"))
        return {str(gid) for gid in split.get("dev", [])}
    except (OSError, ValueError, AttributeError, TypeError):
        return set()
