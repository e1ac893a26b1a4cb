"""The in-process applier never disagrees with git: a seeded differential fuzz on a real repository.

Real `git diff` patches of random edits (contexts 0 to 5, odd names, a CRLF file, a file without its final
newline, creations and deletions) and patches made here (overlapping hunks, hunks out of order,
deletions), each mutated by every class in `tests.support.applier_fuzz_support.MUTATIONS` and applied also to
base trees with modes git no longer writes. The applier may decline anything; whatever tree it makes must be
git's (`git apply --cached` + `git write-tree`). bench/exactapply_fuzz.py runs the same on a real history.
"""

from __future__ import annotations

import random
from pathlib import Path

from tests.conftest import run_git
from tests.support.applier_fuzz_support import (
    MUTATIONS,
    Oracle,
    Tally,
    mutants,
    odd_base,
    random_edits,
    synthetic_files,
    synthetic_patches,
    touched_paths,
)

PATCHES = 24
MUTANTS_PER_PATCH = 6


def test_seeded_mutated_patches_never_make_a_tree_git_does_not(make_repo, tmp_path: Path) -> None:
    rng = random.Random(25)
    files = synthetic_files(rng)
    repo = make_repo(files)
    base_tree = run_git(repo.path, "rev-parse", "HEAD^{tree}").strip()
    oracle = Oracle(repo.path / ".git" / "objects", tmp_path / "fuzz")
    tally = Tally()
    made_here = synthetic_patches(rng, files)
    for n in range(PATCHES):
        real = repo.patch(random_edits(rng, files), context=rng.choice([0, 1, 3, 3, 5]))
        for kind, patch in mutants(rng, real, MUTANTS_PER_PATCH, start=n * MUTANTS_PER_PATCH):
            tally.add(kind, oracle, base_tree, patch)
        synthetic = next(made_here)
        tally.add("synthetic", oracle, base_tree, synthetic)
        for kind, patch in list(mutants(rng, synthetic, 2))[1:]:
            tally.add(kind, oracle, base_tree, patch)
        odd = odd_base(rng, oracle.git_dir, base_tree, touched_paths(real))
        if odd is not None:
            tally.add("odd-base", oracle, odd, real)
    print(tally.table())
    assert not tally.divergences, "\n".join(tally.divergences)
    assert set(MUTATIONS) <= set(tally.cases)  # every class was tried
    # Not vacuous: the applier takes git's own output, and git applies some mutants of most classes.
    assert tally.taken["none"] >= PATCHES // 2
    assert tally.taken["odd-base"] == 0 < tally.cases["odd-base"]
    assert sum(1 for kind in tally.cases if tally.git_applied[kind]) >= len(MUTATIONS) // 2
