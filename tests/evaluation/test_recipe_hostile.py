"""A recipe as an attacker would write it (issue 34, items 1, 2, 10, 11, 12 and 13): no value runs a command,
no name writes outside the cache, a malformed recipe is one line naming the file, the field and what was
expected, duplicates are refused, a track whose recipe changed says "prepare again", and a pointed-at file is
hashed in chunks, never held whole.

Real parts: two git repositories built per test (tests/support/recipe_sources.py), `gagar bench prepare` in
process and as a command, git itself. A hostile value would `touch` a canary file if git ever ran it as an
option; each test asserts the canary is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from grader.cli.commands import main
from grader.errors import GitError
from grader.evaluation.prepare import (
    NotPrepared,
    ShaMismatch,
    SourceLocator,
    _seed_mirror,
    prepare,
    prepared_root,
    resolve_bench,
)
from grader.evaluation.recipe import BenchmarkRecipeError, load_recipe, sha256_bytes
from grader.util.untrusted import OutsidePath
from grader.workspace.mirrors import MirrorCache
from tests.conftest import REPO_ROOT, run_gagar
from tests.support.recipe_sources import TASK, build_recipe_sources, commit_all


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("GAGAR_CACHE", str(tmp_path / "cache"))
    return build_recipe_sources(tmp_path)


def edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def edit_first_line(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    change(lines[0])
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def prepare_command(sources: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GAGAR_CACHE": str(Path(sources["recipe"]).parent / "cache")}
    return run_gagar(
        "bench", "prepare", str(sources["recipe"]), "--source-root", str(sources["root"]), *extra, env=env
    )


# -- 1. no recipe value runs a command ----------------------------------------------------------------------

FIRST_FILE = "run-a/predictions"


def _set(container: str, key: str, value: str) -> Callable[[Path, str], None]:
    """Sets one field of the recipe to `value` (CANARY in it replaced by the canary's path)."""

    def apply(recipe: Path, canary: str) -> None:
        hostile = value.replace("CANARY", canary)
        if container == "files":
            edit_json(recipe / "recipe.json", lambda m: m["files"][FIRST_FILE].__setitem__(key, hostile))
        elif container == "sources":
            edit_json(recipe / "recipe.json", lambda m: m["sources"][0].__setitem__(key, hostile))
        elif container == "instance":
            edit_first_line(recipe / "instances.jsonl", lambda line: line.__setitem__(key, hostile))
        else:
            edit_first_line(recipe / "instances.jsonl", lambda line: line["row"].__setitem__(key, hostile))

    return apply


# Every recipe field that reaches a git command line, each with a value git would read as an option.
COMMAND_LINE_FIELDS = {
    "files.commit": (
        _set("files", "commit", "--upload-pack=touch CANARY;:"),
        "files.run-a/predictions.commit",
    ),
    "files.path": (_set("files", "path", "--output=CANARY"), "files.run-a/predictions.path"),
    "files.repository": (_set("files", "repository", "--upload-pack=touch CANARY;:/x"), ".repository"),
    "sources.repository": (_set("sources", "repository", "-u touch CANARY/x"), "sources[0].repository"),
    "instance.base_commit": (_set("instance", "base_commit", "--upload-pack=touch CANARY;:"), "base_commit"),
    "instance.repository": (_set("instance", "repository", "--upload-pack=touch CANARY;:/x"), "repository"),
    "row.commit": (_set("row", "commit", "--upload-pack=touch CANARY;:"), "row.commit"),
    "row.path": (_set("row", "path", "--output=CANARY"), "row.path"),
    "row.repository": (_set("row", "repository", "../../x"), "row.repository"),
}


@pytest.mark.parametrize("field", sorted(COMMAND_LINE_FIELDS))
def test_every_field_that_reaches_git_refuses_an_option_named_and_runs_nothing(
    sources: dict[str, Any], tmp_path: Path, field: str
) -> None:
    change, named = COMMAND_LINE_FIELDS[field]
    canary = tmp_path / "canary"
    change(sources["recipe"], str(canary))
    done = prepare_command(sources, "--offline")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr  # one line, no traceback
    file = "instances.jsonl" if field.startswith(("instance", "row")) else "recipe.json"
    assert file in lines[0] and named in lines[0] and "refused: expected" in lines[0], lines[0]
    assert not canary.exists()


def test_a_base_commit_that_slipped_past_the_checks_is_a_name_to_git_never_an_option(
    sources: dict[str, Any], tmp_path: Path
) -> None:
    """The git calls themselves put every value after `--end-of-options`: a hostile commit handed straight to
    the mirror seeding (as a recipe object built without `load_recipe` would) is looked up, not run."""
    canary = tmp_path / "canary"
    hostile = f"--upload-pack=touch {canary};:"
    with pytest.raises(GitError, match="base commits not in"):
        _seed_mirror(MirrorCache(tmp_path / "mirrors"), TASK, Path(sources["task"]), [hostile])
    assert not canary.exists()


# -- 2. no name escapes the cache ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["..", "../../x", "a/b", "/abs/dir", ".hidden", "-x", "", "x\ny"])
def test_a_name_that_is_not_one_path_segment_is_refused(sources: dict[str, Any], name: str) -> None:
    edit_json(sources["recipe"] / "recipe.json", lambda m: m.__setitem__("name", name))
    with pytest.raises(
        BenchmarkRecipeError, match=r"recipe\.json: name: .* refused: expected one path segment"
    ):
        load_recipe(sources["recipe"])


def test_an_unchecked_name_writes_and_deletes_nothing_outside_the_prepared_root(
    sources: dict[str, Any], tmp_path: Path
) -> None:
    recipe = load_recipe(sources["recipe"])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "verification").mkdir()
    (outside / "verification" / "keep").write_text("mine")
    recipe.manifest["name"] = str(outside)  # as a recipe object built without `load_recipe` could say
    with pytest.raises(OutsidePath, match="outside"):
        prepare(recipe, SourceLocator(roots=[sources["root"]]))
    assert sorted(p.name for p in outside.rglob("*")) == ["keep", "verification"]
    recipe.manifest["name"] = "../../escaped"
    with pytest.raises(OutsidePath):
        prepare(recipe, SourceLocator(roots=[sources["root"]]))
    assert not (prepared_root() / "../../escaped").exists()


def test_a_prepared_folder_replaced_by_a_link_out_of_the_cache_is_refused(
    sources: dict[str, Any], tmp_path: Path
) -> None:
    recipe = load_recipe(sources["recipe"])
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    prepared_root().mkdir(parents=True)
    (prepared_root() / recipe.name).symlink_to(outside)
    with pytest.raises(OutsidePath, match=str(outside)):
        prepare(recipe, SourceLocator(roots=[sources["root"]]))
    assert list(outside.iterdir()) == []  # no state.json, no lock, no track
    (prepared_root() / recipe.name).unlink()
    prepare(recipe, SourceLocator(roots=[sources["root"]]))  # the same recipe, in its own folder
    (prepared_root() / recipe.name / "verification").rename(tmp_path / "moved")
    (prepared_root() / recipe.name / "verification").symlink_to(outside)
    with pytest.raises(OutsidePath):
        prepare(recipe, SourceLocator(roots=[sources["root"]]))  # the track the link stands for: refused
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("repository", ["../../x", "a/../..", "acme/..", "/abs/x", "acme/widget/extra"])
def test_a_repository_that_would_become_a_path_outside_a_source_root_is_refused(
    sources: dict[str, Any], tmp_path: Path, repository: str
) -> None:
    with pytest.raises(ValueError, match="OWNER/NAME"):
        SourceLocator(roots=[sources["root"]], online=True, clone_root=tmp_path / "clones").locate(repository)
    with pytest.raises(ValueError, match="OWNER/NAME"):
        SourceLocator(roots=[sources["root"]], given={repository: sources["task"]})
    assert not (tmp_path / "clones").exists()


# -- 3. malformed recipes: one line naming the file, the field and what was expected -------------------------


def _drop(container: str, key: str) -> Callable[[Path], None]:
    def apply(recipe: Path) -> None:
        if container == "manifest":
            edit_json(recipe / "recipe.json", lambda m: m.pop(key))
        else:
            edit_first_line(recipe / f"{container}.jsonl", lambda line: line.pop(key))

    return apply


def _manifest(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    return lambda recipe: edit_json(recipe / "recipe.json", change)


def _write(name: str, text: str) -> Callable[[Path], None]:
    return lambda recipe: (recipe / name).write_text(text)


MALFORMED: dict[str, tuple[Callable[[Path], None], str]] = {
    "recipe.json not JSON": (_write("recipe.json", '{"name": '), "recipe.json: not JSON"),
    "recipe.json a list": (_write("recipe.json", "[]"), "recipe.json: expected a JSON object, got a list"),
    "recipe.json missing": (lambda r: (r / "recipe.json").unlink(), "no recipe"),
    "name missing": (_drop("manifest", "name"), "recipe.json: missing field 'name'"),
    "name a number": (_manifest(lambda m: m.__setitem__("name", 7)), "recipe.json: name: 7 is refused"),
    "format wrong": (
        _manifest(lambda m: m.__setitem__("recipe", 2)),
        "recipe.json: recipe: expected 1, got 2",
    ),
    "unknown field": (_manifest(lambda m: m.__setitem__("extra", 1)), "recipe.json: unknown field 'extra'"),
    "sources empty": (
        _manifest(lambda m: m.__setitem__("sources", [])),
        "recipe.json: sources: expected a non-empty list",
    ),
    "source without licence": (
        _manifest(lambda m: m["sources"][0].pop("licence")),
        "sources[0]: missing field 'licence'",
    ),
    "files a list": (
        _manifest(lambda m: m.__setitem__("files", [])),
        "recipe.json: files: expected a non-empty object, got a list",
    ),
    "short sha256": (
        _manifest(lambda m: m["files"][FIRST_FILE].__setitem__("sha256", "ab")),
        "files.run-a/predictions.sha256: 'ab' is refused: expected a sha256 of 64 hex digits",
    ),
    "unknown format": (
        _manifest(lambda m: m["files"][FIRST_FILE].__setitem__("format", "csv")),
        "files.run-a/predictions.format: 'csv' is not one of predictions-json, predictions-jsonl",
    ),
    "negative size": (
        _manifest(lambda m: m["files"][FIRST_FILE].__setitem__("size", -1)),
        "files.run-a/predictions.size: expected a number of bytes",
    ),
    "pointer a string": (
        _manifest(lambda m: m["files"].__setitem__(FIRST_FILE, "x")),
        "files.run-a/predictions: expected a JSON object, got a string",
    ),
    "run names no file": (
        _manifest(lambda m: m["runs"]["run-a"].__setitem__("report", "nope")),
        "runs.run-a.report: 'nope' is not an id under files",
    ),
    "run with unknown field": (
        _manifest(lambda m: m["runs"]["run-a"].__setitem__("when", "now")),
        "runs.run-a: unknown field 'when'",
    ),
    "instances.jsonl missing": (lambda r: (r / "instances.jsonl").unlink(), "instances.jsonl: missing"),
    "instances.jsonl empty": (_write("instances.jsonl", "\n"), "instances.jsonl: empty"),
    "instance line not JSON": (_write("instances.jsonl", "{nope\n"), "instances.jsonl:1: not JSON"),
    "instance line a list": (_write("instances.jsonl", "[1]\n"), "instances.jsonl:1: expected a JSON object"),
    "instance without row": (_drop("instances", "row"), "instances.jsonl:1: missing field 'row'"),
    "instance row a number": (
        lambda r: edit_first_line(r / "instances.jsonl", lambda line: line.__setitem__("row", 3)),
        "instances.jsonl:1: row: expected a JSON object, got a number",
    ),
    "candidate resolved a string": (
        lambda r: edit_first_line(r / "candidates.jsonl", lambda line: line.__setitem__("resolved", "yes")),
        "candidates.jsonl:1: resolved: expected true/false, got a string",
    ),
    "candidate of an unknown run": (
        lambda r: edit_first_line(r / "candidates.jsonl", lambda line: line.__setitem__("run", "ghost")),
        "candidates.jsonl:1: run: 'ghost' is not a run",
    ),
    "candidate without sha256": (_drop("candidates", "sha256"), "candidates.jsonl:1: missing field 'sha256'"),
    "split a string": (
        _write("split.json", '{"dev": "all", "test": []}'),
        "split.json: dev: expected a list",
    ),
    "split with another key": (
        _write("split.json", '{"dev": [], "test": [], "train": []}'),
        "split.json: unknown field 'train'",
    ),
    "references line not JSON": (_write("references.jsonl", "{\n"), "references.jsonl:1: not JSON"),
    "probes.json not a list": (_write("probes.json", "{}"), "probes.json: expected a list of objects"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_recipe_is_one_line_naming_the_file_the_field_and_what_was_expected(
    sources: dict[str, Any], case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    change, expected = MALFORMED[case]
    change(sources["recipe"])
    assert main(["bench", "prepare", str(sources["recipe"]), "--list-sources"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines


# -- 5. duplicates ------------------------------------------------------------------------------------------


def test_an_instance_listed_twice_is_refused_with_both_lines(sources: dict[str, Any]) -> None:
    path = sources["recipe"] / "instances.jsonl"
    first = path.read_text().splitlines()[0]
    path.write_text(path.read_text() + first + "\n")
    with pytest.raises(BenchmarkRecipeError, match=r"instances\.jsonl:3: instance acme__widget-1 is listed "):
        load_recipe(sources["recipe"])
    with pytest.raises(BenchmarkRecipeError, match=r"\(first at .*instances\.jsonl:1\)"):
        load_recipe(sources["recipe"])


def test_a_candidate_listed_twice_is_refused_named(sources: dict[str, Any]) -> None:
    path = sources["recipe"] / "candidates.jsonl"
    lines = path.read_text().splitlines()
    # The same instance and run again, with another label: before, the second silently joined the first.
    again = dict(json.loads(lines[0]), resolved=not json.loads(lines[0])["resolved"])
    path.write_text(path.read_text() + json.dumps(again) + "\n")
    with pytest.raises(BenchmarkRecipeError, match=r"candidate acme__widget-1 / run-a is listed twice"):
        load_recipe(sources["recipe"])


def test_a_key_given_twice_in_a_recipe_file_is_refused_named(sources: dict[str, Any]) -> None:
    path = sources["recipe"] / "recipe.json"
    text = path.read_text()
    path.write_text(text.replace('"name": "tiny-recipe"', '"name": "tiny-recipe", "name": "other"', 1))
    with pytest.raises(BenchmarkRecipeError, match=r"recipe\.json: key 'name' appears twice"):
        load_recipe(sources["recipe"])


# -- 4. a prepared track that no longer matches its recipe ---------------------------------------------------


@pytest.mark.parametrize("change", ["candidate removed", "instance removed", "reference added"])
def test_a_track_prepared_from_another_version_of_the_recipe_says_prepare_again(
    sources: dict[str, Any], tmp_path: Path, change: str, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe_dir = sources["recipe"]
    prepare(load_recipe(recipe_dir), SourceLocator(roots=[sources["root"]]))
    assert resolve_bench(str(recipe_dir), "verification")  # as prepared: used
    if change == "candidate removed":
        lines = (recipe_dir / "candidates.jsonl").read_text().splitlines()
        (recipe_dir / "candidates.jsonl").write_text("".join(line + "\n" for line in lines[:-1]))
    elif change == "instance removed":
        lines = (recipe_dir / "instances.jsonl").read_text().splitlines()
        (recipe_dir / "instances.jsonl").write_text(lines[0] + "\n")
        (recipe_dir / "split.json").write_text(json.dumps({"dev": ["acme__widget-1"], "test": []}))
        kept = [c for c in (recipe_dir / "candidates.jsonl").read_text().splitlines() if "widget-2" not in c]
        (recipe_dir / "candidates.jsonl").write_text("".join(line + "\n" for line in kept))
    else:
        pair = {"group_id": "acme__widget-1", "better": "run-a", "worse": "run-c", "category": "hygiene"}
        (recipe_dir / "references.jsonl").write_text(json.dumps(pair) + "\n")
    with pytest.raises(NotPrepared, match="prepare again"):
        resolve_bench(str(recipe_dir), "verification")
    check = ["bench", "check", str(recipe_dir), "--track", "verification"]
    evaluate = ["eval", "--bench", str(recipe_dir), "--track", "verification", "--out", str(tmp_path / "r")]
    for command in (check, evaluate):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "prepare again" in err and "gagar bench prepare tiny-recipe" in err, err
    prepare(load_recipe(recipe_dir), SourceLocator(roots=[sources["root"]]))
    assert resolve_bench(str(recipe_dir), "verification")  # prepared again: used


# -- 6. a pointed-at file is hashed in chunks ---------------------------------------------------------------

BIG = 48 * 2**20


def _big_predictions(sources: dict[str, Any], declared: int | None) -> None:
    """Point run-a's predictions at a 48 MiB file whose sha256 is not the recipe's (a swapped source)."""
    data: Path = sources["data"]
    (data / "big.jsonl").write_bytes(os.urandom(BIG))
    commit = commit_all(data, "big")

    def point(manifest: dict[str, Any]) -> None:
        pointer = manifest["files"][FIRST_FILE]
        pointer.update(commit=commit, path="big.jsonl")
        if declared is not None:
            pointer["size"] = declared

    edit_json(sources["recipe"] / "recipe.json", point)


def test_a_file_over_its_declared_size_is_refused_before_it_is_read(sources: dict[str, Any]) -> None:
    _big_predictions(sources, declared=1000)
    with pytest.raises(ShaMismatch, match=rf"big\.jsonl \(file run-a/predictions\) holds {BIG} bytes, over "):
        prepare(load_recipe(sources["recipe"]), SourceLocator(roots=[sources["root"]]))


# The peak resident memory of this process (VmHWM, KiB): unlike ru_maxrss, it starts afresh at exec, not at
# the parent's peak (pytest's own, far above what is measured).
MEASURE = """
import re, sys
from pathlib import Path
from grader.evaluation.prepare import ShaMismatch, SourceLocator, prepare
from grader.evaluation.recipe import load_recipe
def peak():
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
recipe = load_recipe(sys.argv[1])
before = peak()
try:
    prepare(recipe, SourceLocator(roots=[Path(sys.argv[2])]))
except ShaMismatch as exc:
    print(exc, file=sys.stderr)
print(peak() - before)
"""


def test_a_large_file_whose_sha256_is_wrong_is_never_held_whole(sources: dict[str, Any]) -> None:
    """Before, the 48 MiB file was read whole (and held twice: git's output and its copy); now it is hashed
    in 1 MiB chunks, so the peak grows by the spool's memory part at most."""
    _big_predictions(sources, declared=None)
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(sources["recipe"]), str(sources["root"])],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "GAGAR_CACHE": str(Path(sources["recipe"]).parent / "cache")},
        timeout=300,
    )
    assert "sha256 mismatch" in done.stderr and "big.jsonl" in done.stderr, done.stderr
    grown_kib = int(done.stdout.strip())
    assert grown_kib < 24 * 1024, f"peak memory grew by {grown_kib} KiB reading a {BIG >> 20} MiB file"


def test_a_file_of_its_declared_size_is_hashed_whole_in_chunks_and_one_byte_more_is_refused(
    sources: dict[str, Any],
) -> None:
    """A 3.5 MB file (four chunks) of exactly its declared size passes its sha256 check (the chunks hash to
    the file's digest: preparing goes on to the patches); declared one byte smaller, it is refused unread."""
    data: Path = sources["data"]
    payload = (json.dumps({"instance_id": "acme__widget-1", "model_patch": "x"}) + "\n") * 60_000
    (data / "many.jsonl").write_text(payload)
    commit = commit_all(data, "many")
    pointer = {"commit": commit, "path": "many.jsonl", "sha256": sha256_bytes(payload.encode())}
    for declared in (len(payload), len(payload) - 1):
        edit_json(
            sources["recipe"] / "recipe.json",
            lambda m: m["files"]["run-c/predictions"].update(pointer, size=declared),  # noqa: B023
        )
        with pytest.raises(ShaMismatch) as refused:
            prepare(load_recipe(sources["recipe"]), SourceLocator(roots=[sources["root"]]))
        if declared == len(payload):  # past the file's check: its patch is not the recipe's
            assert "candidate acme__widget-1 / run-c" in str(refused.value)
        else:
            assert f"holds {len(payload)} bytes, over the {declared}" in str(refused.value)
