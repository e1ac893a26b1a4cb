"""The HTML report in headless Chromium: it loads without console messages, lists the groups, and a group
opened through `#group=<id>` shows its diffs, chart and transcript, with hostile content left as text.

Chromium is driven by its command line only (`--dump-dom`, `--screenshot`, console messages on stderr with
`--enable-logging=stderr`), so no browser-automation package is needed. The report itself never logs, so any
console line is a failure: a script error, a Content-Security-Policy refusal, or a payload that ran.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest

import grader.inspect.report as report_module
from grader.inspect.report import write_report
from tests.conftest import REPO_ROOT, run_gagar
from tests.support.inspect_runs import (
    GROUP,
    HOSTILE_GROUP,
    heuristic_run,
    hostile_run,
    llm_run,
    synthetic_run,
)

__all__ = ["heuristic_run", "hostile_run", "llm_run"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)"
)
CONSOLE = re.compile(r":CONSOLE[:(]")


def browse(url: str, profile: Path, *flags: str) -> tuple[str, list[str]]:
    """Load `url` headless; (stdout, console lines). Each call gets its own profile directory."""
    proc = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--disable-gpu",
            "--no-sandbox",  # as root in a container: Chromium's own sandbox cannot start
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            *flags,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return proc.stdout, [line for line in proc.stderr.splitlines() if CONSOLE.search(line)]


def dom(path: Path, tmp_path: Path, group: str | None = None) -> str:
    url = path.as_uri() + (f"#group={quote(group, safe='')}" if group is not None else "")
    page, console = browse(url, tmp_path / "profile", "--dump-dom")
    assert console == [], console
    assert page.count('<tr class="row') >= 1, page[:2000]
    return page


def screenshot(path: Path, tmp_path: Path, group: str, name: str) -> Path:
    shot = tmp_path / name
    url = f"{path.as_uri()}#group={quote(group, safe='')}"
    _, console = browse(url, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1400,2400")
    assert console == [], console
    assert shot.stat().st_size > 20_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\nscreenshot: {shot}")
    return shot


def test_the_report_lists_groups_and_opens_none_until_asked(heuristic_run: Path, tmp_path: Path) -> None:
    page = dom(write_report(heuristic_run, tmp_path / "report.html"), tmp_path)
    assert page.count('<tr class="row') == 1 and f'data-group="{GROUP}"' in page
    assert 'class="group-body"' not in page  # rendered only when opened
    assert "1 graded · 0 skipped · 0 failed" in page and "leftover_files: 1 candidate in 1 group" in page


def test_a_heuristic_group_opened(heuristic_run: Path, tmp_path: Path) -> None:
    path = write_report(heuristic_run, tmp_path / "report.html")
    page = dom(path, tmp_path, GROUP)
    assert page.count('class="group-body"') == 1
    # Candidates side by side, each with its diff, lines classed for colour.
    assert len(re.findall(r'<div class="cand( failing)?" data-trajectory=', page)) == 7
    assert page.count('<pre class="diff">') == 6  # gave-up's patch is empty
    assert '<span class="add">+    if not items:</span>' in page
    assert '<span class="add">+print(average_price([]))</span>' in page
    # The chart: two bars per trajectory, negative ones drawn to the left of zero.
    chart = page[page.index('<svg class="chart"') : page.index("</svg>", page.index('<svg class="chart"'))]
    assert chart.count('class="before') == 7 and chart.count('class="after') == 7
    assert chart.count('class="after neg"') == 2 and "+0.5855 → +0.7319" in chart
    assert "penalty 2.90: leaves reproduce.py" in page
    screenshot(path, tmp_path, GROUP, "heuristic-group.png")


def test_an_llm_group_opened_shows_its_transcript(llm_run: Path, tmp_path: Path) -> None:
    path = write_report(llm_run, tmp_path / "report.html")
    page = dom(path, tmp_path, GROUP)
    assert page.count('class="group-body"') == 1
    assert page.count('<details class="tool" data-tool="diff">') == 4  # collapsible tool calls
    transcript = page[page.index('<div class="transcript">') :]
    assert transcript.count('<pre class="diff">') >= 4 and "+        return 0.0" in transcript
    assert "submitted ranking, confidence 0.7" in transcript
    assert "You are a senior code reviewer" in transcript  # the shared system prompt, resolved
    assert '<svg class="chart"' in page
    screenshot(path, tmp_path, GROUP, "llm-group.png")


def test_hostile_content_stays_text(hostile_run: Path, tmp_path: Path) -> None:
    path = write_report(hostile_run, tmp_path / "report.html")
    page = dom(path, tmp_path, HOSTILE_GROUP)  # no console line: no payload ran
    assert page.count('class="group-body"') == 1
    assert page.count("<script") == 3  # the index, the one group, the report's own script: nothing injected
    assert not re.search(r"<img\b", page) and "<b>bold</b>" not in page
    assert '&lt;/script&gt;&lt;script&gt;console.error("pwned-1")&lt;/script&gt;&lt;!--&lt;script&gt;' in page
    assert '&lt;img src=x onerror=console.error("pwned-2")&gt;' in page
    assert "sneaky &lt;b&gt;bold&lt;/b&gt;" in page and 'class="alert"' in page  # the injection flag
    screenshot(path, tmp_path, HOSTILE_GROUP, "hostile-group.png")


def test_the_length_monitor_in_the_page(tmp_path: Path) -> None:
    """A step whose lengths follow the grader's preference (examples/length_steps.py), graded by the CLI: the
    summary has the tau histogram, an opened group its weight-against-length scatter."""
    sys.path.insert(0, str(REPO_ROOT / "examples"))
    from length_steps import write_steps

    (groups,) = write_steps(tmp_path / "groups", steps=1, groups=3, rewarding_from=1, seed=0)
    run = tmp_path / "run"
    proc = run_gagar("grade", str(groups), "--out", str(run))
    assert proc.returncode == 0, proc.stderr
    path = write_report(run, tmp_path / "report.html")
    page = dom(path, tmp_path, "step1-group0")
    summary = page[page.index('id="summary"') : page.index("<h2>Groups</h2>")]
    assert "Credit vs length (Kendall tau per group)" in summary and "rose 3 · fell 0 of 3 groups" in summary
    assert summary.count('<svg class="hist"') == 2  # weight spread and tau
    assert page.count('<svg class="chart scatter"') == 1
    scatter = page[page.index('<svg class="chart scatter"') :]
    scatter = scatter[: scatter.index("</svg>")]
    assert scatter.count("<circle") == 5 and "response length (tokens)" in scatter
    assert "Kendall tau with response length (tokens): weight +0.95" in page
    screenshot(path, tmp_path, "step1-group0", "length-group.png")


def test_sorting_filtering_and_opening_in_the_page(
    llm_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A driver appended to the report's own script (so the page's policy admits it by hash) clicks and
    # types as a reader would, then logs what the table shows.
    driver = """
(() => {
  const rows = () => [...document.querySelectorAll("#groups tbody tr.row")];
  const visible = () => rows().filter((r) => !r.hidden).map((r) => r.dataset.group);
  const sort = (key) => document.querySelector(`th[data-key="${key}"] button`).click();
  const set = (id, value, kind) => {
    const input = document.getElementById(id);
    input.value = value;
    input.dispatchEvent(new Event(kind));
  };
  const out = {};
  sort("seconds");
  out.slowest = rows().slice(0, 3).map((r) => r.dataset.group);
  sort("seconds");
  out.fastest = rows().slice(0, 3).map((r) => r.dataset.group);
  set("filter", "g000", "input");
  out.filtered = visible();
  set("filter", "", "input");
  set("status-filter", "failed", "change");
  out.failed = visible();
  out.shown = document.getElementById("shown").textContent;
  set("status-filter", "", "change");
  document.querySelector('tr.row[data-group="g0001"] td.group a').click();
  out.opened = document.querySelectorAll(".group-body").length;
  out.hash = location.hash;
  document.querySelector('tr.row[data-group="g0001"] td.group a').click();
  out.closed = document.querySelector("tr.detail").hidden;
  console.log("gagar-test " + JSON.stringify(out));
})();
"""
    monkeypatch.setattr(report_module, "JS", report_module.JS + driver)
    path = write_report(synthetic_run(tmp_path / "run", llm_run, 100))
    _, console = browse(path.as_uri(), tmp_path / "profile", "--dump-dom")
    (line,) = console
    result = json.loads(re.search(r'"gagar-test (.*)", source', line).group(1).replace('\\"', '"'))
    assert result["slowest"] == ["g0036", "g0073", "g0035"]  # numbers sort biggest first, ties in run order
    assert result["fastest"] == ["g0000", "g0037", "g0074"]
    assert result["filtered"] == [f"g000{i}" for i in range(10)]
    assert sorted(result["failed"]) == ["g0007", "g0032", "g0057", "g0082"]  # in the table's (sorted) order
    assert result["shown"] == "4 of 100 groups"
    assert result["opened"] == 1 and result["hash"] == "#group=g0001" and result["closed"] is True


def test_a_thousand_groups_open_quickly(llm_run: Path, tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "run", llm_run, 1000)
    start = time.perf_counter()
    path = write_report(run)
    written = time.perf_counter() - start
    start = time.perf_counter()
    page = dom(path, tmp_path)
    loaded = time.perf_counter() - start
    assert page.count('<tr class="row') == 1000
    assert 'class="group-body"' not in page  # not 1,000 rendered groups: none until one is opened
    opened = dom(path, tmp_path, "g0501")
    assert opened.count('class="group-body"') == 1 and 'data-group="g0501"' in opened
    print(
        f"\n1,000 groups: report written in {written:.2f}s, {path.stat().st_size / 2**20:.1f} MiB; "
        f"Chromium start, load and DOM dump {loaded:.2f}s"
    )
