"""Building the environment layers of a batch of groups ahead of grading (`gagar env build`).

Grading builds a task's layer the first time its `run` is used, inside a grading turn. On a cluster that is
better done once, before the batch: this walks the groups, builds each distinct layer once (from the base
tree of the first group that needs it), and says per layer what happened, so a failing requirement is seen
before any grader waits on it. A failure is remembered (see `environments.FailureMemory`): graders then fail
that task's `run` at once with the reason, until `retry` builds it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from grader.errors import EnvironmentBuildError, GagarError
from grader.groups.models import Group
from grader.sandbox.environments import EnvironmentSpec, environment_for, spec_for_task


@dataclass
class LayerOutcome:
    """What pre-building one environment layer came to."""

    spec: EnvironmentSpec
    """The layer's recipe."""
    groups: list[str] = field(default_factory=list)
    """The ids of the groups whose tasks use this layer."""
    status: str = "pending"
    """"built", "reused" (already there) or "failed"."""
    tag: str = ""
    """The layer's tag ("" when it failed before one was known)."""
    seconds: float = 0.0
    """Wall time of the build or of the cache check."""
    size_bytes: int = 0
    """The image's size as the engine reports it."""
    detail: str = ""
    """The failure's reason, or the layer's notes (the interpreter that stood in)."""


def needs_layer(group: Group) -> bool:
    """Whether a group's task is run in an environment layer: it names an interpreter or a recipe, no image.

    Args:
        group: the group.

    Returns:
        True when grading would build (or reuse) a layer for it.
    """
    task = group.task
    return task.image is None and bool(task.python or task.environment)


def prebuild(
    groups: Iterable[Group],
    *,
    retry: bool = False,
    force: bool = False,
    timeout: float | None = None,
    on_layer: Callable[[LayerOutcome], None] | None = None,
) -> list[LayerOutcome]:
    """Build every distinct environment layer the groups' tasks need, each once; a failure stops only its own.

    Args:
        groups: completed groups (`models.complete_group`); those with an image or no environment are skipped.
        retry: build layers whose earlier build failed (by default their remembered failure is reported).
        force: rebuild layers that are already there.
        timeout: seconds one layer's build may take (default: `environments.DEFAULT_BUILD_TIMEOUT`).
        on_layer: called with each outcome as soon as it is known (for progress output).

    Returns:
        One outcome per distinct layer, in the order the groups first need them.
    """
    from grader.workspace.workspace import open_workspace

    layers: dict[EnvironmentSpec, tuple[Group, LayerOutcome]] = {}
    for group in groups:
        if not needs_layer(group):
            continue
        spec = spec_for_task(group.task.repo, group.task.python, group.task.environment)
        if spec not in layers:
            layers[spec] = (group, LayerOutcome(spec))
        layers[spec][1].groups.append(group.group_id)
    options: dict[str, Any] = {"retry": retry, "force": force}
    if timeout is not None:
        options["timeout"] = timeout
    outcomes = []
    for spec, (group, outcome) in layers.items():
        try:
            with open_workspace(group) as workspace:
                layer = environment_for(workspace, spec, **options)
        except (GagarError, OSError, ValueError) as exc:
            # EnvironmentBuildError and UnknownInterpreter are GagarErrors; a repository that cannot be
            # read (ValueError, OSError) fails this layer only.
            kind = "" if isinstance(exc, EnvironmentBuildError) else f"{type(exc).__name__}: "
            outcome.status, outcome.detail = "failed", f"{kind}{exc}"
        else:
            outcome.status = "built" if layer.built else "reused"
            outcome.tag, outcome.seconds, outcome.size_bytes = layer.tag, layer.seconds, layer.size_bytes
            outcome.detail = layer.note
        outcomes.append(outcome)
        if on_layer is not None:
            on_layer(outcome)
    return outcomes


def summary_line(outcome: LayerOutcome) -> str:
    """One line of the pre-build summary, e.g. "built   gagar/env:... 56 s 502 MB 2 groups".

    Args:
        outcome: a layer's outcome.

    Returns:
        The line (the failure's reason, or the layer's notes, after a colon).
    """
    name = outcome.tag or f"{outcome.spec.slug} (python {outcome.spec.python or 'default'})"
    size = f"{outcome.size_bytes / 1e6:.0f} MB" if outcome.size_bytes else "-"
    count = len(outcome.groups)
    line = f"{outcome.status:7} {name}  {outcome.seconds:.0f} s  {size}  {count} group{'s' * (count != 1)}"
    return f"{line}: {outcome.detail}" if outcome.detail else line


__all__ = ["LayerOutcome", "needs_layer", "prebuild", "summary_line"]
