"""Git objects read and written in process: trees, packs of new objects, and a memo of the base's files.

A workspace build used to start two git processes per distinct patch (`apply --cached`, `write-tree`). The
objects those leave are simple: a blob is its content, a tree a sorted list of "MODE NAME\\0<20-byte id>"
entries, each named by the SHA-1 of "KIND SIZE\\0BODY". Here a build's new objects are hashed in memory and
written as one pack; reading the base side costs one `git cat-file --batch` per build, and nothing once a base
file is in `base_files` (a base tree's content never changes: the memo never goes stale). Only SHA-1
repositories are handled; callers fall back to git for SHA-256 ones.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from grader.workspace.gitcmd import git

TREE_MODE = "40000"
FILE_MODES = ("100644", "100755")
"""The modes of regular files: what an exact in-process apply may create or change."""
BASE_FILES_MEMO_BYTES = 64 * 1024 * 1024
"""Most bytes of base trees and files kept in memory per process."""
_OID = re.compile(rb"[0-9a-f]{40}")


@dataclass(frozen=True)
class Entry:
    """One entry of a tree: its mode as git writes it ("100644", "40000", ...) and its object id."""

    mode: str
    oid: str

    @property
    def is_tree(self) -> bool:
        return self.mode == TREE_MODE


def hash_object(kind: str, body: bytes) -> str:
    """The SHA-1 id git gives an object of `kind` ("blob", "tree", "commit") holding `body`."""
    return hashlib.sha1(f"{kind} {len(body)}\0".encode() + body).hexdigest()


_PACK_TYPES = {"commit": 1, "tree": 2, "blob": 3}


class ObjectBuffer:
    """New objects kept in memory, then written to the repository as one pack (`flush`).

    A build makes a few dozen objects (a blob and the trees above it per patch, a commit per trajectory);
    as loose objects that is a file and often a directory each. One pack and its index are two files.
    Thread-safe: the patches of a build are applied on several threads.
    """

    def __init__(self) -> None:
        self._objects: dict[str, tuple[str, bytes]] = {}
        self._lock = threading.Lock()

    def add(self, kind: str, body: bytes) -> str:
        """Keep an object ("blob", "tree" or "commit") for the next `flush`; returns its id."""
        sha = hash_object(kind, body)
        with self._lock:
            self._objects.setdefault(sha, (kind, body))
        return sha

    def flush(self, objects_dir: Path) -> None:
        """Write what was added since the last flush as one pack (and its index) under `objects_dir`/pack.

        Raises:
            OSError: when the pack cannot be written.
        """
        with self._lock:
            objects, self._objects = self._objects, {}
        if objects:
            write_pack(objects_dir, objects)


def write_pack(objects_dir: Path, objects: dict[str, tuple[str, bytes]]) -> Path:
    """Store `objects` (id -> (kind, body)) as an undeltified version 2 pack and its version 2 index, the
    way `git index-pack` would lay them out.

    The pack appears before its index, each whole (written aside, then renamed), so git never sees an index
    without its pack.

    Args:
        objects_dir: the repository's `objects` directory.
        objects: the objects, keyed by their ids (`hash_object`).

    Returns:
        The pack's path.

    Raises:
        OSError: when a file cannot be written.
        ValueError: when the pack would pass 2 GiB (an index with 64-bit offsets is not written here).
    """
    pack = bytearray(b"PACK" + struct.pack(">II", 2, len(objects)))
    entries: list[tuple[bytes, int, int]] = []  # (raw id, crc32, offset)
    for sha, (kind, body) in objects.items():
        size, header = len(body), bytearray()
        byte = (_PACK_TYPES[kind] << 4) | (size & 0x0F)
        size >>= 4
        while size:
            header.append(byte | 0x80)
            byte, size = size & 0x7F, size >> 7
        header.append(byte)
        entry = bytes(header) + zlib.compress(body, 1)
        entries.append((bytes.fromhex(sha), zlib.crc32(entry), len(pack)))
        pack += entry
    if len(pack) >= 1 << 31:
        raise ValueError("a pack of 2 GiB or more needs 64-bit index offsets")
    checksum = hashlib.sha1(pack).digest()
    pack += checksum
    entries.sort()
    fanout = [0] * 256
    for raw, _, _ in entries:
        fanout[raw[0]] += 1
    for i in range(1, 256):
        fanout[i] += fanout[i - 1]
    index = bytearray(b"\xfftOc" + struct.pack(">I", 2) + struct.pack(">256I", *fanout))
    index += b"".join(raw for raw, _, _ in entries)
    index += struct.pack(f">{len(entries)}I", *(crc for _, crc, _ in entries))
    index += struct.pack(f">{len(entries)}I", *(offset for _, _, offset in entries))
    index += checksum
    index += hashlib.sha1(index).digest()
    folder = objects_dir / "pack"
    folder.mkdir(exist_ok=True)
    name = f"pack-{checksum.hex()}"
    for suffix, data in ((".pack", pack), (".idx", index)):
        tmp = folder / f"tmp-{name}{suffix}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_bytes(data)
        os.replace(tmp, folder / f"{name}{suffix}")
    return folder / f"{name}.pack"


def parse_tree(body: bytes) -> dict[str, Entry]:
    """The entries of a raw tree object, by name (names decoded as UTF-8 with surrogateescape).

    Raises:
        ValueError: when `body` is not a well-formed SHA-1 tree.
    """
    entries: dict[str, Entry] = {}
    at = 0
    while at < len(body):
        space = body.index(b" ", at)
        nul = body.index(b"\0", space)
        if nul + 21 > len(body):
            raise ValueError("truncated tree entry")
        name = body[space + 1 : nul].decode("utf-8", "surrogateescape")
        entries[name] = Entry(body[at:space].decode("ascii"), body[nul + 1 : nul + 21].hex())
        at = nul + 21
    return entries


def _sort_key(item: tuple[str, Entry]) -> bytes:
    # git orders a tree's entries by name bytes, a subtree's name compared as if it ended in "/".
    name, entry = item
    raw = name.encode("utf-8", "surrogateescape")
    return raw + b"/" if entry.is_tree else raw


def serialize_tree(entries: dict[str, Entry]) -> bytes:
    """The raw tree object of `entries`, in git's order (the same bytes `git write-tree` makes)."""
    return b"".join(
        f"{entry.mode} ".encode() + name.encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(entry.oid)
        for name, entry in sorted(entries.items(), key=_sort_key)
    )


@dataclass(frozen=True)
class BaseObject:
    """What `tree:path` names in a base tree: its kind ("blob", "tree", ...), id and content."""

    kind: str
    oid: str
    body: bytes


class BaseFiles:
    """Per-process memo of base trees and files, keyed by (root tree id, path): immutable, so never stale.

    Thread-safe; bounded by `max_bytes` (least recently used out first).
    """

    def __init__(self, max_bytes: int = BASE_FILES_MEMO_BYTES) -> None:
        self.max_bytes = max_bytes
        self._memo: OrderedDict[tuple[str, str], BaseObject | None] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def read(self, git_dir: Path, tree: str, paths: list[str]) -> dict[str, BaseObject | None]:
        """The objects at `paths` ("" is the root tree itself) under `tree`, None where nothing is there.

        What the memo lacks is read in one `git cat-file --batch` process.

        Args:
            git_dir: a repository that has the tree's objects (directly or through alternates).
            tree: the full id of the root tree.
            paths: repository paths, without a leading or trailing "/" (bytes that are not UTF-8 held as
                surrogateescape text).

        Returns:
            path -> object (None for a path that does not exist).

        Raises:
            GitError: when git cannot run.
            ValueError: when git's answer cannot be read, or a path holds a lone surrogate (no bytes at all).
        """
        found: dict[str, BaseObject | None] = {}
        with self._lock:
            for path in paths:
                if (tree, path) in self._memo:
                    found[path] = self._memo[(tree, path)]
                    self._memo.move_to_end((tree, path))
        missing = [p for p in dict.fromkeys(paths) if p not in found]
        if not missing:
            return found
        # Paths are bytes to git: a name that is not UTF-8 arrives here as surrogateescape text.
        specs = "".join(f"{tree}:{path}\n" if path else f"{tree}\n" for path in missing)
        try:
            raw_specs = specs.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise ValueError(f"a path that is no text git can be given: {exc}") from None
        data = git(["cat-file", "--batch"], git_dir=git_dir, input=raw_specs).stdout
        at = 0
        read: dict[str, BaseObject | None] = {}
        for path in missing:
            end = data.index(b"\n", at)
            header = data[at:end].split(b" ")
            # An object's line is "<id> <kind> <size>"; anything else ("<spec> missing", "<spec> ambiguous",
            # where the spec itself may hold spaces) means nothing is at that path.
            if len(header) != 3 or not _OID.fullmatch(header[0]) or not header[2].isdigit():
                read[path], at = None, end + 1
                continue
            size = int(header[2])
            read[path] = BaseObject(header[1].decode(), header[0].decode(), data[end + 1 : end + 1 + size])
            at = end + 1 + size + 1
        with self._lock:
            for path, obj in read.items():
                self._memo[(tree, path)] = obj
                self._bytes += len(obj.body) if obj else 0
            while self._bytes > self.max_bytes and self._memo:
                _, dropped = self._memo.popitem(last=False)
                self._bytes -= len(dropped.body) if dropped else 0
        return found | read


base_files = BaseFiles()
"""The process's memo; every workspace shares it."""


__all__ = [
    "BaseFiles",
    "BaseObject",
    "Entry",
    "ObjectBuffer",
    "FILE_MODES",
    "TREE_MODE",
    "base_files",
    "hash_object",
    "parse_tree",
    "serialize_tree",
    "write_pack",
]
