"""A conversation that outgrows the model's context: telling a server's refusal for it apart (llama.cpp, vLLM,
OpenAI each word it their way), and the limit it names.
"""

from __future__ import annotations

import json
import re
from typing import Any

from grader.graders.llm.failures import ContextOverflow

_OVERFLOW = re.compile(
    r"exceed_context_size|exceeds the available context|maximum context length|context_length_exceeded"
    r"|context (length|window|size) (is )?exceeded|too many tokens|prompt is too long",
    re.IGNORECASE,
)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def context_overflow(status: int, message: str, body: Any) -> ContextOverflow | None:
    """The failure a server's refusal stands for when it refused a request for not fitting the model's
    context, else None.

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
