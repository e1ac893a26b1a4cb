"""`gagar report`: a run as one self-contained HTML file (no server, no network, no external assets).

The data goes into the page as JSON inside `<script type="application/json">` tags: one small index for the
table of groups, and one tag per group that the page parses only when that group is opened, so a run of
thousands of groups opens as fast as its table can be drawn. Every `<` in the JSON is written `\\u003c`, so
no text in a patch or a transcript can close the tag (`</script>`) or open a comment-script state (`<!--`).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import time
from pathlib import Path
from typing import Any

from grader.groups.models import GroupResult
from grader.inspect.assets import CSS, JS
from grader.inspect.run import (
    Run,
    candidate_order,
    dumps_compact,
    fired_signals,
    group_flags,
    load_run,
    rank_of,
    summarize,
    tokens,
    top_candidates,
    weight_spread,
)
from grader.inspect.steps import readable_steps
from grader.ranking.length import read_step
from grader.util.atomic import write_text_atomic

REPORT = "report.html"
FLOAT_KEY = "$float"  # see _finite_json; the page's JSON reviver knows it too
MAX_TEXT = 200_000  # characters of one patch or tool result kept in the page; past that, cut with a note
SPREAD_BUCKETS = 10
TAU_BUCKETS = 10


def _finite_json(value: Any) -> Any:
    # JSON has no NaN or infinity: they travel as {"$float": "NaN"} and the page's reviver makes them
    # numbers again, so a NaN advantage shows as NaN instead of failing the whole report.
    if isinstance(value, float) and not math.isfinite(value):
        return {FLOAT_KEY: "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")}
    if isinstance(value, dict):
        return {key: _finite_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_json(item) for item in value]
    return value


def embed_json(value: Any) -> str:
    """JSON safe inside a <script> element: ASCII only (no encoding surprises, lone surrogates escaped) and
    no `<` at all, so the element can only end where the page ends it. Non-finite floats are encoded as
    `{"$float": "NaN"}` (or "Infinity", "-Infinity"), which the page reads back as numbers."""
    text = json.dumps(_finite_json(value), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c")


def _cap(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"\n… {len(text) - MAX_TEXT:,} more characters not included in the report"


def _csp_hash(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


# -- what the page shows ------------------------------------------------------------------------------------


def index_payload(run: Run, generated: str, shared: SharedTexts) -> dict[str, Any]:
    summary = summarize(run.results)
    histogram = [0] * SPREAD_BUCKETS
    for spread in summary.spreads:
        histogram[min(SPREAD_BUCKETS - 1, int(spread * SPREAD_BUCKETS))] += 1
    rows = []
    for result in run.results:
        rows.append(
            {
                "id": result.group_id,
                "status": result.status,
                "reason": result.reason,
                "grader": result.grader,
                "n": sum(1 for r in result.trajectories.values() if r.passed),
                "top": top_candidates(result),
                "spread": weight_spread(result),
                "flags": group_flags(result),
                "seconds": result.seconds,
                "tokens": tokens(result),
            }
        )
    return {
        "run": str(run.directory),
        "generated": generated,
        "length": length_payload(run),
        "patches": run.groups is not None,
        "summary": {
            "groups": summary.groups,
            "statuses": dict(summary.statuses),
            "graders": summary.graders.most_common(),
            "models": summary.models.most_common(),
            "tokens": summary.tokens,
            "prompt_tokens": summary.prompt_tokens,
            "cached_prompt_tokens": summary.cached_prompt_tokens,
            "requests": summary.requests,
            "tool_calls": summary.tool_calls,
            "retries": summary.retries,
            "seconds": round(summary.seconds, 4),
            "slowest": list(summary.slowest) if summary.slowest else None,
            "spread": summary.spread_stats(),
            "spread_histogram": histogram,
            "flags": [list(flag) for flag in summary.top_flags(limit=20)],
            "failures": summary.failures.most_common(8),
            "identity": summary.identity.most_common(5),
        },
        "rows": rows,
        "texts": shared.texts,
    }


def length_payload(run: Run) -> dict[str, Any] | None:
    """The run's length signal for the summary: mean taus, where lengths came from, a histogram of the
    per-group tau(weight, length) over [-1, 1]; None when no graded group carries one."""
    reading = read_step(str(run.directory), run.results)
    if not reading.graded:
        return None
    histogram = [0] * TAU_BUCKETS
    for tau in reading.taus:
        histogram[min(TAU_BUCKETS - 1, int((tau + 1) / 2 * TAU_BUCKETS))] += 1
    return {
        "graded": reading.graded,
        "sources": reading.sources,
        "weight": reading.mean(reading.taus),
        "advantage": reading.mean(reading.advantage_taus),
        "patch": reading.mean(reading.patch_taus),
        "rose": sum(t > 0 for t in reading.taus),
        "fell": sum(t < 0 for t in reading.taus),
        "histogram": histogram,
    }


class SharedTexts:
    """Texts stored once in the index and referred to by number: the system prompt is the same in every
    group of a run, and repeating it would add a few KB per group for nothing."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._numbers: dict[str, int] = {}

    def ref(self, text: str) -> dict[str, int]:
        if text not in self._numbers:
            self._numbers[text] = len(self.texts)
            self.texts.append(text)
        return {"text": self._numbers[text]}


def group_payload(run: Run, result: GroupResult, shared: SharedTexts | None = None) -> dict[str, Any]:
    shared = shared or SharedTexts()
    ranks = rank_of(result)
    candidates = []
    for tid in candidate_order(result):
        report = result.trajectories.get(tid)
        stats = report.stats if report else None
        candidates.append(
            {
                "id": tid,
                "passed": bool(report and report.passed),
                "rank": ranks.get(tid),
                "weight": result.weights.get(tid),
                "before": result.advantages_before.get(tid),
                "after": result.advantages_after.get(tid),
                "apply": report.apply_method if report else None,
                "error": report.error if report else None,
                "patch_class": report.patch_class if report else None,
                "stats": None
                if stats is None
                else {
                    "files": stats.files,
                    "added": stats.lines_added,
                    "removed": stats.lines_removed,
                    "new": stats.new_files,
                    "deleted": stats.deleted_files,
                    "renamed": stats.renamed_files,
                    "tests": stats.test_files,
                    "binary": stats.binary_files,
                },
                "fired": fired_signals(report) if report else [],
                "signals": [[k, dumps_compact(v)] for k, v in report.signals.items()] if report else [],
                "rationale": report.rationale if report else None,
                "patch": _cap(run.patch(result.group_id, tid)),
            }
        )
    transcript, note = None, ""
    if result.transcript is not None or result.grader == "llm":
        reading = run.read_transcript(result)
        steps, note = (None, reading.note)
        if reading.events is not None:
            steps, note = readable_steps(reading.events, reading.path)
        if steps is not None:
            transcript = [
                {
                    "t": step.t if isinstance(step.t, int | float) else None,
                    "kind": step.kind,
                    "title": step.title,
                    "body": shared.ref(step.body) if step.kind == "system" else _cap(step.body),
                    "problem": step.problem,
                    "calls": [
                        {
                            "name": call.name,
                            "arguments": call.arguments,
                            "result": _cap(call.result),
                            "error": call.error,
                            "seconds": call.seconds,
                        }
                        for call in step.calls
                    ],
                }
                for step in steps
            ]
    details = result.details
    return {
        "id": result.group_id,
        "status": result.status,
        "reason": result.reason,
        "grader": result.grader,
        "redistribution": result.redistribution,
        "seconds": result.seconds,
        "model": details.get("model"),
        "seed": details.get("seed"),
        "confidence": details.get("confidence"),
        "usage": list(result.usage.items()),
        "flags": [[tid, hits] for tid, hits in result.flags.items() if hits],
        "ranking": result.ranking,
        "length": None if result.length is None else result.length.model_dump(mode="json"),
        "candidates": candidates,
        "patch_note": run.patch_note(result.group_id),
        "transcript": transcript,
        "transcript_note": note,
    }


# -- the page -----------------------------------------------------------------------------------------------


def build_report(run: Run, generated: str | None = None) -> str:
    """The whole HTML page for a run."""
    generated = generated or time.strftime("%Y-%m-%d %H:%M:%S")
    # Only this stylesheet and this script may run: a candidate's markup that somehow reached the page could
    # neither execute nor load anything (default-src 'none').
    csp = f"default-src 'none'; script-src {_csp_hash(JS)}; style-src {_csp_hash(CSS)}; img-src data:"
    parts = [
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(csp)}">\n',
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>gagar report: {html.escape(run.directory.name or str(run.directory))}</title>\n",
        f"<style>{CSS}</style>\n</head>\n<body>\n",
        '<header><h1>gagar report</h1><p id="run"></p></header>\n',
        "<noscript><p>This report draws its tables with JavaScript: enable it for this file.</p>"
        "</noscript>\n",
        '<section id="summary" class="summary"></section>\n',
        "<h2>Groups</h2>\n",
        '<div class="filters"><input id="filter" type="search" '
        'placeholder="filter by group, candidate, flag or reason" aria-label="filter groups">'
        '<select id="status-filter" aria-label="status"><option value="">all statuses</option></select>'
        '<select id="grader-filter" aria-label="grader"><option value="">all graders</option></select>'
        '<select id="flag-filter" aria-label="flag"><option value="">any flag</option></select>'
        '<span id="shown" class="muted"></span></div>\n',
        '<table id="groups" class="groups"><thead><tr></tr></thead><tbody></tbody></table>\n',
    ]
    shared = SharedTexts()
    groups = [
        f'<script type="application/json" id="gagar-group-{i}">'
        f"{embed_json(group_payload(run, result, shared))}</script>\n"
        for i, result in enumerate(run.results)
    ]
    # The index is built after the groups, which add the texts they share to it.
    index = embed_json(index_payload(run, generated, shared))
    parts.append(f'<script type="application/json" id="gagar-index">{index}</script>\n')
    parts.extend(groups)
    parts.append(f"<script>{JS}</script>\n</body>\n</html>\n")
    return "".join(parts)


def write_report(run_dir: Path | str, output: Path | str | None = None) -> Path:
    """Write the report of a run directory (to RUN_DIR/report.html by default) and return its path."""
    run = load_run(run_dir)
    path = Path(output) if output is not None else Path(run_dir) / REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, build_report(run))
    return path
