"""The run folder of `gagar distill`: its lock, its secret, one record per (group, sample), and `run.json`.

Everything here is read back by a later run, so everything read is checked: a damaged secret, record or
`run.json` (cut, not UTF-8, not JSON, nested past the reader, lacking what the outputs are built from) is
moved aside to `NAME.damaged-<time>` (`move_aside`), named to the caller, and made again; nothing read from
the folder raises past these functions except as their docstrings say.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from grader.errors import DistillError
from grader.util.atomic import write_text_atomic
from grader.util.jsontext import loads
from grader.util.safenames import safe_name

log = logging.getLogger("grader.distill.run")

__all__ = [
    "check_resume",
    "move_aside",
    "prepare_out",
    "read_record",
    "read_secret",
    "record_path",
    "record_problem",
    "run_lock",
]


@contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """Hold the run folder's lock (`out/.lock`) while the block runs.

    Raises:
        DistillError: another distillation run holds it.
    """
    with open(out / ".lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DistillError(f"{out}: another distillation run is writing here") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare_out(out: Path, notify: Callable[[str], None] | None = None) -> str:
    """Make the output folder and read (or create) the run's secret; fails before any teacher call.

    Args:
        out: the output folder.
        notify: told when the secret is damaged and replaced (see `read_secret`; default: a log warning).

    Returns:
        The run's secret (`out/secret`, created with fresh randomness on the first run; put one there to
        reproduce another run's labels and markers).

    Raises:
        DistillError: the folder cannot be created or written, or another run is writing in it.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "records").mkdir(exist_ok=True)
        probe = out / f".probe-{os.getpid()}"
        probe.write_text("ok", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise DistillError(f"{out}: cannot write the output folder: {exc.strerror or exc}") from None
    # Under the run's lock: two runs started together would each make a secret, and one would grade under
    # the secret the other's write replaced.
    with run_lock(out):
        return read_secret(out, notify)


def read_secret(out: Path, notify: Callable[[str], None] | None = None) -> str:
    """The run's secret from `out/secret`, made with fresh randomness when there is none.

    A secret that is not UTF-8 text or is empty (a cut write, a stray binary file) is moved aside to
    `secret.damaged-<time>` and replaced by a fresh one; `notify` is told (records made under the old
    secret keep their labels; only new samples use the new one).

    Args:
        out: the output folder (it exists).
        notify: told when the secret is damaged and replaced (default: a log warning).

    Returns:
        The secret, without surrounding white space.

    Raises:
        DistillError: the file cannot be read, moved aside or written.
    """
    notify = notify or log.warning
    path = out / "secret"
    try:
        if path.exists():
            try:
                secret = path.read_bytes().decode("utf-8").strip()
            except UnicodeDecodeError:
                secret = ""
            if secret:
                return secret
            moved = move_aside(path)
            notify(
                f"{path} is damaged (empty or not UTF-8 text): moved to {moved.name}; a new secret is made"
            )
        secret = secrets.token_hex(16)
        write_text_atomic(path, secret + "\n", mode=0o600)
        return secret
    except OSError as exc:
        raise DistillError(f"{path}: cannot read or write the run's secret: {exc.strerror or exc}") from None


def move_aside(path: Path) -> Path:
    """Rename a damaged file to `NAME.damaged-<UTC time>` (a counter added when taken), in its folder; the
    file is kept for a person to look at, never read again. The caller holds the run's lock: two writers
    moving files aside in the same second could otherwise pick the same name.

    Args:
        path: the damaged file.

    Returns:
        Its new path.

    Raises:
        OSError: the file cannot be renamed.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target, n = path.with_name(f"{path.name}.damaged-{stamp}"), 1
    while target.exists():
        target, n = path.with_name(f"{path.name}.damaged-{stamp}-{n}"), n + 1
    os.replace(path, target)
    return target


def record_problem(record: Any, group_id: str, sample: int) -> str | None:
    """Why a record read back cannot be used: what `assemble` reads must be there, of its type.

    Args:
        record: the record file's JSON value.
        group_id, sample: what the record's path says it records.

    Returns:
        The problem in words, or None when the record can be used.
    """
    if not isinstance(record, dict):
        return f"not a JSON object but {type(record).__name__}"
    if record.get("group_id") != group_id or record.get("sample") != sample:
        return (
            f"records {record.get('group_id')!r} sample {record.get('sample')!r}, not {group_id!r} {sample}"
        )
    if record.get("status") not in ("kept", "dropped"):
        return f"status {record.get('status')!r} is neither kept nor dropped"
    for key in ("category", "reason"):
        if not isinstance(record.get(key), str):
            return f"{key!r} is missing or not a string"
    usage = record.get("usage", {})
    if not isinstance(usage, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in usage.values()
    ):
        return "'usage' is not an object of numbers"
    if record["status"] == "kept":
        if not isinstance(record.get("messages"), list) or not isinstance(record.get("shown"), list):
            return "a kept record without its 'messages' and 'shown' lists"
        contrast = record.get("contrast") or []
        if not isinstance(contrast, list) or not all(isinstance(c, list) and len(c) == 2 for c in contrast):
            return "'contrast' is not a list of pairs"
    return None


def read_record(path: Path, group_id: str, sample: int) -> tuple[dict[str, Any] | None, str]:
    """The record at `path`, checked by `record_problem`.

    Args:
        path: the record's file (`record_path`).
        group_id, sample: what it should record.

    Returns:
        (record, "") for a usable record; (None, "") when there is no file; (None, why) when it is damaged
        (not UTF-8, not JSON, nested past the JSON reader, or missing what `assemble` reads).

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, ""
    record, problem = _json_of(data)
    if problem:
        return None, problem
    problem = record_problem(record, group_id, sample)
    return (None, problem) if problem else (record, "")


def _json_of(data: bytes) -> tuple[Any, str]:
    """The JSON value of a file's bytes, or None and why it has none (never an exception)."""
    try:
        return loads(data.decode("utf-8")), ""
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except ValueError as exc:
        return None, f"not JSON ({exc})"


def record_path(out: Path, group_id: str, sample: int) -> Path:
    """Where the record of (group, sample) lives."""
    return out / "records" / safe_name(group_id) / f"{sample}.json"


def check_resume(out: Path, header: dict[str, Any], notify: Callable[[str], None] | None = None) -> None:
    """Refuse to continue a run whose teacher, prompts, tools, reference or settings were different.

    Args:
        out: the output folder.
        header: this run's manifest header.
        notify: told when `run.json` is damaged (it is moved aside and written again; default: a log
            warning).

    Raises:
        DistillError: `out/run.json` records another run; the message names what differs.
        OSError: `run.json` cannot be read, moved or written.
    """
    path = out / "run.json"
    identity = {k: header[k] for k in ("format", "fingerprints", "settings")}
    # The teacher by model and fingerprint, not by address: a resumed run may reach it on another port.
    identity["teacher"] = {k: v for k, v in header["teacher"].items() if k != "base_url"}
    notify = notify or log.warning
    before: Any = None
    if path.exists():
        before, problem = _json_of(path.read_bytes())
        if not problem and not isinstance(before, dict):
            problem = f"not a JSON object but {type(before).__name__}"
        if problem:
            moved = move_aside(path)
            notify(
                f"{path} is damaged ({problem}): moved to {moved.name}; the records already made cannot "
                "be checked against this run's settings, and are kept"
            )
            before = None
    if before is not None:
        differs = sorted(k for k in identity if before.get(k) != identity[k])
        if differs:
            raise DistillError(
                f"{out} holds a run with other {', '.join(differs)}; use a new folder (or the same options)"
            )
        return
    write_text_atomic(path, json.dumps(identity, indent=2, sort_keys=True) + "\n")
