"""A grader benchmark on disk: groups, references, a split, provenance, double labels and probes, validated.

The format is written down in docs/benchmark.md. A benchmark is a folder:

    benchmark.json     name, format version, description, sources (repository, licence), instances
    groups/            group files (*.json, *.jsonl); each task's repo points at a bundle below
    bundles/           one git bundle per base tree: a single root commit holding exactly the upstream tree
    references.jsonl   references of any kind (grader.ranking.references), one per group
    split.json         {"dev": [instance, ...], "test": [instance, ...]}
    provenance.json    bundles (upstream repository, commit, tree), patches and labellers
    labels.jsonl       double-labelling records of the labelled pairs that carry no probe
    probes.json        one probe per correctness or behaviour pair: passes on the better, fails on the worse
    probes/            the probe scripts

`load_benchmark` reads and checks all of it and raises one `BenchmarkError` listing every problem, each
naming the file, the group and the pair. `find_benchmark` resolves a name: a folder, else
`$GAGAR_BENCHMARKS`, ./benchmarks, the repository's benchmarks/ and ../shared/benchmarks beside it.

Over 600 lines as one idea: reading a benchmark folder and checking every file against the others (a
reference against its group, a probe against its pair, the split against both), so one `BenchmarkError`
can list every problem; the reference model and its credit are apart, in grader.ranking.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.errors import GagarError, GitError, InputFileError, InvalidReference
from grader.groups.formats import LoadFailure, load_groups
from grader.groups.models import Group
from grader.ranking.references import Reference, load_references
from grader.util.jsontext import loads
from grader.workspace.gitcmd import git, git_identity, safe_env
from grader.workspace.gitcmd import out as git_out

FORMAT = 1
SPLITS = ("dev", "test")
PROBED = frozenset({"correctness", "behaviour"})
"""Categories whose pairs are checked by running a probe rather than by two labellers."""
VERDICTS = ("a", "b", "tie")
DISAGREED = ("", "")  # the verdict of a pair two labellers disagreed on
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


class BenchmarkError(GagarError, ValueError):
    """A benchmark folder that does not follow the format; the message lists every problem found."""


@dataclass(frozen=True)
class Probe:
    """A committed check that tells a pair apart by running: it passes on `better` and fails on `worse`."""

    group_id: str
    """The group of the pair."""
    better: str
    """The trajectory it must pass on (exit status 0)."""
    worse: str
    """The trajectory it must fail on (any other exit status)."""
    script: Path
    """The probe file, inside the benchmark folder."""
    command: str = "python {probe}"
    """The shell command run in the candidate's tree; {probe} becomes the probe file's path there."""

    @property
    def pair(self) -> tuple[str, str]:
        """(better, worse)."""
        return (self.better, self.worse)


@dataclass(frozen=True)
class Label:
    """One labeller's verdict on one pair of a group: "a", "b" (the better one) or "tie"."""

    group_id: str
    a: str
    b: str
    labeller: str
    verdict: str
    category: str | None = None
    reason: str = ""

    @property
    def key(self) -> tuple[str, frozenset[str]]:
        """(group, the unordered pair)."""
        return (self.group_id, frozenset((self.a, self.b)))

    def preferred(self) -> tuple[str, str] | None:
        """(better, worse) as this labeller says, or None for a tie."""
        if self.verdict == "tie":
            return None
        return (self.a, self.b) if self.verdict == "a" else (self.b, self.a)


@dataclass
class LabelAgreement:
    """How often two independent labellers agreed, over the pairs both labelled."""

    pairs: int
    agreed: int
    disagreed: list[tuple[str, str, str]] = field(default_factory=list)  # (group, a, b)

    @property
    def rate(self) -> float | None:
        """agreed / pairs, None when nothing was double-labelled."""
        return self.agreed / self.pairs if self.pairs else None


@dataclass
class Benchmark:
    """A validated benchmark (see the module docstring); built by `load_benchmark`."""

    root: Path
    manifest: dict[str, Any]
    groups: dict[str, Group]
    references: dict[str, Reference]
    instances: dict[str, str]
    """Group id -> instance id (the unit of the split)."""
    split: dict[str, str]
    """Instance id -> "dev" or "test"."""
    provenance: dict[str, Any]
    labels: list[Label]
    probes: list[Probe]

    @property
    def name(self) -> str:
        """The benchmark's name from its manifest."""
        return str(self.manifest["name"])

    def group_ids(self, split: str | None = None) -> list[str]:
        """The groups of one split (every group with None), in file order.

        Args:
            split: "dev", "test" or None.

        Returns:
            Group ids.

        Raises:
            BenchmarkError: an unknown split name.
        """
        if split is not None and split not in SPLITS:
            raise BenchmarkError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
        return [gid for gid in self.groups if split is None or self.split[self.instances[gid]] == split]

    def agreement(self) -> LabelAgreement:
        """The double-labelling agreement over every pair two labellers labelled.

        Returns:
            Pairs, pairs agreed on, and the pairs disagreed on (left out of the references).
        """
        by_pair: dict[tuple[str, frozenset[str]], list[Label]] = {}
        for label in self.labels:
            by_pair.setdefault(label.key, []).append(label)
        result = LabelAgreement(0, 0)
        for (group_id, _), labels in by_pair.items():
            result.pairs += 1
            if len({label.preferred() for label in labels}) == 1:
                result.agreed += 1
            else:
                result.disagreed.append((group_id, labels[0].a, labels[0].b))
        return result

    def counts(self) -> dict[str, Counter[str]]:
        """Reference pairs per upstream repository and per category.

        Returns:
            {"repository": Counter, "category": Counter, "kind": Counter, "split": Counter}.
        """
        counts: dict[str, Counter[str]] = {
            name: Counter() for name in ("repository", "category", "kind", "split")
        }
        for gid, reference in self.references.items():
            repository = self.repository_of(gid)
            for preference in reference.preferences:
                counts["repository"][repository] += 1
                counts["category"][preference.category or "uncategorised"] += 1
                counts["kind"][reference.kind] += 1
                counts["split"][self.split[self.instances[gid]]] += 1
        return counts

    def repository_of(self, group_id: str) -> str:
        """The upstream repository of a group's base tree, from the bundle's provenance.

        Args:
            group_id: a group of the benchmark.

        Returns:
            The repository as the provenance names it.
        """
        group = self.groups[group_id]
        if group.task.repo in self.provenance.get("repositories", {}):
            return str(self.provenance["repositories"][group.task.repo]["repository"])
        bundle = _bundle_key(self.root, group)
        return str(self.provenance["bundles"][bundle]["repository"])


def benchmark_roots() -> list[Path]:
    """Where benchmarks are looked up by name, in order: each folder of `$GAGAR_BENCHMARKS`
    (os.pathsep-separated), ./benchmarks, the repository's benchmarks/ and ../shared/benchmarks beside the
    repository (where CI places the read-only shared data)."""
    given = [Path(p) for p in os.environ.get("GAGAR_BENCHMARKS", "").split(os.pathsep) if p]
    shared = REPOSITORY_ROOT.parent / "shared" / "benchmarks"
    return [*given, Path("benchmarks"), REPOSITORY_ROOT / "benchmarks", shared]


def find_benchmark(name_or_path: str | Path) -> Path:
    """The folder of a benchmark given by path or by name.

    A name is looked up in each of `benchmark_roots()`, in order.

    Args:
        name_or_path: a folder holding benchmark.json, or a benchmark's name.

    Returns:
        The folder.

    Raises:
        InputFileError: nothing found; the message lists every place searched.
    """
    direct = Path(name_or_path)
    if (direct / "benchmark.json").is_file():
        return direct
    places = benchmark_roots()
    for place in places:
        if (place / str(name_or_path) / "benchmark.json").is_file():
            return place / str(name_or_path)
    searched = ", ".join(str(place / str(name_or_path)) for place in [direct.parent, *places])
    raise InputFileError(
        f"no benchmark {str(name_or_path)!r} (a folder with benchmark.json); searched {searched}"
    )


def load_benchmark(name_or_path: str | Path, check_bundles: bool = True) -> Benchmark:
    """Read a benchmark and check every rule of the format (docs/benchmark.md).

    Args:
        name_or_path: see `find_benchmark`.
        check_bundles: also unbundle each base tree and check it is a single root commit whose tree is the
            one its provenance names (a few git calls per bundle).

    Returns:
        The benchmark.

    Raises:
        InputFileError: no such benchmark.
        BenchmarkError: the folder breaks the format; the message lists every problem.
    """
    root = find_benchmark(name_or_path)
    problems: list[str] = []
    manifest = _read_json(root / "benchmark.json", problems) or {}
    _check_manifest(manifest, problems)
    groups = _load_groups(root, problems)
    references = _load_references(root, problems)
    provenance = _read_json(root / "provenance.json", problems) or {}
    instances = _instances(manifest, groups, problems)
    split = _load_split(root, set(instances.values()), problems)
    labels = _load_labels(root, problems)
    probes = _load_probes(root, problems)
    benchmark = Benchmark(root, manifest, groups, references, instances, split, provenance, labels, probes)
    if not problems:
        _check_references(benchmark, problems)
        _check_provenance(benchmark, problems, check_bundles)
        _check_labels_and_probes(benchmark, problems)
    if problems:
        listed = "\n".join(f"  - {problem}" for problem in problems)
        raise BenchmarkError(f"benchmark {root} breaks the format ({len(problems)} problems):\n{listed}")
    return benchmark


def bundle_base_tree(source: Path | str, commit: str, out: Path | str, repository: str) -> dict[str, str]:
    """Write a benchmark bundle: one root commit holding exactly the tree of `commit` in the repository
    `source`, so the benchmark runs offline without the upstream history.

    The new commit has a fixed identity, date and message (naming the upstream commit), so the same upstream
    commit always gives the same bundle commit. The source repository is only read (its objects are borrowed
    through a temporary repository's alternates).

    Args:
        source: a local git repository (work tree or bare) holding `commit`.
        commit: the upstream base commit (any revision git resolves there).
        out: the bundle file to write (its folder is created).
        repository: the upstream repository's name, as the provenance and sources list it.

    Returns:
        The bundle's provenance record: {"repository", "commit" (upstream), "tree", "base_commit"}; the
        groups' tasks take `base_commit`.

    Raises:
        GitError: `source` is not a repository or does not hold `commit`.
    """
    # `commit` is a user's argument: after --end-of-options it is only ever a revision, never an option.
    upstream = git_out(["rev-parse", "--verify", "--end-of-options", f"{commit}^{{commit}}"], cwd=source)
    tree = git_out(["rev-parse", "--verify", "--end-of-options", f"{upstream}^{{tree}}"], cwd=source)
    objects = git_out(["rev-parse", "--path-format=absolute", "--git-path", "objects"], cwd=source)
    env = safe_env(git_identity(date="2000-01-01T00:00:00+0000"))
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gagar-bundle-") as scratch:
        git(["init", "-q", "--bare", scratch])
        Path(scratch, "objects", "info", "alternates").write_text(objects + "\n", encoding="utf-8")
        root = git_out(["commit-tree", tree, "-m", f"upstream base {upstream}"], git_dir=scratch, env=env)
        git(["update-ref", "refs/heads/base", root], git_dir=scratch)
        git(["bundle", "create", "-q", str(target.resolve()), "base"], git_dir=scratch, env=env)
    return {"repository": repository, "commit": upstream, "tree": tree, "base_commit": root}


# -- reading ----------------------------------------------------------------------------------------------


def _read_json(path: Path, problems: list[str]) -> Any:
    try:
        return loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problems.append(f"{path.name}: missing")
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name}: cannot read: {exc}")
    return None


def _strings(item: dict[str, Any], keys: tuple[str, ...], where: str, problems: list[str]) -> bool:
    """Whether every key present in `item` holds a non-empty string; a problem names each that does not."""
    wrong = [k for k in keys if k in item and not (isinstance(item[k], str) and item[k])]
    for key in wrong:
        problems.append(f"{where}: `{key}` is a non-empty string, found {type(item[key]).__name__}")
    return not wrong


def _jsonl(path: Path, problems: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{path.name}: cannot read: {exc}")
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = loads(line)
        except ValueError as exc:
            problems.append(f"{path.name}:{number}: not JSON: {exc}")
            continue
        if not isinstance(item, dict):
            problems.append(f"{path.name}:{number}: a line is a JSON object")
            continue
        yield number, item


def _check_manifest(manifest: dict[str, Any], problems: list[str]) -> None:
    if not isinstance(manifest, dict):
        problems.append("benchmark.json: a JSON object")
        return
    if not isinstance(manifest.get("name"), str) or not manifest.get("name"):
        problems.append("benchmark.json: `name` missing")
    if manifest.get("format") != FORMAT:
        problems.append(f"benchmark.json: `format` must be {FORMAT}, found {manifest.get('format')!r}")
    sources = manifest.get("sources")
    if not isinstance(sources, list) or not sources:
        problems.append("benchmark.json: `sources` lists every source with its repository and licence")
        return
    for i, source in enumerate(sources):
        if not isinstance(source, dict) or not source.get("repository") or not source.get("licence"):
            problems.append(f"benchmark.json: source {i} needs a repository and a licence")


def _load_groups(root: Path, problems: list[str]) -> dict[str, Group]:
    files = sorted(p for p in (root / "groups").glob("*") if p.suffix in (".json", ".jsonl"))
    if not files:
        problems.append("groups/: no group file (*.json or *.jsonl)")
    groups: dict[str, Group] = {}
    for item in load_groups(files):
        if isinstance(item, LoadFailure):
            problems.append(f"groups/{Path(item.source).name}: group {item.group_id!r}: {item.reason}")
        elif item.group_id in groups:
            problems.append(f"groups/: group {item.group_id!r} is defined twice")
        else:
            groups[item.group_id] = item
    return groups


def _load_references(root: Path, problems: list[str]) -> dict[str, Reference]:
    found = [p for p in (root / "references.jsonl", root / "references.json") if p.is_file()]
    if len(found) != 1:
        problems.append("references.jsonl (or references.json): exactly one reference file is required")
        return {}
    try:
        return load_references(found[0])
    except (InvalidReference, InputFileError) as exc:
        problems.append(str(exc).replace(str(root) + os.sep, ""))
        return {}


def _instances(manifest: dict[str, Any], groups: dict[str, Group], problems: list[str]) -> dict[str, str]:
    declared = manifest.get("instances", {}) if isinstance(manifest, dict) else {}
    if not isinstance(declared, dict):
        problems.append("benchmark.json: `instances` maps group id -> instance id")
        declared = {}
    for gid in declared:
        if gid not in groups:
            problems.append(f"benchmark.json: instances: no group {gid!r}")
    return {gid: str(declared.get(gid, gid)) for gid in groups}


def _load_split(root: Path, instances: set[str], problems: list[str]) -> dict[str, str]:
    before = len(problems)
    data = _read_json(root / "split.json", problems)
    if len(problems) > before:  # missing or unreadable, said
        return {}
    if (
        not isinstance(data, dict)
        or set(data) != set(SPLITS)
        or not all(isinstance(v, list) for v in data.values())
    ):
        problems.append('split.json: {"dev": [instance, ...], "test": [instance, ...]}')
        return {}
    split: dict[str, str] = {}
    for name in SPLITS:
        for instance in data[name]:
            if not isinstance(instance, str):
                problems.append(f"split.json: {name}: an instance is a string, found {instance!r:.60}")
            elif instance in split:
                problems.append(f"split.json: instance {instance!r} is in both splits (or twice)")
            elif instance not in instances:
                problems.append(f"split.json: instance {instance!r} has no group")
            split[str(instance)] = name
    for instance in sorted(instances - set(split)):
        problems.append(f"split.json: instance {instance!r} is in no split")
    return split


def _load_labels(root: Path, problems: list[str]) -> list[Label]:
    labels = []
    keys = {"group_id", "a", "b", "labeller", "verdict", "category", "reason"}
    for number, item in _jsonl(root / "labels.jsonl", problems):
        where = f"labels.jsonl:{number}"
        unknown = sorted(set(item) - keys)
        missing = sorted({"group_id", "a", "b", "labeller", "verdict"} - set(item))
        if unknown or missing:
            problems.append(f"{where}: unknown keys {unknown}, missing keys {missing}")
        elif not _strings(item, ("group_id", "a", "b", "labeller", "verdict"), where, problems):
            continue
        elif not isinstance(item.get("reason", ""), str) or not isinstance(item.get("category") or "", str):
            problems.append(f"{where}: `reason` and `category` are strings")
        elif item["verdict"] not in VERDICTS:
            problems.append(f"{where}: verdict is one of {', '.join(VERDICTS)}, found {item['verdict']!r}")
        else:
            labels.append(Label(**{k: item[k] for k in keys if k in item}))
    return labels


def _load_probes(root: Path, problems: list[str]) -> list[Probe]:
    path = root / "probes.json"
    if not path.is_file():
        return []
    data = _read_json(path, problems)
    if not isinstance(data, list):
        problems.append("probes.json: a list of {group_id, better, worse, script, command?}")
        return []
    probes = []
    for i, item in enumerate(data):
        where = f"probes.json[{i}]"
        if not isinstance(item, dict) or not {"group_id", "better", "worse", "script"} <= set(item):
            problems.append(f"{where}: needs group_id, better, worse and script")
            continue
        if not _strings(item, ("group_id", "better", "worse", "script", "command"), where, problems):
            continue
        script = root / str(item["script"])
        if not script.is_file() or root.resolve() not in script.resolve().parents:
            problems.append(f"{where}: script {item['script']!r} is not a file inside the benchmark")
            continue
        command = str(item.get("command", "python {probe}"))
        try:
            command.format(probe="probe.py")
        except (KeyError, IndexError, ValueError) as exc:
            problems.append(f"{where}: command {command!r}: only {{probe}} may be in braces ({exc!r})")
            continue
        probes.append(Probe(item["group_id"], item["better"], item["worse"], script, command))
    return probes


# -- checking ---------------------------------------------------------------------------------------------


def _check_references(bench: Benchmark, problems: list[str]) -> None:
    for gid, reference in bench.references.items():
        group = bench.groups.get(gid)
        if group is None:
            problems.append(f"references: group {gid!r} is not in groups/")
            continue
        passing = {t.id for t in group.trajectories if t.passed}
        for tid in sorted(reference.ids() - passing):
            problems.append(f"references: group {gid!r}: {tid!r} is not a passing trajectory of the group")
        if reference.kind != "pairwise":
            continue
        for p in reference.preferences:
            if p.category is None or not p.reason:
                problems.append(
                    f"references: group {gid!r}: pair {p.better} > {p.worse} needs a category and a reason"
                )
    for gid in bench.groups:
        if gid not in bench.references:
            problems.append(f"groups/: group {gid!r} has no reference")


def _bundle_key(root: Path, group: Group) -> str:
    """The group's base bundle as a path relative to the benchmark folder ("bundles/x.bundle")."""
    repo = Path(group.task.repo)
    try:
        return repo.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return group.task.repo


def _check_provenance(bench: Benchmark, problems: list[str], check_bundles: bool) -> None:
    provenance = bench.provenance
    if not isinstance(provenance, dict) or not all(
        isinstance(provenance.get(k), dict) for k in ("bundles", "patches", "labellers")
    ):
        problems.append("provenance.json: an object with `bundles`, `patches` and `labellers` objects")
        return
    before = len(problems)
    for name in ("bundles", "patches"):
        for key, record in provenance[name].items():
            if not isinstance(record, dict):
                problems.append(
                    f"provenance.json: {name}: {key!r} is an object, found {type(record).__name__}"
                )
    for key, record in provenance["bundles"].items():
        if isinstance(record, dict):
            _strings(record, ("repository", "commit", "tree"), f"provenance.json: bundles: {key!r}", problems)
    for gid, records in provenance["patches"].items():
        for tid, record in records.items() if isinstance(records, dict) else ():
            if not isinstance(record, dict):
                problems.append(f"provenance.json: patches: group {gid!r}: {tid!r} is an object")
            else:
                where = f"provenance.json: patches: group {gid!r}: {tid!r}"
                _strings(record, ("repository", "commit", "path"), where, problems)
    if len(problems) > before:
        return
    licensed = {str(s["repository"]) for s in bench.manifest["sources"]}
    bundles: dict[str, set[str]] = {}
    # A prepared recipe (grader.evaluation.prepare) names its task repositories by URL instead of bundling
    # them: the mirror cache holds their base commits.
    named = provenance.get("repositories") or {}
    for gid, group in bench.groups.items():
        if group.task.repo in named:
            if named[group.task.repo].get("repository") not in licensed:
                problems.append(f"provenance.json: repositories: {group.task.repo!r} is not in sources")
            continue
        key = _bundle_key(bench.root, group)
        if not key.startswith("bundles/") or not key.endswith(".bundle"):
            problems.append(f"groups/: group {gid!r}: task.repo is not under bundles/: {group.task.repo!r}")
            continue
        bundles.setdefault(key, set()).add(group.task.base_commit)
    for key, commits in bundles.items():
        record = provenance["bundles"].get(key)
        if not isinstance(record, dict) or not {"repository", "commit", "tree"} <= set(record):
            problems.append(f"provenance.json: bundles: {key!r} needs repository, commit (upstream) and tree")
            continue
        if record["repository"] not in licensed:
            problems.append(
                f"provenance.json: bundles: {key!r}: repository {record['repository']!r} is not in sources"
            )
        if check_bundles:
            _check_bundle(bench.root / key, record, commits, problems)
    for gid, reference in bench.references.items():
        patches = provenance["patches"].get(gid, {})
        for tid in sorted(reference.ids()):
            record = patches.get(tid)
            if not isinstance(record, dict) or not {"repository", "path"} <= set(record):
                problems.append(
                    f"provenance.json: patches: group {gid!r}: {tid!r} needs repository, commit, path"
                )
            elif record["repository"] != "." and (
                not record.get("commit") or record["repository"] not in licensed
            ):
                problems.append(
                    f"provenance.json: patches: group {gid!r}: {tid!r}: an upstream patch needs a commit and "
                    "a repository listed in sources"
                )
    for labeller in sorted({label.labeller for label in bench.labels}):
        if labeller not in provenance["labellers"]:
            problems.append(f"provenance.json: labellers: {labeller!r} is not described")


def _check_bundle(path: Path, record: dict[str, Any], commits: set[str], problems: list[str]) -> None:
    """A single root commit whose tree is the recorded upstream tree, and the commit the groups start from."""
    where = f"bundles: {path.name}"
    if not path.is_file():
        problems.append(f"{where}: missing")
        return
    with tempfile.TemporaryDirectory(prefix="gagar-bundle-") as scratch:
        try:
            git(["init", "-q", "--bare", scratch])
            git(["fetch", "-q", str(path.resolve()), "+refs/*:refs/*"], git_dir=scratch)
            heads = git_out(["for-each-ref", "--format=%(objectname)"], git_dir=scratch).split()
            listed = git_out(["rev-list", "--all", "--parents"], git_dir=scratch).splitlines()
        except GitError as exc:
            problems.append(f"{where}: not a readable git bundle: {exc.stderr}")
            return
        if len(listed) != 1 or len(listed[0].split()) != 1 or len(set(heads)) != 1:
            problems.append(f"{where}: must hold a single root commit, found {len(listed)} commits")
            return
        commit = listed[0].split()[0]
        tree = git_out(["rev-parse", f"{commit}^{{tree}}"], git_dir=scratch)
    if tree != record["tree"]:
        problems.append(f"{where}: tree {tree} is not the upstream tree {record['tree']} named in provenance")
    for wanted in sorted(commits - {commit}):
        problems.append(f"{where}: a group starts from {wanted}, but the bundle's commit is {commit}")


def _check_labels_and_probes(bench: Benchmark, problems: list[str]) -> None:
    by_pair: dict[tuple[str, frozenset[str]], list[Label]] = {}
    for label in bench.labels:
        group = bench.groups.get(label.group_id)
        if group is None or not {label.a, label.b} <= {t.id for t in group.trajectories}:
            problems.append(
                f"labels.jsonl: group {label.group_id!r}: no pair {label.a}, {label.b} in groups/"
            )
            continue
        by_pair.setdefault(label.key, []).append(label)
    verdicts: dict[tuple[str, frozenset[str]], tuple[str, str] | None] = {}
    for (gid, pair), labels in by_pair.items():
        shown = " / ".join(sorted(pair))
        if len(labels) != 2 or labels[0].labeller == labels[1].labeller:
            problems.append(f"labels.jsonl: group {gid!r}: pair {shown} needs two labels by two labellers")
            continue
        first, second = (label.preferred() for label in labels)
        verdicts[(gid, pair)] = first if first == second else DISAGREED
    probed = {(p.group_id, p.better, p.worse) for p in bench.probes}
    for probe in bench.probes:
        reference = bench.references.get(probe.group_id)
        if reference is None or not reference.defines(*probe.pair):
            problems.append(
                f"probes.json: {probe.group_id!r}: {probe.better} > {probe.worse}: not a reference pair"
            )
    for gid, reference in bench.references.items():
        if reference.kind == "pairwise":
            for p in reference.preferences:
                key = (gid, frozenset(p.pair))
                if p.category in PROBED:
                    if (gid, p.better, p.worse) not in probed:
                        problems.append(
                            f"probes.json: group {gid!r}: {p.category} pair {p.better} > {p.worse}: no probe"
                        )
                elif key not in verdicts:
                    problems.append(
                        f"labels.jsonl: group {gid!r}: pair {p.better} > {p.worse} is not double-labelled"
                    )
                elif verdicts[key] != p.pair:
                    problems.append(
                        f"references: group {gid!r}: pair {p.better} > {p.worse}: the two labels differ"
                    )
        for (label_gid, pair), verdict in verdicts.items():
            if label_gid != gid:
                continue
            a, b = sorted(pair) if len(pair) == 2 else (next(iter(pair)),) * 2
            kept = [pair_ for pair_ in ((a, b), (b, a)) if reference.defines(*pair_)]
            if verdict in (None, DISAGREED) and kept:
                problems.append(
                    f"references: group {gid!r}: pair {' > '.join(kept[0])} is not agreed by both labels"
                )
