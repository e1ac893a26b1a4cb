"""A conversation that outgrows the model's context: telling a server's refusal for it apart (llama.cpp, vLLM,
OpenAI each word it their way), and the model's context as the endpoint learns it from such refusals.

A chat-completions server does not say its context until it refuses a request for it, and what it says then
is the server's data: a limit is learnt only where it is plausible (at least `MIN_CONTEXT_TOKENS`, and at
least the tokens a successful request of this endpoint already held), and it is forgotten as soon as the
server answers a request that held more. Each is a lesson of the endpoint (the transcript's `learnt` event,
`details["endpoint"]`, `gagar show`), so a grading whose final turn came early for a learnt limit says so.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from grader.graders.llm.failures import ContextOverflow

MIN_CONTEXT_TOKENS = 512
"""The smallest context a refusal may teach: the grader's own opening (system prompt, task and tool schemas)
takes more than that, so a smaller one could grade nothing, and no server serves it (the tests' smallest
llama.cpp context is 512). A refusal naming less still shortens its grading's conversation, once."""

_OVERFLOW = re.compile(
    r"exceed_context_size|exceeds the available context|maximum context length|context_length_exceeded"
    r"|context (length|window|size) (is )?exceeded|too many tokens|prompt is too long",
    re.IGNORECASE,
)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def context_overflow(status: int, message: str, body: Any) -> ContextOverflow | None:
    """The failure a server's refusal stands for when it refused a request for not fitting the model's
    context, else None. The limit is the one the server names, not yet judged (see `ContextLimit.judge`).

    llama.cpp answers 400 `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`; vLLM 400 "This
    model's maximum context length is N tokens..."; OpenAI `context_length_exceeded`. The reason names the
    limit where the server gives it."""
    if not (400 <= status < 500 or status == 500):
        return None
    text = f"{message} {json.dumps(body, default=str) if isinstance(body, dict) else ''}"
    if not _OVERFLOW.search(text):
        return None
    details = body if isinstance(body, dict) else {}
    if isinstance(details.get("error"), dict):
        details = details["error"]
    prompt, limit = _count(details.get("n_prompt_tokens")), _count(details.get("n_ctx"))
    if limit is None:
        match = re.search(r"(?:maximum context length is|context size \(|context window of)\s*(\d+)", text)
        limit = int(match.group(1)) if match else None
    if prompt is None:  # vLLM: "... you requested 9000 tokens (8000 in the messages, 1000 in the completion)"
        match = re.search(r"\((\d+) in the messages", text)
        prompt = int(match.group(1)) if match else None
    size = f" ({prompt:,} prompt tokens)" if prompt is not None else ""
    bound = f"the model's context of {limit:,} tokens" if limit is not None else "the model's context"
    reason = (
        f"context overflow: the conversation{size} no longer fits {bound}; give the server a larger context "
        f"or lower the tool output budget (HTTP {status}: {message[:200]})"
    )
    return ContextOverflow(reason, limit, prompt)


class ContextLimit:
    """The model's context as this endpoint has learnt it (thread-safe): the limit a plausible refusal
    named, and the most tokens a successful request held (a limit below that is no limit)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tokens: int | None = None
        """The learnt limit, None while none is."""
        self.cause: str | None = None
        """The refusal the limit was learnt from."""
        self.held = 0
        """The most tokens (prompt plus completion, as reported) a successful request of this endpoint
        held."""

    def judge(self, overflow: ContextOverflow) -> str | None:
        """Learns the limit `overflow` names, if plausible; else takes it out of `overflow` (its `limit`
        becomes None, its reason says why the limit is not believed).

        Returns:
            The limit learnt, as a lesson's cause, or None when nothing was learnt.
        """
        claimed = overflow.limit
        if claimed is None:
            return None
        with self._lock:
            if claimed < MIN_CONTEXT_TOKENS:
                doubt = f"below the least context a refusal may teach, {MIN_CONTEXT_TOKENS:,} tokens"
            elif claimed < self.held:
                doubt = f"below the {self.held:,} tokens a request on this endpoint already held"
            else:
                self.tokens, self.cause = claimed, str(overflow)
                return self.cause
        overflow.limit = None
        overflow.args = (f"{overflow} (its limit of {claimed:,} tokens is not believed: {doubt})",)
        return None

    def held_tokens(self, tokens: int | None) -> int | None:
        """Records that a successful request held `tokens` (prompt plus completion, None: not reported).

        Returns:
            The learnt limit those tokens refute (now forgotten), else None.
        """
        if tokens is None:
            return None
        with self._lock:
            self.held = max(self.held, tokens)
            if self.tokens is None or tokens <= self.tokens:
                return None
            refuted, self.tokens, self.cause = self.tokens, None, None
            return refuted
