"""A scripted teacher and groups with a known right order, shared by the distillation tests.

The teacher reviews as `grader.servers.scripted.read_every_diff_then_rank` does (list, diff every candidate,
rank by
diff size) and behaves by a bucket drawn from the labels it is shown, so each (group, sample) of a run gets
one behaviour, reproducibly: right (smallest diff first, which is the reference's order), wrong (reversed),
nonsense (a ranking of unknown labels, every time), an HTTP error, a timeout, or endless tool calls (the
turn budget runs out).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from grader.groups.formats import write_groups
from grader.groups.models import Group
from grader.servers.scripted import Reply, assistant_turns, error, labels_in, tool_calls, tool_results
from tests.conftest import BASE_FILES, FIX, RepoFactory

BEHAVIOURS = ("right", "right", "right", "wrong", "nonsense", "http-error", "timeout", "chatty")
EXPECTED_CATEGORY = {
    "right": "kept",
    "wrong": "agreement",
    "nonsense": "failure",
    "http-error": "failure",
    "timeout": "failure",
    "chatty": "budget",
}
REQUEST_TIMEOUT = 1.0
TEACHER_OPTIONS = ["--sandbox", "none", "--max-turns", "6", "--retries", "0"]
TEACHER_OPTIONS += ["--request-timeout", str(REQUEST_TIMEOUT), "--max-repairs", "1"]


def behaviour(labels: list[str]) -> str:
    """The behaviour of the teacher for a grading shown these labels, in this order."""
    digest = hashlib.sha256(",".join(labels).encode()).digest()
    return BEHAVIOURS[digest[0] % len(BEHAVIOURS)]


def teacher(request: dict[str, Any], n: int) -> Reply:
    """The scripted teacher (a `ScriptedServer` policy)."""
    labels = labels_in(request)
    kind = behaviour(labels)
    step = assistant_turns(request)
    if kind == "http-error":
        return error(400, "scripted refusal")
    if kind == "timeout":
        return tool_calls(("list_candidates", {}), delay=REQUEST_TIMEOUT + 0.5)
    if kind == "chatty" or step == 0:
        return tool_calls(("list_candidates", {}))
    if step == 1:
        return tool_calls(*[("diff", {"candidate": label}) for label in labels])
    if kind == "nonsense":
        ranking = [["C-zzzz"], *[[label] for label in labels]]
        return tool_calls(("submit_ranking", {"ranking": ranking, "reasons": {}, "confidence": 0.5}))
    diffs = tool_results(request)[1 : 1 + len(labels)]
    order = [label for label, _ in sorted(zip(labels, diffs, strict=True), key=lambda pair: len(pair[1]))]
    if kind == "wrong":
        order.reverse()
    reasons = {
        label: f"{label} is number {i + 1}: its diff is the {i + 1}-th smallest"
        for i, label in enumerate(order)
    }
    return tool_calls(
        ("submit_ranking", {"ranking": [[x] for x in order], "reasons": reasons, "confidence": 0.7})
    )


def known_groups(root: Path) -> tuple[list[Group], dict[str, list[list[str]]]]:
    """Two groups (two tasks) of three passing patches whose right order is smallest first, plus a failing
    one; and their reference rankings."""
    repo = RepoFactory(root / "repo", BASE_FILES)
    core = FIX["pkg/core.py"]
    patches = {
        "tidy": repo.patch(FIX),
        "chatty-comments": repo.patch(
            {"pkg/core.py": core.replace("a + b", "a + b  # add them up\n    # done")}
        ),
        "stray-files": repo.patch(
            {**FIX, "notes.txt": "scratch notes\n" * 4, "debug.py": "print('debug')\n" * 3}
        ),
        "broken": repo.patch({"pkg/core.py": core.replace("a + b", "a * b")}),
    }
    groups, references = [], {}
    for gid, statement in (("add-1", "fix add"), ("add-2", "fix add, which subtracts")):
        group = repo.group({tid: (patch, tid != "broken") for tid, patch in patches.items()}, group_id=gid)
        groups.append(
            group.model_copy(update={"task": group.task.model_copy(update={"statement": statement})})
        )
        references[gid] = [["tidy"], ["chatty-comments"], ["stray-files"]]
    return groups, references


def write_inputs(root: Path) -> tuple[Path, Path, list[Group]]:
    """groups.jsonl and reference.json under `root`."""
    groups, references = known_groups(root)
    write_groups(groups, root / "groups.jsonl")
    (root / "reference.json").write_text(json.dumps(references), encoding="utf-8")
    return root / "groups.jsonl", root / "reference.json", groups
