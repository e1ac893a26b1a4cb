"""Running git safely: one place that decides git's environment and configuration for all of gagar.

Patches and repositories come from trajectories and users; nothing they contain may make git run a hook, a
filter, an fsmonitor or a remote helper, or read the user's own configuration. Values from files gagar did not
write are checked (`grader.util.untrusted`) before they reach an argument list, and go after `--` or
`--end-of-options` where the command takes options (docs/security.md has the audit of every call).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
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
    # Only git's own transports: a URL of `TRANSPORT::ADDRESS` would run a remote helper program.
    "protocol.allow=never",
    "protocol.https.allow=always",
    "protocol.http.allow=always",
    "protocol.ssh.allow=always",
    "protocol.git.allow=always",
    "protocol.file.allow=always",
    "advice.detachedHead=false",
)


def git_identity(
    name: str = "gagar", email: str = "gagar@localhost", date: str | None = None
) -> dict[str, str]:
    """The environment variables that give git an author and a committer, and with `date` fixed timestamps.

    Every commit gagar makes (workspace branches, sandbox set-up, the example, the tests) takes its identity
    from here: git refuses to commit without one, and a uid with no passwd entry (the sandboxes) has none.

    Args:
        name: author and committer name.
        email: author and committer email.
        date: a git date (e.g. "2024-01-01T00:00:00+0000") for both timestamps, so commits are reproducible.

    Returns:
        A new dict of GIT_AUTHOR_* and GIT_COMMITTER_* variables.
    """
    env = {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }
    if date is not None:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return env


_base_env: tuple[frozenset[tuple[bytes, bytes]], dict[str, str]] | None = None


def safe_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment git runs with: no system or global config, no prompts, a stable locale.

    Args:
        extra: variables set on top (e.g. GIT_INDEX_FILE).

    Returns:
        A new dict.
    """
    global _base_env
    # Decoding os.environ costs ~0.3 ms, more than a tenth of a git process: done again only when it changed.
    current = frozenset(os.environb.items())
    if _base_env is None or _base_env[0] != current:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CONFIG_GLOBAL=os.devnull,
            GIT_ATTR_NOSYSTEM="1",
            GIT_TERMINAL_PROMPT="0",
            LC_ALL="C",
            **git_identity(),
        )
        _base_env = (current, env)
    env = dict(_base_env[1])
    if extra:
        env.update(extra)
    return env


def _command(args: Sequence[str], git_dir: Path | str | None) -> list[str]:
    command = ["git"]
    for item in SAFE_CONFIG:
        command += ["-c", item]
    if git_dir is not None:
        command.append(f"--git-dir={git_dir}")
    return command + list(args)


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
    proc = subprocess.run(
        _command(args, git_dir),
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


@contextmanager
def git_stream(
    args: Sequence[str], cwd: Path | str | None = None, git_dir: Path | str | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Run one git command whose stdout is read as it comes (a large blob hashed in chunks), with the same
    configuration and environment as `git`.

    The caller reads `process.stdout`; on leaving, a process still running is killed (a reader that stopped
    early wants no more) and waited for. Its stderr goes to a pipe read after exit: keep commands whose
    errors are short.

    Args:
        args: git's arguments.
        cwd: the folder to run in.
        git_dir: the repository (`--git-dir`).

    Yields:
        The running process.
    """
    proc = subprocess.Popen(
        _command(args, git_dir),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=safe_env(),
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
