"""`gagar bench prepare`: materialize a recipe (grader.evaluation.recipe) into benchmark folders in the cache.

Prediction files, reports and dataset rows are read at their pinned commits from local git copies of their
repositories (`--source-root DIR` holding OWNER/NAME git dirs, bare or not; `--source OWNER/NAME=PATH`), or
from clones of https://github.com/OWNER/NAME made into the cache when online. Every file's sha256 and every
patch's sha256 is checked; the first mismatch stops the run, named. Base trees are not copied: each group's
task names https://github.com/OWNER/NAME at its base commit, and `prepare` seeds the shared mirror cache
(grader.workspace.mirrors) under that URL from the local copy, so workspaces then find every base commit
offline.

Output, under `prepared_root()/NAME/`: one benchmark folder per track (`verification/`, `preference/` once
it has labelled pairs), each in the format of grader.evaluation.benchmark plus `references.dev.jsonl` and
`references.test.jsonl` (its references split, for `gagar distill --reference`), and `state.json` recording
what is done, so a second run skips it (idempotent) and a killed run resumes where it stopped. Each track's
benchmark.json records the digest of the recipe it was prepared from (`recipe_digest`): `eval --bench` and
`bench check` refuse a track whose recipe has changed since, and say to prepare again.

Nothing a recipe says reaches git or a path unchecked: `load_recipe` checks every value's characters, git
takes them after `--` or `--end-of-options`, and every path written or deleted here is first proven inside
its root (`_owned`, `grader.util.untrusted.contained`). Pointed-at files are hashed as they are read, in
chunks, and reading stops past the recipe's declared size (`size`), else past `MAX_SOURCE_BYTES`.

Over 600 lines as one idea: the steps of one command, each writing what the next reads (rows, mirrors,
patches, tracks); finding and reading sources is apart, in grader.evaluation.sources.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.errors import GagarError, GitError, InputFileError
from grader.evaluation.recipe import (
    BenchmarkRecipe,
    BenchmarkRecipeError,
    Candidate,
    SourceFile,
    is_recipe,
    load_recipe,
    parse_predictions,
    parse_report,
    parse_row,
    sha256_bytes,
    sha256_text,
)
from grader.evaluation.sources import (  # the names moved there, still importable from here
    MAX_SOURCE_BYTES,
    SourceLocator,
    _owned,
    candidate_paths,
    fix_command,
    github_url,
    prepared_root,
    read_at,
    read_hashed,
)
from grader.sandbox.swebench import swebench_environment
from grader.util.filelock import file_lock
from grader.workspace.gitcmd import git
from grader.workspace.gitcmd import out as git_out
from grader.workspace.mirrors import MirrorCache, has_commit

TRACKS = ("preference", "verification")
VERIFICATION_REASON = "the published harness report resolves the first and not the second"


class SourceMissing(GagarError, FileNotFoundError):
    """Source repositories that are not on this machine (and could not be cloned); the message names each
    with the command that would fix it."""


class ShaMismatch(GagarError, ValueError):
    """A pointed-at file or patch whose sha256 is not the recipe's: the source moved or changed."""


class NotPrepared(GagarError, FileNotFoundError):
    """A recipe benchmark used before `gagar bench prepare`; the message gives the command."""


# -- preparing --------------------------------------------------------------------------------------------


@dataclass
class PrepareReport:
    """What one `prepare` run did."""

    root: Path
    tracks: dict[str, dict[str, int]] = field(default_factory=dict)
    """Track -> {"groups", "candidates", "pairs"} written."""
    skipped: list[str] = field(default_factory=list)
    """Instances left out because their task repository is missing (only with `partial`)."""
    resumed: int = 0
    """Steps found done by an earlier run."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Instance -> why its base tree cannot be read whole (only with `partial`)."""


class _State:
    """state.json: the steps done, so a killed run resumes and a finished one is a no-op."""

    def __init__(self, path: Path, fingerprint: str) -> None:
        self.path = path
        data: dict[str, Any] = {}
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                data = {}
        if data.get("fingerprint") != fingerprint:
            data = {"fingerprint": fingerprint, "done": {}}
        self.data = data

    def get(self, key: str) -> Any:
        return self.data["done"].get(key)

    def put(self, key: str, value: Any) -> None:
        self.data["done"][key] = value
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data), encoding="utf-8")
        tmp.replace(self.path)


STATE_FORMAT = b"2"
"""Bumped when what state.json caches changes (2: rows carry the task's environment)."""


def _fingerprint(recipe: BenchmarkRecipe) -> str:
    # The pointer files only: labelling (references, labels, probes) redoes no source step.
    parts = [
        (recipe.root / name).read_bytes() for name in ("recipe.json", "instances.jsonl", "candidates.jsonl")
    ]
    return sha256_bytes(b"\0".join([STATE_FORMAT, *parts]))


def prepare(
    recipe: BenchmarkRecipe,
    locator: SourceLocator,
    *,
    partial: bool = False,
    mirrors: MirrorCache | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> PrepareReport:
    """Materialize `recipe` into `prepared_root()/NAME/`.

    Args:
        recipe: the loaded recipe.
        locator: where the source repositories are (and whether to clone them).
        partial: prepare the instances whose task repository is here and list the others, rather than stop.
        mirrors: the mirror cache seeded with the task repositories (the shared one by default).
        progress: called with (what, done, total) as each step starts and after it ends.

    Returns:
        What was written.

    Raises:
        SourceMissing: a data source is missing, or (without `partial`) a task repository; every missing
            one is named with the command that fixes it.
        ShaMismatch: the first file or patch whose sha256 differs from the recipe's.
        BenchmarkRecipeError: a source file does not parse.
        GitError: a pinned commit or path is not in its source (the source is another repository).
    """
    mirrors = mirrors or MirrorCache()
    out = _owned(prepared_root() / recipe.name)
    out.mkdir(parents=True, exist_ok=True)
    report = PrepareReport(out)
    with file_lock(_owned(out / "prepare.lock")):
        state = _State(_owned(out / "state.json"), _fingerprint(recipe))
        locations = {r: locator.locate(r) for r in recipe.repositories()}
        tasks = {i.repository for i in recipe.instances.values()}
        missing = [r for r, p in locations.items() if p is None]
        fatal = [r for r in missing if r not in tasks or not partial]
        if fatal:
            lines = "\n".join(f"  - {r}: {fix_command(r, recipe.name)}" for r in missing)
            raise SourceMissing(
                f"benchmark {recipe.name}: {len(missing)} source repositories are not here:\n{lines}"
                + (
                    ""
                    if partial
                    else "\n(or --partial to prepare the instances whose task repository is here)"
                )
            )
        instances = [i for i in recipe.instances.values() if locations[i.repository] is not None]
        report.skipped = sorted(i.id for i in recipe.instances.values() if locations[i.repository] is None)
        steps = len(recipe.files) + len(instances) + len({i.repository for i in instances}) + 1
        done = 0

        def tick(what: str) -> None:
            nonlocal done
            done += 1
            if progress:
                progress(what, done, steps)

        def begin(what: str) -> None:  # a step can take minutes (a mirror): say which one runs
            if progress:
                progress(what, done, steps)

        unreadable: dict[str, str] = {}
        texts: dict[str, str] = {}
        for f in recipe.files.values():
            begin(f"reading {f.id}")
            texts[f.id] = _checked_text(f, locations[f.repository])
            tick(f.id)
        rows: dict[str, dict[str, Any]] = {}
        for instance in instances:
            begin(f"instance {instance.id}")
            cached = state.get(f"row:{instance.id}")
            if cached is not None:
                report.resumed += 1
                rows[instance.id] = cached
            else:
                row_file = instance.row
                text = _checked_text(row_file, locations[row_file.repository])
                row = parse_row(
                    text, row_file.format, f"{row_file.repository}@{row_file.commit[:12]}:{row_file.path}"
                )
                if row["instance_id"] != instance.id or row["base_commit"] != instance.base_commit:
                    raise ShaMismatch(
                        f"{row_file.path}: the row is {row['instance_id']}@{row['base_commit']}, "
                        f"the recipe says {instance.id}@{instance.base_commit}"
                    )
                # The task's environment (interpreter, install recipe, test command) from swebench's
                # pinned tables, so probes and the LLM grader's `run` get the task's layer.
                rows[instance.id] = {"statement": row["problem_statement"], "task": swebench_environment(row)}
                state.put(f"row:{instance.id}", rows[instance.id])
            tick(instance.id)
        for repository in sorted({i.repository for i in instances}):
            commits = sorted({i.base_commit for i in instances if i.repository == repository})
            begin(f"seeding the mirror of {repository} ({len(commits)} base commits)")
            key = f"mirror:{repository}:{sha256_text(' '.join(commits))}"
            broken = state.get(key)
            mirror = mirrors.path_for(github_url(repository))  # read as it is: never cloned or fetched here
            if broken is not None and mirror.exists() and all(has_commit(mirror, c) for c in commits):
                report.resumed += 1
            else:
                broken = _seed_mirror(mirrors, repository, locations[repository], commits)
                state.put(key, broken)
            for instance in instances:
                if instance.repository == repository and instance.base_commit in broken:
                    unreadable[instance.id] = (
                        f"{repository}@{instance.base_commit[:12]}: {broken[instance.base_commit]}"
                    )
            tick(f"mirror {repository}")
        if unreadable and not partial:
            lines = "\n".join(f"  - {i}: {why}" for i, why in sorted(unreadable.items()))
            raise SourceMissing(
                f"benchmark {recipe.name}: {len(unreadable)} base trees cannot be read whole from the local "
                f"copies (a partial snapshot?): fetch a complete clone, or --partial to leave them "
                f"out:\n{lines}"
            )
        instances = [i for i in instances if i.id not in unreadable]
        report.skipped += sorted(unreadable)
        report.unreadable = unreadable
        begin("writing the tracks")
        patches = _checked_patches(recipe, texts, {i.id for i in instances})
        report.tracks["verification"] = _write_verification(
            recipe, instances, rows, patches, _owned(out / "verification")
        )
        preference = _write_preference(recipe, instances, rows, patches, _owned(out / "preference"))
        if preference is not None:
            report.tracks["preference"] = preference
        tick("verification")
    return report


def _checked_text(f: SourceFile, location: Path | None) -> str:
    where = f"{f.repository}@{f.commit[:12]}:{f.path}"
    if location is None:
        raise SourceMissing(f"{f.repository} is not here")
    limit = f.size if f.size is not None else MAX_SOURCE_BYTES
    try:
        digest, spool = read_hashed(location, f.commit, f.path, limit)
    except GitError as exc:
        raise GitError(
            ["cat-file", "blob", f"{f.commit}:{f.path}"],
            exc.returncode,
            f"{where}: not in {location}: {exc.stderr}",
        ) from exc
    except ValueError as exc:
        declared = "the recipe's declared size" if f.size is not None else "the cap for undeclared sizes"
        raise ShaMismatch(f"{where} (file {f.id}) {exc} ({declared})") from None
    with spool:
        if digest != f.sha256:
            raise ShaMismatch(
                f"sha256 mismatch: {where} (file {f.id}) hashes to {digest}, the recipe says {f.sha256}"
            )
        data = spool.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BenchmarkRecipeError(f"{where} (file {f.id}): not UTF-8 text ({exc.reason})") from None


def _checked_patches(
    recipe: BenchmarkRecipe, texts: dict[str, str], wanted: set[str]
) -> dict[tuple[str, str], str]:
    """(instance, run) -> patch text, each checked against its sha256 and published label."""
    predictions: dict[str, dict[str, str]] = {}
    reports: dict[str, set[str]] = {}
    patches: dict[tuple[str, str], str] = {}
    for c in recipe.candidates:
        if c.instance not in wanted:
            continue
        if c.predictions not in predictions:
            f = recipe.files[c.predictions]
            predictions[c.predictions] = parse_predictions(texts[f.id], f.format, f.path)
        if c.report not in reports:
            reports[c.report] = parse_report(texts[c.report], recipe.files[c.report].path)[0]
        patch = predictions[c.predictions].get(c.instance)
        where = f"candidate {c.instance} / {c.run} (file {c.predictions})"
        if patch is None:
            raise ShaMismatch(f"{where}: no prediction for {c.instance} in the file")
        if sha256_text(patch) != c.sha256:
            raise ShaMismatch(
                f"sha256 mismatch: {where}: the patch hashes to {sha256_text(patch)}, "
                f"the recipe says {c.sha256}"
            )
        if (c.instance in reports[c.report]) != c.resolved:
            raise ShaMismatch(f"{where}: the report {c.report} says resolved={not c.resolved}")
        patches[(c.instance, c.run)] = patch
    return patches


def _seed_mirror(
    mirrors: MirrorCache, repository: str, location: Path | None, commits: list[str]
) -> dict[str, str]:
    """Make the mirror cache's entry for github_url(repository) hold every commit, from the local copy, and
    check each base tree can be read whole.

    The commits are fetched (a copy); when the local copy cannot be packed (a partial snapshot lacking some
    large objects), the mirror borrows its objects through git alternates instead, so it then needs the
    local copy to stay where it is.

    Returns:
        Base commit -> why its tree cannot be read (missing objects), for the commits that fail.

    Raises:
        GitError: a commit is not in the local copy at all.
    """
    url = github_url(repository)
    path = _owned(mirrors.path_for(url), mirrors.root)
    assert location is not None
    source = Path(git_out(["rev-parse", "--path-format=absolute", "--git-dir"], cwd=location))
    with file_lock(_owned(path.with_suffix(".lock"), mirrors.root)):
        if not path.exists():
            tmp = _owned(path.with_name(path.name + f".tmp{os.getpid()}"), mirrors.root)
            shutil.rmtree(tmp, ignore_errors=True)
            path.parent.mkdir(parents=True, exist_ok=True)
            git(["init", "--bare", "--quiet", "--", str(tmp)])
            git(["remote", "add", "origin", url], git_dir=tmp)
            tmp.rename(path)
        absent = [c for c in commits if not has_commit(path, c)]
        if absent:
            git(["fetch", "--quiet", "--end-of-options", str(source), *absent], git_dir=path, check=False)
            absent = [c for c in commits if not has_commit(path, c)]
        if absent and all(has_commit(source, c) for c in absent):
            alternates = _owned(path / "objects" / "info" / "alternates", mirrors.root)
            borrowed = alternates.read_text(encoding="utf-8").split() if alternates.exists() else []
            if str(source / "objects") not in borrowed:
                alternates.write_text(
                    "\n".join([*borrowed, str(source / "objects")]) + "\n", encoding="utf-8"
                )
        for commit in commits:
            if has_commit(path, commit):  # a ref keeps it through gc and documents why it is here
                git(["update-ref", "--end-of-options", f"refs/gagar/base/{commit}", commit], git_dir=path)
        absent = [c for c in commits if not has_commit(path, c)]
        if absent:
            raise GitError(
                ["fetch", str(source)],
                1,
                f"{repository}: base commits not in {location}: {', '.join(absent[:3])}",
            )
        broken = {}
        for commit in commits:
            proc = git(
                ["archive", "--format=tar", "-o", os.devnull, "--end-of-options", commit],
                git_dir=path,
                check=False,
            )
            if proc.returncode != 0:
                first = proc.stderr.decode("utf-8", "replace").strip().splitlines()[:1]
                broken[commit] = first[0] if first else f"git archive exited {proc.returncode}"
    return broken


def _dedupe(candidates: Iterable[Candidate]) -> tuple[list[Candidate], int]:
    """One candidate per distinct patch (the first run by name); a patch published both resolved and
    unresolved (a flaky test) is dropped. Returns the kept candidates and the number dropped as flaky."""
    by_sha: dict[str, list[Candidate]] = {}
    for c in sorted(candidates, key=lambda c: c.run):
        by_sha.setdefault(c.sha256, []).append(c)
    kept, flaky = [], 0
    for same in by_sha.values():
        if len({c.resolved for c in same}) > 1:
            flaky += 1
            continue
        kept.append(same[0])
    return kept, flaky


def _distinct_by_instance(recipe: BenchmarkRecipe) -> list[tuple[str, list[Candidate]]]:
    """(instance, its distinct candidates as `_dedupe` keeps them), by instance id."""
    by_instance: dict[str, list[Candidate]] = {}
    for c in recipe.candidates:
        by_instance.setdefault(c.instance, []).append(c)
    return [(instance, _dedupe(candidates)[0]) for instance, candidates in sorted(by_instance.items())]


def verification_groups(recipe: BenchmarkRecipe) -> dict[str, tuple[list[Candidate], list[Candidate]]]:
    """Instance -> (resolved, unresolved) distinct candidates, for every instance with at least one of
    each."""
    groups = {}
    for instance, kept in _distinct_by_instance(recipe):
        resolved = [c for c in kept if c.resolved]
        unresolved = [c for c in kept if not c.resolved]
        if resolved and unresolved:
            groups[instance] = (resolved, unresolved)
    return groups


def _write_verification(
    recipe: BenchmarkRecipe,
    instances: list[Any],
    rows: dict[str, dict[str, Any]],
    patches: dict[tuple[str, str], str],
    folder: Path,
) -> dict[str, int]:
    wanted = {i.id for i in instances}
    groups = {k: v for k, v in verification_groups(recipe).items() if k in wanted}
    references = []
    for instance_id, (resolved, unresolved) in groups.items():
        annotated = [
            {"better": b.run, "worse": w.run, "category": "correctness", "reason": VERIFICATION_REASON}
            for b in resolved
            for w in unresolved
        ]
        references.append(
            {
                "group_id": instance_id,
                "kind": "ranking",
                "ranking": [[c.run for c in resolved], [c.run for c in unresolved]],
                "preferences": annotated,
            }
        )
    description = (
        "Resolved over unresolved published predictions of one instance, every candidate graded as passing; "
        "labels from the published harness reports alone."
    )
    candidates = {k: [*r, *u] for k, (r, u) in groups.items()}
    return _write_track(
        recipe, "verification", description, candidates, references, rows, patches, folder, may_fail=True
    )


def preference_candidates(recipe: BenchmarkRecipe) -> dict[str, list[Candidate]]:
    """Instance -> its textually distinct resolved candidates (deduplicated as for verification), for every
    instance with two or more."""
    found = {}
    for instance, kept in _distinct_by_instance(recipe):
        resolved = [c for c in kept if c.resolved]
        if len(resolved) >= 2:
            found[instance] = resolved
    return found


def _write_preference(
    recipe: BenchmarkRecipe,
    instances: list[Any],
    rows: dict[str, dict[str, Any]],
    patches: dict[tuple[str, str], str],
    folder: Path,
) -> dict[str, int] | None:
    """The preference track: the recipe's labelled pairs over the distinct resolved patches; None (and no
    folder) while nothing is labelled."""
    path = recipe.root / "references.jsonl"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not lines:
        shutil.rmtree(_owned(folder), ignore_errors=True)
        return None
    labelled = {str(line["group_id"]) for line in lines}
    wanted = {i.id for i in instances}
    candidates = {k: v for k, v in preference_candidates(recipe).items() if k in labelled and k in wanted}
    description = (
        "Pairs of resolved published patches of one instance where one is clearly better, labelled by us."
    )
    copies = {
        name: recipe.root / name for name in ("references.jsonl", "labels.jsonl", "probes.json", "probes")
    }
    return _write_track(
        recipe, "preference", description, candidates, None, rows, patches, folder, copies=copies
    )


def _write_track(
    recipe: BenchmarkRecipe,
    track: str,
    description: str,
    groups: dict[str, list[Candidate]],
    references: list[dict[str, Any]] | None,
    rows: dict[str, dict[str, Any]],
    patches: dict[tuple[str, str], str],
    folder: Path,
    *,
    may_fail: bool = False,
    copies: dict[str, Path] | None = None,
) -> dict[str, int]:
    """Write one track as a benchmark folder (atomically: a temporary folder renamed into place)."""
    folder = _owned(folder)
    tmp = _owned(folder.with_name(folder.name + ".tmp"))
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "groups").mkdir(parents=True)
    group_lines = []
    labellers = recipe.manifest.get("labellers", {})
    provenance: dict[str, Any] = {"bundles": {}, "repositories": {}, "patches": {}, "labellers": labellers}
    for instance_id, candidates in groups.items():
        instance = recipe.instances[instance_id]
        group_lines.append(
            {
                "group_id": instance_id,
                "task": {
                    "repo": github_url(instance.repository),
                    "base_commit": instance.base_commit,
                    "statement": rows[instance_id]["statement"],
                    **rows[instance_id].get("task", {}),
                },
                "trajectories": [
                    {
                        "id": c.run,
                        "patch": patches[(c.instance, c.run)],
                        "passed": True,
                        "metadata": {"resolved": c.resolved},
                    }
                    for c in candidates
                ],
            }
        )
        provenance["repositories"][github_url(instance.repository)] = {"repository": instance.repository}
        provenance["patches"][instance_id] = {
            c.run: {
                "repository": recipe.files[c.predictions].repository,
                "commit": recipe.files[c.predictions].commit,
                "path": recipe.files[c.predictions].path,
                "label": recipe.files[c.report].path,
            }
            for c in candidates
        }
    manifest = {
        "name": f"{recipe.name}/{track}",
        "format": 1,
        "track": track,
        "description": f"{description} Prepared from the recipe {recipe.name} by gagar bench prepare.",
        "sources": recipe.manifest["sources"],
        "candidates_may_fail": may_fail,
        "recipe_digest": recipe.digest(),
    }
    split = {name: sorted(i for i in groups if recipe.split[i] == name) for name in ("dev", "test")}
    _write(tmp / "benchmark.json", manifest)
    _write(tmp / "split.json", split)
    _write(tmp / "provenance.json", provenance)
    (tmp / "groups" / f"{track}.jsonl").write_text(
        "".join(json.dumps(g) + "\n" for g in group_lines), encoding="utf-8"
    )
    if references is not None:
        (tmp / "references.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in references), encoding="utf-8"
        )
    for name, source in (copies or {}).items():
        _copy_for_groups(source, tmp / name, set(groups))
    for name, ids in split.items():
        # One reference file per split, usable as it is: `gagar distill --reference references.dev.jsonl`
        # distills on the dev groups only (the others have no reference there and are left out, named).
        _copy_for_groups(tmp / "references.jsonl", tmp / f"references.{name}.jsonl", set(ids))
    shutil.rmtree(_owned(folder), ignore_errors=True)
    tmp.rename(folder)
    return {
        "groups": len(groups),
        "candidates": sum(len(c) for c in groups.values()),
        "pairs": _count_pairs(folder / "references.jsonl"),
    }


def _copy_for_groups(source: Path, target: Path, groups: set[str]) -> None:
    """Copy our own work into a track: JSONL lines and probes.json entries of the groups written (a partial
    prepare leaves some out), probe scripts as they are."""
    if source.is_dir():
        shutil.copytree(source, target)
    elif source.suffix == ".jsonl" and source.is_file():
        lines = [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
        kept = [line for line in lines if str(json.loads(line).get("group_id")) in groups]
        target.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    elif source.is_file():
        items = json.loads(source.read_text(encoding="utf-8"))
        _write(target, [item for item in items if str(item.get("group_id")) in groups])


def _count_pairs(path: Path) -> int:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sum(
        1 if "better" in line else len(line.get("preferences", []) or []) or _ranking_pairs(line)
        for line in lines
    )


def _ranking_pairs(line: dict[str, Any]) -> int:
    tiers = [len(tier) for tier in line.get("ranking", [])]
    return sum(a * b for i, a in enumerate(tiers) for b in tiers[i + 1 :])


def _write(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


# -- using a prepared benchmark ---------------------------------------------------------------------------


def find_recipe(name_or_path: str) -> Path | None:
    """The recipe folder of `name_or_path` (a folder with recipe.json, or a name under the benchmark roots),
    or None when it names no recipe."""
    from grader.evaluation.benchmark import benchmark_roots

    direct = Path(name_or_path)
    if is_recipe(direct):
        return direct
    for place in benchmark_roots():
        if is_recipe(place / name_or_path):
            return place / name_or_path
    return None


def resolve_bench(name_or_path: str, track: str | None) -> str:
    """What `eval --bench` and `bench check` load: the prepared track of a recipe, else the name as given.

    Args:
        name_or_path: a benchmark or recipe name or folder.
        track: "preference" or "verification"; None means preference for a recipe.

    Returns:
        A benchmark folder or name for `load_benchmark`.

    Raises:
        NotPrepared: a recipe that `gagar bench prepare` has not materialized (the message gives the command).
        InputFileError: `track` given for a benchmark that is not a recipe.
    """
    recipe = find_recipe(name_or_path)
    if recipe is None:
        if track is not None:
            raise InputFileError(f"--track needs a recipe benchmark; {name_or_path!r} is a plain benchmark")
        return name_or_path
    loaded = load_recipe(recipe)
    name = loaded.name
    track = track or "preference"
    labelled = (recipe / "references.jsonl").is_file() and (recipe / "references.jsonl").read_text().strip()
    if track == "preference" and not labelled:
        raise InputFileError(
            f"benchmark {name} has no labelled preference pairs yet ({recipe / 'references.jsonl'} is "
            "empty): use --track verification"
        )
    folder = prepared_root() / name / track
    command = f"  gagar bench prepare {name} --source-root DIR"
    if not (folder / "benchmark.json").is_file():
        raise NotPrepared(
            f"benchmark {name} is not prepared (no {folder}): run\n{command}"
            f"\n(`gagar bench prepare {name} --list-sources` lists the repositories DIR must hold)"
        )
    try:
        prepared = json.loads((folder / "benchmark.json").read_text(encoding="utf-8")).get("recipe_digest")
    except (OSError, ValueError, AttributeError):
        prepared = None
    if prepared != loaded.digest():
        why = "by an older gagar, which kept no digest of it" if prepared is None else "from another version"
        raise NotPrepared(
            f"benchmark {name}: the prepared track {folder} was prepared {why} of the recipe "
            f"{recipe} (an instance, candidate, label or probe changed since): prepare again:\n{command}"
        )
    return str(folder)


__all__ = [
    "MAX_SOURCE_BYTES",
    "NotPrepared",
    "PrepareReport",
    "BenchmarkRecipeError",
    "ShaMismatch",
    "SourceLocator",
    "SourceMissing",
    "TRACKS",
    "candidate_paths",
    "fix_command",
    "github_url",
    "prepare",
    "prepared_root",
    "read_at",
    "read_hashed",
    "resolve_bench",
    "verification_groups",
]
