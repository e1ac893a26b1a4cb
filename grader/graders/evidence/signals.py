"""From outcomes to clusters, per-candidate signals and the table a reader (or an LLM grader) sees.

Per probe, the candidates are clustered by behaviour (status, exception type, normalised output: see
`Outcome.behaviour`). The signals, each counted over the probes where base and the candidate both ran:

- `regressions`: tests that passed on base and fail on the candidate (the test run), capped per candidate;
- `still_raises`: a statement probe on which base raised and the candidate raises the same exception type
  (the statement's bug, most likely, is still there);
- `unchanged`: a statement probe on which the candidate behaves exactly as base does, while some other
  candidate behaves differently (when no candidate changes anything, the probe shows nothing and counts for
  no one);
- `minority`: a statement probe on which the candidate changed behaviour but is outside the largest cluster of
  those that changed (a strict largest: a tie for largest says nothing). The vote of CodeT, MBR-exec and
  Agentless: right fixes tend to behave alike, wrong ones each differently;
- `new_crashes`: a probe that ends on an exception on the candidate and not on base.

Timeouts are shown in the table but read by no signal (see `candidate_signals`), and a probe that timed out
on base compares nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grader.graders.evidence.outcomes import Outcome
from grader.graders.evidence.run import Evidence
from grader.workspace.view import BASE

MAX_REGRESSIONS = 3
"""Regressions counted per candidate: three broken tests already say the fix breaks something."""
SIGNALS = ("regressions", "still_raises", "unchanged", "minority", "new_crashes")


def clusters(outcomes: dict[str, Outcome], candidates: Sequence[str]) -> list[list[str]]:
    """Candidates grouped by behaviour on one probe, largest cluster first (ties in the candidates' order).

    Args:
        outcomes: target -> outcome for one probe (base may be among them; it is not clustered).
        candidates: the candidate targets, in order.

    Returns:
        The clusters; candidates without an outcome, or not run, are left out.
    """
    groups: dict[tuple[str, str, str], list[str]] = {}
    for target in candidates:
        outcome = outcomes.get(target)
        if outcome is None or outcome.status == "not-run":
            continue
        groups.setdefault(outcome.behaviour(), []).append(target)
    return sorted(groups.values(), key=lambda members: -len(members))


def candidate_signals(evidence: Evidence) -> dict[str, dict[str, Any]]:
    """Per candidate, every signal's count and the probes behind it.

    Args:
        evidence: a group's evidence (may be empty or skipped: every count is then 0).

    Returns:
        Candidate -> {signal: count, ..., "probes": {signal: [probe names]}}.
    """
    found: dict[str, dict[str, list[str]]] = {c: {s: [] for s in SIGNALS} for c in evidence.candidates}
    for probe in evidence.probes:
        by_target = evidence.outcomes.get(probe.name, {})
        base = by_target.get(BASE)
        if base is None or base.status == "not-run":
            continue
        if base.status == "timeout":
            continue  # what base does is unknown: nothing to compare with
        # A run cut at its time limit is shown in the table, but no signal reads it: on a loaded machine it
        # says as much about the machine as about the fix (a fix that hangs on every probe still shows).
        ran = [
            c
            for c in evidence.candidates
            if c in by_target and by_target[c].status not in ("not-run", "timeout")
        ]
        for c in ran:
            outcome = by_target[c]
            if outcome.crashed and not base.crashed and not (probe.kind == "tests" and outcome.tests):
                found[c]["new_crashes"].append(probe.name)
        if probe.kind == "tests":
            for c in ran:
                broken = sorted(
                    test
                    for test, passed in base.tests.items()
                    if passed and by_target[c].tests.get(test) is False
                )
                if not by_target[c].tests and base.tests and by_target[c].status != "ok":
                    broken = ["(the test run)"]  # nothing readable: the whole run broke
                found[c]["regressions"].extend(f"{probe.name}:{t}" for t in broken)
            continue
        changed = [c for c in ran if by_target[c].behaviour() != base.behaviour()]
        for c in ran:
            if base.exception and by_target[c].exception == base.exception:
                found[c]["still_raises"].append(probe.name)
            if changed and c not in changed:
                found[c]["unchanged"].append(probe.name)
        changed_clusters = clusters({c: by_target[c] for c in changed}, changed)
        if len(changed_clusters) > 1 and len(changed_clusters[0]) > len(changed_clusters[1]):
            for cluster in changed_clusters[1:]:
                for c in cluster:
                    found[c]["minority"].append(probe.name)
    result: dict[str, dict[str, Any]] = {}
    for c, by_signal in found.items():
        counts: dict[str, Any] = {s: len(by_signal[s]) for s in SIGNALS}
        counts["regressions"] = min(MAX_REGRESSIONS, counts["regressions"])
        counts["probes"] = {s: names for s, names in by_signal.items() if names}
        result[c] = counts
    return result


def render_table(evidence: Evidence, labels: dict[str, str] | None = None, width: int = 14) -> str:
    """The evidence as a compact text table: one row per probe, one column per target, then the clusters.

    Args:
        evidence: a group's evidence.
        labels: target -> the name to show (an LLM grader's candidate labels); default the target ids.
        width: the widest a cell gets (longer words are cut with "~").

    Returns:
        The table, or one line saying why there is no evidence.
    """
    if evidence.skipped:
        return f"Execution evidence: not gathered ({evidence.skipped})."
    if not evidence.probes:
        notes = "; ".join(evidence.notes) or "no probe ran"
        return f"Execution evidence: none ({notes})."
    names = labels or {}
    targets = [BASE, *evidence.candidates]
    heads = [names.get(t, t) for t in targets]

    def cell(text: str) -> str:
        return text if len(text) <= width else text[: width - 1] + "~"

    lines = [
        "Execution evidence (gagar ran these on base and on every candidate in the task's environment):",
    ]
    for probe in evidence.probes:
        lines.append(f"- {probe.description}")
    header = ["probe", *[cell(h) for h in heads], "clusters of changed behaviour"]
    rows = [header]
    for probe in evidence.probes:
        by_target = evidence.outcomes[probe.name]
        base = by_target[BASE]
        row = [probe.name]
        for target in targets:
            outcome = by_target.get(target)
            if outcome is None:
                row.append("-")
                continue
            word = outcome.short()
            if probe.kind == "tests" and outcome.tests:
                failed = sum(1 for passed in outcome.tests.values() if not passed)
                word = f"{failed} failed"
            elif target != BASE and outcome.behaviour() == base.behaviour():
                word = "= base"
            row.append(cell(word))
        changed = [
            c for c in evidence.candidates if c in by_target and by_target[c].behaviour() != base.behaviour()
        ]
        groups = clusters({c: by_target[c] for c in changed}, changed)
        row.append(" | ".join(" ".join(names.get(c, c) for c in members) for members in groups) or "none")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        lines.append("  ".join(value.ljust(widths[i]) for i, value in enumerate(row)).rstrip())
    if evidence.notes:
        lines.append("Not run: " + "; ".join(evidence.notes))
    return "\n".join(lines)
