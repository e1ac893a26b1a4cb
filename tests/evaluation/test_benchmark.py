"""The benchmark format on examples/benchmark-tiny: loading, each refusal, the split, `eval --bench`."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.errors import InputFileError
from grader.evaluation import benchmark, cli, harness, metrics
from grader.evaluation.benchmark import BenchmarkError, find_benchmark, load_benchmark
from grader.graders.heuristic import HeuristicGrader
from grader.ranking.references import load_references
from tests.conftest import EXAMPLE_GROUP, REPO_ROOT

TINY = REPO_ROOT / "examples" / "benchmark-tiny"
BUNDLE = "bundles/inventory.bundle"


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """A private copy of the tiny benchmark, to break."""
    return Path(shutil.copytree(TINY, tmp_path / "tiny"))


def append_line(path: Path, item: dict) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(item) + "\n")


def edit_json(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def problems(root: Path) -> str:
    """What load_benchmark says is wrong with a folder."""
    with pytest.raises(BenchmarkError) as caught:
        load_benchmark(root)
    return str(caught.value)


def test_the_tiny_benchmark_loads_with_every_kind_of_reference() -> None:
    bench = load_benchmark(TINY)
    assert bench.name == "inventory-tiny" and bench.manifest["example"] is True
    assert {gid: r.kind for gid, r in bench.references.items()} == {
        "inv-pairs": "pairwise",
        "inv-degrade": "degrade",
        "inv-ranking": "ranking",
        "inv-consensus": "consensus",
    }
    assert bench.group_ids("dev") == ["inv-ranking", "inv-consensus"]
    assert bench.group_ids("test") == ["inv-pairs", "inv-degrade"]
    counts = bench.counts()
    assert counts["repository"] == {"gagar": 54} and counts["split"] == {"dev": 18, "test": 36}
    assert counts["category"]["correctness"] == 1 and counts["kind"]["pairwise"] == 6
    agreement = bench.agreement()
    assert (agreement.pairs, agreement.agreed) == (6, 4)
    assert sorted(agreement.disagreed) == [
        ("inv-pairs", "clean", "clean-respaced"),
        ("inv-pairs", "leftover-script", "reformats-report"),
    ]
    # Disagreed pairs are left out of the references; agreed ones are in, with the labellers' category.
    pairs = {p.pair: p for p in bench.references["inv-pairs"].preferences}
    assert ("clean", "clean-respaced") not in pairs and ("leftover-script", "reformats-report") not in pairs
    assert pairs[("clean", "edits-tests")].category == "tests"
    assert {p.pair for p in bench.probes} == {
        ("clean", "returns-int"),
        ("clean", "clean+debug_output"),
    }
    with pytest.raises(BenchmarkError, match="unknown split 'train'"):
        bench.group_ids("train")


def test_a_cyclic_reference_in_a_benchmark_is_refused_with_the_pair_named(tiny: Path) -> None:
    references = tiny / "references.jsonl"
    extra = {"group_id": "inv-pairs", "category": "hygiene", "reason": "r"}
    for better, worse in [
        ("edits-tests", "reformats-report"),
        ("reformats-report", "leftover-script"),
        ("leftover-script", "edits-tests"),
    ]:
        append_line(references, {**extra, "better": better, "worse": worse})
    cycle = "edits-tests > reformats-report > leftover-script > edits-tests"
    pattern = rf"group 'inv-pairs': cyclic preferences {cycle}"
    with pytest.raises(
        BenchmarkError, match=pattern + r" \(the pair leftover-script > edits-tests closes it\)"
    ):
        load_benchmark(tiny)


def test_every_broken_rule_is_listed_in_one_error(tiny: Path) -> None:
    # A pair with a failing trajectory and no probe; a pair the labellers disagreed on, kept anyway.
    references = tiny / "references.jsonl"
    failing = {"better": "reformats-report", "worse": "wrong-value", "category": "behaviour", "reason": "r"}
    append_line(references, {"group_id": "inv-pairs", **failing})
    disagreed = {
        "better": "leftover-script",
        "worse": "reformats-report",
        "category": "hygiene",
        "reason": "r",
    }
    append_line(references, {"group_id": "inv-pairs", **disagreed})
    edit_json(
        tiny / "provenance.json", lambda p: p["bundles"]["bundles/inventory.bundle"].update(tree="0" * 40)
    )
    edit_json(tiny / "provenance.json", lambda p: p["patches"]["inv-ranking"].pop("edits-tests"))
    # Files that do not read stop the checks across files: spoil them, then put them back as they were.
    unreadable = {
        "benchmark.json": lambda m: m["sources"][0].pop("licence"),
        "split.json": lambda s: s["dev"].remove("inventory/consensus"),
        "probes.json": lambda p: p[1].update(command="python {script}"),
    }
    originals = {name: (tiny / name).read_bytes() for name in unreadable}
    for name, spoil in unreadable.items():
        edit_json(tiny / name, spoil)
    message = problems(tiny)
    assert "benchmark.json: source 0 needs a repository and a licence" in message
    assert "split.json: instance 'inventory/consensus' is in no split" in message
    assert "probes.json[1]: command 'python {script}': only {probe} may be in braces" in message
    for name, original in originals.items():
        (tiny / name).write_bytes(original)
    message = problems(tiny)
    assert "'wrong-value' is not a passing trajectory of the group" in message
    assert "behaviour pair reformats-report > wrong-value: no probe" in message
    assert "pair leftover-script > reformats-report: the two labels differ" in message
    assert "is not the upstream tree 0000000000000000000000000000000000000000" in message
    assert "patches: group 'inv-ranking': 'edits-tests' needs repository, commit, path" in message


def test_a_bundle_must_be_a_single_root_commit(tiny: Path, tmp_path: Path) -> None:
    repo = tmp_path / "two"
    subprocess.run(
        ["git", "clone", "-q", "--branch", "main", str(TINY / "bundles" / "inventory.bundle"), str(repo)],
        check=True,
    )
    ident = ["-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run(
        ["git", *ident, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "history"], check=True
    )
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "bundle",
            "create",
            "-q",
            str(tiny / "bundles" / "inventory.bundle"),
            "main",
        ],
        check=True,
    )
    with pytest.raises(BenchmarkError, match="must hold a single root commit, found 2 commits"):
        load_benchmark(tiny)
    assert load_benchmark(tiny, check_bundles=False).name == "inventory-tiny"


def test_a_benchmark_is_found_by_name(tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("GAGAR_BENCHMARKS", raising=False)
    with pytest.raises(InputFileError, match=r"no benchmark 'tiny'.*shared/benchmarks/tiny"):
        find_benchmark("tiny")
    monkeypatch.setenv("GAGAR_BENCHMARKS", str(tmp_path))
    assert find_benchmark("tiny") == tmp_path / "tiny"
    monkeypatch.delenv("GAGAR_BENCHMARKS")
    (work / "benchmarks").mkdir()
    shutil.move(tiny, work / "benchmarks" / "tiny")
    assert find_benchmark("tiny") == Path("benchmarks") / "tiny"
    assert load_benchmark("tiny").root == Path("benchmarks") / "tiny"
    # CI's read-only copy of the shared data sits beside the clone: ../shared/benchmarks from its root.
    shutil.move(work / "benchmarks" / "tiny", tmp_path / "shared" / "benchmarks" / "tiny")
    monkeypatch.setattr(benchmark, "REPOSITORY_ROOT", tmp_path / "clone")
    assert find_benchmark("tiny") == tmp_path / "shared" / "benchmarks" / "tiny"


def test_eval_bench_scores_a_split_per_category_with_intervals(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert (
        cli.main(["eval", "--bench", str(TINY), "--split", "test", "--out", str(out), "--consistency", "2"])
        == 0
    )
    report = json.loads((out / "eval.json").read_text())
    assert set(report["groups"]) == {"inv-pairs", "inv-degrade"}
    assert report["bench"]["split"] == "test" and report["bench"]["label_agreement"]["agreed"] == 4
    overall = report["overall"]
    assert overall["reference_pairs"] == overall["scored_pairs"] == 36 and overall["coverage"] == 1.0
    low, high = overall["interval"]
    assert low <= overall["pairwise_accuracy"] <= high
    categories = report["by_category"]
    assert set(categories) == {"correctness", "behaviour", "hygiene", "tests", "scope", "design"}
    # The heuristic cannot tell returning 0 from 0.0, but the group can (v6's agreement): the other candidates
    # are variants of the clean fix, so returning 0 is the one change that diverges, and it ranks lower.
    assert categories["correctness"]["pairwise_accuracy"] == 1.0 and categories["correctness"]["groups"] == 1
    assert categories["correctness"]["interval"] is None  # one group: no interval
    for name in ("behaviour", "hygiene", "tests", "scope", "design"):
        low, high = categories[name]["interval"]
        assert categories[name]["groups"] == 2 and low <= categories[name]["pairwise_accuracy"] <= high
    assert report["consistency"]["k"] == 2 and set(report["consistency"]["groups"]) == set(report["groups"])


def test_eval_takes_either_a_reference_or_a_bench(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reference = TINY / "references.jsonl"
    assert (
        cli.main(["eval", "--bench", str(TINY), "--reference", str(reference), "--out", str(tmp_path)]) == 2
    )
    assert cli.main(["eval", str(EXAMPLE_GROUP), "--bench", str(TINY), "--out", str(tmp_path)]) == 2
    assert (
        cli.main(
            [
                "eval",
                str(EXAMPLE_GROUP),
                "--split",
                "dev",
                "--reference",
                str(reference),
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "either --reference" in capsys.readouterr().err


def test_coverage_counts_pairs_whose_candidates_were_not_both_graded(tmp_path: Path) -> None:
    path = tmp_path / "refs.jsonl"
    for worse in ("edits-tests", "wrong-value"):  # wrong-value fails its tests: the grader never ranks it
        append_line(path, {"group_id": "inventory-average-empty", "better": "clean", "worse": worse})
    from grader.groups.formats import load_groups

    evaluation, _ = harness.evaluate(load_groups([EXAMPLE_GROUP]), load_references(path), HeuristicGrader())
    overall = evaluation.overall()
    assert (overall["scored_pairs"], overall["reference_pairs"], overall["coverage"]) == (1, 2, 0.5)
    assert evaluation.groups[0].unranked == ["wrong-value"]


def test_the_bootstrap_resamples_groups() -> None:
    units = [(3.0, 4), (1.0, 4), (2.0, 2)]
    low, high = metrics.bootstrap_interval(units, resamples=500, seed=1)
    assert 0.25 <= low < 0.6 < high <= 1.0  # pooled 6/10 inside, bounded by the groups' own rates
    assert metrics.bootstrap_interval(units, resamples=500, seed=1) == (low, high)  # seeded: reproducible
    assert metrics.bootstrap_interval([(1.0, 2)], resamples=50) is None  # one group: nothing to resample
    assert metrics.bootstrap_interval([(1.0, 2), (0.0, 0)]) is None
    with pytest.raises(ValueError):
        metrics.bootstrap_interval(units, resamples=0)


def test_the_tiny_benchmark_is_what_its_generator_makes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "make_benchmark", REPO_ROOT / "examples" / "make_benchmark.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path / "made")
    committed = sorted(p.relative_to(TINY) for p in TINY.rglob("*") if p.is_file())
    assert (
        sorted(p.relative_to(tmp_path / "made") for p in (tmp_path / "made").rglob("*") if p.is_file())
        == committed
    )
    for path in committed:
        assert (tmp_path / "made" / path).read_bytes() == (TINY / path).read_bytes(), path


def test_bench_bundle_cuts_history_and_keeps_the_upstream_tree(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = tmp_path / "upstream"
    subprocess.run(["git", "clone", "-q", "--branch", "main", str(TINY / BUNDLE), str(upstream)], check=True)
    (upstream / "CHANGES").write_text("a second commit: history the bundle must not carry\n")
    ident = ["-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run(["git", "-C", str(upstream), "add", "CHANGES"], check=True)
    subprocess.run(["git", *ident, "-C", str(upstream), "commit", "-qm", "changes"], check=True)
    head = subprocess.run(["git", "-C", str(upstream), "rev-parse", "HEAD"], capture_output=True, text=True)
    out = tmp_path / "b" / "x.bundle"
    args = ["bench", "bundle", str(upstream), "HEAD", "--repository", "example/inventory", "--out", str(out)]
    assert cli.main(args) == 0
    record = json.loads(capsys.readouterr().out)[str(out)]
    assert record["commit"] == head.stdout.strip() and record["repository"] == "example/inventory"
    assert cli.main([*args[:-1], str(tmp_path / "again.bundle")]) == 0  # the same upstream: the same commit
    assert json.loads(capsys.readouterr().out)[str(tmp_path / "again.bundle")] == record
    # In place of the tiny benchmark's bundle it passes the bundle check (one root commit, the tree).
    shutil.copyfile(out, tiny / BUNDLE)
    edit_json(tiny / "provenance.json", lambda p: p["bundles"][BUNDLE].update(tree=record["tree"]))
    message = problems(tiny)
    assert "must hold a single root commit" not in message and "is not the upstream tree" not in message
    assert f"the bundle's commit is {record['base_commit']}" in message  # the groups still name the old one
