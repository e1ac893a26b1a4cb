"""The LLM grader's configuration, apart from the agent loop: the CLI builds its options without the SDK."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from grader.errors import UnknownName
from grader.graders.llm.budgets import Budgets
from grader.sandbox.base import BACKENDS


@dataclass
class LLMConfig:
    """The agentic grader: an LLM on an OpenAI-compatible endpoint inspects the candidates with tools, then
    submits a ranking that is validated before use.

    Raises UnknownName when `sandbox` names no registered backend (`grader.sandbox.BACKENDS`)."""

    model: str
    """Model name as the endpoint knows it (the llm grader needs one)."""
    base_url: str | None = None
    """OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (default: the OpenAI API)."""
    api_key: str | None = field(default=None, metadata={"cli": None})
    """The API key itself (API only: on a command line it would show in `ps`; use api_key_env)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key (servers that need none accept any)."""
    temperature: float = 0.0
    """Sampling temperature."""
    tool_mode: Literal["native", "text"] = "native"
    """native function calling, or JSON in text for endpoints without it."""
    structured: bool = False
    """In text mode, constrain every reply to one JSON tool call (`response_format` json_schema, which
    llama.cpp, vLLM and SGLang enforce by constrained decoding): for small or base models that will not call
    tools on their own. The reply can then hold no reasoning text."""
    stream: bool = True
    """Stream replies: a request cut by the wall budget then closes its connection mid-reply, and the
    server stops generating (llama.cpp keeps generating a non-streamed request whose client left). Where the
    server does not stream, whole replies are asked for instead, learnt once."""
    prompts_dir: Path | None = field(default=None, metadata={"cli": "--prompts"})
    """Folder whose files override the shipped prompts/."""
    budgets: Budgets = field(default_factory=Budgets)
    """Limits on one grading (turns, tokens, time, ...)."""
    sandbox: str | None = field(default="docker", metadata={"choices": BACKENDS.names})
    """Where the run tool executes code: docker (a container) or local (this machine, isolated); none: no run
    tool."""
    show_failing: bool = False
    """Show failing trajectories for contrast."""
    candidates_may_fail: bool = False
    """Do not tell the model every candidate passes the tests: say some may not fix the task (a verification
    benchmark grades resolved and unresolved patches alike, every one marked as passing)."""
    seed: int | None = None
    """Seed for labels and their order (default: random, recorded). `gagar eval` grading k uses seed + k."""
    secret: str | None = field(default=None, metadata={"cli": None})
    """A per-run secret (API only): labels, their order and the data markers then derive from it, the group
    id, the seed and the call's number instead of fresh randomness, so a rerun shows the model exactly the
    same text (`gagar distill` sets it; candidate text cannot guess markers without it)."""
    transcript_dir: Path | None = field(default=None, metadata={"cli": None})
    """Where each grading's transcript is written (the CLI uses RUN_DIR/transcripts)."""

    def __post_init__(self) -> None:
        # Backends can be registered at run time, so the name is checked against the registry, not a type.
        if self.sandbox is not None and self.sandbox not in BACKENDS.names():
            known = ", ".join(repr(name) for name in BACKENDS.names())
            raise UnknownName(
                f"no sandbox backend {self.sandbox!r}: registered are {known} (or None: no run tool)"
            )
