"""The heuristic grader, gagar's default: ranks passing candidates from signals read off the view.

No model: each equivalence class of patches is scored on what a reviewer would object to in a fix that
already passes the tests, and classes are ranked by total penalty (equal penalties tie). From the diffs it
sees hygiene, scope and public signatures; where the task names an environment it also runs the candidates
first (`grader.graders.evidence`: the statement's snippets and the relevant existing tests, on base and on
each class) and reads correctness signals off what ran (`EVIDENCE_PENALTIES`, each counted over probes, at
most 3: regressions, still_raises, unchanged, minority, new_crashes; argued in docs/heuristic-grader.md,
weights tuned on swebench-lite's dev split only). Weights of the diff signals, per unit:

    existing tests weakened         3.0   lines of an existing test removed or changed, a skip or xfail added,
                                          or a test file deleted: the worst way to pass the tests. Tests
                                          added (new files, or new lines in an existing file) are no penalty
    exception swallowed             3.0   `except ...: pass` added: hides the next bug as a test edit does
    leftover file                   2.0   a reproduction script, scratch file or backup left in the tree
    out-of-scope file               1.0   a file no other candidate needed to touch
    formatting-only file            1.0   a file whose change is only whitespace, brackets, commas or quotes
    debug line                      2.0   print / pdb / breakpoint added where the file had none (max 3)
    public API broken               2.0   per public function or method removed, or whose parameters change so
                                          that a call that worked before fails (max 3; `signatures`): the
                                          tests pass, but callers outside the repository break. When every
                                          candidate makes the same break (the issue asks for it), all pay
                                          alike and the ranking is unchanged. The weight is set by that
                                          argument (a cost that ships, like a debug line), not fitted to data
    commented-out or dead code      0.5   per line (max 3)
    disagreement with the group     2.0   times how much less its code change agrees with the others than
                                          the most agreeing candidate's does; agreement is the mean
                                          similarity to every other distinct candidate's change (Jaccard of
                                          the sets of changed lines, whitespace and comments ignored; test,
                                          leftover and formatting-only files left out: they have their own
                                          signals). Equivalent patches are one vote, so equal fixes tie. A
                                          soft form of the agreement vote SWE-bench systems (Agentless among
                                          them) pick patches by: fixes that are right tend to make the same
                                          change, wrong ones diverge. Needs three distinct candidates (with
                                          two, both pay alike). It is a correctness signal, and on a group of
                                          rollouts it favours the fix most of them converge on. Weight tuned
                                          on the dev split of swebench-lite only (docs/benchmark.md,
                                          *Published figures*)
    size                            0.5   per doubling of changed lines over the smallest candidate, not
                                          counting test files that only gain tests: a grader that charged
                                          for added tests would teach a policy to skip them. A weakened test
                                          file counts (as do leftovers)

Deterministic: the same workspace always gives the same ranking, signals and rationales.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from grader.graders import signatures
from grader.graders.base import Grade
from grader.graders.evidence import SIGNALS, Evidence, OutcomeCache, candidate_signals, gather, render_table
from grader.graders.evidence.run import unbuilt_layer
from grader.ranking.order import expand_classes
from grader.util.terminal import printable_line
from grader.workspace import patches
from grader.workspace.view import BASE, GradingView

PENALTIES = {
    "test_files_modified": 3.0,
    "swallowed_exceptions": 3.0,
    "leftover_files": 2.0,
    "out_of_scope_files": 1.0,
    "formatting_only_files": 1.0,
    "debug_lines": 2.0,
    "public_api_breaks": 2.0,
    "commented_code_lines": 0.5,
    "size": 0.5,
    "disagreement": 2.0,
}
EVIDENCE_PENALTIES = {
    "regressions": 2.0,
    "still_raises": 2.0,
    "unchanged": 2.0,
    "minority": 2.0,
    "new_crashes": 2.0,
}
"""Per unit of each execution signal (`grader.graders.evidence.signals`), at most 3 units each. Tuned on
swebench-lite's dev split only: 2.0 each is the smallest uniform weight that reaches the dev maximum
(verification 0.778 -> 0.876; preference unchanged at 0.810); docs/benchmark.md, *Tuning the heuristic*."""
LINE_SIGNAL_CAP = 3
FILE_SIGNALS = ("test_files_modified", "leftover_files", "out_of_scope_files", "formatting_only_files")
LINE_SIGNALS = ("debug_lines", "swallowed_exceptions", "commented_code_lines")
CAPPED_LIST_SIGNALS = ("public_api_breaks",)

_SCRATCH_NAME = re.compile(
    r"^(repro(duce)?|reproduction|debug|scratch|tmp|temp|check_?fix|demo)[\w.-]*$"
    r"|\.(bak|orig|rej|swp|swo|pyc|log|tmp)$|~$",
    re.IGNORECASE,
)
_ISSUE_TEST_NAME = re.compile(r"^test_?(fix|issue|bug|repro)[\w.-]*$", re.IGNORECASE)
"""A one-off check named for the bug; scratch at the root, a test in the test suite (issue 24, item 6)."""
_IN_TEST_DIRECTORY = re.compile(r"(^|/)(tests?|testing)/")
_ROOT_CONVENTIONAL = {
    "setup.py",
    "conftest.py",
    "noxfile.py",
    "tasks.py",
    "manage.py",
    "fabfile.py",
    "docs.py",
    "__init__.py",
}
_SCRIPT_SUFFIXES = {".py", ".sh", ".js", ".ts", ".rb", ".pl", ".txt", ".out", ".json", ".csv"}
_DEBUG = re.compile(r"\bprint\s*\(|\bpdb\b|\bbreakpoint\s*\(|\bset_trace\s*\(|\bconsole\.log\s*\(|\bdbg!\(")
_COMMENTED_CODE = re.compile(
    r"^\s*(#|//)\s*(?:[A-Za-z_][\w.]*\s*(?:\(.*\)|\[.*\]|[-+*/]?=[^=].*)\s*$"
    r"|return\b|import\s+\w|from\s+\S+\s+import\b|(?:if|elif|for|while|with|def|class)\b.*:\s*$|raise\s+\w)"
)
_SWALLOW = re.compile(r"^\s*except\b[^:]*:\s*(pass|\.\.\.)?\s*(#.*)?$")
_EMPTY_BODY = re.compile(r"^\s*(pass|\.\.\.)\s*(#.*)?$")
_DEAD_CODE = re.compile(r"^\s*(if|while)\s+(False|0)\s*:|^\s*if\s*\(\s*(false|0)\s*\)")
_FORMATTING = re.compile(r"[\s(),'\"]+")
_SKIP = re.compile(
    r"\bpytest\.(?:mark\.)?(?:skip|skipif|xfail|importorskip)\b|\bunittest\.(?:skip\w*|expectedFailure)\b"
    r"|\.skipTest\(|@skip\w*\b"
)
_RATIONALE = (
    ("test_files_modified", "modifies tests {}"),
    ("leftover_files", "leaves {}"),
    ("out_of_scope_files", "touches {}, which no other candidate needed"),
    ("formatting_only_files", "only reformats {}"),
    ("swallowed_exceptions", "swallows exceptions ({} handler(s) that do nothing)"),
    ("debug_lines", "adds {} debug line(s)"),
    ("public_api_breaks", "breaks public API: {}"),
    ("commented_code_lines", "adds {} commented-out or dead line(s)"),
)
"""Signal -> how a rationale says it, in the order rationales list them."""
_EXECUTION_WORDS = {
    "regressions": "breaks tests that pass on base",
    "still_raises": "still raises the statement's exception",
    "unchanged": "behaves as base where others changed",
    "minority": "behaves unlike the most common fix",
    "new_crashes": "crashes where base does not",
}


@dataclass
class _Candidate:
    representative: str
    parsed: Any
    new_files: set[str]
    touched: set[str]
    code: frozenset[str]
    """Its changed lines of code, as `_code_lines` normalizes them (what agreement compares)."""


def is_leftover(path: str) -> bool:
    """A new file that looks like scratch: a reproduction script, a backup, or a stray script at the root. A
    `test*` file inside a test directory is a test (`tests/test_issue_42.py` covers issue 42), not scratch."""
    pure = PurePosixPath(path)
    if _SCRATCH_NAME.search(pure.name):
        return True
    if _ISSUE_TEST_NAME.search(pure.name):
        return _IN_TEST_DIRECTORY.search(path) is None
    return len(pure.parts) == 1 and pure.suffix in _SCRIPT_SUFFIXES and pure.name not in _ROOT_CONVENTIONAL


class HeuristicGrader:
    """Ranks classes of passing candidates by penalty; see the module docstring for the signals."""

    name = "heuristic"
    version = 7  # bump when a change alters rankings, so cached grades are not reused (7: execution evidence)
    # Class-level defaults too: a subclass that does not call __init__ grades as the default does.
    evidence = "auto"
    evidence_budget = 300.0
    evidence_sandbox = "docker"
    outcome_cache: OutcomeCache | None = None

    def __init__(
        self, evidence: str = "auto", evidence_budget: float = 300.0, evidence_sandbox: str = "docker"
    ) -> None:
        """Args:
            evidence: "auto" runs the evidence stage where the task names an environment; "off" never.
            evidence_budget: seconds the stage may take per group.
            evidence_sandbox: the sandbox backend it runs in.

        Raises:
            ValueError: an unknown `evidence` mode or a budget that is not positive.
        """
        if evidence not in ("auto", "off"):
            raise ValueError(f"evidence must be 'auto' or 'off', not {evidence!r}")
        if not evidence_budget > 0:
            raise ValueError(f"evidence_budget must be positive, not {evidence_budget!r}")
        self.evidence = evidence
        self.evidence_budget = float(evidence_budget)
        self.evidence_sandbox = evidence_sandbox
        self.progress: Callable[[str], None] | None = _stderr_progress
        self.outcome_cache = None  # where the stage keeps outcomes; None: the default under the data cache

    def fingerprint(self) -> str:
        """The name, the signal version and whether execution evidence is read: nothing else changes its
        grades (the budget bounds the stage, it does not change a signal's meaning)."""
        return f"{self.name}:{self.version}:evidence-{self.evidence}:{self.evidence_sandbox}"

    def gather_evidence(self, view: GradingView) -> Evidence:
        """Run the evidence stage on a group, or say why it was skipped.

        Args:
            view: the group.

        Returns:
            The evidence; `skipped` names the reason when nothing ran (evidence off, no environment, no
            sandbox here). Never raises for a candidate's or a probe's behaviour.
        """
        task = view.task
        if self.evidence == "off":
            return Evidence(view.group_id, skipped="evidence is off")
        if not (task.image or task.python or task.environment):
            return Evidence(
                view.group_id, skipped="the task names no environment (image, python or recipe) to run it in"
            )
        if len(view.classes) < 2:
            return Evidence(view.group_id, skipped="one distinct candidate: nothing to compare")
        unbuilt = unbuilt_layer(view, self.evidence_sandbox)
        if unbuilt:
            return Evidence(view.group_id, skipped=unbuilt)

        def opener() -> Any:
            from grader.sandbox.environments import open_task_sandbox

            with view.resources.sandbox:
                return open_task_sandbox(view, self.evidence_sandbox)

        progress = getattr(self, "progress", _stderr_progress)
        return gather(view, opener, self.evidence_budget, cache=self.outcome_cache, progress=progress)

    def _say_skipped(self, evidence: Evidence) -> None:
        progress = getattr(self, "progress", _stderr_progress)
        if evidence.skipped and progress is not None:
            progress(f"{evidence.group_id}: stage skipped: {evidence.skipped}")

    def grade(self, view: GradingView) -> Grade:
        candidates = [self._read(view, members[0]) for members in view.classes]
        if not candidates:
            return Grade(ranking=[])
        evidence = self.gather_evidence(view)
        self._say_skipped(evidence)
        executed = candidate_signals(evidence)
        sizes = {c.representative: _sized_lines(c.parsed) for c in candidates}
        smallest = max(1, min(sizes.values()))
        agreement = _agreement(candidates)
        scored = []
        for c in candidates:
            others = (
                set().union(*(o.touched for o in candidates if o is not c)) if len(candidates) > 1 else None
            )
            signals = self._signals(view, c, others)
            signals["size_ratio"] = round(max(1, sizes[c.representative]) / smallest, 3)
            penalty = sum(PENALTIES[name] * len(signals[name]) for name in FILE_SIGNALS)
            penalty += sum(PENALTIES[name] * min(LINE_SIGNAL_CAP, signals[name]) for name in LINE_SIGNALS)
            penalty += sum(
                PENALTIES[name] * min(LINE_SIGNAL_CAP, len(signals[name])) for name in CAPPED_LIST_SIGNALS
            )
            penalty += PENALTIES["size"] * math.log2(signals["size_ratio"])
            if agreement:
                signals["agreement"] = round(agreement[c.representative], 3)
                signals["agreement_gap"] = round(max(agreement.values()) - agreement[c.representative], 3)
                penalty += PENALTIES["disagreement"] * signals["agreement_gap"]
            ran = executed.get(c.representative)
            if ran:
                signals["execution"] = {name: ran[name] for name in SIGNALS if ran[name]}
                signals["execution_probes"] = ran["probes"]
                penalty += sum(EVIDENCE_PENALTIES[name] * min(LINE_SIGNAL_CAP, ran[name]) for name in SIGNALS)
            signals["penalty"] = round(penalty, 6)
            scored.append((signals["penalty"], c.representative, signals))

        position = {tid: i for i, tid in enumerate(view.gradable())}  # ties keep the input order
        scored.sort(key=lambda item: (item[0], position[item[1]]))
        class_ranking: list[list[str]] = []
        last_penalty = None
        for penalty, representative, _ in scored:
            if penalty == last_penalty:
                class_ranking[-1].append(representative)
            else:
                class_ranking.append([representative])
                last_penalty = penalty
        classes = {members[0]: members for members in view.classes}
        signals_by_id: dict[str, dict[str, Any]] = {}
        rationales: dict[str, str] = {}
        for _, representative, signals in scored:
            for member in classes[representative]:
                signals_by_id[member] = dict(
                    signals, equivalent_to=[m for m in classes[representative] if m != member]
                )
                rationales[member] = _rationale(signals)
        return Grade(
            ranking=expand_classes(class_ranking, classes),
            rationales=rationales,
            signals=signals_by_id,
            details={"evidence": evidence.to_dict(), "evidence_table": render_table(evidence)},
        )

    def _read(self, view: GradingView, trajectory_id: str) -> _Candidate:
        parsed = patches.parse(view.diff(trajectory_id))
        touched = {patches.file_path(f) for f in parsed}
        new = {patches.file_path(f) for f in parsed if f.is_added_file}
        return _Candidate(trajectory_id, parsed, new, touched, _code_lines(parsed, new))

    def _signals(self, view: GradingView, c: _Candidate, others: set[str] | None) -> dict[str, Any]:
        leftovers = sorted(p for p in c.new_files if is_leftover(p))
        tests_modified = sorted(
            patches.file_path(f)
            for f in c.parsed
            if patches.is_test_path(patches.file_path(f)) and not _adds_tests_only(f)
        )
        debug = commented = swallowed = 0
        formatting_only = []
        for patched_file in c.parsed:
            path = patches.file_path(patched_file)
            if path in leftovers or patches.is_test_path(path):
                continue
            added = [line.value for hunk in patched_file for line in hunk if line.is_added]
            removed = [line.value for hunk in patched_file for line in hunk if line.is_removed]
            if (
                added
                and removed
                and _FORMATTING.sub("", "".join(added)) == _FORMATTING.sub("", "".join(removed))
            ):
                formatting_only.append(path)
            if any(_DEBUG.search(text) for text in added) and not self._base_uses_debug(view, path):
                debug += sum(1 for text in added if _DEBUG.search(text))
            commented += sum(1 for text in added if _COMMENTED_CODE.match(text) or _DEAD_CODE.match(text))
            swallowed += _swallowed(added)
        out_of_scope = []
        if others is not None:
            out_of_scope = sorted(
                p
                for p in c.touched - others
                # Tests are never out of scope: adding them is good practice; weakening them is a signal.
                if p not in leftovers and not patches.is_test_path(p)
            )
        return {
            "public_api_breaks": self._api_breaks(view, c),
            "test_files_modified": tests_modified,
            "leftover_files": leftovers,
            "out_of_scope_files": out_of_scope,
            "formatting_only_files": sorted(formatting_only),
            "debug_lines": debug,
            "swallowed_exceptions": swallowed,
            "commented_code_lines": commented,
            "files": sorted(c.touched),
            "changed_lines": _changed_lines(c.parsed),
        }

    @staticmethod
    def _api_breaks(view: GradingView, c: _Candidate) -> list[str]:
        """Public functions of existing non-test modules that the candidate removes or breaks calls of."""
        breaks = []
        for patched_file in c.parsed:
            path = patches.file_path(patched_file)
            if (
                patched_file.is_added_file
                or patches.is_test_path(path)
                or not signatures.is_public_module(path)
            ):
                continue
            try:
                before = view.read_file(BASE, path).decode("utf-8", "replace")
            except FileNotFoundError:
                continue  # renamed, or new: nothing existed there to call
            after = None
            if not patched_file.is_removed_file:
                try:
                    after = view.read_file(c.representative, path).decode("utf-8", "replace")
                except FileNotFoundError:
                    after = None
            breaks.extend(f"{path}:{item}" for item in signatures.broken_signatures(before, after))
        return breaks

    @staticmethod
    def _base_uses_debug(view: GradingView, path: str) -> bool:
        # A command-line module that already prints is following its own convention, not debugging.
        try:
            text = view.read_file(BASE, path).decode("utf-8", "replace")
        except FileNotFoundError:
            return False
        return bool(_DEBUG.search(text))


def _stderr_progress(line: str) -> None:
    """The evidence stage's progress, one line each on stderr (untrusted ids made printable)."""
    # A note for whoever watches: a stderr that is gone (a closed terminal, a pipe nobody reads) must not
    # fail the group being graded.
    with contextlib.suppress(OSError, ValueError):
        print(f"[evidence] {printable_line(line)}", file=sys.stderr, flush=True)


def _code_lines(parsed: Any, new_files: set[str]) -> frozenset[str]:
    """The lines a patch adds and removes in code, as "+path:text" / "-path:text" with all whitespace taken
    out; comments (a Python line's trailing one too), test files, leftover files and formatting-only files are
    not code changes to agree on (the last three have their own signals)."""
    lines = set()
    for patched_file in parsed:
        path = patches.file_path(patched_file)
        if patches.is_test_path(path) or (path in new_files and is_leftover(path)):
            continue
        added = [line.value for hunk in patched_file for line in hunk if line.is_added]
        removed = [line.value for hunk in patched_file for line in hunk if line.is_removed]
        if added and removed and _FORMATTING.sub("", "".join(added)) == _FORMATTING.sub("", "".join(removed)):
            continue
        for hunk in patched_file:
            for line in hunk:
                value = _without_comment(line.value) if path.endswith(".py") else line.value
                text = "".join(value.split())
                if (line.is_added or line.is_removed) and text and not text.startswith("#"):
                    lines.add(f"{'+' if line.is_added else '-'}{path}:{text}")
    return frozenset(lines)


def _without_comment(line: str) -> str:
    """A Python line without its trailing comment: a `#` outside string quotes starts one."""
    quote = ""
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote:
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#":
            return line[:i]
    return line


def _agreement(candidates: list[_Candidate]) -> dict[str, float]:
    """Class representative -> mean similarity of its code change to every other class's, for three classes
    or more; none for fewer, where a pair's similarity is the same for both and says nothing. Classes, not
    trajectories, vote: a patch repeated is one fix, and equal fixes must tie however often they occur."""
    if len(candidates) < 3:
        return {}
    agreement = {}
    for c in candidates:
        similarities = []
        for o in candidates:
            if o is not c:
                union = c.code | o.code
                similarities.append(len(c.code & o.code) / len(union) if union else 1.0)
        agreement[c.representative] = sum(similarities) / len(similarities)
    return agreement


def _swallowed(added: list[str]) -> int:
    """Added handlers that do nothing: `except ...: pass`, or an `except` line followed by a bare `pass`."""
    count = 0
    for i, text in enumerate(added):
        match = _SWALLOW.match(text)
        if not match:
            continue
        body_inline = match.group(1) is not None
        body_next = i + 1 < len(added) and _EMPTY_BODY.match(added[i + 1]) is not None
        count += body_inline or body_next
    return count


def _changed_lines(parsed: Any) -> int:
    return sum(f.added + f.removed for f in parsed)


def _sized_lines(parsed: Any) -> int:
    """What size is measured on: changed lines, less those of test files that only gain tests (new test files,
    and existing ones `_weakens_tests` passes)."""
    return _changed_lines([f for f in parsed if not _adds_tests_only(f)])


def _adds_tests_only(patched_file: Any) -> bool:
    path = patches.file_path(patched_file)
    return patches.is_test_path(path) and (patched_file.is_added_file or not _weakens_tests(patched_file))


def _rationale(signals: dict[str, Any]) -> str:
    notes = []
    for name, text in _RATIONALE:
        value = signals[name]
        if value:
            notes.append(text.format(", ".join(value) if isinstance(value, list) else value))
    if signals.get("agreement_gap"):
        notes.append(
            f"its change agrees {signals['agreement_gap']:g} less with the other candidates' than the most "
            "agreeing one's"
        )
    for name in signals.get("execution", {}):
        probes = ", ".join(signals.get("execution_probes", {}).get(name, [])[:3])
        notes.append(f"{_EXECUTION_WORDS[name]} ({probes})" if probes else _EXECUTION_WORDS[name])
    if signals["size_ratio"] > 1:
        notes.append(f"{signals['size_ratio']:g}x the smallest candidate's changed lines")
    body = "; ".join(notes) if notes else "smallest candidate, nothing flagged"
    return f"penalty {signals['penalty']:.2f}: {body}"


def _weakens_tests(patched_file: Any) -> bool:
    """Whether a patch to an existing test file can weaken it: it deletes the file, removes or changes a line
    (one not merely moved within the file), or adds a skip or an xfail. New lines alone add tests."""
    if patched_file.is_removed_file:
        return True
    added = [line.value for hunk in patched_file for line in hunk if line.is_added]
    removed = [line.value for hunk in patched_file for line in hunk if line.is_removed]
    remaining = Counter(text.strip() for text in removed if text.strip())
    remaining.subtract(text.strip() for text in added)
    return any(count > 0 for count in remaining.values()) or any(_SKIP.search(text) for text in added)
