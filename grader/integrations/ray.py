"""Grading across machines with Ray: groups spread over actors, results streamed back as they finish.

Each actor builds its own grader and keeps its own mirror cache and sandboxes, so actors share nothing but
the code. A group whose actor dies (or whose node goes away) is retried on a fresh actor, then fails with a
reason naming the node; a deadline bounds how long the trainer waits: groups not done by then pass through
unchanged. Needs `gagar[ray]`; running on a multi-node cluster: docs/ray-cluster.md.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from grader.graders.base import Grader, get_grader
from grader.groups.formats import LoadFailure
from grader.groups.models import Group, GroupResult
from grader.groups.outcomes import Outcome
from grader.integrations.deadlines import checked_seconds, wait_seconds
from grader.pipeline import GradingOptions, grade_group_contained, passthrough

try:
    import ray
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("grading with Ray needs the ray extra: pip install 'gagar[ray]'") from exc


STOP_POLL = 0.1
"""Seconds between looks at the `stop` event while waiting for results."""
WHERE_TIMEOUT = 2.0
"""Seconds to wait for a dead actor's node name when writing the reason of a group it lost."""
SPAWN_WAIT = 10.0
"""Seconds to wait for a replacement actor to start (and say its node) before grading goes on without it."""
REPLACE_TRIES = 3
"""Replacement actors started for one lost actor when they keep dying on the way up."""
LOST = (
    ray.exceptions.RayActorError,
    ray.exceptions.WorkerCrashedError,
    ray.exceptions.ObjectLostError,
    ray.exceptions.NodeDiedError,
)
"""What a group's task raises when its actor, worker process or node is gone: the group is tried elsewhere."""


class _GradingActor:
    """Grades groups sent as JSON-able dicts; several at once (threaded actor)."""

    def __init__(self, make_grader: Callable[[], Grader], options: GradingOptions) -> None:
        self.grader = make_grader()
        self.options = options

    def grade(self, group_data: dict[str, Any]) -> dict[str, Any]:
        # Anything the grader raises (SystemExit included) fails the group, never the actor.
        group = Group.model_validate(group_data)
        result = grade_group_contained(group, self.grader, self.options)
        # Where it ran goes beside the result, not into its reason: a group's result is the same in-process
        # and through Ray (a repository one node lacks is told by the reason plus this node).
        result.details["ray"] = {"node": self.where()}
        return result.model_dump(mode="json")

    def where(self) -> str:
        """The node this actor runs on: its address and the start of its Ray node id."""
        return f"{ray.util.get_node_ip_address()} (node {ray.get_runtime_context().get_node_id()[:8]})"

    def ping(self) -> bool:
        return True


def _unknown_node() -> str:
    """For an actor that never said where it ran: the nodes the cluster has lost so far, which it names."""
    try:
        lost = sorted({str(n.get("NodeManagerAddress")) for n in ray.nodes() if not n.get("Alive")})
    except Exception:  # the runtime cannot say either
        lost = []
    return f"an actor's unknown node (nodes lost so far: {', '.join(lost)})" if lost else "an unknown node"


@dataclass
class _Pending:
    index: int
    group: Group
    attempts: int
    actor: int


class RayGrader:
    """Grades groups on Ray actors. Either `grader_name` (+ `grader_options`) or a picklable `grader_factory`.

    `actors` actors each run up to `per_actor` groups at once. `retries` is how many more actors a group
    whose actor died is tried on. `deadline` (seconds from the start of a call) stops waiting: unfinished
    groups come back as `failed` with their advantages unchanged (None or `math.inf`: wait for all; NaN or
    a value that is not a number: ValueError or TypeError here, before Ray starts).

    A lost actor (its process, or its whole node, gone) is replaced by a new one, which Ray places on a node
    still there; the groups it held are tried again, and a group out of retries fails with a reason naming
    the node it was lost on. A result carries `details["ray"]`: the node that graded it and which attempt it
    was; a group that fails on its node (a repository missing there) says which node in its reason.
    """

    def __init__(
        self,
        grader_name: str = "heuristic",
        grader_options: dict[str, Any] | None = None,
        options: GradingOptions | None = None,
        grader_factory: Callable[[], Grader] | None = None,
        address: str | None = None,
        actors: int = 2,
        per_actor: int = 4,
        retries: int = 1,
        deadline: float | None = None,
        actor_options: dict[str, Any] | None = None,
    ) -> None:
        deadline = checked_seconds(deadline, "deadline")  # before Ray starts: refused at the call
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        name, grader_opts = grader_name, dict(grader_options or {})
        self._factory = grader_factory or (lambda: get_grader(name, **grader_opts))
        self.name = grader_name if grader_factory is None else getattr(grader_factory, "name", grader_name)
        # Each actor gets a copy of the resources' settings (semaphores do not travel between processes), so
        # it bounds its own gradings as one process would; `per_actor` bounds how many groups it takes.
        self.options = options or GradingOptions()
        self.per_actor = max(1, per_actor)
        self.retries = retries
        self.deadline = deadline
        self._remote = ray.remote(_GradingActor).options(
            max_concurrency=self.per_actor, num_cpus=0, **(actor_options or {})
        )
        self._where: list[Any] = []  # per actor: the reference to its answer to `where()`
        self._nodes: dict[int, str] = {}  # per actor: that answer, once read
        self._actors: list[Any] = [self._spawn() for _ in range(max(1, actors))]
        self._alive = [True] * len(self._actors)

    def _spawn(self) -> Any:
        actor = self._remote.remote(self._factory, self.options)
        # Asked now, while the actor lives: a reason for a lost node must name it after the node is gone.
        self._where.append(actor.where.remote())
        return actor

    def _node_of(self, actor: int) -> str:
        """Where actor `actor` ran, as it said when it started; "an unknown node" if it never said.

        Asked once per actor (at most `WHERE_TIMEOUT` seconds): the groups of one lost node cost one wait.
        """
        if actor not in self._nodes:
            try:
                self._nodes[actor] = str(ray.get(self._where[actor], timeout=WHERE_TIMEOUT))
            except Exception:  # the actor died before it answered (placed on a node being lost, say)
                self._nodes[actor] = _unknown_node()
        return self._nodes[actor]

    def _note_nodes(self) -> None:
        """Read the nodes of the actors that have answered `where()` since the last look (never waits)."""
        unread = {self._where[i]: i for i in range(len(self._where)) if i not in self._nodes}
        if unread:
            ready, _ = ray.wait(list(unread), num_returns=len(unread), timeout=0)
            with contextlib.suppress(Exception):  # a dead actor's answer among them: asked again when needed
                for ref, node in zip(ready, ray.get(ready), strict=True):
                    self._nodes[unread[ref]] = str(node)

    def _replace(self, actor: int, load: list[int], wait: float) -> None:
        """Mark `actor` dead and start a fresh one; wait up to `wait` seconds for it to say where it runs.

        Ray may place the new actor on the very node being lost (its death reaches the driver before the
        head gives the node up); such an actor dies on the way up and another is started (a few times at
        most). An actor that has said where it runs can have its lost groups name their node.
        """
        if not self._alive[actor]:
            return
        self._alive[actor] = False
        for _ in range(REPLACE_TRIES):
            self._actors.append(self._spawn())
            self._alive.append(True)
            load.append(0)
            new = len(self._actors) - 1
            try:
                self._nodes[new] = str(ray.get(self._where[new], timeout=max(0.0, wait)))
                return
            except LOST:  # started on the lost node and died with it: try again
                self._alive[new] = False
            except Exception:  # not up within `wait`: use it anyway, its node is read when it answers
                return

    def _least_loaded(self, load: list[int]) -> int:
        live = [i for i, alive in enumerate(self._alive) if alive]
        if not live:  # every actor died: start a fresh one rather than give up on the batch
            self._actors.append(self._spawn())
            self._alive.append(True)
            load.append(0)
            live = [len(self._actors) - 1]
        return min(live, key=lambda i: load[i])

    def grade_indexed(
        self, items: Iterable[Group | LoadFailure], stop: threading.Event | None = None
    ) -> Iterator[tuple[int, GroupResult]]:
        """(input position, result) as groups finish. Never raises for a group's own problems.

        Args:
            items: groups (or file entries that are not groups) to grade.
            stop: when set, stop waiting: the groups still running are cancelled and come back as late,
                as at the deadline (the batch grader sets it when the trainer stops waiting).
        Returns:
            an iterator of (position in `items`, result), every position once.
        """
        start = time.monotonic()
        load = [0] * len(self._actors)
        pending: dict[Any, _Pending] = {}
        queue: list[tuple[int, Group, int]] = []
        for index, item in enumerate(items):
            if isinstance(item, LoadFailure):
                reason = f"invalid group ({item.source}): {item.reason}"
                yield index, passthrough(item, self.name, reason, Outcome.INVALID_GROUP)
            else:
                queue.append((index, item, 0))

        def submit(index: int, group: Group, attempts: int) -> None:
            actor = self._least_loaded(load)
            ref = self._actors[actor].grade.remote(group.model_dump(mode="json"))
            pending[ref] = _Pending(index, group, attempts, actor)
            load[actor] += 1

        while queue or pending:
            # Capacity follows the live actors: a lost node's actors are replaced, not counted.
            while queue and len(pending) < self.per_actor * max(1, sum(self._alive)):
                submit(*queue.pop(0))
            timeout = None
            if self.deadline is not None:
                timeout = self.deadline - (time.monotonic() - start)
                if timeout <= 0:
                    break
            if stop is not None:
                if stop.is_set():
                    break
                timeout = STOP_POLL if timeout is None else min(timeout, STOP_POLL)
            done, _ = ray.wait(list(pending), num_returns=1, timeout=wait_seconds(timeout))
            for ref in done:
                job = pending.pop(ref)
                load[job.actor] -= 1
                try:
                    result = GroupResult.model_validate(ray.get(ref))
                except LOST as exc:
                    node = self._node_of(job.actor)
                    left = None if self.deadline is None else self.deadline - (time.monotonic() - start)
                    self._replace(job.actor, load, SPAWN_WAIT if left is None else min(SPAWN_WAIT, left))
                    if job.attempts < self.retries:
                        queue.append((job.index, job.group, job.attempts + 1))
                    else:
                        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                        reason = (
                            f"actor died while grading ({job.attempts + 1} attempts), the last on {node}:"
                            f" {type(exc).__name__}: {cause}"
                        )
                        yield job.index, passthrough(job.group, self.name, reason, Outcome.ACTOR_DIED)
                except ray.exceptions.RayError as exc:
                    reason = f"ray ({self._node_of(job.actor)}): {type(exc).__name__}: {exc}"
                    yield job.index, passthrough(job.group, self.name, reason, Outcome.DISTRIBUTED)
                else:
                    result.details.setdefault("ray", {})["attempts"] = job.attempts + 1
                    # Its node, known without asking: the reason for a group lost with it will need it.
                    self._nodes.setdefault(job.actor, str(result.details["ray"].get("node", "")))
                    yield job.index, result
            self._note_nodes()
        late = [(job.index, job.group) for job in pending.values()] + [(i, g) for i, g, _ in queue]
        for ref in pending:
            ray.cancel(ref)
        for index, group in sorted(late, key=lambda pair: pair[0]):
            waited = f"{self.deadline:g}s" if self.deadline is not None else "the deadline"
            yield (
                index,
                passthrough(
                    group,
                    self.name,
                    f"deadline: not graded within {waited}; advantages unchanged",
                    Outcome.DEADLINE,
                ),
            )

    def grade(self, items: Iterable[Group | LoadFailure]) -> list[GroupResult]:
        """Every result, in input order."""
        results = dict(self.grade_indexed(items))
        return [results[i] for i in sorted(results)]

    def shutdown(self) -> None:
        """Stop the actors (the Ray cluster itself is left running)."""
        for actor in self._actors:
            ray.kill(actor)
        self._actors, self._alive = [], []
