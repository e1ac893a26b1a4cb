"""An on-disk cache of grades, keyed by what was graded and how.

The key is a hash of the task, the patches with their pass flags, and the grader's fingerprint; trajectory ids
and advantages are not part of it, so a group resampled with the same patches at a later training step is not
graded again. The cached ranking is stored by patch content and mapped back to the new ids on a hit.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from grader.graders.base import Grade, Grader
from grader.models import Group


def patch_key(patch: str) -> str:
    return hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()[:24]


def fingerprint(grader: Grader) -> str:
    """The grader's own fingerprint when it has one (configuration that changes grades), else its name."""
    method = getattr(grader, "fingerprint", None)
    return method() if callable(method) else grader.name


def group_key(group: Group, grader: Grader, graded_ids: list[str]) -> str:
    task = group.task
    content = {
        "task": [task.repo, task.base_commit, task.statement, task.image, task.setup, task.test_command],
        "graded": sorted(patch_key(group.trajectory(t).patch) for t in graded_ids),
        "others": sorted(
            (patch_key(t.patch), bool(t.passed)) for t in group.trajectories if t.id not in graded_ids
        ),
        "grader": fingerprint(grader),
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


class GradeCache:
    """Grades on disk under `root`, one JSON file per key. Safe for concurrent writers (atomic renames)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str, group: Group, graded_ids: list[str]) -> Grade | None:
        path = self._path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        ids_by_patch: dict[str, list[str]] = {}
        for tid in graded_ids:
            ids_by_patch.setdefault(patch_key(group.trajectory(tid).patch), []).append(tid)
        ranking = [[tid for pk in tier for tid in ids_by_patch.get(pk, [])] for tier in data["ranking"]]

        def per_id(values: dict[str, Any]) -> dict[str, Any]:
            return {tid: values[pk] for pk, tids in ids_by_patch.items() if pk in values for tid in tids}

        details = dict(data.get("details", {}), cached=True)
        details.pop("transcript", None)
        return Grade(
            ranking=[tier for tier in ranking if tier],
            rationales=per_id(data["rationales"]),
            signals=per_id(data["signals"]),
            details=details,
        )

    def put(self, key: str, group: Group, grade: Grade) -> None:
        def by_patch(values: dict[str, Any]) -> dict[str, Any]:
            return {patch_key(group.trajectory(tid).patch): value for tid, value in values.items()}

        ranking: list[list[str]] = []
        for tier in grade.ranking:
            keys = list(dict.fromkeys(patch_key(group.trajectory(tid).patch) for tid in tier))
            ranking.append(keys)
        data = {
            "ranking": ranking,
            "rationales": by_patch(grade.rationales),
            "signals": by_patch(grade.signals),
            "details": grade.details,
        }
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, default=str)
        os.replace(tmp, path)
