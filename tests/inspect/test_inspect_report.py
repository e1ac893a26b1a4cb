"""`gagar report`: the HTML file itself (the browser tests load it in Chromium)."""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path

from grader.inspect.assets import JS
from grader.inspect.report import MAX_TEXT, build_report, embed_json, group_payload, write_report
from grader.inspect.run import load_run
from tests.support.inspect_runs import (
    GROUP,
    HOSTILE_GROUP,
    PAYLOAD,
    heuristic_run,
    hostile_run,
    inspect_cli,
    llm_run,
    synthetic_run,
)

__all__ = ["heuristic_run", "hostile_run", "llm_run"]

DATA = re.compile(r'<script type="application/json" id="([\w-]+)">(.*?)</script>', re.S)


def data_tags(page: str) -> dict[str, object]:
    return {name: json.loads(text) for name, text in DATA.findall(page)}


def test_the_command_writes_into_the_run_by_default(heuristic_run: Path, tmp_path: Path) -> None:
    proc = inspect_cli("report", str(heuristic_run))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"wrote {heuristic_run / 'report.html'} (")
    elsewhere = inspect_cli("report", str(heuristic_run), "-o", str(tmp_path / "out" / "r.html"))
    assert elsewhere.returncode == 0 and (tmp_path / "out" / "r.html").is_file()


def test_the_page_is_self_contained(llm_run: Path) -> None:
    page = build_report(load_run(llm_run))
    # Nothing is fetched: no links, no sources, no imports, and a policy that would refuse them anyway.
    assert not re.search(r"<(link|img|iframe|object|embed)\b", page)
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "@import" not in page and "url(" not in page and "fetch(" not in JS and "XMLHttpRequest" not in JS
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)
    assert policy is not None
    rules = html.unescape(policy.group(1))
    assert rules.startswith("default-src 'none'; script-src 'sha256-") and "unsafe-inline" not in rules


def test_the_script_never_parses_data_as_html() -> None:
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in JS, sink


def test_hostile_text_cannot_leave_its_script_tag(hostile_run: Path) -> None:
    page = build_report(load_run(hostile_run))
    # Each data tag ends at its own </script>: the payload's "</script>" and "<!--" appear nowhere raw.
    assert page.count("</script>") == page.count("<script")
    assert "<!--" not in page and "pwned" in page
    tags = data_tags(page)
    (group,) = [v for k, v in tags.items() if k.startswith("gagar-group-")]
    assert isinstance(group, dict) and group["id"] == HOSTILE_GROUP
    sneaky = next(c for c in group["candidates"] if c["id"].startswith("sneaky"))
    assert PAYLOAD in sneaky["patch"].replace("+", "")  # the text comes back intact once parsed
    assert embed_json("</script><!--\u2028\udc80") == '"\\u003c/script>\\u003c!--\\u2028\\udc80"'


def test_a_group_holds_what_its_view_needs(llm_run: Path) -> None:
    run = load_run(llm_run)
    payload = group_payload(run, run.results[0])
    assert payload["ranking"][0] == ["clean", "clean-respaced"]
    ids = [c["id"] for c in payload["candidates"]]
    assert ids[:2] == ["clean", "clean-respaced"] and ids[-2:] == ["wrong-value", "gave-up"]
    clean = payload["candidates"][0]
    assert (
        clean["weight"] == 1.0
        and clean["before"] < clean["after"]
        and "+        return 0.0" in clean["patch"]
    )
    kinds = [step["kind"] for step in payload["transcript"]]
    assert kinds[0] == "start" and kinds[-1] == "submitted"
    system = next(step for step in payload["transcript"] if step["kind"] == "system")
    assert system["body"] == {"text": 0}  # shared by every group, stored once in the index
    calls = [call for step in payload["transcript"] for call in step["calls"]]
    assert [c["name"] for c in calls].count("diff") == 4 and all(c["result"] for c in calls)


def test_long_texts_are_cut_with_a_note(heuristic_run: Path, tmp_path: Path) -> None:
    run = load_run(heuristic_run)
    assert run.groups is not None
    group = run.groups[GROUP]
    long_patch = "x" * (MAX_TEXT + 5000)
    run.groups[GROUP] = group.model_copy(
        update={"trajectories": [t.model_copy(update={"patch": long_patch}) for t in group.trajectories]}
    )
    clean = group_payload(run, run.results[0])["candidates"][0]
    assert clean["patch"].endswith("… 5,000 more characters not included in the report")


def test_a_thousand_groups(llm_run: Path, tmp_path: Path) -> None:
    run_dir = synthetic_run(tmp_path / "run", llm_run, 1000)
    start = time.perf_counter()
    path = write_report(run_dir)
    seconds = time.perf_counter() - start
    size = path.stat().st_size
    print(f"\n1,000-group report: {seconds:.2f}s, {size / 2**20:.1f} MiB -> {path}")
    assert size < 40 * 2**20
    tags = data_tags(path.read_text())
    index = tags.pop("gagar-index")
    assert isinstance(index, dict) and len(index["rows"]) == 1000 and len(tags) == 1000
    assert index["summary"]["statuses"] == {"graded": 860, "skipped": 100, "failed": 40}
    assert len(index["texts"]) == 1  # one system prompt for the whole run


def test_show_and_report_give_prompt_tokens_and_those_cached(llm_run: Path, tmp_path: Path) -> None:
    result = json.loads((llm_run / "results.jsonl").read_text())
    result["usage"].update(prompt_tokens=12345, cached_prompt_tokens=6789)
    (tmp_path / "results.jsonl").write_text(json.dumps(result) + "\n")
    shown = inspect_cli("show", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "prompt tokens 12,345, of which 6,789 cached" in shown.stdout
    proc = inspect_cli("report", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    summary = data_tags((tmp_path / "report.html").read_text())["gagar-index"]["summary"]
    assert (summary["prompt_tokens"], summary["cached_prompt_tokens"]) == (12345, 6789)
