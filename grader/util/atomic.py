"""Files replaced whole or not at all: every output gagar writes goes through here.

A file is written to a temporary file in the same folder, flushed to disk (fsync), renamed over the target
and the folder synced, so an interrupted writer (a full disk, a kill, a power cut) leaves either the previous
complete file or the new complete one, never an emptied or cut one. The temporary file is hidden
(`.NAME.<random>.tmp`) and removed when the write fails; only a killed process leaves one behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO


def _umask() -> int:
    # Linux shows the umask in /proc; elsewhere os.umask can only be read by setting it (and setting it
    # back), which a thread creating a file at that instant could notice: done once, at import.
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


DEFAULT_MODE = 0o666 & ~_umask()
"""The permissions `open(path, "w")` gives a new file; `replacing` gives the same."""


def _sync_folder(folder: Path) -> None:
    # The rename lives in the folder's entries: without this a power cut can bring back the old name.
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # a platform or file system that cannot open folders: the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: Path | str, mode: int | None = None) -> Iterator[IO[str]]:
    """A UTF-8 text handle whose content replaces `path` when the block ends without an exception.

    Args:
        path: the file to replace (its folder must exist).
        mode: the new file's permissions (default: what `open(path, "w")` would give, e.g. 0o644).

    Yields:
        The handle to write to. Until the block ends, `path` keeps its previous content.

    Raises:
        OSError: the temporary file cannot be created, written, synced or renamed (the target is untouched
            and the temporary file removed); its message names the target. Any exception raised inside the
            block also leaves the target untouched and propagates.
    """
    target = Path(path)
    try:
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:100]}.", suffix=".tmp")
    except OSError as exc:
        raise OSError(exc.errno, _naming(exc, target)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, DEFAULT_MODE if mode is None else mode)
        os.replace(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError) and exc.filename is None:
            raise OSError(exc.errno, _naming(exc, target)) from None
        raise
    _sync_folder(target.parent)


# What `replacing` names its temporaries: mkstemp's 8 random characters between the target's name and ".tmp".
_TEMPORARY = re.compile(r"\..+\.[A-Za-z0-9_]{8}\.tmp")


def remove_leftover_temporaries(folder: Path | str) -> list[Path]:
    """Remove the hidden temporaries that killed writers left in `folder` and below; return them.

    Only `replacing`'s own names (`.NAME.<8 random characters>.tmp`) are touched. Call it only while holding
    the folder's exclusive lock (a run's `.lock`): a live writer's temporary would otherwise be removed from
    under it, and its rename would then fail.

    Args:
        folder: the folder to sweep (a missing one holds nothing).

    Returns:
        The removed files, sorted.

    Raises:
        OSError: a temporary exists but cannot be removed (its path named).
    """
    removed = []
    for path in sorted(Path(folder).rglob(".*.tmp")):
        if path.is_file() and not path.is_symlink() and _TEMPORARY.fullmatch(path.name):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _naming(exc: OSError, target: Path) -> str:
    # A failed write says "File too large" or "No space left on device" without saying which file.
    return f"{exc.strerror or exc} (writing {target}; its previous content is kept)"


def write_text_atomic(path: Path | str, text: str, mode: int | None = None) -> None:
    """Replace `path` with `text`, atomically.

    Args:
        path: the file to replace (its folder must exist).
        text: the new content, written as UTF-8 (a lone surrogate raises UnicodeEncodeError, the target
            untouched).
        mode: the new file's permissions (default: what `open(path, "w")` would give).

    Raises:
        OSError: as `replacing` raises it, naming `path`; its previous content is kept.
    """
    with replacing(path, mode) as handle:
        handle.write(text)


def write_lines_atomic(path: Path | str, lines: Iterable[str]) -> int:
    """Replace `path` with `lines`, each followed by a newline, atomically.

    Args:
        path: the file to replace (its folder must exist).
        lines: the lines, without their newlines; consumed while writing, so a generator is never held whole
            in memory.

    Returns:
        How many lines were written.

    Raises:
        OSError: as `replacing` raises it, naming `path`; its previous content is kept. An exception that
            `lines` raises propagates and leaves `path` as it was too.
    """
    count = 0
    with replacing(path) as handle:
        for line in lines:
            handle.write(line + "\n")
            count += 1
    return count
