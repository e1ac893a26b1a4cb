"""The import graph of `grader`: the arrows that climb a floor, and the cycles.

Reads the AST of every module under grader/ (no import is executed) and places each module on its floor in
the table of docs/architecture.md ("Floors"). An arrow from a lower floor to a higher one climbs; a cycle is
a set of modules importing each other, around a circle. Imports at module level, inside functions ("lazy")
and under `if TYPE_CHECKING:` ("typing") are all arrows (tests/support/import_graph.py says why).
tests/test_import_floors.py fails on any of them; this script prints them all, with their lines.

    python bench/import_graph.py [ROOT]        # ROOT defaults to this checkout; its docs/architecture.md

Prints the modules the table and the source disagree on, the climbing arrows, the cycles per kind of import
counted, and the counts.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.import_graph import (  # noqa: E402
    KINDS,
    climbing,
    cycles,
    import_arrows,
    label,
    misplaced,
    read_floors,
    source_files,
)


def main(root: Path) -> None:
    modules = set(source_files(root))
    arrows = import_arrows(root)
    floors = read_floors(root / "docs" / "architecture.md")
    names = {m: f.name for f in floors for m in f.modules}
    floor_name = lambda m: names.get(label(m), "no floor")  # noqa: E731
    print(f"{len(modules)} modules, {len(arrows)} names imported from another module, {len(floors)} floors")
    for problem in misplaced(floors, modules):
        print("floor table:", problem)
    up = climbing(arrows, floors)
    print("climbing arrows: " + ", ".join(f"{sum(a.kind == k for a in up)} {k}" for k in KINDS))
    for a in sorted(up, key=lambda a: (KINDS.index(a.kind), a.source, a.target)):
        print(
            f"  {a.kind:<6} {label(a.source)}:{a.line} ({floor_name(a.source)}) -> "
            f"{label(a.target)} ({floor_name(a.target)})"
        )
    for counted in (KINDS[:1], KINDS[:2], KINDS):
        found = cycles([a for a in arrows if a.kind in counted])
        print(f"cycles through {' + '.join(counted)} imports: {len(found)}")
        for component in found:
            print("  " + " <-> ".join(label(m) for m in component))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
