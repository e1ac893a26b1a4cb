"""Sandbox pieces that need no engine: output caps, limits, archive bundling, apt sources, CLI parsing."""

from __future__ import annotations

import argparse
import io
import tarfile
from pathlib import Path

import pytest

from grader.sandbox import Limits, SandboxError
from grader.sandbox.images import _sources
from grader.sandbox.output import CappedBuffer


def test_capped_buffer_keeps_everything_under_the_cap() -> None:
    buf = CappedBuffer(10)
    for piece in (b"abc", b"defg", b"hij"):
        buf.feed(piece)
    assert buf.text() == "abcdefghij" and not buf.truncated


def test_capped_buffer_keeps_head_and_tail_and_counts_the_cut() -> None:
    buf = CappedBuffer(10)
    for _ in range(1000):
        buf.feed(b"0123456789")
    buf.feed(b"END")
    assert buf.truncated and buf.cut == 10_003 - 10
    assert buf.text() == "01234\n[... 9,993 bytes cut ...]\n89END"


def test_capped_buffer_decodes_with_replacement() -> None:
    buf = CappedBuffer(100)
    buf.feed("é".encode()[:1] + b"ok")
    assert buf.text() == "\ufffdok"


def test_limits_reject_nonsense() -> None:
    with pytest.raises(ValueError):
        Limits(memory_bytes=0)
    with pytest.raises(ValueError):
        Limits(timeout=-1)
    assert Limits().timeout == 120.0


def _tar(*members: tuple[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.SYMTYPE, target
            tar.addfile(link)
    return buf.getvalue()


def test_bundle_prefixes_every_tree_and_refuses_escapes() -> None:
    pytest.importorskip("docker")
    from grader.sandbox.bundle import bundle

    made = bundle({"base": _tar(("a.txt", b"x")), "A": _tar(("d/b.txt", b"y"))}, {})
    data, names = made.data, made.names
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        listed = tar.getnames()
    assert f"{names['base']}/a.txt" in listed and f"{names['A']}/d/b.txt" in listed
    assert names["base"] != names["A"]
    for bad in ("../evil", "/etc/passwd", "a/../../evil"):
        with pytest.raises(SandboxError, match="unsafe"):
            bundle({"base": _tar((bad, b"x"))}, {})


def test_bundle_holds_a_file_the_trees_share_once(tmp_path: Path) -> None:
    pytest.importorskip("docker")
    from grader.sandbox.bundle import bundle

    big = b"shared\n" * 10_000
    base = _tar(("same.py", big), ("changed.py", b"old\n"))
    candidate = _tar(("same.py", big), ("changed.py", b"new\n"), ("added.py", b"added\n"))
    made = bundle({"base": base, "A": candidate, "B": candidate}, {})
    data, names = made.data, made.names
    assert len(data) < len(base) + 3 * 10_240  # the big file once, the rest headers and small files
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        links = {name: m.linkname for name, m in members.items() if m.islnk()}
        assert links == {
            f"{names['A']}/same.py": f"{names['base']}/same.py",
            f"{names['B']}/same.py": f"{names['base']}/same.py",
            f"{names['B']}/changed.py": f"{names['A']}/changed.py",
            f"{names['B']}/added.py": f"{names['A']}/added.py",
        }
        tar.extractall(tmp_path, filter="fully_trusted")
    for target, changed in (("base", b"old\n"), ("A", b"new\n"), ("B", b"new\n")):
        tree = tmp_path / names[target]
        assert (tree / "same.py").read_bytes() == big and (tree / "changed.py").read_bytes() == changed
    assert not (tmp_path / names["base"] / "added.py").exists()


def test_bundle_refuses_an_archive_that_brings_its_own_links() -> None:
    # The bundle makes hard links itself; one from a tree could point into another target's tree or out.
    pytest.importorskip("docker")
    from grader.sandbox.bundle import bundle

    for kind, target in (
        (tarfile.LNKTYPE, "../../etc/passwd"),
        (tarfile.LNKTYPE, "a.txt"),
        (tarfile.FIFOTYPE, ""),
    ):
        link = tarfile.TarInfo("evil")
        link.type, link.linkname = kind, target
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.addfile(link)
        with pytest.raises(SandboxError, match="unsupported member 'evil'"):
            bundle({"base": _tar(("a.txt", b"x")), "A": buf.getvalue()}, {})


def test_bundle_does_not_link_a_file_whose_mode_differs() -> None:
    pytest.importorskip("docker")
    from grader.sandbox.bundle import bundle

    plain, executable = _tar(("run.sh", b"echo hi\n")), _tar(("run.sh", b"echo hi\n"))
    with tarfile.open(fileobj=io.BytesIO(executable)) as tar:
        member = tar.getmembers()[0]
    member.mode = 0o755
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.addfile(member, io.BytesIO(b"echo hi\n"))
    made = bundle({"base": plain, "A": buf.getvalue()}, {})
    data = made.data
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert not any(m.islnk() for m in tar.getmembers())


def test_apt_sources_are_read_in_both_formats() -> None:
    one_line = "deb [arch=amd64] http://mirror.example/debian bookworm main\n"
    deb822 = "Types: deb\nURIs: http://deb.example/debian\nSuites: trixie trixie-updates\nComponents: main\n"
    assert _sources(one_line) == [("http://mirror.example/debian", "bookworm")]
    assert _sources(deb822) == [("http://deb.example/debian", "trixie")]


def test_cli_takes_options_after_the_target() -> None:
    from grader.sandbox.cli import _split_rest, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["sandbox", "exec", "g.json", "A", "--backend", "local", "--timeout", "3", "--", "ls", "-la"]
    )
    assert _split_rest(args) == ["ls", "-la"]
    assert (args.backend, args.timeout, args.target) == ("local", 3.0, "A")
    assert parser.parse_args(["images", "build", "--no-offline"]).offline is False
    assert parser.parse_args(["sandbox", "cleanup", "--all"]).all is True


def test_owner_labels_tell_a_dead_owner_from_a_live_one() -> None:
    import subprocess
    import sys

    from grader.sandbox.leftovers import LABEL_BOOT, LABEL_HOST, LABEL_START, owner_alive, owner_labels

    mine = owner_labels()
    assert owner_alive(mine)
    assert not owner_alive({**mine, LABEL_START: str(int(mine[LABEL_START]) + 1)})  # the pid was reused
    assert owner_alive({**mine, LABEL_HOST: "another-host"})  # cannot tell: the lifetime bounds it
    assert owner_alive({**mine, LABEL_BOOT: "another-boot"})
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not owner_alive({**mine, "gagar.pid": str(child.pid)})  # gone


def test_limits_lifetime_must_outlast_a_command() -> None:
    with pytest.raises(ValueError, match="lifetime"):
        Limits(timeout=60, lifetime=30)
    assert Limits().lifetime > Limits().command_bound


def test_every_pythonpath_entry_becomes_absolute_inside_the_tree() -> None:
    from grader.sandbox.base import absolute_pythonpath

    assert absolute_pythonpath("/b/t", "src:.") == "/b/t:/b/t/src"  # a task environment's
    assert absolute_pythonpath("/b/t", "/opt/x::./lib/") == "/b/t:/opt/x:/b/t/lib"
    assert absolute_pythonpath("/b/t", None) == "/b/t"


def test_slots_fit_the_cpu_quota_in_the_cores_and_never_exceed_the_targets(monkeypatch) -> None:
    pytest.importorskip("docker")
    import os

    from grader.sandbox.docker import default_slots

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert default_slots(Limits(cpus=1.0), 11) == 8
    assert default_slots(Limits(cpus=2.0), 11) == 4
    assert default_slots(Limits(cpus=1.0), 3) == 3
    assert default_slots(Limits(cpus=16.0), 11) == 1


def test_a_candidate_given_by_its_changes_is_bundled_as_those_only() -> None:
    pytest.importorskip("docker")
    from grader.sandbox.bundle import bundle
    from grader.workspace.archives import TreeChanges

    base = _tar(("same.txt", b"x" * 50_000), ("old.txt", b"old\n"))
    change = TreeChanges(("old.txt", "new.txt"), _tar(("new.txt", b"new\n")))
    # Slot 2 of a sandbox: no base target, so base's tree comes along under a name no target has.
    made = bundle({}, {"A": change}, base)
    assert len(made.data) < 2 * 50_000 and made.manifest  # the shared file once: in base's tree only
    with tarfile.open(fileobj=io.BytesIO(made.data)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    (line,) = files[made.manifest].decode().splitlines()
    tree, from_tree, changes, changed, removed = line.split()
    assert tree == made.names["A"] and made.trees == [from_tree, tree]
    assert from_tree not in made.names.values()
    assert files[f"{from_tree}/same.txt"] == b"x" * 50_000
    assert files[changed] == b"old.txt\0new.txt\0" and files[removed] == b"old.txt\0"
    with tarfile.open(fileobj=io.BytesIO(files[changes])) as tar:
        assert tar.getnames() == ["new.txt"]
    with pytest.raises(SandboxError, match="need base's tree"):
        bundle({}, {"A": change})


@pytest.mark.parametrize(
    ("paths", "files", "refused"),
    [
        (("../evil",), (), "unsafe path '../evil'"),
        (("/etc/passwd",), (), "unsafe path"),
        (("new.txt",), (("../new.txt", b"x"),), "unsafe member"),
        (("out/passwd",), (), "through a symlink"),
        (("out",), (("out/x", b"x"),), None),  # the symlink is changed itself: removed first, then a folder
        (("new.txt",), (("out/x", b"x"),), "through a symlink"),
    ],
)
def test_changes_that_climb_out_or_reach_through_a_symlink_of_base_are_refused(paths, files, refused) -> None:
    pytest.importorskip("docker")
    from grader.sandbox.bundle import bundle
    from grader.workspace.archives import TreeChanges

    base = _tar(("a.txt", b"a"), symlinks={"out": "/etc"})
    change = TreeChanges(paths, _tar(*files))
    if refused is None:
        assert bundle({"base": base}, {"A": change}).manifest
        return
    with pytest.raises(SandboxError, match=refused):
        bundle({"base": base}, {"A": change})
