"""Building the sandbox images from `workspace_images/`, with or without a reachable registry.

Online, each Dockerfile builds on its default `BASE_IMAGE` from the registry. Offline (or when the pull
fails), the bases are made from Debian packages: `debootstrap` into a folder, `docker import` as
`gagar/debian-base:<suite>` (minbase) and `gagar/debian-python:<suite>` (with python3, pytest and git),
and the Dockerfiles are built on those with the build's network off. Every image carries a content-hash
label and is skipped when an image with the same label is already there.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grader.errors import ImageBuildError
from grader.sandbox.interpreters import Interpreter
from grader.util.cachedirs import machine_cache
from grader.util.filelock import file_lock

log = logging.getLogger(__name__)

MINIMAL_IMAGE = "gagar/minimal:latest"
HASH_LABEL = "gagar.content-hash"
IMAGES_DIR = Path(__file__).resolve().parents[2] / "workspace_images"

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SUITE = "bookworm"
PYTHON_PACKAGES = ("python3", "python3-pytest", "python3-pip", "python3-setuptools", "git", "ca-certificates")
# An interpreter image is where task environments are built: a venv, a C toolchain for sdists that compile.
INTERPRETER_PACKAGES = (
    "python3", "python3-dev", "python3-venv", "python3-pip", "gcc", "g++", "make", "patch", "git",
    "ca-certificates",
)  # fmt: skip
INTERPRETER_REPOSITORY = "gagar/interpreter"


@dataclass(frozen=True)
class _Spec:
    name: str  # directory under workspace_images/ and image repository gagar/<name>
    online_base: str
    offline_base: str  # which debootstrapped base: "base" or "python"


_SPECS = (
    _Spec("python", "python:3.11-slim-bookworm", "python"),
    _Spec("minimal", "debian:bookworm-slim", "base"),
)


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    content_hash: str
    built: bool  # False when an identical image was already there
    seconds: float


def build_images(
    offline: bool | None = None,
    names: tuple[str, ...] = ("python", "minimal"),
    mirror: str | None = None,
    suite: str | None = None,
    cache_dir: Path | None = None,
    force: bool = False,
    install_debootstrap: bool = True,
) -> list[BuiltImage]:
    """Build the sandbox images (tags `gagar/<name>:latest`), skipping those already up to date.

    `offline=None` tries to pull each online base and falls back to the debootstrapped one when that fails;
    True never touches a registry; False fails rather than fall back. `mirror` and `suite` default to the
    first Debian entry in /etc/apt/sources.list*. Debootstrap needs root and the `debootstrap` package
    (installed with apt-get when missing, unless `install_debootstrap` is False); downloaded packages are
    cached in `cache_dir`. Concurrent callers (threads or processes) wait for one build.
    Raises `ImageBuildError` (no engine, an unknown name, debootstrap missing or failing, a failed build).
    """
    import docker
    import docker.errors

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise ImageBuildError(f"no Docker engine reachable: {exc}") from exc
    specs = [s for s in _SPECS if s.name in names]
    unknown = set(names) - {s.name for s in _SPECS}
    if unknown:
        raise ImageBuildError(f"unknown image(s): {', '.join(sorted(unknown))}")
    found_mirror, found_suite = apt_mirror()
    mirror, suite = mirror or found_mirror, suite or found_suite
    cache = _cache_root(cache_dir)
    # Two sessions building at once would both debootstrap the same bases: the second waits, then finds
    # them up to date.
    with file_lock(
        cache / "images.lock",
        waiting=lambda: log.info("another process is building the sandbox images: waiting for it"),
    ):
        return _build_images(client, specs, offline, mirror, suite, cache, force, install_debootstrap)


def _build_images(
    client: object,
    specs: list[_Spec],
    offline: bool | None,
    mirror: str,
    suite: str,
    cache: Path,
    force: bool,
    install_debootstrap: bool,
) -> list[BuiltImage]:
    bases: dict[str, str] = {}
    for spec in specs:
        if offline is not True and _present(client, spec.online_base):
            bases[spec.name] = spec.online_base
        elif offline is None and not force and _present(client, _offline_tag(spec.offline_base, suite)):
            continue  # built offline before: no registry to ask again (and no network traffic to make)
        elif offline is not True and _pull(client, spec.online_base):
            bases[spec.name] = spec.online_base
        elif offline is False:
            raise ImageBuildError(f"could not pull {spec.online_base} and offline=False")
    missing = {s.offline_base for s in specs if s.name not in bases}
    if missing:
        made = _debootstrap_bases(client, sorted(missing), mirror, suite, cache, force, install_debootstrap)
        for spec in specs:
            bases.setdefault(spec.name, made[spec.offline_base])

    built = []
    for spec in specs:
        built.append(
            _build_one(
                client, spec, bases[spec.name], offline=spec.online_base != bases[spec.name], force=force
            )
        )
    return built


def _offline_tag(kind: str, suite: str) -> str:
    """The tag of a debootstrapped base: "python" (with python3, git, pytest) or "base"."""
    return f"gagar/debian-python:{suite}" if kind == "python" else f"gagar/debian-base:{suite}"


def _present(client: object, image: str) -> bool:
    import docker.errors

    try:
        client.images.get(image)  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:
        return False
    return True


def apt_mirror() -> tuple[str, str]:
    """(mirror URL, suite) of the first Debian archive in the apt sources, or the defaults."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for uri, suite in _sources(text):
            if re.search(r"/debian/?$", uri) and "security" not in suite and "-" not in suite:
                return uri.rstrip("/"), suite
    return DEFAULT_MIRROR, DEFAULT_SUITE


def _sources(text: str) -> list[tuple[str, str]]:
    found = []
    for line in text.splitlines():
        m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
        if m:
            found.append((m.group(1), m.group(2)))
    for stanza in re.split(r"\n\s*\n", text):
        fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, flags=re.M))
        if "deb" in fields.get("Types", "").split() and fields.get("URIs") and fields.get("Suites"):
            found.append((fields["URIs"].split()[0], fields["Suites"].split()[0]))
    return found


def _pull(client: object, ref: str) -> bool:
    import docker.errors

    try:
        client.images.get(ref)  # type: ignore[attr-defined]
        return True
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(ref)  # type: ignore[attr-defined]
        return True
    except docker.errors.DockerException as exc:
        log.info("cannot pull %s (%s); using a debootstrapped base", ref, str(exc).splitlines()[0])
        return False


def image_hash(client: object, tag: str) -> str | None:
    """The content hash (`HASH_LABEL`) an image gagar built carries, or None when there is no such image."""
    import docker.errors

    try:
        image = client.images.get(tag)  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:
        return None
    return (image.labels or {}).get(HASH_LABEL)


def _debootstrap_bases(
    client: object, kinds: list[str], mirror: str, suite: str, cache: Path, force: bool, install: bool
) -> dict[str, str]:
    jobs = {}
    for kind in kinds:
        include = PYTHON_PACKAGES if kind == "python" else ()
        tag = _offline_tag(kind, suite)
        digest = hashlib.sha256(repr(("minbase", suite, mirror, include)).encode()).hexdigest()[:16]
        if not force and image_hash(client, tag) == digest:
            log.debug("%s is up to date", tag)
            continue
        jobs[kind] = (tag, digest, include)
    if jobs:
        _ensure_debootstrap(install)
        cache.mkdir(parents=True, exist_ok=True)
        # Mostly waiting on downloads and dpkg: two at once is faster even on two cores.
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            futures = [
                pool.submit(_debootstrap_import, client, tag, digest, include, mirror, suite, cache)
                for tag, digest, include in jobs.values()
            ]
            for f in futures:
                f.result()
    return {kind: _offline_tag(kind, suite) for kind in kinds}


def _ensure_debootstrap(install: bool = True) -> None:
    """Make sure `debootstrap` is on PATH: installed with apt-get when missing, if `install` and root.

    Raises `ImageBuildError` naming the Debian package when it is missing and cannot or may not be installed.
    """
    if shutil.which("debootstrap"):
        return
    if not install:
        raise ImageBuildError("debootstrap is not installed (Debian package: apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap is missing and we are not root: apt-get install debootstrap")
    log.info("installing debootstrap with apt-get")
    for argv in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "debootstrap"],
    ):
        done = subprocess.run(
            argv, capture_output=True, text=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        )
        if done.returncode != 0:
            raise ImageBuildError(f"{' '.join(argv)} failed: {done.stderr[-2000:]}")


def _debootstrap_import(
    client: object,
    tag: str,
    digest: str,
    include: tuple[str, ...],
    mirror: str,
    suite: str,
    cache: Path,
    keep_apt: bool = False,
) -> None:
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap needs root to build an offline base image")
    started = time.monotonic()
    log.info("debootstrapping %s from %s %s (minutes: downloads and dpkg)", tag, mirror, suite)
    with tempfile.TemporaryDirectory(prefix="gagar-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        # Each run gets its own package cache: concurrent debootstraps would fight over a shared one.
        own_cache = cache / tag.replace("/", "_").replace(":", "_")
        own_cache.mkdir(parents=True, exist_ok=True)
        argv = ["debootstrap", "--variant=minbase", f"--cache-dir={own_cache}"]
        if include:
            argv.append(f"--include={','.join(include)}")
        argv += [suite, str(rootfs), mirror]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageBuildError(f"debootstrap failed for {tag}: {(done.stdout + done.stderr)[-3000:]}")
        # Not needed in a sandbox and large: apt lists and caches, docs.
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        if keep_apt:  # apt-get wants these folders back (its lists are fetched again by `apt-get update`)
            for folder in ("var/cache/apt/archives/partial", "var/lib/apt/lists/partial"):
                (rootfs / folder).mkdir(parents=True, exist_ok=True)
        repo, _, version = tag.partition(":")
        tar = subprocess.Popen(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE
        )
        try:
            client.api.import_image_from_stream(  # type: ignore[attr-defined]
                tar.stdout,
                repository=repo,
                tag=version,
                changes=[f"LABEL {HASH_LABEL}={digest}", "ENV LANG=C.UTF-8", 'CMD ["/bin/sh"]'],
            )
        finally:
            tar.wait()
        if tar.returncode != 0:
            raise ImageBuildError(f"tar of the {tag} rootfs failed")
    log.info("built %s from %s %s in %.0f s", tag, mirror, suite, time.monotonic() - started)


def _build_one(client: object, spec: _Spec, base: str, *, offline: bool, force: bool) -> BuiltImage:
    import docker.errors

    started = time.monotonic()
    tag = f"gagar/{spec.name}:latest"
    context = IMAGES_DIR / spec.name
    dockerfile = (context / "Dockerfile").read_bytes()
    base_id = client.images.get(base).id  # type: ignore[attr-defined]
    digest = hashlib.sha256(dockerfile + b"\0" + base_id.encode()).hexdigest()[:16]
    if not force and image_hash(client, tag) == digest:
        return BuiltImage(tag, digest, built=False, seconds=time.monotonic() - started)
    log.info("building %s on %s", tag, base)
    try:
        client.images.build(  # type: ignore[attr-defined]
            path=str(context),
            tag=tag,
            buildargs={"BASE_IMAGE": base},
            labels={HASH_LABEL: digest},
            pull=False,
            rm=True,
            forcerm=True,
            network_mode="none" if offline else None,
        )
    except docker.errors.BuildError as exc:
        lines = "".join(str(c.get("stream", c.get("error", ""))) for c in exc.build_log)
        raise ImageBuildError(f"building {tag} failed: {exc}\n{lines[-3000:]}") from exc
    except docker.errors.DockerException as exc:
        raise ImageBuildError(f"building {tag} failed: {exc}") from exc
    return BuiltImage(tag, digest, built=True, seconds=time.monotonic() - started)


def interpreter_tag(interpreter: Interpreter) -> str:
    """The tag of the interpreter image for `interpreter`, e.g. `gagar/interpreter:3.9-bullseye`."""
    return f"{INTERPRETER_REPOSITORY}:{interpreter.version}-{interpreter.suite}"


def build_interpreter_image(
    interpreter: Interpreter,
    mirror: str | None = None,
    cache_dir: Path | None = None,
    force: bool = False,
    install_debootstrap: bool = True,
) -> BuiltImage:
    """Debootstrap Debian `interpreter.suite` with its python3 and a C toolchain into `interpreter_tag`.

    No registry is involved: packages come from `mirror` (default: the apt sources' Debian mirror). Skipped
    when the image is there with the same content hash; concurrent callers (threads or processes) wait for
    one build. `debootstrap` is installed with apt-get when missing unless `install_debootstrap` is False.
    Raises `ImageBuildError` (no engine, not root, debootstrap missing or failed).
    """
    import docker
    import docker.errors

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise ImageBuildError(f"no Docker engine reachable: {exc}") from exc
    mirror = mirror or apt_mirror()[0]
    cache = _cache_root(cache_dir)
    tag = interpreter_tag(interpreter)
    digest = hashlib.sha256(
        repr(("minbase", interpreter.suite, mirror, INTERPRETER_PACKAGES)).encode()
    ).hexdigest()[:16]
    started = time.monotonic()
    lock = cache / f"{tag.replace('/', '_').replace(':', '_')}.lock"
    with file_lock(lock, waiting=lambda: log.info("another process is building %s: waiting for it", tag)):
        if not force and image_hash(client, tag) == digest:
            return BuiltImage(tag, digest, built=False, seconds=time.monotonic() - started)
        _ensure_debootstrap(install_debootstrap)
        _debootstrap_import(
            client, tag, digest, INTERPRETER_PACKAGES, mirror, interpreter.suite, cache, keep_apt=True
        )
    return BuiltImage(tag, digest, built=True, seconds=time.monotonic() - started)


def _cache_root(cache_dir: Path | None) -> Path:
    root = cache_dir or machine_cache() / "debootstrap"
    root.mkdir(parents=True, exist_ok=True)
    return root
