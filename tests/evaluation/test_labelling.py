"""benchmarks/tools/labelling.py: the drawn pairs, the blind view and the agreement of two labellers."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from grader.errors import InvalidReference
from grader.evaluation.benchmark import load_benchmark
from grader.evaluation.prepare import SourceLocator, prepare, resolve_bench
from grader.evaluation.recipe import load_recipe
from tests.conftest import REPO_ROOT
from tests.support.recipe_sources import sources  # noqa: F401 (the fixture: a tiny recipe and its git sources)

spec = importlib.util.spec_from_file_location("labelling", REPO_ROOT / "benchmarks/tools/labelling.py")
assert spec is not None and spec.loader is not None
labelling = importlib.util.module_from_spec(spec)
sys.modules["labelling"] = labelling  # dataclasses look their module up there
spec.loader.exec_module(labelling)

RECIPE = REPO_ROOT / "benchmarks/swebench-lite"


def write_jsonl(path: Path, items: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(item) + "\n" for item in items))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_draw_is_seeded_and_the_committed_pairs_are_pairs_it_can_draw(tmp_path: Path) -> None:
    drawn = labelling.draw_pairs(RECIPE)
    assert labelling.draw_pairs(RECIPE) == drawn
    labelling.write_pairs(drawn, tmp_path / "pairs.jsonl")
    assert labelling.read_pairs(tmp_path / "pairs.jsonl") == {p.id: p for p in drawn}
    other = labelling.draw_pairs(RECIPE, seed=27)
    assert [(p.instance, p.a, p.b) for p in other] != [(p.instance, p.a, p.b) for p in drawn]
    # The committed file is frozen once labelling starts (a probe added later changes the draw): each of
    # its pairs is still a pair of representatives of two code classes of an available instance. The draw
    # predates the recipe's split: a pair's instance may since be in swebench-lite-large.
    preference = {
        item["instance"]: item
        for recipe in (RECIPE, RECIPE.with_name("swebench-lite-large"))
        for item in read_jsonl(recipe / "preference.jsonl")
    }
    committed = labelling.read_pairs(RECIPE / "labelling/pairs.jsonl")
    assert len(committed) == 132
    for pair in committed.values():
        item = preference[pair.instance]
        representatives = {min(runs) for runs in item["same_code"]}
        assert item["repository"] in labelling.AVAILABLE_REPOSITORIES
        assert pair.a != pair.b and {pair.a, pair.b} <= representatives


def test_pairs_refuses_to_renumber_an_existing_draw(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe"
    for name in ("recipe.json", "instances.jsonl", "candidates.jsonl", "split.json", "preference.jsonl"):
        (recipe / name).parent.mkdir(parents=True, exist_ok=True)
        (recipe / name).write_bytes((RECIPE / name).read_bytes())
    assert labelling.main(["--recipe", str(recipe), "pairs"]) == 0
    written = (recipe / "labelling/pairs.jsonl").read_text()
    assert labelling.main(["--recipe", str(recipe), "pairs"]) == 0  # the same draw: fine
    assert labelling.main(["--recipe", str(recipe), "pairs", "--seed", "1"]) == 2
    assert (recipe / "labelling/pairs.jsonl").read_text() == written
    assert labelling.main(["--recipe", str(recipe), "pairs", "--seed", "1", "--force"]) == 0
    assert (recipe / "labelling/pairs.jsonl").read_text() != written


def test_drawn_pairs_are_between_code_classes_capped_and_skip_probed_pairs() -> None:
    drawn = labelling.draw_pairs(RECIPE, per_instance=4)
    assert len(drawn) > 0 and [p.id for p in drawn] == [f"p{i:03d}" for i in range(1, len(drawn) + 1)]
    preference = {item["instance"]: item for item in read_jsonl(RECIPE / "preference.jsonl")}
    probed = {
        (r["group_id"], frozenset((r["better"], r["worse"])))
        for r in read_jsonl(RECIPE / "references.jsonl")
        if r["category"] in ("correctness", "behaviour")
    }
    per_instance: dict[str, int] = {}
    for p in drawn:
        assert p.repository in labelling.AVAILABLE_REPOSITORIES
        classes = [sorted(c) for c in preference[p.instance]["same_code"]]
        first, second = (next(c for c in classes if run in c) for run in (p.a, p.b))
        assert first != second and p.a == first[0] and p.b == second[0]
        assert not any((p.instance, frozenset((x, y))) in probed for x in first for y in second)
        per_instance[p.instance] = per_instance.get(p.instance, 0) + 1
    assert max(per_instance.values()) == 4
    # both orientations occur: the side shown as A is drawn, not the first class
    assert any(p.a > p.b for p in drawn) and any(p.a < p.b for p in drawn)


def labelled_case(root: Path) -> None:
    """Six pairs of one group; labeller a labels all, b all but the last."""
    (root / "recipe.json").write_text(json.dumps({"name": "case"}))
    pairs = [
        {"pair": f"p{i}", "instance": "g", "repository": "o/n", "split": "test", "A": a, "B": b}
        for i, (a, b) in enumerate([("r1", "r2"), ("r3", "r4"), ("r5", "r6"), ("r7", "r8"), ("r9", "r10")], 1)
    ]
    pairs.append({"pair": "p6", "instance": "h", "repository": "o/n", "split": "dev", "A": "x", "B": "y"})
    write_jsonl(root / "labelling/pairs.jsonl", pairs)
    write_jsonl(
        root / "labelling/labeller-a.jsonl",
        [
            {"pair": "p1", "verdict": "A", "category": "hygiene", "reason": "B leaves a debug script."},
            {"pair": "p2", "verdict": "B", "category": "scope", "reason": "A edits an unrelated module"},
            {"pair": "p3", "verdict": "A", "category": "design", "reason": "one"},
            {"pair": "p4", "verdict": "A", "category": "hygiene", "reason": "two"},
            {"pair": "p5", "verdict": "none", "category": None, "reason": "same in effect"},
            {"pair": "p6", "verdict": "A", "category": "tests", "reason": "only a labelled"},
        ],
    )
    write_jsonl(
        root / "labelling/labeller-b.jsonl",
        [
            {"pair": "p1", "verdict": "A", "category": "hygiene", "reason": "B adds a stray file"},
            {"pair": "p2", "verdict": "B", "category": "scope", "reason": "A changes more than asked"},
            {"pair": "p3", "verdict": "B", "category": "design", "reason": "three"},
            {"pair": "p4", "verdict": "A", "category": "design", "reason": "four"},
            {"pair": "p5", "verdict": "none", "category": "scope", "reason": "neither"},
        ],
    )
    write_jsonl(
        root / "references.jsonl",
        [{"group_id": "g", "better": "q1", "worse": "q2", "category": "behaviour", "reason": "a probe"}],
    )


def test_agree_reports_agreement_and_keeps_only_agreed_pairs(tmp_path: Path) -> None:
    labelled_case(tmp_path)
    report = labelling.agree(tmp_path)
    assert report["labelled"] == {"labeller_a": 6, "labeller_b": 5, "both": 5}
    assert report["same_verdict"] == 4 and report["raw_agreement"] == 0.8
    # a: A3 B1 none1, b: A2 B2 none1 -> chance (6 + 2 + 1) / 25 = 0.36; (0.8 - 0.36) / 0.64
    assert report["cohen_kappa"] == 0.6875
    assert report["opposite_sides"] == 1 and report["same_side_other_category"] == 1
    assert report["both_none"] == 1 and report["kept"] == 2
    assert report["per_category"]["hygiene"] == {"labeller_a": 2, "labeller_b": 1, "both": 1, "kept": 1}
    assert json.loads((tmp_path / "labelling/agreement.json").read_text()) == report
    references = read_jsonl(tmp_path / "references.jsonl")
    assert [(r["better"], r["worse"], r["category"]) for r in references] == [
        ("q1", "q2", "behaviour"),
        ("r1", "r2", "hygiene"),
        ("r4", "r3", "scope"),
    ]
    assert references[1]["reason"] == "B leaves a debug script; B adds a stray file"
    labels = read_jsonl(tmp_path / "labels.jsonl")
    assert len(labels) == 10 and {label["labeller"] for label in labels} == {"labeller-a", "labeller-b"}
    assert {(label["a"], label["verdict"]) for label in labels if label["labeller"] == "labeller-b"} == {
        ("r1", "a"),
        ("r3", "b"),
        ("r5", "b"),
        ("r7", "a"),
        ("r9", "tie"),
    }
    assert set(json.loads((tmp_path / "recipe.json").read_text())["labellers"]) == {
        "labeller-a",
        "labeller-b",
    }
    before = {name: (tmp_path / name).read_text() for name in ("references.jsonl", "labels.jsonl")}
    labelling.agree(tmp_path)  # a second run replaces its own lines, nothing else
    assert {name: (tmp_path / name).read_text() for name in before} == before


def test_a_pair_probed_since_the_draw_is_neither_labelled_nor_kept(tmp_path: Path) -> None:
    labelled_case(tmp_path)
    probe = {"group_id": "g", "better": "r2", "worse": "r1", "category": "behaviour", "reason": "a probe"}
    with (tmp_path / "references.jsonl").open("a") as out:
        out.write(json.dumps(probe) + "\n")
    report = labelling.agree(tmp_path)
    assert report["superseded_by_probe"] == ["p1"] and report["kept"] == 1
    assert report["labelled"]["both"] == 5  # the labellers' agreement still counts it
    assert report["same_side_other_category"] == 1  # p4; p1 agreed on its category, superseded or not
    assert all(label["a"] != "r1" for label in read_jsonl(tmp_path / "labels.jsonl"))
    kept = [(r["better"], r["worse"]) for r in read_jsonl(tmp_path / "references.jsonl")]
    assert kept == [("q1", "q2"), ("r2", "r1"), ("r4", "r3")]


def test_kappa_is_undefined_when_chance_agreement_is_total() -> None:
    assert labelling.cohen_kappa(["A", "A"], ["A", "A"]) is None
    assert labelling.cohen_kappa([], []) is None
    assert labelling.cohen_kappa(["A", "B"], ["B", "A"]) == -1.0


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"pair": "p9", "verdict": "A", "category": "hygiene", "reason": "x"}, "unknown pair 'p9'"),
        (
            {"pair": "p1", "verdict": "a", "category": "hygiene", "reason": "x"},
            "verdict is one of A, B, none",
        ),
        ({"pair": "p1", "verdict": "A", "category": "behaviour", "reason": "x"}, "category is one of"),
        ({"pair": "p1", "verdict": "B", "category": "scope", "reason": " "}, "no reason"),
    ],
)
def test_a_bad_labeller_line_is_named(tmp_path: Path, line: dict, message: str) -> None:
    labelled_case(tmp_path)
    write_jsonl(tmp_path / "labelling/labeller-b.jsonl", [line])
    with pytest.raises(labelling.LabellingError, match=f"labeller-b.jsonl:1: .*{message}"):
        labelling.agree(tmp_path)


def test_agreed_pairs_closing_a_cycle_with_a_probed_pair_write_nothing(tmp_path: Path) -> None:
    labelled_case(tmp_path)  # the probed pair: q1 > q2
    write_jsonl(
        tmp_path / "labelling/pairs.jsonl",
        [
            {"pair": "p1", "instance": "g", "repository": "o/n", "split": "test", "A": "q2", "B": "q3"},
            {"pair": "p2", "instance": "g", "repository": "o/n", "split": "test", "A": "q3", "B": "q1"},
        ],
    )
    for name in ("labeller-a", "labeller-b"):
        write_jsonl(
            tmp_path / f"labelling/{name}.jsonl",
            [
                {"pair": pair, "verdict": "A", "category": "design", "reason": "simpler"}
                for pair in ("p1", "p2")
            ],
        )
    before = (tmp_path / "references.jsonl").read_text()
    with pytest.raises(InvalidReference, match="cycl"):
        labelling.agree(tmp_path)
    assert (tmp_path / "references.jsonl").read_text() == before
    assert not (tmp_path / "labels.jsonl").exists() and not (tmp_path / "labelling/agreement.json").exists()


def test_show_hides_the_runs_and_agreed_pairs_prepare_into_a_valid_track(
    sources: dict,  # noqa: F811
) -> None:
    recipe_dir: Path = sources["recipe"]
    write_jsonl(
        recipe_dir / "preference.jsonl",
        [
            {
                "instance": "acme__widget-1",
                "repository": "acme/widget",
                "split": "dev",
                "candidates": [["run-a"], ["run-c"]],
                "same_code": [["run-a"], ["run-c"]],
            }
        ],
    )
    pairs = labelling.draw_pairs(recipe_dir, repositories=("acme/widget",))
    assert [(p.instance, {p.a, p.b}) for p in pairs] == [("acme__widget-1", {"run-a", "run-c"})]
    labelling.write_pairs(pairs, recipe_dir / "labelling/pairs.jsonl")
    shown = labelling.show(recipe_dir, "p001", [sources["root"]])
    assert "set VALUE" in shown and "+VALUE = 1  # also one" in shown and "+VALUE = 1\n" in shown
    assert "run-" not in shown
    side = "A" if pairs[0].a == "run-a" else "B"  # run-a: the same fix without the stray comment
    for name in ("labeller-a", "labeller-b"):
        write_jsonl(
            recipe_dir / f"labelling/{name}.jsonl",
            [{"pair": "p001", "verdict": side, "category": "hygiene", "reason": f"{name}: no stray comment"}],
        )
    assert labelling.agree(recipe_dir)["kept"] == 1
    prepare(load_recipe(recipe_dir), SourceLocator(roots=[sources["root"]]))
    bench = load_benchmark(resolve_bench(str(recipe_dir), None))
    agreement = bench.agreement()
    assert (agreement.pairs, agreement.agreed) == (1, 1)
    [preference] = bench.references["acme__widget-1"].preferences
    assert (preference.better, preference.worse, preference.category) == ("run-a", "run-c", "hygiene")


def test_show_refuses_an_unknown_pair(tmp_path: Path) -> None:
    labelled_case(tmp_path)
    with pytest.raises(labelling.LabellingError, match="unknown pair 'p99'"):
        labelling.show(tmp_path, "p99", [tmp_path])
