"""The LLM grader's agent loop: turns over one state object, each step a method that fits on a screen.

A turn (`AgentLoop.run`): `ask` puts the user message the turn needs into the conversation (a nudge, an
order to submit, or `final_turn`'s instruction when a budget or a stall calls for it); `check_budgets`;
`send` asks the model (a context overflow shortens the conversation into the final turn, `shortened`);
`take_reply` puts the reply into the history and tracks progress; then `no_call` (an answer without a tool
call: a nudge next, or a `repair` in the final turn) or `run_calls` (each call answered; a valid
submission ends the loop through `finish`). Everything the steps share is in `LoopState`. The loop knows
tools only through `Toolbox.schemas()`, `final_schemas()`, `call()` and `submission()`, and the server only
through `Endpoint.complete(...) -> Reply`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from grader.errors import GradingFailed
from grader.graders.llm.config import LLMConfig
from grader.graders.llm.endpoint import (
    ContextOverflow,
    DeadlinePassed,
    Endpoint,
    EndpointFailed,
    Reply,
    Traffic,
)
from grader.graders.llm.replies import (
    Call,
    arguments_text,
    aside,
    call_key,
    cut_note,
    reply_format,
    tool_calls_of,
)
from grader.graders.llm.tools import SUBMIT, Submission, Toolbox, ToolError
from grader.graders.transcript import Transcript

NUDGE = "Continue with the tools; finish by calling submit_ranking."
FORCE = (
    "Call submit_ranking now: `ranking` is a list of tie groups, best first, each a list of labels "
    '([["C-one"], ["C-two", "C-six"]] ranks C-one first and ties the other two), every candidate in exactly '
    "one; `reasons` maps each label to a one-sentence reason; `confidence` is from 0 to 1."
)
FINAL = "Call submit_ranking now: this is your last turn. {how}"
FINAL_TIERS = (
    "Give `tiers`, an object with every candidate's label ({labels}) as a key and its tie group as the "
    "value: 1 for the best, 2 for the next, the same number for a tie "
    '({{"C-one": 1, "C-two": 2, "C-six": 1}} ties C-one and C-six first); `reasons`, one sentence for each '
    "label; `confidence`, from 0 to 1."
)
"""What the final turn's submit_ranking takes (`Toolbox.final_schemas`), said as its schema says it; the
example labels cannot be real ones (a label's letters leave out o and i)."""
TEXT_CALL = ' Reply with the call alone, as JSON: {{"tool": "submit_ranking", "arguments": {{{names}}}}}.'
SILENT_TURNS_BEFORE_FORCING = 2
UNANSWERED = "no tool call when forced"
REPEATED = "only calls already answered"
"""Why a final turn follows a forced turn the model answered without any tool call: it will not inspect, so
what it can still do is submit (under "auto", which a server refusing "required" falls back to, Gemma 3 270M
on llama-cpp-python answered 21 forced turns in a row with an empty message)."""
CONTEXT = "context window"
"""Why the final turn comes when the conversation nears or passes the model's context."""
LEFT_OUT = "Your {count} earlier message(s) and their tool results were left out to fit the model's context. "
OPENING_MESSAGES = 2
"""The system prompt and the task: never left out of a shortened conversation."""


@dataclass
class Usage(Traffic):
    """A grading's costs: the endpoint's traffic (requests, retries, slot waits) and what the turns used."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # served from the server's prefix cache, where it reports them
    completion_tokens: int = 0
    tool_calls: int = 0
    tool_output_chars: int = 0
    sandbox_seconds: int = 0  # in `run`'s commands (Budgets.sandbox_seconds), rounded
    environment_seconds: int = 0  # opening the sandbox: building or finding the task's environment
    evidence_seconds: int = 0  # the evidence stage before the first turn (its own budget, not the wall's)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int]:
        counts = {k: v for k, v in self.__dict__.items() if k != "slot_wait"}
        return {**counts, "total_tokens": self.total_tokens}


@dataclass
class LoopState:
    """What one grading's loop knows between its steps."""

    messages: list[dict[str, Any]]
    """The conversation as the next request sends it (append-only, but for a shortened final turn)."""
    labels: list[str]
    """The candidate labels, in the order shown."""
    usage: Usage
    details: dict[str, Any]
    """The grading's details; the loop adds "final_turn" (its number and why) when it forces one."""
    began: float
    """When the loop began (time.monotonic)."""
    turn: int = 0
    repairs: int = 0
    silent: int = 0
    """Consecutive answers without a tool call."""
    forcing: bool = False
    """Whether turns are sent with tool_choice "required" (from the first forced turn on)."""
    final: str | None = None
    """Why the submission is forced with submit_ranking alone, once it is."""
    stalled: str | None = None
    """UNANSWERED or REPEATED once the model stops making progress."""
    pending: tuple[str, str] | None = None
    """An answer without a tool call is answered in the next turn's user message (cut note, reminder), which
    an instruction to submit replaces: one user turn, as templates that alternate want."""
    answered: set[str] = field(default_factory=set)
    """The calls made so far (`call_key`)."""
    slowest: float = 0.0
    """The longest turn so far (request and tools), to tell when the wall budget is near."""
    last_prompt: int = 0
    """Prompt tokens of the latest request: the least the next one costs."""
    growth: int = 0
    """What the latest turn added to the prompt: about what the next one adds."""
    prompt_token_seconds: float = 0.0
    """The slowest a server processed a prompt token not in its cache, where it reports timings (0 else). The
    final turn offers submit_ranking alone, so the tool list at the head of the prompt changes and the server
    reads the whole conversation again: on a small CPU server that alone can take longer than a turn."""
    turn_began: float | None = None
    off_at_turn: float = 0.0
    """`AgentLoop.off_the_clock` when the turn began."""
    asked_at: int = 0
    """Where this turn's user message goes, if it has one (the end of the conversation before the turn)."""


class AgentLoop:
    """One grading's turns, from the opening messages to a valid submission.

    Args:
        config: the grader's options (budgets, tool mode, structured replies).
        endpoint: the server, shared by the grader's gradings.
        toolbox: the tools over the group's view.
        transcript: where every event goes.
        state: the opening conversation, labels, usage and details (changed in place).
    """

    def __init__(
        self,
        config: LLMConfig,
        endpoint: Endpoint,
        toolbox: Toolbox,
        transcript: Transcript,
        state: LoopState,
    ) -> None:
        self.config = config
        self.budgets = config.budgets
        self.endpoint = endpoint
        self.toolbox = toolbox
        self.transcript = transcript
        self.state = state
        self.native = config.tool_mode == "native"
        self.native_calls = False  # the latest reply's calls came as native calls (answered by tool messages)

    def run(self) -> Submission:
        """Turns until the model submits a valid ranking; a forced final turn is recorded in the details
        ("final_turn": its number and the budget that called for it).

        Returns:
            The validated submission.

        Raises:
            GradingFailed: a budget ran out first, or the endpoint failed (the reason says which).
        """
        state = self.state
        for turn in range(1, self.budgets.turns + 1):
            state.turn = turn
            self.ask()
            self.check_budgets()
            reply, limit = self.send()
            calls = self.take_reply(reply)
            cut = cut_note(reply, limit)
            if not calls:
                self.no_call(cut)
                continue
            submission = self.run_calls(calls, cut)
            if submission is not None:
                return submission
            if time.monotonic() > self.deadline():
                raise GradingFailed(f"wall-time budget exhausted ({self.budgets.wall_seconds:g}s)")
        raise GradingFailed(f"turn budget exhausted ({self.budgets.turns} turns) without a valid ranking")

    def deadline(self) -> float:
        """When the wall budget ends: waits for shared slots, the environment's build and `run`'s commands
        (their own budget) are not the model's time."""
        return (
            self.state.began + self.budgets.wall_seconds + self.state.usage.slot_wait + self.off_the_clock()
        )

    def off_the_clock(self) -> float:
        """Seconds of the grading so far that the wall budget does not count, but for endpoint slot waits."""
        toolbox = self.toolbox
        return toolbox.waited + toolbox.environment_seconds + toolbox.sandbox_seconds

    # -- asking --------------------------------------------------------------------------------------

    def ask(self) -> None:
        """Put this turn's user message into the conversation: the final turn's instruction when a budget
        or a stall calls for it, else an order to submit after `SILENT_TURNS_BEFORE_FORCING` answers
        without a call, else what answers the last reply without a call (`pending`), else nothing."""
        state = self.state
        now, off = time.monotonic(), self.off_the_clock()
        if state.turn_began is not None:  # the turn's time on the clock: a long `run` is not the model's
            state.slowest = max(state.slowest, now - state.turn_began - (off - state.off_at_turn))
        state.turn_began, state.off_at_turn = now, off
        why = state.final or state.stalled or self.last_turn(self.deadline() - now)
        state.asked_at = len(state.messages)
        prefix = state.pending[0] if state.pending else ""
        if state.final is None and why is not None:
            self.final_turn(why, prefix)
        elif not state.forcing and state.silent >= SILENT_TURNS_BEFORE_FORCING:
            # Force a tool call: `required` (what llama.cpp, vLLM and OpenAI all take; in structured text
            # mode, a schema of submit_ranking alone) plus an appended instruction; the tool list stays as it
            # was, so the history stays append-only.
            state.forcing = True
            self.say(prefix + FORCE, forced=True)
        elif state.pending:
            self.say(prefix + state.pending[1])
        state.pending = None

    def final_turn(self, why: str, prefix: str = "") -> None:
        """Make this turn the last one the budgets leave: submit_ranking alone is offered, and required (a
        server that refuses "required" is sent it named instead), so the grading ends in the model's own
        ranking, validated as ever, rather than on a budget. `prefix`: what answers the last reply."""
        state = self.state
        state.final, state.forcing = why, True
        state.details["final_turn"] = {"turn": state.turn, "why": why}
        self.say(prefix + self.final_instruction(), forced="final", why=why)

    def final_instruction(self) -> str:
        """The final turn's instruction, saying what the submit_ranking it offers takes
        (`Toolbox.final_schemas`: `tiers`, a tie-group number per label, not the tie groups as lists the
        other turns' schema takes) and naming every label; in text mode, where the schema reaches the model
        only through a `response_format` a server may not take, the call's JSON layout too."""
        (submit,) = self.toolbox.final_schemas()
        taken = list(submit["function"]["parameters"].get("properties", {}))
        text = FINAL.format(how=FINAL_TIERS.format(labels=", ".join(self.state.labels)))
        if not self.native:
            text += TEXT_CALL.format(names=", ".join(f'"{name}": ..' for name in taken))
        return text

    def say(self, text: str, **marks: Any) -> None:
        """Append a user message to the conversation and the transcript (`marks`: forced, why)."""
        self.state.messages.append({"role": "user", "content": text})
        self.transcript.event("message", role="user", content=text, **marks)

    def last_turn(self, seconds_left: float) -> str | None:
        """Which budget makes this turn the last one that surely fits, if one does: the turns; the tokens
        (another turn costs at least the conversation again plus a reply); the model's context, once an
        overflow on this endpoint named it (two more turns like the last one and a reply would not fit);
        the wall time (less than two of the slowest turns so far left, or less than one and the final turn's
        reading of the whole conversation again, where the server's timings tell its speed)."""
        budgets, state = self.budgets, self.state
        if state.turn >= budgets.turns:
            return "turn budget"
        if budgets.tokens - state.usage.total_tokens < 2 * (state.last_prompt + budgets.max_output_tokens):
            return "token budget"
        context = self.endpoint.context_tokens
        if context is not None and state.last_prompt + 2 * state.growth + budgets.max_output_tokens > context:
            return CONTEXT
        if state.slowest > 0:
            rereading = state.prompt_token_seconds * (state.last_prompt + state.growth)
            if seconds_left < state.slowest + max(state.slowest, rereading):
                return "wall-time budget"
        return None

    def check_budgets(self) -> None:
        """Raises GradingFailed when the token or tool-output budget is spent before the turn is sent."""
        usage = self.state.usage
        if usage.total_tokens >= self.budgets.tokens:
            raise GradingFailed(f"token budget exhausted ({usage.total_tokens:,} >= {self.budgets.tokens:,})")
        if usage.tool_output_chars >= self.budgets.tool_output_chars:
            raise GradingFailed(f"tool output budget exhausted ({usage.tool_output_chars:,} characters)")

    # -- sending -------------------------------------------------------------------------------------

    def send(self) -> tuple[Reply, int]:
        """The model's reply to this turn, and the `max_tokens` it was sent with. A conversation the server
        refuses for its size is sent again as the final turn on what still fits (`shortened`).

        Raises:
            GradingFailed: as `complete`, or nothing is left to leave out of an overflowing conversation.
        """
        state = self.state
        choice = "required" if state.forcing else "auto"
        prompt_before = state.usage.prompt_tokens
        only = state.final is not None
        limit = self.max_tokens()
        while True:
            try:
                reply = self.complete(limit, choice, only)
                break
            except ContextOverflow as overflow:
                # The final turn, on what still fits: submit_ranking alone, on the opening and the most
                # recent turns (the model can still rank on what it saw last rather than fail the group).
                state.messages = self.shortened(overflow)
                state.asked_at = len(state.messages) - 1
                if state.final is None:
                    state.final, state.forcing, choice, only = CONTEXT, True, "required", True
                    state.details["final_turn"] = {"turn": state.turn, "why": CONTEXT}
        state.growth = max(0, state.usage.prompt_tokens - prompt_before - state.last_prompt)
        state.last_prompt = state.usage.prompt_tokens - prompt_before
        return reply, limit

    def max_tokens(self) -> int:
        """Tokens one turn may generate: the per-turn cap, and never past what the token budget has left, so
        a request the loop abandons cannot keep a server generating for long."""
        left = self.budgets.tokens - self.state.usage.total_tokens
        return max(1, min(self.budgets.max_output_tokens, left))

    def complete(self, max_tokens: int, tool_choice: str = "auto", only_submit: bool = False) -> Reply:
        """The model's reply to the conversation, its usage counted (estimated where the server reported
        none, so the token budget still binds). `max_tokens`: what the reply may generate. `only_submit`:
        submit_ranking is the one tool offered, under `tool_choice` "required", and the one call a
        `response_format` admits (in any mode): llama-server reads "required" as a call at the end of the
        reply, after any text, so a base model that echoes its prompt never reaches it, while a
        `response_format` holds the reply to the JSON call from its first token (a text call, which the loop
        parses in native mode too).

        Raises:
            GradingFailed: the wall budget ran out, or the endpoint gave no reply (the reason says which).
            ContextOverflow: the conversation does not fit the model's context.
        """
        deadline, messages, toolbox, native = self.deadline(), self.state.messages, self.toolbox, self.native
        if deadline - time.monotonic() <= 0:
            raise GradingFailed(f"wall-time budget exhausted ({self.budgets.wall_seconds:g}s)")
        structured = not native and self.config.structured
        started = time.monotonic()
        try:
            # Explicit tool_choice: OpenAI reads a missing one as "auto", llama.cpp's Python server as "none".
            tools = toolbox.final_schemas() if only_submit else toolbox.schemas()
            reply = self.endpoint.complete(
                messages,
                tools=tools if native else None,
                tool_choice=tool_choice if native else None,
                response_format=reply_format(toolbox, only_submit or tool_choice == "required", only_submit)
                if structured or only_submit
                else None,
                max_tokens=max_tokens,
                deadline=deadline,
                traffic=self.state.usage,
                note=self.transcript.event,
                slot=toolbox.view.resources.llm,
            )
        except DeadlinePassed:
            raise GradingFailed(f"wall-time budget exhausted ({self.budgets.wall_seconds:g}s)") from None
        except ContextOverflow:
            raise  # the loop shortens the conversation
        except EndpointFailed as exc:
            raise GradingFailed(str(exc)) from None
        self.count_usage(reply)
        self.transcript.event(
            "response",
            seconds=round(time.monotonic() - started, 4),
            finish_reason=reply.finish_reason,
            usage=reply.usage,
        )
        return reply

    def count_usage(self, reply: Reply) -> None:
        """Add a reply's tokens to the usage: as the server reported them, else estimated from the text
        (some servers omit usage), so the token budget still binds."""
        usage, reported = self.state.usage, reply.usage
        if reply.prompt_token_seconds is not None:
            self.state.prompt_token_seconds = max(self.state.prompt_token_seconds, reply.prompt_token_seconds)
        if reported is not None:
            usage.prompt_tokens += reported.get("prompt_tokens") or 0
            usage.completion_tokens += reported.get("completion_tokens") or 0
            usage.cached_prompt_tokens += reply.cached_tokens
        else:
            usage.prompt_tokens += len(json.dumps(self.state.messages)) // 4
            written = (reply.content or "") + "".join(
                c.name + arguments_text(c.arguments) for c in reply.tool_calls
            )
            usage.completion_tokens += len(written) // 4

    def shortened(self, overflow: ContextOverflow) -> list[dict[str, Any]]:
        """The conversation as the final turn sends it after `overflow`: the opening (system prompt and task),
        the later half of the turns before this turn's user message (each turn an assistant message and what
        answered it), and a last user message that says what was left out and asks for the ranking. The
        transcript gets a "left_out" event with the slices of the conversation dropped, so the conversation
        the model saw can be rebuilt from it (`grader.distill.sft`).

        Raises:
            GradingFailed: nothing is left to leave out (the overflow's reason).
        """
        messages, asked_at, opening = self.state.messages, self.state.asked_at, OPENING_MESSAGES
        starts = [i for i in range(opening, asked_at) if messages[i]["role"] == "assistant"]
        if asked_at > opening and (not starts or starts[0] != opening):
            starts.insert(0, opening)  # a user message before the first reply (an earlier final turn's)
        if not starts:
            raise GradingFailed(str(overflow))
        kept_from = starts[(len(starts) + 1) // 2] if len(starts) > 1 else asked_at
        slices = [[opening, kept_from], [asked_at, len(messages)]]
        slices = [s for s in slices if s[1] > s[0]]
        self.transcript.event(
            "left_out",
            slices=slices,
            reason=str(overflow),
            context_tokens=overflow.limit,
            prompt_tokens=overflow.prompt_tokens,
        )
        text = LEFT_OUT.format(count=kept_from - opening) + self.final_instruction()
        shortened = messages[:opening] + messages[kept_from:asked_at] + [{"role": "user", "content": text}]
        self.transcript.event("message", role="user", content=text, forced="final", why=CONTEXT)
        return shortened

    # -- the reply -----------------------------------------------------------------------------------

    def take_reply(self, reply: Reply) -> list[Call]:
        """Put the reply into the history and the transcript, and track progress: answers without a call
        in a row, and a turn whose calls all repeat calls already answered (`REPEATED`).

        Returns:
            The reply's tool calls (native, or one written as JSON in its text).
        """
        state = self.state
        calls = tool_calls_of(reply, self.native, self.toolbox.markers)
        assistant: dict[str, Any] = {"role": "assistant", "content": reply.content or ""}
        if self.native and reply.tool_calls:
            assistant["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": arguments_text(c.arguments)},
                }
                for c in reply.tool_calls
            ]
        state.messages.append(assistant)
        self.transcript.event(
            "message",
            role="assistant",
            turn=state.turn,
            content=reply.content,
            tool_calls=[{"id": cid, "name": n, "arguments": a} for cid, n, a in calls],
        )
        state.silent = 0 if calls else state.silent + 1
        made = {call_key(name, arguments) for _, name, arguments in calls}
        if calls and state.final is None and made <= state.answered:
            # Every call repeats one already answered: its results are in the history, and a model at
            # temperature 0 that loops on them will not stop (Gemma 3 270M echoing its prompt on
            # llama-server made the same seven calls each turn). What it can still do is submit.
            state.stalled = REPEATED
        state.answered |= made
        # Results of calls written as text (a response_format in native mode) go back as user turns: a tool
        # message would answer a call the history does not have.
        self.native_calls = self.native and bool(reply.tool_calls)
        return calls

    def no_call(self, cut: str) -> None:
        """An answer without a tool call: in the final turn a repair; after a forced turn a stall; the next
        turn's user message says what was cut (`cut`) and reminds or orders."""
        state = self.state
        if state.final is not None:
            # The final turn offers nothing but the submission: a reply without it is a failed one, and
            # asking again is a repair like any invalid ranking (at temperature 0 a reply cut at the turn
            # limit comes back the same: Gemma 3 270M spent 20 turns so).
            self.repair("no submit_ranking call in the final turn" + aside(cut), None)
        if state.forcing:
            state.stalled = UNANSWERED
        state.pending = (cut, FORCE if state.forcing else NUDGE)

    def repair(self, problem: str, call_id: str | None) -> None:
        """Count a repair of an invalid (or missing) ranking.

        Raises:
            GradingFailed: the repairs ran out (`Budgets.repairs`), naming the last problem.
        """
        state = self.state
        state.repairs += 1
        self.transcript.event("invalid_ranking", call_id=call_id, problem=problem, repair=state.repairs)
        if state.repairs > self.budgets.repairs:
            raise GradingFailed(f"no valid ranking after {self.budgets.repairs} repairs: {problem}") from None

    # -- tools ---------------------------------------------------------------------------------------

    def run_calls(self, calls: list[Call], cut: str) -> Submission | None:
        """Answer each call in turn: a tool's output (or its error), or, for submit_ranking, the validated
        submission, which ends the loop (an invalid one is answered with the problem and counted as a
        repair). `cut`: the note on a reply cut at a limit, added to every error.

        Returns:
            The submission, or None when the turn made none that is valid.
        """
        for call_id, name, arguments in calls:
            self.state.usage.tool_calls += 1
            started = time.monotonic()
            if name == SUBMIT:
                try:
                    submission = self.toolbox.submission(arguments)
                except ToolError as exc:
                    self.repair(str(exc), call_id)
                    self.answer(call_id, name, f"error: {exc}{aside(cut)}", started, True)
                    continue
                return self.finish(call_id, submission)
            try:
                output, is_error = self.toolbox.call(name, arguments), False
            except ToolError as exc:
                output, is_error = f"error: {exc}{aside(cut)}", True
            usage = self.state.usage
            usage.tool_output_chars += len(output)
            usage.sandbox_seconds = round(self.toolbox.sandbox_seconds)
            usage.environment_seconds = round(self.toolbox.environment_seconds)
            if self.toolbox.sandbox_failure and "sandbox_unavailable" not in self.state.details:
                self.state.details["sandbox_unavailable"] = self.toolbox.sandbox_failure
            self.answer(call_id, name, output, started, is_error)
        return None

    def answer(self, call_id: str, name: str, output: str, started: float, is_error: bool) -> None:
        """Put a call's result into the conversation (a tool message, or a user turn for a call written
        as text) and the transcript, with the seconds it took since `started`."""
        if self.native_calls:
            self.state.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        else:
            self.state.messages.append({"role": "user", "content": f"Result of {name}:\n{output}"})
        self.transcript.event(
            "tool_result",
            call_id=call_id,
            name=name,
            content=output,
            error=is_error,
            seconds=round(time.monotonic() - started, 4),
        )

    def finish(self, call_id: str, submission: Submission) -> Submission:
        """Record a valid submission in the transcript (with the usage so far) and return it."""
        self.transcript.event(
            "submitted",
            call_id=call_id,
            ranking=submission.labels,
            confidence=submission.confidence,
            usage=self.state.usage.as_dict(),
            final=self.state.final,
        )
        return submission
