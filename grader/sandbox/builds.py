"""One environment layer's `docker build`: bounded, logged, its failure worded twice, and remembered.

`docker_build` runs the build under a time limit with its output capped into a log on the host. When it fails,
the cause is read off the tail of the output and worded twice (`EnvironmentBuildError`): for people, with the
layer's tag, the date PyPI was resolved at and the log's path; for a model grading the task (`reason`), in
the task's terms only (what is unavailable and why), with no host path, tag or cache detail, since the
model can do nothing with them. `FailureMemory` keeps both parts of a failed build, so the next task of the
same layer fails at once with the same words.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from grader.errors import EnvironmentBuildError
from grader.sandbox.images import HASH_LABEL

log = logging.getLogger(__name__)

# Proxy settings the host's pip would use: the layer's pip must go the same way to reach PyPI.
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
# How much of the output's tail the cause is read from.
_TAIL_LINES = 60


@dataclass(frozen=True)
class BuildFailure:
    """Why a build failed, from its output: `cause` for people, `model_cause` in the task's terms."""

    cause: str
    """One line, with the failing step's command where the engine printed one."""
    model_cause: str
    """The same without the step's command, container paths or pip's bookkeeping."""


def docker_build(
    context: Path, tag: str, digest: str, log_path: Path, timeout: float, log_bytes: int, no_cache: bool
) -> BuildFailure | None:
    """`docker build` of `context` as `tag`, under `timeout`, its output capped into `log_path`.

    Args:
        context: the build context (with its Dockerfile).
        tag: the tag to build (a temporary one: the caller renames it on success).
        digest: the layer's cache key, set as the image's `HASH_LABEL`.
        log_path: where the output goes (overwritten).
        timeout: seconds the build may take; past it the build is killed and fails.
        log_bytes: at most this much output is kept in the log (the rest is counted).
        no_cache: do not reuse the engine's cached build steps.

    Returns:
        None when the build succeeded, else why it failed.
    """
    # --force-rm: the engine keeps a failed step's container otherwise (one per failed build, forever).
    argv = ["docker", "build", "--force-rm", "--network=host", "--label", f"{HASH_LABEL}={digest}", "-t", tag]
    argv += ["--no-cache"] if no_cache else []
    for name in _PROXY_VARS:
        if os.environ.get(name):
            argv += ["--build-arg", f"{name}={os.environ[name]}"]
    argv.append(str(context))
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    started = time.monotonic()
    tail: list[str] = []
    written = dropped = 0
    with open(log_path, "w", encoding="utf-8", errors="replace") as out:
        out.write(f"$ {shlex.join(argv)}\n")
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env
        )
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail = (tail + [line])[-_TAIL_LINES:]
                if written + len(line) <= log_bytes:
                    out.write(line)
                    written += len(line)
                else:
                    dropped += len(line)
            proc.wait()
        finally:
            timer.cancel()
        if dropped:
            out.write(f"\n[gagar: {dropped} more bytes of output not kept]\n")
    if proc.returncode == 0:
        return None
    timed_out = time.monotonic() - started >= timeout
    return failure_of("".join(tail), timed_out, timeout)


def failure_of(text: str, timed_out: bool, timeout: float) -> BuildFailure:
    """Why a build failed, from the tail of its output.

    Args:
        text: the last lines of the build's output.
        timed_out: the build was killed at its time limit.
        timeout: that limit, in seconds.

    Returns:
        The cause, worded for people and for a model.
    """
    if timed_out:
        cause = f"the build took longer than {timeout:g} s and was stopped"
        return BuildFailure(cause, cause)
    patterns = (
        (
            r"No matching distribution found for (\S+)",
            "requirement {} is not on PyPI for this Python",
            "requirement {} cannot be installed on this Python",
        ),
        (
            r"Could not find a version that satisfies the requirement (\S+)",
            "no version of {} fits",
            "no version of requirement {} fits this Python",
        ),
        (
            r"Failed to build '?([A-Za-z0-9_.\-]+)'? when getting requirements to build wheel",
            "requirement {} does not build from source",
            "requirement {} does not build from source",
        ),
        (
            r"Unable to locate package (\S+)",
            "Debian package {} is not on the mirror",
            "system package {} is not available",
        ),
        (r"(No space left on device)", "the disk is full ({})", "the machine's disk is full"),
    )
    clean = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [line.strip() for line in clean.splitlines() if line.strip()]
    # A Python exception says more than the step's exit code that follows it, and more than pip's summary.
    raised = [line for line in lines if re.match(r"[A-Z]\w*(Error|Exception): ", line)]
    step = [line for line in lines if "returned a non-zero code" in line]
    for pattern, message, model in patterns:
        m = re.search(pattern, clean)
        if m:
            if raised and "does not build" in message:
                # The build's own exception is the cause (e.g. an old setup.py importing a removed name).
                why = _without_paths(raised[-1])
                return BuildFailure(
                    f"{message.format(m.group(1))}: {why}", f"{model.format(m.group(1))}: {why}"
                )
            return BuildFailure(message.format(m.group(1)), model.format(m.group(1)))
    errors = [line for line in lines if re.search(r"error", line, re.I)]
    picked = (raised or step or errors or lines or ["docker build failed without output"])[-1][:400]
    cause = f"{picked} [{step[-1][:200]}]" if raised and step else picked
    if raised:
        model_cause = f"installing its dependencies failed: {_without_paths(raised[-1])}"
    elif step:
        code = re.search(r"non-zero code: (\d+)", step[-1])
        model_cause = f"a build step failed (exit {code.group(1) if code else '?'})"
    else:
        model_cause = "the build failed"
    return BuildFailure(cause, model_cause)


def _without_paths(line: str) -> str:
    """`line` without parenthesised file paths (`(/tmp/pip-build-env-.../__init__.py)`), at most 300 chars."""
    return re.sub(r"\s*\((?:/|[A-Za-z]:\\)[^()]*\)", "", line).strip()[:300]


class FailureMemory:
    """Failed layer builds: one JSON file per final tag under `<cache>/failures/`, keyed by the digest.

    A record only answers for the digest it was written for: a changed recipe is a new layer and builds.
    """

    def __init__(self, cache: Path) -> None:
        self.root = cache / "failures"

    def _path(self, tag: str) -> Path:
        return self.root / f"{tag.replace('/', '_').replace(':', '_')}.json"

    def recall_error(self, tag: str, digest: str) -> EnvironmentBuildError | None:
        """The remembered failure of `tag` at `digest`, as the error to raise, or None.

        Args:
            tag: the layer's final tag.
            digest: the layer's current cache key.

        Returns:
            The error: its message names the earlier reason, when it failed and how to retry; its `reason`
            is the model's wording of the earlier failure. None when there is no record for this digest.
        """
        try:
            record = json.loads(self._path(tag).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("digest") != digest:
            return None
        message = (
            f"{record.get('reason', 'failed')} [remembered from the build at {record.get('at', '?')}; "
            "retry with `gagar env build --retry` or build_environment(..., retry=True)]"
        )
        model_reason = record.get("model_reason")
        return EnvironmentBuildError(message, model_reason if isinstance(model_reason, str) else None)

    def recall(self, tag: str, digest: str) -> str | None:
        """The remembered failure's message (see `recall_error`), or None."""
        error = self.recall_error(tag, digest)
        return None if error is None else str(error)

    def remember(self, tag: str, digest: str, reason: str, model_reason: str | None = None) -> None:
        """Record that `tag` failed at `digest` (written atomically; never raises).

        Args:
            tag: the layer's final tag.
            digest: the layer's cache key.
            reason: the build's error message.
            model_reason: the same failure in the task's terms (`EnvironmentBuildError.reason`).
        """
        record = {
            "tag": tag,
            "digest": digest,
            "reason": reason,
            "model_reason": model_reason or reason,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            partial = self._path(tag).with_suffix(f".{secrets.token_hex(4)}.tmp")
            partial.write_text(json.dumps(record), encoding="utf-8")
            partial.replace(self._path(tag))
        except OSError as exc:
            log.warning("could not remember the failed build of %s: %s", tag, exc)

    def forget(self, tag: str) -> None:
        """Drop `tag`'s record (after a successful build).

        Args:
            tag: the layer's final tag.
        """
        self._path(tag).unlink(missing_ok=True)


__all__ = ["BuildFailure", "FailureMemory", "docker_build", "failure_of"]
