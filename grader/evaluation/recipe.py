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
from grader.util.lazy import renamed_names

RECIPE_FORMAT = 1
EXCLUDED_REPOSITORIES = frozenset({"psf/requests", "pallets/flask"})
"""Held out of every gagar benchmark (the project's rule)."""
PREDICTION_FORMATS = ("predictions-json", "predictions-jsonl")
REPORT_FORMATS = ("swebench-report",)
ROW_FORMATS = ("acr-meta",)


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


def _file(record: Any, where: str, file_id: str = "") -> SourceFile:
    keys = ("repository", "commit", "path", "sha256", "format")
    if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in keys):
        raise BenchmarkRecipeError(f"{where}: needs {', '.join(keys)}")
    if len(record["commit"]) != 40 or len(record["sha256"]) != 64:
        raise BenchmarkRecipeError(f"{where}: commit is 40 hex digits and sha256 64")
    return SourceFile(file_id or record["path"], *(record[k] for k in keys))


def _jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BenchmarkRecipeError(f"{path.name}:{number}: not JSON: {exc.msg}") from exc
            if not isinstance(item, dict):
                raise BenchmarkRecipeError(f"{path.name}:{number}: a line is a JSON object")
            rows.append((number, item))
    return rows


def load_recipe(folder: Path | str) -> BenchmarkRecipe:
    """Read and check a recipe folder.

    Args:
        folder: the folder holding recipe.json.

    Returns:
        The recipe.

    Raises:
        BenchmarkRecipeError: a file is missing or malformed, a pointer is incomplete, an instance of a
            held-out
            repository (psf/requests, pallets/flask) appears, or a candidate names an unknown run or instance.
    """
    root = Path(folder)
    try:
        manifest = json.loads((root / "recipe.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BenchmarkRecipeError(f"{root / 'recipe.json'}: cannot read: {exc}") from exc
    if manifest.get("recipe") != RECIPE_FORMAT or not manifest.get("name"):
        raise BenchmarkRecipeError(f"{root / 'recipe.json'}: needs a name and `recipe: {RECIPE_FORMAT}`")
    licensed = {s.get("repository") for s in manifest.get("sources", []) if s.get("licence")}
    files = {fid: _file(rec, f"recipe.json: files: {fid}", fid) for fid, rec in manifest["files"].items()}
    for f in files.values():
        if f.repository not in licensed:
            raise BenchmarkRecipeError(
                f"recipe.json: files: {f.id}: {f.repository} is not a source with a licence"
            )
    runs = manifest.get("runs", {})
    for run, record in runs.items():
        for role in ("predictions", "report"):
            if record.get(role) not in files:
                raise BenchmarkRecipeError(f"recipe.json: runs: {run}: {role} names no file")
    instances: dict[str, Instance] = {}
    for number, item in _jsonl(root / "instances.jsonl"):
        where = f"instances.jsonl:{number}"
        repository = str(item.get("repository", ""))
        if repository in EXCLUDED_REPOSITORIES:
            raise BenchmarkRecipeError(
                f"{where}: {item.get('instance')}: {repository} is held out of gagar benchmarks"
            )
        if repository not in licensed:
            raise BenchmarkRecipeError(
                f"{where}: task repository {repository!r} is not a source with a licence"
            )
        row = _file(item.get("row"), f"{where}: row")
        instances[str(item["instance"])] = Instance(
            str(item["instance"]), repository, item["base_commit"], row
        )
    candidates = []
    for number, item in _jsonl(root / "candidates.jsonl"):
        where = f"candidates.jsonl:{number}"
        run = runs.get(item.get("run"))
        if run is None or item.get("instance") not in instances:
            raise BenchmarkRecipeError(
                f"{where}: unknown run {item.get('run')!r} or instance {item.get('instance')!r}"
            )
        candidates.append(
            Candidate(
                item["instance"],
                item["run"],
                item["sha256"],
                bool(item["resolved"]),
                run["predictions"],
                run["report"],
            )
        )
    split_data = json.loads((root / "split.json").read_text(encoding="utf-8"))
    split = {str(i): name for name in ("dev", "test") for i in split_data.get(name, [])}
    unsplit = sorted(set(instances) - set(split))
    if unsplit:
        raise BenchmarkRecipeError(f"split.json: {len(unsplit)} instances in no split, first {unsplit[0]}")
    return BenchmarkRecipe(root, manifest, files, instances, candidates, split)


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
