"""Grading many groups at once: order, bounds on each resource, the async API and the grade cache."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from grader.graders.cache import CachedGrader, GradeCache
from grader.graders.heuristic import HeuristicGrader
from grader.graders.llm.agent import Budgets, LLMGrader
from grader.groups.formats import load_group_file
from grader.groups.models import Group
from grader.pipeline import GradingOptions, grade_group, grade_group_sync, grade_groups
from grader.servers.scripted import ScriptedServer, labels_in, tool_calls
from grader.util.concurrency import Concurrency
from tests.conftest import EXAMPLE_GROUP


def example_copies(n: int) -> list[Group]:
    (group,) = load_group_file(EXAMPLE_GROUP)
    return [group.model_copy(update={"group_id": f"g{i}"}) for i in range(n)]


def test_parallel_results_equal_sequential_ones_in_input_order() -> None:
    groups = example_copies(6)
    sequential = grade_groups(groups, HeuristicGrader())
    seen: list[str] = []
    parallel = grade_groups(groups, HeuristicGrader(), workers=4, on_result=lambda r: seen.append(r.group_id))
    assert [r.group_id for r in parallel] == [g.group_id for g in groups]
    assert sorted(seen) == sorted(g.group_id for g in groups)
    for a, b in zip(sequential, parallel, strict=True):
        assert (a.ranking, a.advantages_after) == (b.ranking, b.advantages_after)


class InFlight:
    """A scripted model that submits at once after a delay, counting requests in flight."""

    def __init__(self, delay: float) -> None:
        self.delay, self.now, self.peak = delay, 0, 0
        self.lock = threading.Lock()

    def __call__(self, request, n):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        labels = labels_in(request)
        reply = tool_calls(
            ("submit_ranking", {"ranking": [labels], "reasons": {}, "confidence": 1.0}), delay=self.delay
        )
        # Done when the server starts to answer, not on a timer: under load a timer fired late and counted a
        # request that had already been answered (a peak of 3 against a bound of 2).
        reply.on_send = self._done
        return reply

    def _done(self) -> None:
        with self.lock:
            self.now -= 1


def test_llm_calls_are_bounded_separately() -> None:
    for bound, expect in ((2, lambda peak: peak <= 2), (8, lambda peak: peak > 2)):
        policy = InFlight(delay=0.3)
        concurrency = Concurrency(llm_calls=bound)
        with ScriptedServer(policy) as server:
            grader = LLMGrader(
                "scripted",
                base_url=server.url,
                sandbox=None,
                budgets=Budgets(retries=0),
            )
            results = grade_groups(
                example_copies(8), grader, GradingOptions(concurrency=concurrency), workers=8
            )
        assert all(r.status == "graded" for r in results), [r.reason for r in results]
        assert expect(policy.peak), (bound, policy.peak)


def test_the_async_api() -> None:
    async def main():
        return await asyncio.gather(*(grade_group(g, HeuristicGrader()) for g in example_copies(3)))

    results = asyncio.run(main())
    assert [r.group_id for r in results] == ["g0", "g1", "g2"] and all(r.status == "graded" for r in results)


def test_the_cache_skips_groups_graded_before(tmp_path: Path) -> None:
    class Counting(HeuristicGrader):
        calls = 0

        def grade(self, workspace):
            Counting.calls += 1
            return super().grade(workspace)

    cache = GradeCache(tmp_path / "cache")
    options = GradingOptions()
    (group,) = example_copies(1)
    first = grade_group_sync(group, CachedGrader(Counting(), cache), options)
    again = grade_group_sync(group, CachedGrader(Counting(), cache), options)
    assert Counting.calls == 1 and again.details.get("cached") is True
    assert (again.ranking, again.advantages_after) == (first.ranking, first.advantages_after)
    # The same patches under new ids at a later step: still a hit, mapped to the new ids.
    renamed = group.model_copy(
        update={"trajectories": [t.model_copy(update={"id": f"step2-{t.id}"}) for t in group.trajectories]}
    )
    hit = grade_group_sync(renamed, CachedGrader(Counting(), cache), options)
    assert Counting.calls == 1
    assert hit.ranking == [[f"step2-{t}" for t in tier] for tier in first.ranking]
    assert hit.trajectories["step2-clean"].rationale == first.trajectories["clean"].rationale
    # Different content, or a different grader configuration: graded again.
    changed = group.model_copy(update={"trajectories": group.trajectories[1:]})
    grade_group_sync(changed, CachedGrader(Counting(), cache), options)
    assert Counting.calls == 2
