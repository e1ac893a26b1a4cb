"""A benchmark recipe: pointers into public sources plus our own work, never the fetched text itself.

A recipe folder (docs/benchmark.md, *Recipes*) holds:

    recipe.json          name, sources (repository, commit, licence), files (id -> repository, commit, path,
                         sha256, format), runs (id -> predictions file, report file), task repositories
    instances.jsonl      SWE-bench id, upstream repository, base commit, where its dataset row is read from
    candidates.jsonl     instance, run, the sha256 of its patch text, its published resolved label
    split.json           dev and test instances
    preference.jsonl     instances with two or more textually distinct resolved patches, ready for labelling
    references.jsonl     our labelled preference pairs (may be empty)
    labels.jsonl         double-labelling records; probes.json and probes/: our probes

`gagar bench prepare` (grader.evaluation.prepare) reads the pointed-at files at their commits, checks every
sha256 and writes ordinary benchmark folders (grader.evaluation.benchmark) into the gagar cache. This module
only reads and checks the recipe and parses the source formats; it touches no git repository.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.errors import GagarError
from grader.util.jsontext import loads, unique_keys
from grader.util.lazy import renamed_names
from grader.util.untrusted import (
    UnsafeValue,
    commit_id,
    path_segment,
    relative_path,
    repository_name,
    sha256_hex,
)

RECIPE_FORMAT = 1
EXCLUDED_REPOSITORIES = frozenset({"psf/requests", "pallets/flask"})
"""Held out of every gagar benchmark (the project's rule)."""
PREDICTION_FORMATS = ("predictions-json", "predictions-jsonl")
REPORT_FORMATS = ("swebench-report",)
ROW_FORMATS = ("acr-meta",)
RECIPE_FILES = (
    "recipe.json",
    "instances.jsonl",
    "candidates.jsonl",
    "split.json",
    "references.jsonl",
    "labels.jsonl",
    "probes.json",
)
"""The files of a recipe folder a prepared track is made from (with the scripts under probes/)."""


class BenchmarkRecipeError(GagarError, ValueError):
    """A recipe folder that breaks its format, or a source file that does not parse; the message says
    where."""


@dataclass(frozen=True)
class SourceFile:
    """One file of a public repository, pinned: read at `commit`, its bytes must hash to `sha256`."""

    id: str
    repository: str
    commit: str
    path: str
    sha256: str
    format: str
    size: int | None = None
    """The file's size in bytes when the recipe declares it: reading stops past it."""


@dataclass(frozen=True)
class Instance:
    """One SWE-bench task: its upstream repository and base commit, and the file its dataset row is in."""

    id: str
    repository: str
    base_commit: str
    row: SourceFile


@dataclass(frozen=True)
class Candidate:
    """One published prediction of one run for one instance, and its published resolved label."""

    instance: str
    run: str
    sha256: str
    """sha256 of the patch text (UTF-8)."""
    resolved: bool
    predictions: str
    """The id of the predictions file it is read from (its key there is the instance id)."""
    report: str
    """The id of the report file its label is read from (resolved when listed under `resolved`)."""


@dataclass
class BenchmarkRecipe:
    """A loaded recipe (see the module docstring); built by `load_recipe`."""

    root: Path
    manifest: dict[str, Any]
    files: dict[str, SourceFile]
    instances: dict[str, Instance]
    candidates: list[Candidate]
    split: dict[str, str]

    @property
    def name(self) -> str:
        """The recipe's name (the benchmark's name)."""
        return str(self.manifest["name"])

    def digest(self) -> str:
        """The sha256 of every file of the recipe folder a prepared track comes from (the pointer files, the
        split, our references, labels and probes), by name and content: a track prepared from another
        version of the recipe has another digest."""
        names = [
            *RECIPE_FILES,
            *(
                f"probes/{p.relative_to(self.root / 'probes').as_posix()}"
                for p in sorted((self.root / "probes").rglob("*"))
                if p.is_file()
            ),
        ]
        digest = hashlib.sha256()
        for name in names:
            path = self.root / name
            data = path.read_bytes() if path.is_file() else b""
            digest.update(f"{name}\0{len(data)}\0".encode())
            digest.update(data)
        return digest.hexdigest()

    def repositories(self) -> list[str]:
        """Every OWNER/NAME the recipe reads: the data sources first, then the task repositories, sorted."""
        data = {f.repository for f in self.files.values()} | {
            i.row.repository for i in self.instances.values()
        }
        tasks = {i.repository for i in self.instances.values()}
        return sorted(data) + sorted(tasks - data)


def is_recipe(folder: Path) -> bool:
    """Whether `folder` holds a recipe (recipe.json)."""
    return (folder / "recipe.json").is_file()


def sha256_text(text: str) -> str:
    """The sha256 of a text's UTF-8 bytes, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_bytes(data: bytes) -> str:
    """The sha256 of bytes, hex."""
    return hashlib.sha256(data).hexdigest()


# -- reading and checking ---------------------------------------------------------------------------------
#
# Every value of a recipe is checked here, once, before anything reaches git or a path: its type, its
# characters (grader.util.untrusted), and that nothing is listed twice. Each error is one line naming the
# file, the field and what was expected.


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _read_json(path: Path) -> Any:
    """The JSON of one recipe file (duplicate keys refused). Raises BenchmarkRecipeError naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BenchmarkRecipeError(f"{path}: missing (a recipe folder holds it)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchmarkRecipeError(f"{path}: cannot read: {exc}") from None
    try:
        return loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise BenchmarkRecipeError(f"{path}: not JSON: {exc.msg} (line {exc.lineno})") from None
    except ValueError as exc:
        raise BenchmarkRecipeError(f"{path}: {exc}") from None


def _jsonl(path: Path, *, required: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """(where, object) for each non-blank line. Raises BenchmarkRecipeError naming the file and line."""
    if not path.is_file():
        if required:
            raise BenchmarkRecipeError(f"{path}: missing (a recipe folder holds it)")
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = loads(line, object_pairs_hook=unique_keys)
        except json.JSONDecodeError as exc:
            raise BenchmarkRecipeError(f"{where}: not JSON: {exc.msg}") from None
        except ValueError as exc:
            raise BenchmarkRecipeError(f"{where}: {exc}") from None
        if not isinstance(item, dict):
            raise BenchmarkRecipeError(f"{where}: expected a JSON object, got {_kind(item)}")
        rows.append((where, item))
    if required and not rows:
        raise BenchmarkRecipeError(f"{path}: empty: expected one JSON object per line")
    return rows


def _fields(item: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    """`item`, once it is an object holding every required field and no unknown one."""
    if not isinstance(item, dict):
        raise BenchmarkRecipeError(f"{where}: expected a JSON object, got {_kind(item)}")
    missing = [k for k in required if k not in item]
    if missing:
        raise BenchmarkRecipeError(f"{where}: missing field {missing[0]!r} (expected {', '.join(required)})")
    unknown = sorted(set(item) - set(required) - set(optional))
    if unknown:
        known = ", ".join([*required, *optional])
        raise BenchmarkRecipeError(f"{where}: unknown field {unknown[0]!r} (expected {known})")
    return item


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BenchmarkRecipeError(f"{where}: expected a non-empty string, got {_kind(value)}")
    return value


def _checked(check: Any, value: Any, where: str) -> str:
    """`check(value, where)` from grader.util.untrusted, its refusal raised as a BenchmarkRecipeError."""
    try:
        return check(value, where)
    except UnsafeValue as exc:
        raise BenchmarkRecipeError(str(exc)) from None


POINTER_FIELDS = ("repository", "commit", "path", "sha256", "format")


def _pointer(record: Any, where: str, file_id: str, formats: tuple[str, ...]) -> SourceFile:
    _fields(record, where, POINTER_FIELDS, ("size",))
    fmt = record["format"]
    if fmt not in formats:
        raise BenchmarkRecipeError(f"{where}.format: {fmt!r} is not one of {', '.join(formats)}")
    size = record.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise BenchmarkRecipeError(f"{where}.size: expected a number of bytes, got {_kind(size)} {size!r}")
    return SourceFile(
        file_id,
        _checked(repository_name, record["repository"], f"{where}.repository"),
        _checked(commit_id, record["commit"], f"{where}.commit"),
        _checked(relative_path, record["path"], f"{where}.path"),
        _checked(sha256_hex, record["sha256"], f"{where}.sha256"),
        fmt,
        size,
    )


def _manifest(path: Path) -> dict[str, Any]:
    manifest = _fields(
        _read_json(path),
        str(path),
        ("name", "recipe", "sources", "runs", "files"),
        ("description", "rules", "labellers"),
    )
    if manifest["recipe"] != RECIPE_FORMAT or isinstance(manifest["recipe"], bool):
        raise BenchmarkRecipeError(f"{path}: recipe: expected {RECIPE_FORMAT}, got {manifest['recipe']!r}")
    _checked(path_segment, manifest["name"], f"{path}: name")
    for key in ("sources", "runs", "files"):
        kind = list if key == "sources" else dict
        if not isinstance(manifest[key], kind) or not manifest[key]:
            wanted = "a non-empty list" if kind is list else "a non-empty object"
            raise BenchmarkRecipeError(f"{path}: {key}: expected {wanted}, got {_kind(manifest[key])}")
    for n, source in enumerate(manifest["sources"]):
        where = f"{path}: sources[{n}]"
        _fields(source, where, ("repository", "licence", "what"), ("commit",))
        _checked(repository_name, source["repository"], f"{where}.repository")
        _text(source["licence"], f"{where}.licence")
        if not isinstance(source["what"], str):
            raise BenchmarkRecipeError(f"{where}.what: expected a string, got {_kind(source['what'])}")
        if "commit" in source:
            _checked(commit_id, source["commit"], f"{where}.commit")
    if not isinstance(manifest.get("description", ""), str):
        raise BenchmarkRecipeError(f"{path}: description: expected a string")
    rules = manifest.get("rules", [])
    if not isinstance(rules, list) or not all(isinstance(rule, str) for rule in rules):
        raise BenchmarkRecipeError(f"{path}: rules: expected a list of strings")
    labellers = manifest.get("labellers", {})
    if not isinstance(labellers, dict) or not all(isinstance(v, str) for v in labellers.values()):
        raise BenchmarkRecipeError(f"{path}: labellers: expected an object of labeller -> description")
    return manifest


def _files(manifest: dict[str, Any], path: Path) -> dict[str, SourceFile]:
    """The pointers of `files`, each with the formats its roles in `runs` allow."""
    roles: dict[str, set[str]] = {}
    for run, record in manifest["runs"].items():
        where = f"{path}: runs.{run}"
        _checked(path_segment, run, f"{path}: runs: run id")
        _fields(record, where, ("predictions", "report"), ("system",))
        for role in ("predictions", "report"):
            if record[role] not in manifest["files"]:
                raise BenchmarkRecipeError(f"{where}.{role}: {record[role]!r} is not an id under files")
            roles.setdefault(record[role], set()).add(role)
        if not isinstance(record.get("system", ""), str):
            raise BenchmarkRecipeError(f"{where}.system: expected a string")
    files = {}
    for file_id, record in manifest["files"].items():
        used = roles.get(file_id, {"predictions", "report"})
        if len(used) > 1 and file_id in roles:
            raise BenchmarkRecipeError(f"{path}: files.{file_id}: named as both predictions and report")
        formats = PREDICTION_FORMATS * ("predictions" in used) + REPORT_FORMATS * ("report" in used)
        files[file_id] = _pointer(record, f"{path}: files.{file_id}", file_id, formats)
    return files


def _licensed(repository: str, licensed: set[str], where: str) -> None:
    if repository not in licensed:
        raise BenchmarkRecipeError(f"{where}: {repository} is not a source with a licence")


def load_recipe(folder: Path | str) -> BenchmarkRecipe:
    """Read and check a recipe folder: every field's type and characters, nothing listed twice.

    Args:
        folder: the folder holding recipe.json.

    Returns:
        The recipe.

    Raises:
        BenchmarkRecipeError: one line naming the file (and line), the field and what was expected: a file
            missing, not JSON or repeating a key; a field missing, unknown or of the wrong type; an empty
            list; a commit that is not 40 hex digits, a repository that is not OWNER/NAME, a path that is
            absolute or climbs with `..`, a name that is not one path segment; an instance or candidate
            listed twice; a repository that is not a source with a licence or is held out (psf/requests,
            pallets/flask); a candidate naming an unknown run or instance; an instance in no split or two.
    """
    root = Path(folder)
    manifest = _manifest(root / "recipe.json")
    licensed = {s["repository"] for s in manifest["sources"]}
    files = _files(manifest, root / "recipe.json")
    for f in files.values():
        _licensed(f.repository, licensed, f"{root / 'recipe.json'}: files.{f.id}.repository")
    instances: dict[str, Instance] = {}
    first_line: dict[str, str] = {}
    for where, item in _jsonl(root / "instances.jsonl"):
        _fields(item, where, ("instance", "repository", "base_commit", "row"))
        instance_id = _checked(path_segment, item["instance"], f"{where}: instance")
        repository = _checked(repository_name, item["repository"], f"{where}: repository")
        if repository in EXCLUDED_REPOSITORIES:
            raise BenchmarkRecipeError(f"{where}: {instance_id}: {repository} is held out of benchmarks")
        _licensed(repository, licensed, f"{where}: repository")
        if instance_id in first_line:
            raise BenchmarkRecipeError(
                f"{where}: instance {instance_id} is listed twice (first at {first_line[instance_id]})"
            )
        first_line[instance_id] = where
        row_path = item["row"].get("path") if isinstance(item["row"], dict) else None
        row = _pointer(item["row"], f"{where}: row", str(row_path), ROW_FORMATS)
        _licensed(row.repository, licensed, f"{where}: row.repository")
        base = _checked(commit_id, item["base_commit"], f"{where}: base_commit")
        instances[instance_id] = Instance(instance_id, repository, base, row)
    candidates = []
    seen: dict[tuple[str, str], str] = {}
    runs = manifest["runs"]
    for where, item in _jsonl(root / "candidates.jsonl"):
        _fields(item, where, ("instance", "run", "sha256", "resolved"))
        if item["instance"] not in instances:
            raise BenchmarkRecipeError(f"{where}: instance: {item['instance']!r} is not in instances.jsonl")
        if item["run"] not in runs:
            raise BenchmarkRecipeError(f"{where}: run: {item['run']!r} is not a run of recipe.json")
        if not isinstance(item["resolved"], bool):
            got = _kind(item["resolved"])
            raise BenchmarkRecipeError(f"{where}: resolved: expected true/false, got {got}")
        key = (item["instance"], item["run"])
        if key in seen:
            raise BenchmarkRecipeError(
                f"{where}: candidate {key[0]} / {key[1]} is listed twice (first at {seen[key]})"
            )
        seen[key] = where
        run = runs[item["run"]]
        sha = _checked(sha256_hex, item["sha256"], f"{where}: sha256")
        candidates.append(Candidate(key[0], key[1], sha, item["resolved"], run["predictions"], run["report"]))
    split = _split(root / "split.json", instances)
    for name in ("references.jsonl", "labels.jsonl"):
        for where, item in _jsonl(root / name, required=False):
            _text(item.get("group_id"), f"{where}: group_id")
    if (root / "probes.json").is_file():
        probes = _read_json(root / "probes.json")
        if not isinstance(probes, list) or not all(isinstance(p, dict) for p in probes):
            raise BenchmarkRecipeError(f"{root / 'probes.json'}: expected a list of objects")
        for n, probe in enumerate(probes):
            _text(probe.get("group_id"), f"{root / 'probes.json'}: [{n}].group_id")
    return BenchmarkRecipe(root, manifest, files, instances, candidates, split)


def _split(path: Path, instances: dict[str, Instance]) -> dict[str, str]:
    data = _fields(_read_json(path), str(path), ("dev", "test"))
    split: dict[str, str] = {}
    for name in ("dev", "test"):
        if not isinstance(data[name], list):
            got = _kind(data[name])
            raise BenchmarkRecipeError(f"{path}: {name}: expected a list of instances, got {got}")
        for instance in data[name]:
            if instance not in instances:
                raise BenchmarkRecipeError(f"{path}: {name}: {instance!r} is not in instances.jsonl")
            if instance in split:
                also = split[instance]
                raise BenchmarkRecipeError(f"{path}: {name}: {instance} is listed twice (also in {also})")
            split[instance] = name
    unsplit = sorted(set(instances) - set(split))
    if unsplit:
        raise BenchmarkRecipeError(f"{path}: {len(unsplit)} instances in no split, first {unsplit[0]}")
    return split


# -- source formats ---------------------------------------------------------------------------------------


def parse_predictions(text: str, fmt: str, where: str) -> dict[str, str]:
    """Instance id -> patch text of a predictions file.

    Args:
        text: the file's text.
        fmt: "predictions-json" (a JSON list of {instance_id, model_patch}, or an object keyed by instance
            id) or "predictions-jsonl" (one such object per line).
        where: names the file in errors.

    Returns:
        The patches (None patches become "").

    Raises:
        BenchmarkRecipeError: the text does not parse, or an entry lacks instance_id.
    """
    try:
        if fmt == "predictions-jsonl":
            items: Any = [json.loads(line) for line in text.splitlines() if line.strip()]
        elif fmt == "predictions-json":
            items = json.loads(text)
            if isinstance(items, dict):
                items = [{"instance_id": k, **v} for k, v in items.items()]
        else:
            raise BenchmarkRecipeError(f"{where}: unknown predictions format {fmt!r}")
        return {str(item["instance_id"]): item.get("model_patch") or "" for item in items}
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise BenchmarkRecipeError(f"{where}: not a {fmt} predictions file: {exc!r}") from exc


def parse_report(text: str, where: str) -> tuple[set[str], set[str] | None]:
    """The resolved instances of a SWE-bench harness report, and the applied ones when it lists them.

    Trailing commas (as one published report has) are tolerated.

    Args:
        text: the report's text: a JSON object with a `resolved` list (and maybe `applied`).
        where: names the file in errors.

    Returns:
        (resolved, applied or None).

    Raises:
        BenchmarkRecipeError: no JSON object with a `resolved` list.
    """
    try:
        data = json.loads(re.sub(r",(\s*[\]}])", r"\1", text))
        resolved = set(map(str, data["resolved"]))
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise BenchmarkRecipeError(f"{where}: not a harness report with a `resolved` list: {exc!r}") from exc
    applied = data.get("applied")
    return resolved, (set(map(str, applied)) if isinstance(applied, list) else None)


def parse_row(text: str, fmt: str, where: str) -> dict[str, Any]:
    """A SWE-bench dataset row (instance_id, repo, base_commit, problem_statement, ...).

    Args:
        text: the file's text.
        fmt: "acr-meta": auto-code-rover's per-task meta.json, whose `task_info` is the row.
        where: names the file in errors.

    Returns:
        The row.

    Raises:
        BenchmarkRecipeError: no row with instance_id, repo, base_commit and problem_statement.
    """
    if fmt not in ROW_FORMATS:
        raise BenchmarkRecipeError(f"{where}: unknown row format {fmt!r}")
    try:
        row = json.loads(text)["task_info"]
        _ = (row["instance_id"], row["repo"], row["base_commit"], row["problem_statement"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise BenchmarkRecipeError(f"{where}: not an {fmt} file with a dataset row: {exc!r}") from exc
    return row


# Old names, for one release.
__getattr__ = renamed_names(
    __name__, {"Recipe": "BenchmarkRecipe", "RecipeError": "BenchmarkRecipeError"}, globals()
)
