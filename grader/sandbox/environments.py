"""Task environments: an image layer with a task's dependencies on top of its interpreter image.

A layer is built once per (repository, environment version, interpreter) and reused by every task that names
the same triple, so the second task of a repository starts in seconds. It holds a venv at `/opt/gagar-env`
(first on PATH) with the environment's pip requirements, its Debian packages from the mirror, and whatever its
install command pulls in. The repository itself is not installed editable: the sandbox's root filesystem is
read-only and each command runs in a fresh copy of its target's tree, so the layer sets a relative
`PYTHONPATH` (`src:.`) that makes whichever tree a command runs in the one that imports.

A build runs `docker build` under a time limit with its output capped, keeps its log under
`~/.cache/gagar/environments/logs/` (or `$XDG_CACHE_HOME/gagar/...`), and is tagged under its final name only
when it succeeded: it is built under a temporary tag which is renamed on success and removed on failure, so
no half-built layer ever sits under a final name. A failure (a requirement PyPI does not have, a hang, a full
disk) raises `EnvironmentBuildError` with the reason; it concerns that task only.

What the layer installs is the recipe as it can install on the interpreter it gets (`plan_layer`, `pins`):
a stand-in interpreter's pins are lifted to releases that install on it, a recipe that pins setuptools
builds its tree with it, and every layer has pytest (and the optional packages its repository's tests
import). A failure's `EnvironmentBuildError` carries the cause twice: for people, with the log's path, and
for a model, in the task's terms (`builds`).

A layer's cache key is its recipe, not the tree that first built it: like SWE-bench's environment images, one
layer serves every task of a (repository, version, interpreter), whatever its base commit (the tree's
requirements file, when the recipe names one, is part of the key; the rest of the tree is not). A failed build
is remembered under the same key (`failures/` beside the logs), so the next task of that environment fails at
once with the remembered reason instead of paying for the same failure again; `retry=True` (`gagar env build
--retry`) builds it again.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import secrets
import shlex
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grader.errors import EnvironmentBuildError, ImageBuildError
from grader.sandbox.builds import FailureMemory, docker_build
from grader.sandbox.images import build_interpreter_image, image_hash
from grader.sandbox.interpreters import InterpreterChoice, choose_interpreter
from grader.sandbox.layer_spec import EnvironmentSpec
from grader.sandbox.pins import adjust
from grader.sandbox.requirements import honour, included_files, unhonourable
from grader.util.cachedirs import machine_cache
from grader.util.filelock import file_lock

log = logging.getLogger(__name__)

ENVIRONMENT_REPOSITORY = "gagar/env"
VENV = "/opt/gagar-env"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# `compiled`'s script in the layer, and the part of each target's setup that runs it (layers that install the
# tree only: the others have no build of it to copy from).
COMPILED_SCRIPT = f"{VENV}/gagar-compiled.py"
COMPILED_SETUP = f"python {COMPILED_SCRIPT} || true"
DEFAULT_BUILD_TIMEOUT = 1800.0
DEFAULT_LOG_BYTES = 4 * 1024**2


@dataclass(frozen=True)
class EnvironmentImage:
    """A built (or reused) environment layer."""

    tag: str
    """The final tag, e.g. `gagar/env:pytest-dev__pytest-5.4-py3.9`."""
    choice: InterpreterChoice
    """The interpreter used, and whether it is the one asked for."""
    built: bool
    """False when an identical layer was already there."""
    seconds: float
    """Wall time of this call (the build, or the cache check)."""
    size_bytes: int
    """The image's size as the engine reports it (the layer plus its interpreter image)."""
    log_path: Path | None = None
    """The build log (None when nothing was built)."""
    notes: tuple[str, ...] = field(default=())
    """What the caller should be told: the interpreter that stands in, requirements files not found."""
    unhonoured: tuple[str, ...] = field(default=())
    """Requirement lines left out because an offline build cannot honour them (VCS URLs, hosts other than
    PyPI, other indexes), as "FILE:LINE: text" (grader.sandbox.requirements); the layer is built without
    them and fails only when what remains does not install."""

    tree_setup: str | None = None
    """The layer's part of each target's setup (it runs before the task's own), or None: copying the
    compiled extension modules of the layer's build of the base tree into the target's tree (`compiled`)."""

    @property
    def note(self) -> str:
        """The notes as one line ("" when there are none)."""
        return "; ".join(self.notes)


def environments_cache() -> Path:
    """Where build logs and locks live: `$XDG_CACHE_HOME/gagar/environments` (default `~/.cache/...`)."""
    root = machine_cache() / "environments"
    (root / "logs").mkdir(parents=True, exist_ok=True)
    return root


def environment_tag(spec: EnvironmentSpec, choice: InterpreterChoice) -> str:
    """The final tag of `spec`'s layer on the interpreter `choice` picked."""
    return f"{ENVIRONMENT_REPOSITORY}:{spec.slug}-py{choice.interpreter.version}"


def plan_layer(spec: EnvironmentSpec) -> tuple[InterpreterChoice, EnvironmentSpec, tuple[str, ...]]:
    """The interpreter `spec`'s layer gets, the spec as built on it (`pins.adjust`), and the notes saying so.

    Args:
        spec: the recipe's layer.

    Returns:
        (the interpreter choice, the spec to build, the notes: the stand-in interpreter, lifted pins).

    Raises:
        UnknownInterpreter: `spec.python` is not a Python 3 release.
    """
    choice = choose_interpreter(spec.python, pinned=any("==" in p for p in spec.pip_packages))
    adjusted, changes = adjust(spec, choice)
    return choice, adjusted, tuple([choice.note] if choice.note else []) + tuple(changes)


def build_environment(
    spec: EnvironmentSpec,
    source: Path | None = None,
    *,
    timeout: float = DEFAULT_BUILD_TIMEOUT,
    log_bytes: int = DEFAULT_LOG_BYTES,
    force: bool = False,
    no_cache: bool = False,
    retry: bool = False,
) -> EnvironmentImage:
    """Build `spec`'s layer (or reuse the one already there) and tag it under `environment_tag`.

    Args:
        spec: what the layer holds.
        source: a checkout of the repository's base tree, for requirements files and the install command;
            None when the spec needs neither.
        timeout: seconds the whole `docker build` may take; past it the build is stopped and fails.
        log_bytes: at most this much of the build's output is kept in the log (the rest is counted, not kept).
        force: rebuild even when a layer with the same content is there.
        no_cache: do not reuse the engine's cached build steps either (a truly cold build, for benches).
        retry: build again even when the same layer failed before (`force` retries too); by default a
            remembered failure is raised at once.

    Returns:
        The layer, with the interpreter that stood in for the one asked for, if any, in its notes.

    Raises:
        UnknownInterpreter: `spec.python` is not a Python 3 release.
        EnvironmentBuildError: the interpreter image or the layer could not be built, now or (remembered) in
            an earlier build of the same layer; the message says why (the missing requirement, the timeout,
            the full disk) and where the log is.
    """
    layer = _layer(
        spec, source, timeout=timeout, log_bytes=log_bytes, force=force, no_cache=no_cache, retry=retry
    )
    assert layer is not None  # only `reuse_only` gives None
    return layer


def _layer(
    spec: EnvironmentSpec,
    source: Path | None,
    *,
    timeout: float = DEFAULT_BUILD_TIMEOUT,
    log_bytes: int = DEFAULT_LOG_BYTES,
    force: bool = False,
    no_cache: bool = False,
    retry: bool = False,
    reuse_only: bool = False,
) -> EnvironmentImage | None:
    """`build_environment`; with `reuse_only`, the layer only if it is there and up to date, else None."""
    import docker
    import docker.errors

    choice, spec, planned = plan_layer(spec)
    notes = list(planned)
    if (spec.requirements_files or spec.install) and source is None:
        raise EnvironmentBuildError(
            f"{spec.slug}: the spec installs from the base tree but no tree was given"
        )
    try:
        base = build_interpreter_image(choice.interpreter)
    except ImageBuildError as exc:
        raise EnvironmentBuildError(
            f"{spec.slug}: interpreter image: {exc}",
            _for_model(
                spec, choice, f"the Python {choice.interpreter.version} interpreter could not be set up"
            ),
        ) from exc
    client = docker.from_env()
    base_id = client.images.get(base.tag).id
    started = time.monotonic()
    cache = environments_cache()
    tag = environment_tag(spec, choice)
    with tempfile.TemporaryDirectory(prefix="gagar-env-") as tmp:
        context = Path(tmp)
        requirements, unhonoured = _stage_context(spec, source, context)
        if spec.requirements_files and requirements is None:
            notes.append(
                f"none of the requirements files {', '.join(spec.requirements_files)} is in the tree"
            )
        if unhonoured:
            shown = ", ".join(unhonoured[:3]) + (
                f" and {len(unhonoured) - 3} more" if len(unhonoured) > 3 else ""
            )
            notes.append(f"left out what an offline build cannot honour (unhonoured): {shown}")
        dockerfile = _dockerfile(
            replace(spec, pip_packages=_honoured(spec.pip_packages)), base.tag, requirements
        )
        (context / "Dockerfile").write_text(dockerfile)
        digest = _context_digest(context, base_id, requirements)
        lock = cache / f"{tag.replace('/', '_').replace(':', '_')}.lock"
        with file_lock(lock, waiting=lambda: log.info("another process is building %s: waiting for it", tag)):
            if reuse_only and (force or image_hash(client, tag) != digest):
                return None
            if not force and image_hash(client, tag) == digest:
                return EnvironmentImage(
                    tag,
                    choice,
                    False,
                    time.monotonic() - started,
                    _size(client, tag),
                    None,
                    tuple(notes),
                    tuple(unhonoured),
                    COMPILED_SETUP if spec.install else None,
                )
            failures = FailureMemory(cache)
            remembered = None if force or retry else failures.recall_error(tag, digest)
            if remembered is not None:
                raise remembered
            log_path = cache / "logs" / f"{tag.split(':', 1)[1]}.log"
            temporary = f"{ENVIRONMENT_REPOSITORY}-partial:{spec.slug}-{secrets.token_hex(4)}"
            try:
                failed = docker_build(context, temporary, digest, log_path, timeout, log_bytes, no_cache)
                if failed is None:
                    client.images.get(temporary).tag(*tag.split(":", 1))
            except docker.errors.DockerException as exc:
                raise EnvironmentBuildError(
                    f"{spec.slug}: could not tag the layer: {exc}",
                    _for_model(spec, choice, "the build failed"),
                ) from exc
            finally:
                _remove_tag(client, temporary)
            if failed is not None:
                # Named by the final tag (the temporary one means nothing to a reader), with the date
                # requirements were resolved at when there is one: "not on PyPI" then means "not yet".
                dated = f" [PyPI as of {spec.uploaded_prior_to}]" if spec.uploaded_prior_to else ""
                message = f"{tag.split(':', 1)[1]}: {failed.cause}{dated} (log: {log_path})"
                reason = _for_model(spec, choice, failed.model_cause)
                failures.remember(tag, digest, message, reason)
                raise EnvironmentBuildError(message, reason)
            failures.forget(tag)
    seconds = time.monotonic() - started
    log.info("built %s in %.0f s (log: %s)", tag, seconds, log_path)
    return EnvironmentImage(
        tag,
        choice,
        True,
        seconds,
        _size(client, tag),
        log_path,
        tuple(notes),
        tuple(unhonoured),
        COMPILED_SETUP if spec.install else None,
    )


def _honoured(packages: tuple[str, ...]) -> tuple[str, ...]:
    """The pip requirements an offline build can honour (the others are listed by `_stage_context`)."""
    return tuple(p for p in packages if not unhonourable(p))


def _stage_context(spec: EnvironmentSpec, source: Path | None, context: Path) -> tuple[str | None, list[str]]:
    """Copy the host CA bundle and the source tree into the build context.

    Returns:
        The requirements file used (None when none is there), and the requirement lines left out because an
        offline build cannot honour them (from `spec.pip_packages`, the file and the files it includes; the
        staged copies are rewritten without them).
    """
    if HOST_CA_BUNDLE.exists():
        shutil.copyfile(HOST_CA_BUNDLE, context / "host-ca.crt")
    else:
        (context / "host-ca.crt").write_text("")
    if spec.install:
        shutil.copyfile(Path(__file__).with_name("compiled.py"), context / "gagar-compiled.py")
    src = context / "src"
    if source is not None and (spec.install or spec.requirements_files):
        shutil.copytree(source, src, ignore=shutil.ignore_patterns(".git"), symlinks=True)
    else:
        src.mkdir()
    unhonoured = [f"pip_packages: {p}" for p in spec.pip_packages if unhonourable(p)]
    for candidate in spec.requirements_files:
        if (src / candidate).is_file():
            return candidate, unhonoured + honour(src / candidate, src)
    return None, unhonoured


def _dockerfile(spec: EnvironmentSpec, base: str, requirements: str | None) -> str:
    pip = f"{VENV}/bin/python -m pip install --no-input --progress-bar off"
    lines = [
        f"FROM {base}",
        'SHELL ["/bin/sh", "-euc"]',
        # The host's CA bundle: PyPI is reached through a TLS-intercepting proxy on some networks.
        "COPY host-ca.crt /usr/local/share/gagar-host-ca.crt",
        "ENV PIP_CERT=/usr/local/share/gagar-host-ca.crt DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8",
        "ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=120 PIP_NO_CACHE_DIR=1",
    ]
    if spec.system_packages:
        packages = " ".join(shlex.quote(p) for p in spec.system_packages)
        lines.append(
            "RUN apt-get update && apt-get install -y --no-install-recommends "
            f"{packages} && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb"
        )
    # setuptools-scm in the venv lets each target's setup write its version file (see `tree_setup`).
    tools = "'setuptools<70' wheel 'setuptools-scm<8'"
    if spec.uploaded_prior_to:
        # pip 26 has --uploaded-prior-to; from here on every pip call (the install command's too) uses it.
        lines.append(f"RUN python3 -m venv {VENV} && {pip} -U 'pip>=26,<27'")
        lines.append(f"ENV PIP_UPLOADED_PRIOR_TO={shlex.quote(spec.uploaded_prior_to)}")
        lines.append(f"RUN {pip} -U {tools}")
    else:
        lines.append(f"RUN python3 -m venv {VENV} && {pip} -U 'pip<25' {tools}")
    if spec.pip_packages:
        lines.append(f"RUN {pip} {' '.join(shlex.quote(p) for p in spec.pip_packages)}")
    lines.append("COPY src /opt/gagar-src")
    env_path = f"ENV PATH={VENV}/bin:$PATH VIRTUAL_ENV={VENV}"
    lines.append(env_path)
    for command in spec.build_commands:
        lines.append(f"RUN cd /opt/gagar-src && {command}")
    if requirements:
        lines.append(f"RUN cd /opt/gagar-src && {pip} -r {shlex.quote(requirements)}")
    if spec.install:
        # Not editable: the sandbox's filesystem is read-only and every command has its own copy of the tree.
        install = re.sub(r"(pip install[^&;|]*?)\s(?:-e|--editable)\s", r"\1 ", f"{spec.install} ")
        # The tree comes without .git: setuptools-scm projects (pytest, pylint) get the environment's version.
        scm = f"SETUPTOOLS_SCM_PRETEND_VERSION={shlex.quote(_pep440(spec.version))}"
        lines.append(f"RUN cd /opt/gagar-src && {scm} {install.strip()}")
    lines.append("RUN rm -rf /opt/gagar-src")
    if spec.test_tools:
        # Last, so they never change what the recipe's own pins resolved to (and earlier steps stay cached).
        checks = [
            f"python -c {shlex.quote(f'import {module}')} 2>/dev/null || {pip} {shlex.quote(requirement)}"
            for module, requirement in spec.test_tools
        ]
        lines.append(f"RUN {'; '.join(checks)}")
    if spec.install:
        lines.append(f"COPY gagar-compiled.py {COMPILED_SCRIPT}")
    for name, value in spec.env:
        lines.append(f"ENV {name}={shlex.quote(value)}")
    # The tree a command runs in imports before anything the install left in site-packages.
    lines.append("ENV PYTHONPATH=src:.")
    return "\n".join(lines) + "\n"


def _context_digest(context: Path, base_id: str, requirements: str | None) -> str:
    """The layer's cache key: the interpreter image, the Dockerfile, the CA bundle and the requirements file.

    The staged tree is left out on purpose (see the module docstring): tasks of one environment version differ
    in their base commits, and one layer serves them all, as SWE-bench's environment images do.
    """
    digest = hashlib.sha256(base_id.encode())
    keyed = ["Dockerfile", "host-ca.crt", *([f"src/{requirements}"] if requirements else [])]
    keyed += ["gagar-compiled.py"] if (context / "gagar-compiled.py").exists() else []
    for name in keyed:
        digest.update(name.encode() + b"\0" + (context / name).read_bytes())
    return digest.hexdigest()[:16]


def _for_model(spec: EnvironmentSpec, choice: InterpreterChoice, cause: str) -> str:
    """A build failure in the task's terms (`EnvironmentBuildError.reason`): which environment, and why."""
    return (
        f"the task's environment ({spec.repository} {spec.version}'s dependencies on Python "
        f"{choice.interpreter.version}) could not be built: {cause}"
    )


def _pep440(version: str) -> str:
    """A version setuptools-scm accepts from an environment version such as "5.4" or "0.12"."""
    return version if re.fullmatch(r"\d+(\.\d+)+", version) else "0.0"


def _size(client: object, tag: str) -> int:
    return int(client.images.get(tag).attrs.get("Size") or 0)  # type: ignore[attr-defined]


def _remove_tag(client: object, tag: str) -> None:
    """Drop a temporary tag (the image stays if the final tag points at it too)."""
    import docker.errors

    try:
        client.images.remove(tag, noprune=False)  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.DockerException as exc:
        log.warning("could not remove the temporary tag %s: %s", tag, exc)


__all__ = [
    "EnvironmentImage",
    "FailureMemory",
    "EnvironmentSpec",
    "build_environment",
    "environment_for",
    "environment_tag",
    "environments_cache",
    "not_built_note",
    "open_task_sandbox",
    "plan_layer",
    "spec_for_task",
    "tree_setup",
]


def tree_setup(version: str) -> str:
    """The `setup` that makes a target's tree importable in place of SWE-bench's `pip install -e .`.

    The venv is read-only in the sandbox, so nothing is installed: `setup.py egg_info` writes what an
    editable install would leave in the tree (setuptools-scm's version file, the egg-info with its entry
    points), and a tree without setup.py needs nothing.

    Args:
        version: the environment's version, given to setuptools-scm (the tree has no .git history).

    Returns:
        A shell command to run in the tree.
    """
    scm = f"SETUPTOOLS_SCM_PRETEND_VERSION={shlex.quote(_pep440(version))}"
    return f"if [ -f setup.py ]; then {scm} python setup.py -q egg_info >/dev/null; fi"


def spec_for_task(repository: str, python: str | None, recipe: dict[str, Any] | None) -> EnvironmentSpec:
    """The layer a task needs: its recipe (an `InstallRecipe.to_dict`) on its interpreter, or the bare
    interpreter.

    Args:
        repository: the task's repository (its URL or path; only the last two path parts name the layer).
        python: the task's `python`, which wins over the recipe's.
        recipe: the task's `environment`, or None.

    Returns:
        The spec; a task with no recipe gets an empty layer keyed by its interpreter.
    """
    recipe = recipe or {}
    name = recipe.get("repo") or "/".join(repository.rstrip("/").removesuffix(".git").split("/")[-2:])
    return EnvironmentSpec(
        repository=str(name),
        version=str(recipe.get("version") or "none"),
        python=python or recipe.get("python") or None,
        pip_packages=tuple(recipe.get("pip_packages") or ()),
        system_packages=tuple(recipe.get("system_packages") or ()),
        requirements_files=tuple(recipe.get("requirements_files") or ()),
        build_commands=tuple(recipe.get("build_commands") or ()),
        install=recipe.get("install") or None,
        env=tuple(sorted((recipe.get("env") or {}).items())),
        uploaded_prior_to=recipe.get("resolved_as_of") or None,
    )


def environment_for(trees: Any, spec: EnvironmentSpec, **options: Any) -> EnvironmentImage:
    """Build (or reuse) `spec`'s layer with the "base" tree of `trees` (a `TreeSource`) as its source.

    Whether the layer is there and up to date is found from the tree's requirements files alone (all that
    its cache key reads of the tree), so reusing a layer unpacks no more of the tree than those.

    Args:
        trees: where the base tree comes from (`archive("base")`, a tar).
        spec: the layer.
        **options: passed to `build_environment` (timeout, log_bytes, force).

    Returns:
        The layer.

    Raises:
        UnknownInterpreter, EnvironmentBuildError: as `build_environment`.
    """
    if not (spec.install or spec.requirements_files):
        return build_environment(spec, None, **options)
    with tempfile.TemporaryDirectory(prefix="gagar-env-src-") as tmp:
        try:
            with tarfile.open(fileobj=io.BytesIO(trees.archive("base"))) as archive:
                if not options.get("force"):
                    reused = _reuse(archive, spec, Path(tmp) / "requirements", options)
                    if reused is not None:
                        return reused
                archive.extractall(Path(tmp) / "tree", filter="data")
        except (tarfile.TarError, OSError, KeyError) as exc:
            raise EnvironmentBuildError(
                f"{spec.slug}: could not unpack the base tree: {exc}",
                f"the task's environment ({spec.repository} {spec.version}) could not be built: "
                "the repository's base tree could not be read",
            ) from exc
        return build_environment(spec, Path(tmp) / "tree", **options)


def _reuse(
    archive: tarfile.TarFile, spec: EnvironmentSpec, folder: Path, options: dict[str, Any]
) -> EnvironmentImage | None:
    """`spec`'s layer if it is there and up to date, found with only the tree's requirements files (and
    what they include) unpacked into `folder`; None when it must be built, or when a requirements file is
    anything but a plain file (then the whole tree decides)."""
    members = {m.name.rstrip("/"): m for m in archive.getmembers()}

    def read(name: str) -> bytes | None:
        member = members.get(name)
        if member is None or not member.isfile():
            return None
        return archive.extractfile(member).read()  # type: ignore[union-attr]

    wanted = included_files(read, spec.requirements_files)
    if any(not members[name].isfile() for name in spec.requirements_files if name in members):
        return None
    folder.mkdir()
    archive.extractall(folder, members=[members[name] for name in sorted(wanted)], filter="data")
    return _layer(spec, folder, reuse_only=True, **options)


def open_task_sandbox(view: Any, backend: str = "docker", limits: Any = None) -> Any:
    """Open a sandbox over a group's trees in its task's environment, as a grader's `run` tool does.

    A task's own image wins; otherwise, on docker, its environment layer (built once, then reused) when the
    task names an interpreter or a recipe; otherwise the default image. The sandbox's `environment_note`
    says what the environment could not honour. A layer's own setup (`EnvironmentImage.tree_setup`) runs
    in each target's tree before the task's.

    Args:
        view: the group's `GradingView` (its task, and its trees as a `TreeSource`).
        backend: the sandbox backend.
        limits: the sandbox's `Limits`, or None for the defaults.

    Returns:
        The open `Sandbox`; close it (or use it as a context manager).

    Raises:
        EnvironmentBuildError: the task's environment layer cannot be built.
        SandboxUnavailable: the backend cannot run here.
        SandboxError: the sandbox failed to start.
    """
    from grader.sandbox.base import open_sandbox

    task = view.task
    image, note, setup = task.image, "", task.setup
    if image is None and (task.python or task.environment):
        if backend == "docker":
            layer = environment_for(view, spec_for_task(task.repo, task.python, task.environment))
            image, note = layer.tag, layer.note
            if layer.tree_setup:
                setup = f"{layer.tree_setup}; {setup}" if setup else layer.tree_setup
        else:
            # Only Docker builds layers: say so on every `run` rather than let a probe on the host's
            # interpreter pass for one in the task's environment.
            note = not_built_note(backend, task.python)
    sandbox = open_sandbox(
        view, backend=backend, image=image, setup=setup, test_command=task.test_command, limits=limits
    )
    sandbox.environment_note = note
    return sandbox


def not_built_note(backend: str, python: str | None) -> str:
    """The `run` note of a backend that does not build task environments (every backend but docker).

    Args:
        backend: the sandbox backend's name.
        python: the task's interpreter, if it names one.

    Returns:
        One line naming what is not honoured and what runs instead.
    """
    wanted = f"Python {python} and its" if python else "its"
    return (
        f"the {backend} backend does not build task environments: {wanted} dependencies are not installed; "
        "commands use the host's own interpreters (sandbox='docker' builds the environment)"
    )
