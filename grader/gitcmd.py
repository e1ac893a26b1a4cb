"""Running git safely: one place that decides git's environment and configuration for all of gagar.

Patches and repositories come from trajectories and users; nothing they contain may make git run a hook, a
filter, an fsmonitor or a remote helper, or read the user's own configuration.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from grader.errors import GitError

# Fixed identity and date: a branch's commit id then depends only on its tree, so runs are reproducible.
COMMIT_IDENTITY = "gagar <gagar@localhost>"
COMMIT_EPOCH = "946684800 +0000"

SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "gc.auto=0",
    "protocol.ext.allow=never",
    "advice.detachedHead=false",
)


def safe_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment git runs with: no system or global config, no prompts, a stable locale."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_ATTR_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME="gagar",
        GIT_AUTHOR_EMAIL="gagar@localhost",
        GIT_COMMITTER_NAME="gagar",
        GIT_COMMITTER_EMAIL="gagar@localhost",
        LC_ALL="C",
    )
    if extra:
        env.update(extra)
    return env


def git(
    args: Sequence[str],
    cwd: Path | str | None = None,
    git_dir: Path | str | None = None,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run one git command and return its completed process (stdout and stderr as bytes).

    Raises GitError when git exits non-zero and `check` is set.
    """
    command = ["git"]
    for item in SAFE_CONFIG:
        command += ["-c", item]
    if git_dir is not None:
        command.append(f"--git-dir={git_dir}")
    command += list(args)
    proc = subprocess.run(
        command,
        cwd=cwd,
        input=input,
        capture_output=True,
        env=safe_env(env),
        stdin=None if input is not None else subprocess.DEVNULL,
    )
    if check and proc.returncode != 0:
        raise GitError(list(args), proc.returncode, proc.stderr.decode("utf-8", "replace"))
    return proc


def out(args: Sequence[str], **kwargs) -> str:
    """Run git and return its stdout as text, stripped."""
    return git(args, **kwargs).stdout.decode("utf-8", "replace").strip()
