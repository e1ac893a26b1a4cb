"""The evidence table in the LLM grader's opening message, under the labels the model sees.

A model spends its turns re-running what gagar can run once: the statement's snippets and the relevant
tests, on base and on every candidate. `opening_evidence` gathers that evidence (from the cache when the
heuristic or an earlier grading already ran it) and renders it with the candidates' labels, never their
trajectory ids, so the table reveals nothing the labels hide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grader.graders.evidence.run import DEFAULT_BUDGET, Evidence, gather, unbuilt_layer
from grader.graders.evidence.signals import render_table
from grader.workspace.view import BASE, GradingView


def has_environment(view: GradingView) -> bool:
    """Whether the task names somewhere to run it: an image, an interpreter or an install recipe."""
    task = view.task
    return bool(task.image or task.python or task.environment)


def opening_evidence(
    view: GradingView,
    members: Mapping[str, Sequence[str]],
    backend: str | None = "docker",
    budget: float = DEFAULT_BUDGET,
) -> str:
    """The evidence table for the opening message, or "" when there is nothing to show.

    Args:
        view: the group.
        members: label -> trajectory ids of its class (the first is the representative), as the model's
            tools name the candidates (`Candidates.members`).
        backend: the sandbox backend; None (no `run` tool) shows nothing.
        budget: wall-time seconds for the stage.

    Returns:
        The table under the labels (base stays "base"), or "" when the task names no environment, no sandbox
        is configured, or nothing ran. Never raises for a probe's or a candidate's behaviour; a sandbox that
        cannot be had gives a one-line note instead of a table.
    """
    if backend is None or not has_environment(view) or len(view.classes) < 2:
        return ""
    unbuilt = unbuilt_layer(view, backend)
    if unbuilt:
        return f"Execution evidence: not gathered ({unbuilt})."

    def opener() -> object:
        from grader.sandbox.environments import open_task_sandbox

        with view.resources.sandbox:
            return open_task_sandbox(view, backend)

    evidence = gather(view, opener, budget)
    return render_labelled(evidence, members)


def render_labelled(evidence: Evidence, members: Mapping[str, Sequence[str]]) -> str:
    """`render_table` with each class shown by its label: every member of a class maps to it.

    Args:
        evidence: a group's evidence.
        members: label -> trajectory ids of its class.

    Returns:
        The table text; "" when no probe ran.
    """
    if not evidence.probes and not evidence.skipped:
        return ""
    labels = {BASE: BASE}
    for label, ids in members.items():
        for tid in ids:
            labels[tid] = label
    return render_table(evidence, labels)
