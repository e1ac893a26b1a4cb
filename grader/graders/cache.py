"""An on-disk cache of grades, and `CachedGrader`, the grader wrapper that uses it.

The key is a hash of the task, the patches with their pass flags, and the grader's fingerprint; trajectory ids
and advantages are not part of it, so a group resampled with the same patches at a later training step is not
graded again. The cached ranking is stored by patch content and mapped back to the new ids on a hit. Caching
is a grader like any other (as `ConsensusGrader` is): the pipeline knows nothing of it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from grader.graders.base import Grade, Grader
from grader.groups.models import Task
from grader.ranking.order import validate_ranking
from grader.util.atomic import write_text_atomic
from grader.workspace.view import GradingView


def patch_key(patch: str) -> str:
    return hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()[:24]


def group_key(view: GradingView, grader: Grader) -> str:
    """What a grade depends on: the task, the graded patches, the others with their pass flags, the grader."""
    task: Task = view.task
    graded = set(view.gradable())
    content = {
        # Every field of the task, so a field added to Task cannot be left out of the key.
        "task": task.model_dump(mode="json"),
        "graded": sorted(patch_key(view.patch(t)) for t in graded),
        "others": sorted(
            (patch_key(view.patch(c.trajectory_id)), c.passed)
            for c in view.candidates()
            if c.trajectory_id not in graded
        ),
        "grader": grader.fingerprint(),
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


class GradeCache:
    """Grades on disk under `root`, one JSON file per key. Safe for concurrent writers (atomic renames)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str, view: GradingView) -> Grade | None:
        """The grade stored under `key`, mapped onto `view`'s trajectory ids; None when there is none."""
        path = self._path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        ids_by_patch: dict[str, list[str]] = {}
        for tid in view.gradable():
            ids_by_patch.setdefault(patch_key(view.patch(tid)), []).append(tid)
        ranking = [[tid for pk in tier for tid in ids_by_patch.get(pk, [])] for tier in data["ranking"]]

        def per_id(values: dict[str, Any]) -> dict[str, Any]:
            return {tid: values[pk] for pk, tids in ids_by_patch.items() if pk in values for tid in tids}

        return Grade(
            ranking=[tier for tier in ranking if tier],
            rationales=per_id(data["rationales"]),
            signals=per_id(data["signals"]),
            flags=per_id(data.get("flags", {})),
            certainty=data.get("certainty"),
            details=dict(data.get("details", {}), cached=True),
        )

    def put(self, key: str, view: GradingView, grade: Grade) -> None:
        """Store `grade` under `key`, by patch content (usage and transcript are the first grading's own)."""

        def by_patch(values: dict[str, Any]) -> dict[str, Any]:
            return {patch_key(view.patch(tid)): value for tid, value in values.items()}

        ranking: list[list[str]] = []
        for tier in grade.ranking:
            keys = list(dict.fromkeys(patch_key(view.patch(tid)) for tid in tier))
            ranking.append(keys)
        data = {
            "ranking": ranking,
            "rationales": by_patch(grade.rationales),
            "signals": by_patch(grade.signals),
            "flags": by_patch(grade.flags),
            "certainty": grade.certainty,
            "details": grade.details,
        }
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(data, default=str))


class CachedGrader:
    """`grader`, but a group graded before (same task, patches and grader fingerprint) is not graded again.

    A hit returns the stored grade mapped onto the new trajectory ids, with `details["cached"] = True` and
    no usage or transcript (no model was called). Misses are graded by `grader` and stored. Raises what
    `grader.grade` raises, and InvalidRanking (not stored) for a ranking that does not cover the view's
    gradable ids once each; a cache entry that cannot be read is a miss.
    """

    def __init__(self, grader: Grader, cache: GradeCache | Path | str) -> None:
        self.grader = grader
        self.cache = cache if isinstance(cache, GradeCache) else GradeCache(cache)
        self.name = grader.name

    def fingerprint(self) -> str:
        return self.grader.fingerprint()  # caching does not change grades

    def grade(self, view: GradingView) -> Grade:
        key = group_key(view, self.grader)
        cached = self.cache.get(key, view)
        if cached is not None:
            return cached
        grade = self.grader.grade(view)
        validate_ranking(grade.ranking, view.gradable())  # an invalid grade is never stored
        self.cache.put(key, view, grade)
        return grade
