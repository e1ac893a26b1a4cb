"""Public signatures a change breaks (the heuristic's `public_api_breaks`), on text and in a workspace."""

from __future__ import annotations

import pytest

from grader.graders.heuristic import HeuristicGrader
from grader.graders.signatures import broken_signatures, is_public_module
from grader.workspace.mirrors import MirrorCache
from grader.workspace.workspace import open_workspace
from tests.conftest import FIX, RepoFactory

BEFORE = """\
import os


def load(path, mode="r", *, encoding=None):
    return open(path, mode, encoding=encoding)


def _helper(x):
    return x


class Store:
    def __init__(self, root):
        self.root = root

    def get(self, key, default=None, *args, **kwargs):
        return default

    def _private(self):
        pass
"""


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            'def load(path, mode="r", *, encoding=None):',
            'def load(path, mode="r", *, encoding=None, retries=3):',
            [],
        ),
        (
            'def load(path, mode="r", *, encoding=None):',
            "def load(path, *, encoding=None):",
            ["load: parameter mode removed"],
        ),
        (
            'def load(path, mode="r", *, encoding=None):',
            'def load(filename, mode="r", *, encoding=None):',
            ["load: parameter path renamed or moved"],
        ),
        (
            'def load(path, mode="r", *, encoding=None):',
            "def load(path, mode, *, encoding=None):",
            ["load: parameter mode lost its default"],
        ),
        (
            'def load(path, mode="r", *, encoding=None):',
            'def load(path, mode="r", *, encoding):',
            ["load: parameter encoding lost its default"],
        ),
        (
            'def load(path, mode="r", *, encoding=None):',
            'def load(path, mode="r", *, encoding=None, strict):',
            ["load: new required keyword parameter strict"],
        ),
        (
            'def load(path, mode="r", *, encoding=None):',
            'def load(path, mode="r"):',
            ["load: keyword parameter encoding removed"],
        ),
        (
            'def load(path, mode="r", *, encoding=None):',
            'def load(path, /, mode="r", *, encoding=None):',
            ["load: parameter path became positional-only"],
        ),
        (
            'def load(path, mode="r", *, encoding=None):',
            'def load(path, mode="r", *args, encoding=None, **kw):',
            [],
        ),
        (
            "    def get(self, key, default=None, *args, **kwargs):",
            "    def get(self, key, default=None, **kwargs):",
            ["Store.get: *args removed"],
        ),
        (
            "    def __init__(self, root):",
            "    def __init__(self, root, cache):",
            ["Store.__init__: new required parameter cache"],
        ),
        ("def _helper(x):", "def _helper(y, z):", []),  # private: not an API
        ("    def _private(self):", "    def _private(self, now):", []),
        ("    return default", "    return self.root or default", []),  # a body change breaks no call
    ],
)
def test_what_breaks_a_call_that_worked(old: str, new: str, expected: list[str]) -> None:
    assert old in BEFORE
    assert broken_signatures(BEFORE, BEFORE.replace(old, new)) == expected


def test_removed_moved_and_unparsable_modules() -> None:
    without_load = BEFORE.replace(
        'def load(path, mode="r", *, encoding=None):\n    return open(path, mode, encoding=encoding)\n', ""
    )
    assert broken_signatures(BEFORE, without_load) == ["load: removed"]
    # Moved elsewhere and imported back: callers still find it.
    assert broken_signatures(BEFORE, "from store.io import load\n" + without_load) == []
    assert broken_signatures(BEFORE, None) == [
        "Store.__init__: module deleted",
        "Store.get: module deleted",
        "load: module deleted",
    ]
    assert broken_signatures(BEFORE, "def load(:\n") == []  # no judgement on text that does not parse
    assert broken_signatures("if X:\n    def f(a): pass\nelse:\n    def f(a, b): pass\n", "") == []
    assert is_public_module("pkg/core.py") and is_public_module("pkg/__init__.py")
    assert not is_public_module("pkg/_impl/core.py") and not is_public_module("pkg/core.txt")


def test_the_heuristic_ranks_a_fix_that_breaks_a_public_signature_lower(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    fixed = FIX["pkg/core.py"]
    candidates = {
        "clean": FIX,
        # The same fix, and mul gains a required parameter: every existing mul(a, b) call now fails.
        "breaks-mul": {"pkg/core.py": fixed.replace("def mul(a, b):", "def mul(a, b, c):")},
        # The same fix, and mul gains an optional parameter: nothing breaks.
        "extends-mul": {"pkg/core.py": fixed.replace("def mul(a, b):", "def mul(a, b, c=1):")},
        "drops-mul": {"pkg/core.py": fixed.split("\n\n\ndef mul")[0] + "\n"},
    }
    patches = {tid: (repo.patch(edits), True) for tid, edits in candidates.items()}
    with open_workspace(repo.group(patches), mirrors=mirrors) as ws:
        result = HeuristicGrader().grade(ws)
    signals = result.signals
    assert signals["breaks-mul"]["public_api_breaks"] == ["pkg/core.py:mul: new required parameter c"]
    assert signals["drops-mul"]["public_api_breaks"] == ["pkg/core.py:mul: removed"]
    assert signals["clean"]["public_api_breaks"] == signals["extends-mul"]["public_api_breaks"] == []
    rank = {tid: i for i, tier in enumerate(result.ranking) for tid in tier}
    assert rank["clean"] < rank["breaks-mul"] and rank["clean"] < rank["drops-mul"]
    assert "breaks public API: pkg/core.py:mul: new required parameter c" in result.rationales["breaks-mul"]


def test_the_same_break_in_every_candidate_changes_no_order(repo: RepoFactory, mirrors: MirrorCache) -> None:
    # The issue asks for the new parameter: both candidates add it, one also leaves a script.
    breaking = {"pkg/core.py": FIX["pkg/core.py"].replace("def mul(a, b):", "def mul(a, b, c):")}
    candidates = {"plain": breaking, "leftover": {**breaking, "repro.py": "print(1)\n"}}
    patches = {tid: (repo.patch(edits), True) for tid, edits in candidates.items()}
    with open_workspace(repo.group(patches), mirrors=mirrors) as ws:
        result = HeuristicGrader().grade(ws)
    assert result.ranking == [["plain"], ["leftover"]]
    assert result.signals["plain"]["penalty"] == 2.0  # the shared break, paid alike


@pytest.mark.parametrize(
    "hostile",
    [
        "x = " + "-" * 100_000 + "1\n",  # the parser runs out of stack: MemoryError
        "x = " + "+0" * 300_000 + "\n",  # too deep to build the tree: RecursionError
    ],
)
def test_text_too_deep_to_parse_gets_no_judgement(hostile: str) -> None:
    # A candidate's module nested beyond what `ast` can take is text that does not parse, not a grader error.
    assert broken_signatures(BEFORE, hostile) == []
    assert broken_signatures(hostile, BEFORE) == []


def test_the_heuristic_grades_a_group_whose_candidate_nests_too_deep(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    deep = {"pkg/core.py": FIX["pkg/core.py"] + "\nLIMIT = " + "+0" * 300_000 + "\n"}
    patches = {tid: (repo.patch(edits), True) for tid, edits in {"clean": FIX, "deep": deep}.items()}
    with open_workspace(repo.group(patches), mirrors=mirrors) as ws:
        result = HeuristicGrader().grade(ws)
    assert {tid for tier in result.ranking for tid in tier} == {"clean", "deep"}


def test_parses_from_threads_are_serialised(monkeypatch: pytest.MonkeyPatch) -> None:
    # CPython keeps the AST constructor's recursion depth in per-interpreter state, so two threads building
    # trees at once can fail one with "SystemError: AST constructor recursion depth mismatch"
    # (python/cpython#106905, seen on 3.11.7): the heuristic grades groups on worker threads.
    import ast
    import threading
    import time

    import grader.graders.signatures as signatures

    inside, most = 0, 0
    lock = threading.Lock()
    real_parse = ast.parse

    def watched_parse(source: str, *args, **kwargs):
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.01)
        try:
            return real_parse(source, *args, **kwargs)
        finally:
            with lock:
                inside -= 1

    monkeypatch.setattr(signatures.ast, "parse", watched_parse)
    threads = [threading.Thread(target=broken_signatures, args=(BEFORE, BEFORE)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 1
