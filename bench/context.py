"""Context economy: the prompt tokens the agentic grader sends, total and uncached, against one prompt.

Each group is graded by the LLM grader against a scripted server whose policy reviews as a careful model
would (`grader.servers.scripted.read_every_diff_then_rank`: list the candidates, diff every one, rank). Every
request it sent is then rendered by a real llama.cpp server with the chat template gagar ships for it
(`/apply-template`) and counted with the model's own tokenizer (`/tokenize`, Gemma 3's). A request's
uncached tokens are those past its longest common prefix with the previous request's prompt: what a prefix
cache cannot serve (the previous turn's reply counts as uncached, a slight over-count). The baseline is a
grader that puts everything into one request (RULER's and Trae's way): the system prompt, the statement,
the labels and every class's full diff against the base, rendered and tokenized the same way.

    python bench/context.py                                    # the bundled example
    python bench/context.py --groups /work/data/x.jsonl --limit 8

Without a llama-server (`python -m grader.servers.llamacpp build`), the counts fall back to characters / 4,
and the table says so. Target: uncached prompt tokens at most 1.5x the one-prompt baseline on every group.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.args import parser_for  # noqa: E402
from grader.graders.base import Grade  # noqa: E402
from grader.graders.llm.agent import Budgets, LLMGrader  # noqa: E402
from grader.graders.llm.tools import assign_labels, wrap  # noqa: E402
from grader.groups.formats import load_group_file  # noqa: E402
from grader.groups.models import Group  # noqa: E402
from grader.pipeline import GradingOptions, grade_group_sync  # noqa: E402
from grader.servers.llamacpp import BuildUnavailable, LlamaServer, ensure_binary, ensure_model  # noqa: E402
from grader.servers.scripted import ScriptedServer, read_every_diff_then_rank  # noqa: E402
from grader.workspace.view import BASE, GradingView  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "inventory_group.json"
TARGET = 1.5


class Counter:
    """Renders a conversation with the server's chat template and counts its tokens; chars/4 without one."""

    def __init__(self, server: LlamaServer | None) -> None:
        self.server = server
        self.unit = "Gemma 3 tokens (llama-server /tokenize)" if server else "characters / 4 (no tokenizer)"

    def tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """The prompt's token ids (or one pseudo-token per 4 characters of its JSON)."""
        if self.server is None:
            text = json.dumps({"messages": messages, "tools": tools or []})
            return [hash(text[i : i + 4]) for i in range(0, len(text), 4)]
        body: dict[str, Any] = {"messages": messages}
        if tools:
            body["tools"] = tools
        prompt = self.server.post("/apply-template", body)["prompt"]
        return self.server.post(
            "/tokenize", {"content": prompt, "add_special": False, "parse_special": True}
        )["tokens"]


def one_prompt(grader: LLMGrader, view: GradingView, seed: int) -> list[dict[str, Any]]:
    """The baseline: system prompt, statement, labels and every class's full diff, in one request."""
    candidates = assign_labels(view, seed)
    diffs = "\n\n".join(
        f"Candidate {label}:\n{wrap(view.diff(ids[0], BASE))}" for label, ids in candidates.members.items()
    )
    task = (
        f"Grade the candidates for this task.\n\nTask statement:\n{wrap(view.task.statement or '')}\n\n"
        f"Candidates: {', '.join(candidates.order)}\n\n{diffs}\n\nRank them, best first."
    )
    return [{"role": "system", "content": grader.prompts.system}, {"role": "user", "content": task}]


@dataclass
class Row:
    """One group's prompt tokens: all it sent, what a prefix cache could not serve, and the baseline."""

    group: str
    classes: int
    requests: int
    total: int
    uncached: int
    baseline: int  # the one-prompt baseline's tokens
    ratio: float  # uncached / baseline


class Recording:
    """The LLM grader, recording the one-prompt baseline for the same view."""

    name = "llm"

    def __init__(self, grader: LLMGrader, counter: Counter) -> None:
        self.grader, self.counter, self.baseline, self.classes = grader, counter, 0, 0

    def fingerprint(self) -> str:
        return self.grader.fingerprint()

    def grade(self, view: GradingView) -> Grade:
        seed = self.grader._seed(view.group_id)
        self.classes = len(view.classes)
        self.baseline = len(self.counter.tokens(one_prompt(self.grader, view, seed), None))
        return self.grader.grade(view)


def measure(group: Group, counter: Counter) -> Row:
    """Grade one group with the reviewing policy and count what every request sent."""

    def policy(request: dict[str, Any], n: int):
        return read_every_diff_then_rank(request, [], lambda label, i, count: f"rank {i + 1} of {count}")

    with ScriptedServer(policy) as server:
        budgets = Budgets(turns=12, retries=0, request_timeout=60)
        grader = LLMGrader("scripted", base_url=server.url, sandbox=None, seed=0, budgets=budgets)
        recording = Recording(grader, counter)
        result = grade_group_sync(group, recording, GradingOptions(grade_all_pass=True))
        if result.status != "graded":
            raise RuntimeError(f"{group.group_id}: {result.reason}")
        requests = server.requests
    total = uncached = 0
    previous: list[int] = []
    for request in requests:
        tokens = counter.tokens(request["messages"], request.get("tools"))
        shared = 0
        for a, b in zip(previous, tokens, strict=False):
            if a != b:
                break
            shared += 1
        total += len(tokens)
        uncached += len(tokens) - shared
        previous = tokens
    ratio = uncached / recording.baseline
    return Row(group.group_id, recording.classes, len(requests), total, uncached, recording.baseline, ratio)


def main(argv: list[str] | None = None) -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--groups", action="append", type=Path, help="group files (default: the example)")
    parser.add_argument("--limit", type=int, default=0, help="at most this many groups from the files")
    args = parser.parse_args(argv)
    groups: list[Group] = []
    for path in args.groups or [EXAMPLE]:
        groups.extend(load_group_file(path))
    if args.limit:
        groups = groups[: args.limit]
    try:
        server: LlamaServer | None = LlamaServer(ensure_binary(), ensure_model(), context=32768).start()
    except BuildUnavailable as exc:
        print(f"no llama-server ({exc}): counting characters / 4", file=sys.stderr)
        server = None
    try:
        counter = Counter(server)
        rows = [measure(group, counter) for group in groups]
    finally:
        if server is not None:
            server.stop()
    print(f"prompt tokens counted as {counter.unit}\n")
    print("| group | classes | requests | total | uncached | one prompt | uncached / one prompt |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r.group} | {r.classes} | {r.requests} | {r.total:,} | {r.uncached:,} | {r.baseline:,} "
            f"| {r.ratio:.2f}x |"
        )
    ratios = [r.ratio for r in rows]
    print(f"\nmedian uncached / one prompt: {statistics.median(ratios):.2f}x, worst {max(ratios):.2f}x")
    verdict = "PASS" if max(ratios) <= TARGET else "FAIL"
    print(f"{verdict}: uncached prompt tokens at most {TARGET}x the one-prompt baseline on every group")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
