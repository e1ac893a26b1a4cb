"""Verification keeps every patch git applies plainly, with exactly git's resulting tree."""

from __future__ import annotations

import random

from grader.mirrors import MirrorCache
from grader.workspace import open_workspace
from tests.conftest import run_git


def test_a_blank_line_deleted_and_readded_is_kept(make_repo, mirrors: MirrorCache) -> None:
    repo = make_repo({"f.txt": "a\nx\n\nb\n"})
    # The patch removes x and the blank line and adds y and a blank line; git's diff of the result pairs the
    # two blank lines as context, so it removes one line and adds one.
    patch = "--- a/f.txt\n+++ b/f.txt\n@@ -1,4 +1,4 @@\n a\n-x\n-\n+y\n+\n b\n"
    group = repo.group({"p": (patch, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        c = ws.candidates["p"]
        assert c.error is None and c.commit is not None
        assert run_git(ws.git_dir, "show", f"{c.commit}:f.txt") == "a\ny\n\nb\n"


def test_seeded_random_plain_patches_keep_gits_tree(make_repo, mirrors: MirrorCache, tmp_path) -> None:
    rng = random.Random(11)
    vocabulary = ["", "    ", "x", "y  ", "pass", "}", "return 1"]
    lines = [rng.choice(vocabulary) + "\n" for _ in range(60)]
    repo = make_repo({"f.txt": "".join(lines)})
    trajectories = {}
    expected = {}
    for i in range(40):
        edited = lines.copy()
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(edited))
            if rng.random() < 0.5:
                del edited[at]
            else:
                edited.insert(at, rng.choice(vocabulary) + "\n")
        trajectories[f"t{i}"] = (repo.patch({"f.txt": "".join(edited)}), True)
        expected[f"t{i}"] = "".join(edited)
    group = repo.group(trajectories)
    with open_workspace(group, mirrors=mirrors) as ws:
        for tid, text in expected.items():
            c = ws.candidates[tid]
            assert c.error is None, (tid, c.error)
            if text != "".join(lines):
                assert run_git(ws.git_dir, "show", f"{c.commit}:f.txt") == text
