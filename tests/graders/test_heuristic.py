"""The heuristic grader on real workspaces: each signal, the bundled example, determinism."""

from __future__ import annotations

from grader.graders.heuristic import HeuristicGrader, is_leftover
from grader.groups.formats import load_group_file
from grader.workspace.mirrors import MirrorCache
from grader.workspace.workspace import open_workspace
from tests.conftest import BASE_FILES, EXAMPLE_GROUP, FIX, RepoFactory

FIXED = FIX["pkg/core.py"]


def grade(repo: RepoFactory, mirrors: MirrorCache, candidates: dict[str, dict[str, str | None]]):
    patches = {tid: (repo.patch(edits), True) for tid, edits in candidates.items()}
    group = repo.group({**patches, "failed": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        return HeuristicGrader().grade(ws)


def test_each_signal_is_detected_and_ranked_below_the_clean_fix(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    result = grade(
        repo,
        mirrors,
        {
            "clean": FIX,
            "leftover": {**FIX, "reproduce_bug.py": "from pkg.core import add\nprint(add(1, 2))\n"},
            "backup": {**FIX, "pkg/core.py.orig": BASE_FILES["pkg/core.py"]},
            "tests": {**FIX, "tests/test_core.py": "def test_add():\n    pass\n"},
            "debug": {
                "pkg/core.py": FIXED.replace("    return a + b", "    print('add', a, b)\n    return a + b")
            },
            "commented": {
                "pkg/core.py": FIXED.replace("    return a + b", "    # return a - b\n    return a + b")
            },
            "dead": {
                "pkg/core.py": FIXED.replace(
                    "    return a + b", "    if False:\n        x = 1\n    return a + b"
                )
            },
            "scope": {**FIX, "pkg/util.py": BASE_FILES["pkg/util.py"].replace("max(lo", "max( lo")},
            "swallow": {
                "pkg/core.py": FIXED.replace(
                    "    return a + b", "    try:\n        return a + b\n    except Exception:\n        pass"
                )
            },
        },
    )
    signals = result.signals
    assert result.ranking[0] == ["clean"]
    assert signals["clean"]["penalty"] == 0
    assert signals["leftover"]["leftover_files"] == ["reproduce_bug.py"]
    assert (
        signals["leftover"]["debug_lines"] == 0
    )  # prints inside a leftover script count once, as the leftover
    assert signals["backup"]["leftover_files"] == ["pkg/core.py.orig"]
    assert signals["tests"]["test_files_modified"] == ["tests/test_core.py"]
    assert signals["debug"]["debug_lines"] == 1
    assert signals["commented"]["commented_code_lines"] == 1
    assert signals["dead"]["commented_code_lines"] == 1
    assert signals["scope"]["out_of_scope_files"] == ["pkg/util.py"]
    assert signals["scope"]["formatting_only_files"] == ["pkg/util.py"]
    assert signals["swallow"]["swallowed_exceptions"] == 1
    assert all(signals[t]["swallowed_exceptions"] == 0 for t in signals if t != "swallow")
    assert all(signals[t]["penalty"] > 0 for t in signals if t != "clean")
    assert result.ranking[-2:] in ([["tests"], ["swallow"]], [["swallow"], ["tests"]])
    assert "modifies tests tests/test_core.py" in result.rationales["tests"]
    assert result.rationales["clean"].endswith("smallest candidate, nothing flagged")


def test_debug_output_where_the_file_already_prints_is_convention(make_repo, mirrors: MirrorCache) -> None:
    repo = make_repo({"cli.py": "def main():\n    print('hello')\n", "lib.py": "def f():\n    return 1\n"})
    result = grade(
        repo,
        mirrors,
        {
            "cli": {"cli.py": "def main():\n    print('hello')\n    print('bye')\n"},
            "lib": {"lib.py": "def f():\n    print('here')\n    return 1\n"},
        },
    )
    assert result.signals["cli"]["debug_lines"] == 0
    assert result.signals["lib"]["debug_lines"] == 1


def test_equal_candidates_tie_and_equivalent_patches_share_a_rank(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    respaced = {"pkg/core.py": FIXED.replace("return a + b", "return  a + b")}
    swapped = {"pkg/core.py": FIXED.replace("a + b", "b + a")}
    result = grade(repo, mirrors, {"a": FIX, "b": swapped, "c": respaced})
    assert result.ranking == [["a", "c", "b"]]
    assert result.signals["a"]["equivalent_to"] == ["c"]


def test_bundled_example_ranking_is_deterministic(mirrors: MirrorCache) -> None:
    (group,) = load_group_file(EXAMPLE_GROUP)
    rankings = []
    for _ in range(2):
        with open_workspace(group, mirrors=mirrors) as ws:
            grade_ = HeuristicGrader().grade(ws)
            rankings.append((grade_.ranking, grade_.rationales))
    assert rankings[0] == rankings[1]
    assert rankings[0][0] == [
        ["clean", "clean-respaced"],
        ["leftover-script"],
        ["reformats-report"],
        ["edits-tests"],
    ]


def test_leftover_names() -> None:
    for path in (
        "reproduce.py",
        "repro_issue.py",
        "debug_run.sh",
        "scratch.txt",
        "pkg/a.py.bak",
        "pkg/a.rej",
        "notes~",
        "run_me.py",
        "output.log",
    ):
        assert is_leftover(path), path
    for path in ("pkg/new_module.py", "setup.py", "docs/guide.md", "tests/test_new.py", "conftest.py"):
        assert not is_leftover(path), path
    # A test named for the issue it covers, in the test suite, is a regression test; at the root, or as a
    # backup, it is still scratch.
    for path in ("tests/test_issue_42.py", "pkg/tests/test_fix.py", "testing/test_bug_7.py"):
        assert not is_leftover(path), path
    for path in ("test_issue.py", "pkg/test_fix.py", "tests/test_issue_42.py.orig", "tests/reproduce.py"):
        assert is_leftover(path), path


def test_adding_a_regression_test_is_no_penalty_but_weakening_one_is(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    test_file = BASE_FILES["tests/test_core.py"]
    added = test_file + "\n\ndef test_add_negative():\n    assert add(-1, -2) == -3\n"
    result = grade(
        repo,
        mirrors,
        {
            "clean": FIX,
            "adds-test": {**FIX, "tests/test_core.py": added},
            "new-test-file": {
                **FIX,
                "tests/test_more.py": "from pkg.core import add\n\n\ndef test_z():\n"
                "    assert add(0, 0) == 0\n",
            },
            "deletes-assertion": {
                **FIX,
                "tests/test_core.py": test_file.replace("    assert add(1, 2) == 3\n", "    pass\n"),
            },
            "changes-expected": {**FIX, "tests/test_core.py": test_file.replace("== 3", "in (3, None)")},
            "adds-xfail": {
                **FIX,
                "tests/test_core.py": test_file.replace(
                    "def test_add", "import pytest\n\n\n@pytest.mark.xfail\ndef test_add"
                ),
            },
            "deletes-test-file": {**FIX, "tests/test_core.py": None},
        },
    )
    signals = result.signals
    for tid in ("adds-test", "new-test-file"):
        assert signals[tid]["test_files_modified"] == [], tid
        assert signals[tid]["out_of_scope_files"] == [], tid
        assert "tests" not in result.rationales[tid], result.rationales[tid]
    for tid in ("deletes-assertion", "changes-expected", "adds-xfail", "deletes-test-file"):
        assert signals[tid]["test_files_modified"] == ["tests/test_core.py"], tid
        assert signals[tid]["penalty"] >= 3.0, tid
    # Added tests cost nothing, size included: the bare fix and the fix with a test tie, and every
    # weakening ranks below them.
    assert result.ranking[0] == ["clean", "adds-test", "new-test-file"], result.ranking
    for tid in ("adds-test", "new-test-file"):
        assert signals[tid]["penalty"] == 0 and signals[tid]["size_ratio"] == 1, tid
        assert result.rationales[tid] == result.rationales["clean"], tid
        assert signals[tid]["changed_lines"] > signals["clean"]["changed_lines"], tid  # still reported
    weakened = {"deletes-assertion", "changes-expected", "adds-xfail", "deletes-test-file"}
    assert {tid for tier in result.ranking[1:] for tid in tier} == weakened, result.ranking


def test_a_regression_test_named_for_its_issue_costs_nothing(repo: RepoFactory, mirrors: MirrorCache) -> None:
    regression = "from pkg.core import add\n\n\ndef test_issue_42():\n    assert add(2, 2) == 4\n"
    result = grade(
        repo,
        mirrors,
        {
            "bare-fix": FIX,
            "fix-and-regression-test": {**FIX, "tests/test_issue_42.py": regression},
            "fix-and-root-script": {**FIX, "test_issue.py": regression},
        },
    )
    assert result.ranking == [["bare-fix", "fix-and-regression-test"], ["fix-and-root-script"]], (
        result.ranking
    )
    assert result.signals["fix-and-root-script"]["leftover_files"] == ["test_issue.py"]


def test_size_does_not_count_added_tests(repo: RepoFactory, mirrors: MirrorCache) -> None:
    test_file = BASE_FILES["tests/test_core.py"]
    many_tests = "".join(f"\n\ndef test_add_{i}():\n    assert add({i}, 1) == {i + 1}\n" for i in range(20))
    roundabout = FIXED.replace(
        "    return a + b", "    total = a\n    total += b\n    result = total\n    return result"
    )
    result = grade(
        repo,
        mirrors,
        {
            "fix-with-many-tests": {**FIX, "tests/test_core.py": test_file + many_tests},
            "bare-fix": FIX,
            "larger-fix": {"pkg/core.py": roundabout},
        },
    )
    signals = result.signals
    # Twenty new tests do not make a fix bigger; four source lines for one do.
    assert result.ranking == [["fix-with-many-tests", "bare-fix"], ["larger-fix"]], result.ranking
    assert signals["larger-fix"]["size_ratio"] == 2.5  # 5 changed lines against 2
    assert "2.5x the smallest candidate's changed lines" in result.rationales["larger-fix"]


def test_the_fix_the_group_disagrees_with_ranks_lower_and_two_candidates_say_nothing(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    # Three different one-line fixes of `add` share the line they remove; the fourth, as small, changes `mul`
    # instead. No other signal tells them apart: only the group's disagreement can order it.
    agreeing = {
        "first": FIX,
        "second": {"pkg/core.py": BASE_FILES["pkg/core.py"].replace("a - b", "b + a")},
        "third": {"pkg/core.py": BASE_FILES["pkg/core.py"].replace("a - b", "(a + b)")},
    }
    diverging = {"pkg/core.py": BASE_FILES["pkg/core.py"].replace("a * b", "a * b * 1")}
    result = grade(repo, mirrors, {**agreeing, "diverging": diverging})
    signals = result.signals
    assert result.ranking == [["first", "second", "third"], ["diverging"]], result.ranking
    assert signals["diverging"]["agreement"] < min(signals[t]["agreement"] for t in agreeing)
    assert signals["first"]["agreement_gap"] == 0 and signals["first"]["penalty"] == 0
    assert signals["diverging"]["agreement_gap"] > 0
    assert "agrees" in result.rationales["diverging"] and "agrees" not in result.rationales["first"]
    # With two candidates each is exactly as similar to the other: no agreement signal, they tie.
    pair = grade(repo, mirrors, {"first": FIX, "diverging": diverging})
    assert pair.ranking == [["first", "diverging"]]
    assert "agreement" not in pair.signals["first"]


def test_a_trailing_comment_does_not_make_the_same_code_disagree(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    # The same fix with a comment after the code is the same code change as the bare fix: the two agree with
    # each other, so more than the other fixes do. A `#` inside a string is code.
    commented = {"pkg/core.py": BASE_FILES["pkg/core.py"].replace("a - b", "a + b  # was a - b")}
    in_string = {"pkg/core.py": BASE_FILES["pkg/core.py"].replace("a - b", "a + b if a else '#'")}
    result = grade(
        repo,
        mirrors,
        {
            "bare": FIX,
            "commented": commented,
            "third": {"pkg/core.py": BASE_FILES["pkg/core.py"].replace("a - b", "(a + b)")},
            "in-string": in_string,
        },
    )
    signals = result.signals
    assert signals["commented"]["agreement"] == signals["bare"]["agreement"] > signals["third"]["agreement"]
    assert signals["in-string"]["agreement"] < signals["bare"]["agreement"], signals
    assert ["bare", "commented"] in result.ranking, result.ranking


def test_the_bundled_example_grades_in_seconds_and_says_the_evidence_stage_was_skipped(
    mirrors: MirrorCache, capsys
) -> None:
    import time

    (group,) = load_group_file(EXAMPLE_GROUP)
    started = time.monotonic()
    with open_workspace(group, mirrors=mirrors) as ws:
        grade = HeuristicGrader().grade(ws)
    assert time.monotonic() - started < 30
    reason = "the task names no environment (image, python or recipe) to run it in"
    assert grade.details["evidence"]["skipped"] == reason
    assert grade.details["evidence_table"] == f"Execution evidence: not gathered ({reason})."
    assert f"inventory-average-empty: stage skipped: {reason}" in capsys.readouterr().err
    assert not any("execution" in signals for signals in grade.signals.values())
