"""SWE-bench install recipes, read from the official `swebench` package's own specification tables.

The tables (`MAP_REPO_VERSION_TO_SPECS_PY` and the requirements/environment.yml path maps) live in
`swebench/harness/constants/python.py` up to swebench 4.1.0; 5.x builds per-instance Dockerfiles instead. We
pin 4.1.0 (and its wheel's sha256), fetch that wheel from PyPI with pip, and read the module from it: nothing
is copied into gagar. A spec is turned into an `EnvironmentSpec` for an offline build: conda packages become
pip requirements where PyPI has the same package, `apt-get install` lines become Debian packages, and what
cannot be honoured here (downloads from other hosts, conda-only packages, CPU hints) is named in
`InstallRecipe.unhonoured`, never silently dropped.
"""

from __future__ import annotations

import ast
import hashlib
import re
import shlex
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from grader.errors import GagarError
from grader.util.cachedirs import machine_cache
from grader.util.lazy import renamed_names

SWEBENCH_VERSION = "4.1.0"
SWEBENCH_WHEEL = f"swebench-{SWEBENCH_VERSION}-py3-none-any.whl"
SWEBENCH_WHEEL_SHA256 = "1243776f720047cc9e20a427f7a52b75c13a07abda6154fb60fe77f82ec8af57"
SPECS_MODULE = "swebench/harness/constants/python.py"

# What SWE-bench's harness leaves out of test directives (swebench/harness/constants NON_TEST_EXTS).
_NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")

# conda package names whose PyPI name differs; a name absent here is taken to be the same on PyPI.
CONDA_TO_PIP = {
    "pytorch": "torch",
    "matplotlib-base": "matplotlib",
    "pyqt": "PyQt5",
    "py-opencv": "opencv-python",
    "msgpack-python": "msgpack",
    "pytables": "tables",
    "python-graphviz": "graphviz",
}
# conda packages that are not Python packages: their Debian equivalent, or None when there is none.
CONDA_TO_DEBIAN: dict[str, str | None] = {
    "compilers": "g++",
    "cxx-compiler": "g++",
    "c-compiler": "gcc",
    "pkg-config": "pkg-config",
    "graphviz": "graphviz",
    "ffmpeg": "ffmpeg",
    "ghostscript": "ghostscript",
    "inkscape": "inkscape",
    "pandoc": "pandoc",
    "make": "make",
    "cmake": "cmake",
    "freetype": "libfreetype-dev",
    "qhull": "libqhull-dev",
    "libpng": "libpng-dev",
    "nodejs": "nodejs",
}


# PyPI as SWE-bench's environment images could have seen it: after the pins its tables add for the
# repositories we met (tox==4.16.0 for sphinx, July 2024) and before today's drift, which breaks old trees
# (docutils 0.22, July 2025, dropped the `docutils.utils.roman` that sphinx 3.5 imports). A later pin fails
# with this date in its reason. pip's --uploaded-prior-to keeps every resolution at this date.
SWEBENCH_RESOLVED_AS_OF = "2025-01-01T00:00:00Z"


class InstallRecipeError(GagarError, ValueError):
    """No recipe for this repository and version, or the specification tables could not be read."""


@dataclass(frozen=True)
class InstallRecipe:
    """How SWE-bench builds one (repository, version) environment, in the terms of an offline build."""

    repo: str
    """`owner/name`, e.g. "pytest-dev/pytest"."""
    version: str
    """The instance's `version`, the environment's key within the repository."""
    python: str
    """The interpreter the spec asks for, e.g. "3.9"."""
    pip_packages: tuple[str, ...] = ()
    """pip requirements: the spec's `pip_packages` and its conda `packages` mapped to PyPI names."""
    requirements_files: tuple[str, ...] = ()
    """Paths in the base tree to `pip install -r` (the spec's "requirements.txt"); the first that exists."""
    environment_files: tuple[str, ...] = ()
    """Paths in the base tree of a conda environment.yml (spec: "environment.yml"); the first that exists."""
    system_packages: tuple[str, ...] = ()
    """Debian packages (the spec's `apt-get install` lines), installed from the mirror."""
    build_commands: tuple[str, ...] = ()
    """Other `pre_install` commands, run in the base tree before the install (and in each target's setup)."""
    install: str | None = None
    """The install command, run in the base tree; what it pulls in stays in the layer."""
    test_command: str = ""
    """The spec's test command, without test files."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables the spec exports before its tests (`eval_commands`)."""
    unhonoured: tuple[str, ...] = ()
    """What the spec asks for that an offline build cannot do, one entry each, with the reason."""
    source: str = ""
    """Where the recipe was read: the pinned swebench version and the table entry."""
    resolved_as_of: str = ""
    """Resolve from PyPI as of this ISO 8601 time (pip's --uploaded-prior-to); "" resolves as of now."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "version": self.version,
            "python": self.python,
            "pip_packages": list(self.pip_packages),
            "requirements_files": list(self.requirements_files),
            "environment_files": list(self.environment_files),
            "system_packages": list(self.system_packages),
            "build_commands": list(self.build_commands),
            "install": self.install,
            "test_command": self.test_command,
            "env": dict(self.env),
            "unhonoured": list(self.unhonoured),
            "source": self.source,
            "resolved_as_of": self.resolved_as_of,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InstallRecipe:
        fields = dict(data)
        for name in (
            "pip_packages",
            "requirements_files",
            "environment_files",
            "system_packages",
            "build_commands",
            "unhonoured",
        ):
            fields[name] = tuple(fields.get(name) or ())
        fields["env"] = tuple(sorted((fields.get("env") or {}).items()))
        return cls(**fields)


@dataclass(frozen=True)
class SpecTables:
    """The parts of swebench's python.py a recipe needs."""

    specs: dict[str, dict[str, dict[str, Any]]]
    requirements_paths: dict[str, list[str]]
    environment_paths: dict[str, list[str]]
    version: str = SWEBENCH_VERSION
    extra: dict[str, Any] = field(default_factory=dict)


def _cache_dir() -> Path:
    root = machine_cache() / "swebench"
    root.mkdir(parents=True, exist_ok=True)
    return root


def fetch_swebench_wheel(cache_dir: Path | None = None) -> Path:
    """The pinned swebench wheel, fetched with pip (`pip download --no-deps`) once and kept in `cache_dir`.

    Raises `InstallRecipeError` when pip cannot fetch it or its sha256 is not the pinned one.
    """
    folder = cache_dir or _cache_dir()
    wheel = folder / SWEBENCH_WHEEL
    if not wheel.exists():
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "-q",
                "-d",
                str(folder),
            ]
            + [f"swebench=={SWEBENCH_VERSION}"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0 or not wheel.exists():
            raise InstallRecipeError(
                f"could not fetch swebench=={SWEBENCH_VERSION} with pip: {done.stderr[-1500:]}"
            )
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != SWEBENCH_WHEEL_SHA256:
        raise InstallRecipeError(f"{wheel} has sha256 {digest}, not the pinned {SWEBENCH_WHEEL_SHA256}")
    return wheel


def read_spec_tables(source: str) -> SpecTables:
    """The tables from the text of swebench's `harness/constants/python.py`.

    The module is plain data (string constants, dicts, loops over versions); it is run in an empty namespace
    after checking that it imports nothing. Raises `InstallRecipeError` when it imports or lacks the tables.
    """
    tree = ast.parse(source)
    if any(isinstance(node, ast.Import | ast.ImportFrom) for node in ast.walk(tree)):
        raise InstallRecipeError(f"{SPECS_MODULE} imports modules; refusing to run it as data")
    namespace: dict[str, Any] = {"__builtins__": {"int": int, "range": range, "dict": dict, "list": list}}
    exec(compile(tree, SPECS_MODULE, "exec"), namespace)  # noqa: S102 - pinned, hash-checked, import-free data
    try:
        return SpecTables(
            specs=namespace["MAP_REPO_VERSION_TO_SPECS_PY"],
            requirements_paths=namespace.get("MAP_REPO_TO_REQS_PATHS", {}),
            environment_paths=namespace.get("MAP_REPO_TO_ENV_YML_PATHS", {}),
        )
    except KeyError as exc:
        raise InstallRecipeError(f"{SPECS_MODULE} has no {exc.args[0]}") from None


@lru_cache(maxsize=4)
def swebench_tables(wheel: Path | None = None) -> SpecTables:
    """The pinned package's tables (fetching the wheel when needed). Raises `InstallRecipeError`."""
    path = wheel or fetch_swebench_wheel()
    try:
        with zipfile.ZipFile(path) as archive:
            source = archive.read(SPECS_MODULE).decode("utf-8")
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise InstallRecipeError(f"cannot read {SPECS_MODULE} from {path}: {exc}") from exc
    return read_spec_tables(source)


def recipe_for(repo: str, version: str, tables: SpecTables | None = None) -> InstallRecipe:
    """The recipe of `repo` at SWE-bench `version`. Raises `InstallRecipeError` when the tables have none."""
    tables = tables or swebench_tables()
    by_version = tables.specs.get(repo)
    if by_version is None:
        raise InstallRecipeError(f"swebench=={tables.version} has no specifications for {repo}")
    spec = by_version.get(str(version))
    if spec is None:
        known = ", ".join(sorted(by_version))
        raise InstallRecipeError(
            f"swebench=={tables.version} has no {repo} version {version!r}; known: {known}"
        )
    return recipe_from_spec(
        repo,
        str(version),
        spec,
        requirements_paths=tables.requirements_paths.get(repo, []),
        environment_paths=tables.environment_paths.get(repo, []),
        source=f"swebench=={tables.version} MAP_REPO_VERSION_TO_SPECS_PY[{repo!r}][{str(version)!r}]",
    )


def recipe_from_spec(
    repo: str,
    version: str,
    spec: dict[str, Any],
    requirements_paths: list[str] | None = None,
    environment_paths: list[str] | None = None,
    source: str = "",
) -> InstallRecipe:
    """Map one SWE-bench spec dict onto what an offline build can do, naming what it cannot."""
    unhonoured: list[str] = []
    pip: list[str] = []
    system: list[str] = []
    requirements: tuple[str, ...] = ()
    environments: tuple[str, ...] = ()
    packages = spec.get("packages")
    if packages == "requirements.txt":
        requirements = tuple(requirements_paths or ())
        if not requirements:
            unhonoured.append("packages=requirements.txt: the tables name no requirements file for this repo")
    elif packages == "environment.yml":
        environments = tuple(environment_paths or ())
        if not environments:
            unhonoured.append("packages=environment.yml: the tables name no environment file for this repo")
    elif packages:
        for word in shlex.split(str(packages)):
            mapped, apt, note = conda_to_pip(word)
            pip += [mapped] if mapped else []
            system += [apt] if apt else []
            unhonoured += [note] if note else []
    pip += [str(p) for p in spec.get("pip_packages") or []]

    commands: list[str] = []
    for line in spec.get("pre_install") or []:
        apt = _apt_packages(line)
        if apt is not None:
            system += apt
        elif re.search(r"\b(wget|curl)\b|https?://|\bgit\s+clone\b", line):
            unhonoured.append(f"pre_install {line!r}: downloads from a host other than PyPI or Debian")
        elif re.fullmatch(r"\s*[A-Za-z_][A-Za-z0-9_]*=.*", line):
            unhonoured.append(f"pre_install {line!r}: only feeds a download that cannot run offline")
        else:
            commands.append(line)

    env: dict[str, str] = {}
    for line in spec.get("eval_commands") or []:
        m = re.fullmatch(r"\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)", line)
        if m:
            env[m.group(1)] = m.group(2).strip().strip("'\"")
        else:
            commands.append(line)  # e.g. locale-gen: a system step, done once in the layer
    if spec.get("nano_cpus"):
        unhonoured.append(f"nano_cpus={spec['nano_cpus']}: the sandbox's Limits.cpus applies instead")
    if spec.get("no_use_env"):
        unhonoured.append("no_use_env: a conda detail; the layer has one venv")
    test_command = str(spec.get("test_cmd") or "")
    if test_command.startswith("tox --current-env"):
        unhonoured.append(f"test_cmd {test_command!r}: run with pytest directly (tox is not in the layer)")
        test_command = "pytest -rA"
    return InstallRecipe(
        repo=repo,
        version=version,
        python=str(spec.get("python") or ""),
        pip_packages=tuple(dict.fromkeys(pip)),
        requirements_files=requirements,
        environment_files=environments,
        system_packages=tuple(dict.fromkeys(system)),
        build_commands=tuple(commands),
        install=spec.get("install"),
        test_command=test_command,
        env=tuple(sorted(env.items())),
        unhonoured=tuple(unhonoured),
        source=source,
        resolved_as_of=SWEBENCH_RESOLVED_AS_OF,
    )


def conda_to_pip(requirement: str) -> tuple[str | None, str | None, str | None]:
    """(pip requirement, Debian package, note) for one conda requirement such as "numpy=1.19" or "python".

    conda's `name=1.2` (a prefix match) becomes pip's `name==1.2.*`; `name==1.2` and ranges are kept.
    The interpreter itself ("python", "python=3.9") maps to nothing: the layer's interpreter is chosen apart.
    """
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)(?:\[[^]]*\])?\s*(.*)", requirement.strip())
    if not m:
        return None, None, f"conda package {requirement!r}: not a requirement gagar can read"
    name, constraint = m.group(1), m.group(2).strip()
    low = name.lower()
    if low == "python" or low == "pip":
        return None, None, None
    if low in CONDA_TO_DEBIAN:
        apt = CONDA_TO_DEBIAN[low]
        if apt is None:
            return None, None, f"conda package {requirement!r}: conda-only, no PyPI or Debian equivalent"
        return None, apt, None
    if re.fullmatch(r"=[^=<>!].*", constraint):
        version = constraint[1:]
        constraint = f"=={version}" if version.endswith("*") or version.count(".") >= 2 else f"=={version}.*"
    return CONDA_TO_PIP.get(low, name) + constraint, None, None


def _apt_packages(line: str) -> list[str] | None:
    """Debian packages an `apt-get install` line asks for; None when the line installs nothing."""
    found: list[str] | None = None
    for part in re.split(r"&&|;", line):
        words = part.split()
        if "apt-get" in words and "install" in words:
            after = words[words.index("install") + 1 :]
            found = (found or []) + [w for w in after if not w.startswith("-") and "=" not in w]
        elif "apt-get" in words and found is None:
            found = []  # update/upgrade: the build does its own
    return found


def test_directives(test_patch: str, repo: str = "") -> list[str]:
    """The test files an instance's `test_patch` touches, as SWE-bench's harness passes them to its runner.

    Files with data extensions are left out; for django/django they become test module names.
    """
    paths = re.findall(r"^diff --git a/.* b/(.*)$", test_patch, flags=re.M)
    paths = [p for p in dict.fromkeys(paths) if not any(p.endswith(ext) for ext in _NON_TEST_EXTS)]
    if repo == "django/django":
        paths = [p.removeprefix("tests/").removesuffix(".py").replace("/", ".") for p in paths]
    return paths


def _without_created_files(test_patch: str) -> str:
    """`test_patch` without the diffs of the files it creates (gagar never applies it: no tree has them)."""
    blocks = re.split(r"(?m)^(?=diff --git )", test_patch)
    kept = [b for b in blocks if not re.search(r"(?m)^(new file mode|--- /dev/null)", b.split("\n@@", 1)[0])]
    return "".join(kept)


def test_command_for(recipe: InstallRecipe, test_patch: str) -> str:
    """The recipe's test command with the instance's relevant test files, as SWE-bench runs them.

    SWE-bench applies the `test_patch` before it runs them; gagar's targets never have it, so the files it
    creates are left out (pytest would stop at a missing path with exit 4 on every target).

    Args:
        recipe: the instance's recipe.
        test_patch: the instance's `test_patch`.

    Returns:
        The command; "" when every test file the patch touches is one it creates (nothing to run).
    """
    files = test_directives(_without_created_files(test_patch), recipe.repo)
    if not files and test_directives(test_patch, recipe.repo):
        return ""
    return " ".join([recipe.test_command, *(shlex.quote(f) for f in files)]).strip()


# Old names, for one release.
__getattr__ = renamed_names(
    __name__, {"Recipe": "InstallRecipe", "RecipeError": "InstallRecipeError"}, globals()
)
