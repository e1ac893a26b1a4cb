"""The LLM grader's tools as a model sees them, on real workspaces and a real local sandbox: output cut at
line boundaries, the sandbox's interpreter said once, identical submissions, vendored trees left out of
search."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from grader.graders.llm.agent import LLMGrader
from grader.graders.llm.prompts import load_prompts
from grader.graders.llm.tools import VENDORED_DIRS, Toolbox, assign_labels, compact_diff, split_budget
from grader.pipeline import grade_group_sync
from grader.sandbox.environments import open_task_sandbox
from grader.sandbox.output import cap_lines
from grader.servers.scripted import Reply, ScriptedServer, labels_in, tool_calls
from grader.workspace.mirrors import MirrorCache
from grader.workspace.view import GradingView
from grader.workspace.workspace import open_workspace
from tests.conftest import FIX, RepoFactory
from tests.support.conftest_sandbox import docker_marks

MARKER = re.compile(r"^\[\.\.\. lines (\d+)-(\d+) of (\d+) cut \.\.\.\]$")


@contextmanager
def toolbox_over(
    repo: RepoFactory, mirrors: MirrorCache, candidates: dict[str, dict[str, str | None]], **options: Any
) -> Iterator[tuple[Toolbox, GradingView]]:
    """A toolbox over a real workspace of `candidates` (all passing), its `run` on the local backend."""
    group = repo.group({**{t: (repo.patch(e), True) for t, e in candidates.items()}, "failed": ("", False)})
    with open_workspace(group, mirrors=mirrors) as workspace:
        view = workspace.view()
        toolbox = Toolbox(
            view,
            assign_labels(view, seed=3),
            load_prompts().tools,
            sandbox_opener=lambda: open_task_sandbox(view, "local"),
            **options,
        )
        try:
            yield toolbox, view
        finally:
            toolbox.close()


def blocks_of(output: str) -> dict[str, str]:
    """Each target's block of a `run` result, by label (the text between its data markers)."""
    found = re.findall(r"^== (\S+): .*?\n<<<DATA (\w+)>>>\n(.*?)\n<<<END \2>>>", output, flags=re.M | re.S)
    return {label: body for label, _, body in found}


def test_cap_lines_keeps_whole_lines_and_names_those_cut() -> None:
    lines = [f"probe {i}: {i * i}" for i in range(1, 181)]
    capped = cap_lines("\n".join(lines) + "\n", 1000)
    shown = capped.splitlines()
    (cut,) = [line for line in shown if line.startswith("[...")]
    first, last, total = map(int, MARKER.match(cut).groups())
    at = shown.index(cut)
    # Every line kept is a whole line, in order, and the marker names exactly the ones that went.
    assert shown[:at] == lines[: first - 1] and shown[at + 1 :] == lines[last:]
    assert total == 180 and at > 0 and len(shown) - at - 1 > 0
    assert len(capped) <= 1000 + len(cut) + 1
    # A line too long to keep whole is cut inside, and says how much; its neighbours stay whole.
    long = cap_lines("short\n" + "x" * 5000 + "\nend\n", 1000)
    assert long.startswith("short\n") and long.endswith("\nend\n") and "characters cut ..." in long
    # A file shown from line 100 (lines 100-199, of 50 characters) is numbered from there: 4 lines fit in
    # half of 500 characters, 5 more in the rest.
    numbered = cap_lines("\n".join(["y" * 50] * 100), 500, first_line=100).splitlines()
    assert numbered[4] == "[... lines 104-194 cut ...]" and len(numbered) == 10
    assert cap_lines("fits\n", 10) == "fits\n"
    # One long line (a JSON document, say) may use the whole limit.
    single = cap_lines("j" * 5000, 3000)
    assert single.count("j") == 3000 and "2,000 characters cut" in single


def test_an_empty_stream_leaves_its_share_to_the_other_and_stderr_does_not_crowd_out_stdout() -> None:
    assert split_budget(5000, 0, 1000) == (1000, 1)
    assert split_budget(5000, 100, 1000) == (900, 100)
    assert split_budget(100, 5000, 1000) == (100, 900)
    # Both long: stdout (a test run's results) first, stderr's warnings a quarter (it was half).
    assert split_budget(5000, 5000, 1000) == (750, 250)


@pytest.fixture
def probe_lines() -> str:
    # 180 lines of 24 characters per target: 4,400 characters, over a target's share of the output.
    return "python3 -c \"[print(f'probe {i:>3}: ' + 'r' * 12) for i in range(1, 181)]\""


def test_run_cuts_a_long_stdout_at_line_boundaries_naming_the_lines(
    repo: RepoFactory, mirrors: MirrorCache, probe_lines: str
) -> None:
    wanted = [f"probe {i:>3}: " + "r" * 12 for i in range(1, 181)]
    with toolbox_over(repo, mirrors, {"a": FIX}, output_chars=4000) as (toolbox, _):
        output = toolbox.call("run", {"command": probe_lines})
    blocks = blocks_of(output)
    assert set(blocks) == {"base"}  # the candidate's output is the same: said in one line, not shown again
    for label in toolbox.candidates.order:
        assert re.search(rf"^== {label}: exit 0, [\d.]+s: the same exit and output as base$", output, re.M)
    for label, body in blocks.items():
        stdout = body.split("stdout:\n", 1)[1].rsplit("\nstderr:\n", 1)[0].splitlines()
        (cut,) = [line for line in stdout if line.startswith("[...")]
        first, last, total = map(int, MARKER.match(cut).groups())
        at = stdout.index(cut)
        assert total == 180, label
        assert stdout[:at] == wanted[: first - 1] and stdout[at + 1 :] == wanted[last:], label
        assert "characters cut" not in body, label


def test_run_shows_a_stdout_that_fits_the_target_share_whole_when_stderr_is_empty(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    # 2 targets share 4,000 characters: 2,000 each. 60 lines of 24 (1,440 characters) fit, with stderr
    # empty; they were cut when stdout had only half a target's share.
    probe = "python3 -c \"[print(f'probe {i:>3}: ' + 'r' * 12) for i in range(1, 61)]\""
    with toolbox_over(repo, mirrors, {"a": FIX}, output_chars=4000) as (toolbox, _):
        output = toolbox.call("run", {"command": probe})
    for label, body in blocks_of(output).items():
        assert "cut ...]" not in body, label
        assert sum(line.startswith("probe ") for line in body.splitlines()) == 60, label


def test_the_first_run_says_which_python_the_sandbox_has_and_later_runs_do_not(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    with toolbox_over(repo, mirrors, {"a": FIX}) as (toolbox, _):
        first = toolbox.call("run", {"command": "true", "targets": ["base"]})
        where = "python3 -c 'import platform, sys; print(platform.python_version(), sys.executable)'"
        version = toolbox.call("run", {"command": where})
        third = toolbox.call("run", {"command": "true"})
    said = [line for line in first.splitlines() if line.startswith("[sandbox, said once: ")]
    assert len(said) == 1, first
    number, executable = blocks_of(version)["base"].split("stdout:\n", 1)[1].split()[:2]
    assert f"python3 is Python {number} ({executable}" in said[0]
    assert "local backend, no image" in said[0]
    assert "[sandbox, said once" not in version and "[sandbox, said once" not in third


def test_search_leaves_vendored_trees_out_unless_asked(make_repo, mirrors: MirrorCache) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/core.py": "def helper(x):\n    return x\n",
        "pkg/_vendor/six.py": "def helper(x):\n    return x\n",
        "third_party/lib/util.py": "def helper(y):\n    return y\n",
        "web/node_modules/left/index.js": "// def helper\n",
        "tests/test_core.py": "from pkg.core import helper\n",
    }
    repo = make_repo(files)
    with toolbox_over(repo, mirrors, {"a": {"pkg/core.py": "def helper(x):\n    return x + 0\n"}}) as (tb, _):
        default = tb.call("search", {"target": "base", "pattern": "def helper"})
        everything = tb.call(
            "search", '{"target": "base", "pattern": "def helper", "include_vendored": true}'
        )
        inside = tb.call("search", {"target": "base", "pattern": "def helper", "path": "pkg/_vendor"})
        tool = next(spec for spec in tb.specs.values() if spec["name"] == "search")
    assert default.startswith(
        "base: 1 matching line(s); 3 match(es) in vendored paths left out (pass include_vendored=true)\n"
    )
    assert "pkg/core.py:1:def helper" in default and "six.py" not in default and "third_party" not in default
    assert everything.startswith("base: 4 matching line(s)\n") and "node_modules" in everything
    assert inside.startswith("base: 1 matching line(s)\n") and "pkg/_vendor/six.py:1:" in inside
    assert "include_vendored" in tool["parameters"]["properties"]
    named = set(re.search(r"directories named ([^)]*)\)", tool["description"]).group(1).split(", "))
    assert named == VENDORED_DIRS  # the description names exactly the trees left out


def test_identical_submissions_are_said_to_share_one_rank_and_not_to_vote(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    with toolbox_over(repo, mirrors, {"a": FIX, "same-as-a": FIX, "b": {"README.md": "x\n"}}) as (tb, _):
        listing = tb.call("list_candidates", {})
    assert "(submitted 2 times)" in listing
    # Said outside the data markers: it is the grader's word, not a candidate's.
    data, note = listing.rsplit(">>>\n", 1)
    assert data.rsplit("\n", 1)[1].startswith("<<<END ") and "(submitted 2 times)" in data
    assert note == "identical submissions are one candidate: they share its rank; the count is not a vote"

    group = repo.group({"a": (repo.patch(FIX), True), "same-as-a": (repo.patch(FIX), True), "f": ("", False)})

    def policy(request: dict[str, Any], n: int) -> Reply:
        order = [labels_in(request)]
        reasons = {label: "same" for label in order[0]}
        return tool_calls(("submit_ranking", {"ranking": order, "reasons": reasons, "confidence": 0.5}))

    with ScriptedServer(policy) as server:
        grader = LLMGrader("scripted", base_url=server.url, sandbox=None, seed=7)
        result = grade_group_sync(group, grader)
    assert result.status == "graded", result.reason
    system = server.requests[0]["messages"][0]["content"]
    assert "how many times a candidate was submitted is not a vote for it" in system
    listed = next(t for t in server.requests[0]["tools"] if t["function"]["name"] == "list_candidates")
    assert "the count is not a vote" in listed["function"]["description"]


@pytest.mark.docker
def test_the_first_run_in_docker_names_the_image_and_its_python(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    (skip,) = [mark for mark in docker_marks() if mark.name == "skip"] or [None]
    if skip is not None:
        pytest.skip(skip.kwargs["reason"])
    from grader.sandbox.base import DEFAULT_IMAGE
    from grader.sandbox.images import build_images

    build_images()  # a no-op once the images exist
    group = repo.group({"a": (repo.patch(FIX), True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as workspace:
        view = workspace.view()
        opener = lambda: open_task_sandbox(view, "docker")  # noqa: E731
        toolbox = Toolbox(view, assign_labels(view, seed=3), load_prompts().tools, sandbox_opener=opener)
        try:
            where = "python3 -c 'import platform; print(platform.python_version())'"
            first = toolbox.call("run", {"command": where, "targets": ["base"]})
        finally:
            toolbox.close()
    number = blocks_of(first)["base"].split("stdout:\n", 1)[1].split()[0]
    (said,) = [line for line in first.splitlines() if line.startswith("[sandbox, said once: ")]
    assert f"python3 is Python {number} (" in said and f"image {DEFAULT_IMAGE}" in said, said


for _mark in docker_marks():  # the docker mark, and a skip naming the cause where no engine answers
    test_the_first_run_in_docker_names_the_image_and_its_python = _mark(
        test_the_first_run_in_docker_names_the_image_and_its_python
    )


def test_output_over_the_sandbox_cap_is_said_and_still_shown_in_whole_lines(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    # 200,000 lines (about 2.5 MB) on stdout: over the sandbox's 1 MB cap, which drops the middle bytes.
    flood = "python3 -c \"[print(f'line {i:>6} end') for i in range(200000)]\""
    with toolbox_over(repo, mirrors, {"a": FIX}) as (toolbox, _):
        output = toolbox.call("run", {"command": flood, "targets": ["base"]})
    assert (
        "== base: exit 0, " in output and "(over the sandbox's output cap: its middle was dropped)" in output
    )
    stdout = blocks_of(output)["base"].split("stdout:\n", 1)[1].rsplit("\nstderr:\n", 1)[0].splitlines()
    assert stdout[0] == "line      0 end" and stdout[-1] == "line 199999 end"
    assert all(re.fullmatch(r"line +\d+ end", line) for line in stdout if not line.startswith("[... lines "))


def test_diff_pages_end_at_line_boundaries_and_together_are_the_whole_diff(
    make_repo, mirrors: MirrorCache
) -> None:
    base = "".join(
        f"value_{i} = {i}  # a line of the module, long enough to fill pages\n" for i in range(400)
    )
    repo = make_repo({"pkg/__init__.py": "", "pkg/big.py": base})
    changed = base.replace(" = ", " == ")
    with toolbox_over(repo, mirrors, {"a": {"pkg/big.py": changed}}, page_chars=3000) as (tb, view):
        label = tb.candidates.order[0]
        first = tb.call("diff", {"candidate": label})
        count = int(re.match(rf"diff of {label} against base, page 1 of (\d+)\n", first).group(1))
        pages = [first] + [tb.call("diff", {"candidate": label, "page": n}) for n in range(2, count + 1)]
        whole = compact_diff(view.diff(tb.candidates.trajectory(label)))
    bodies = [
        re.search(r"<<<DATA (\w+)>>>\n(.*)\n<<<END \1>>>$", page, flags=re.S).group(2) for page in pages
    ]
    assert count > 1 and "".join(bodies) == whole
    assert all(body.endswith("\n") and len(body) <= 3000 for body in bodies)


def test_with_twelve_targets_a_short_output_is_never_cut(repo: RepoFactory, mirrors: MirrorCache) -> None:
    """12 targets of a 12-line probe, 1,300 characters each: over the cap's equal share (1,000), which cut
    every one; short outputs are shown whole, each naming its target."""
    edits = {f"t{i}": {"pkg/util.py": f"VALUE = {i}\n"} for i in range(11)}
    probe = (
        "python3 - <<'EOF'\nimport pkg.util as u\nvalue = getattr(u, 'VALUE', -1)\n"
        "for i in range(12):\n    print(f'{value:>3} line {i:>2} ' + 'v' * 96)\nEOF"
    )
    with toolbox_over(repo, mirrors, edits) as (toolbox, _):
        output = toolbox.call("run", {"command": probe})
    blocks = blocks_of(output)
    assert set(blocks) == {"base", *toolbox.candidates.order}
    for label, body in blocks.items():
        assert "cut" not in body, label
        assert sum(" line " in line for line in body.splitlines()) == 12, label
    assert len(output) > 12 * 1200


def test_a_long_test_run_keeps_its_summary_and_stderr_warnings_do_not_crowd_out_stdout(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    """A test run's 400 result lines and its summary on stdout, 300 warnings on stderr, on 2 targets whose
    outputs differ: each keeps the summary (the tail) and names the lines dropped, and stdout shows at least
    twice what stderr does (they had half each)."""
    run = (
        "python3 - <<'EOF'\nimport sys, pkg.core\nfor i in range(400):\n"
        "    print(f'testing/test_x.py::test_{i} PASSED' + ' ' * 20)\n"
        "    if i < 300:\n"
        "        print(f'DeprecationWarning: old call {i}' + ' ' * 20, file=sys.stderr)\n"
        "print(f'==== {pkg.core.add(1, 2)} failed, 397 passed in 1.23s ====')\nEOF"
    )
    with toolbox_over(repo, mirrors, {"a": FIX}) as (toolbox, _):
        output = toolbox.call("run", {"command": run})
    blocks = blocks_of(output)
    assert set(blocks) == {"base", *toolbox.candidates.order}
    for label, body in blocks.items():
        stdout, stderr = body.split("stdout:\n", 1)[1].split("\nstderr:\n", 1)
        assert re.search(r"==== -?\d+ failed, 397 passed in 1\.23s ====$", stdout.rstrip()), label
        assert MARKER.match(next(line for line in stdout.splitlines() if line.startswith("[..."))), label
        assert len(stdout) >= 2 * len(stderr), (label, len(stdout), len(stderr))


def test_each_tool_result_names_what_it_is_about(repo: RepoFactory, mirrors: MirrorCache) -> None:
    """A result answers its call by id only: each names its candidate or target before the data."""
    with toolbox_over(repo, mirrors, {"a": FIX, "b": {"README.md": "x\n"}}) as (tb, _):
        first, second = tb.candidates.order
        diff = tb.call("diff", {"candidate": first, "against": second, "path": "pkg"})
        read = tb.call("read_file", {"target": second, "path": "pkg/core.py"})
        search = tb.call("search", {"target": first, "pattern": "def add"})
    assert diff.startswith(f"diff of {first} against {second}, pkg\n<<<DATA ")
    assert read.startswith(f"{second}: pkg/core.py lines 1-")
    assert search.startswith(f"{first}: 1 matching line(s)\n")
