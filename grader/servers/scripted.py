"""A scripted OpenAI-compatible chat-completions server on loopback, for tests and benchmarks.

Real HTTP, so the grader's real client is exercised end to end: a *policy* (a function of the request body and
the request's number) decides each reply: a completion with tool calls or text, an HTTP error, or a delay.
The server's options reproduce what real servers do besides: not streaming (and saying so, or answering a
streamed request whole), streaming no choices, failing on a `tool_choice` other than "auto", closing a
kept-alive connection when the next request comes; a reply may never end (`Endless`: keep-alives forever).

    with ScriptedServer(lambda request, n: tool_calls(("list_candidates", {}))) as server:
        grader = LLMGrader("scripted", base_url=server.url)
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from types import SimpleNamespace
from typing import Any, Literal

Policy = Callable[[dict[str, Any], int], "Reply"]


@dataclass
class Reply:
    """What the server answers: `body` as JSON with `status`, `delay` seconds after the request arrived."""

    body: dict[str, Any]
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    cut_after: int | None = None
    """Send only this many bytes of the body, then drop the connection (a server that dies mid-reply)."""
    on_send: Callable[[], None] | None = None
    """Called once the delay is over, just before the reply goes out: the moment the request stops being in
    flight as the client can see it (its next request can only follow this reply)."""
    endless: Endless | None = None
    """Never finish the reply: send its start, then keep-alive bytes until the client goes away."""


@dataclass(frozen=True)
class Endless:
    """A reply that never ends, as a hostile or stuck server sends it: the first `first` server-sent events of
    the reply (of a streamed one; a whole one sends none of its body), then `keep_alive` every `every`
    seconds, until the client goes away (recorded in `ScriptedServer.abandoned`) or `longest` seconds pass.
    The body has no length: it would end only when the connection closes."""

    keep_alive: str = ": keep-alive\n\n"
    first: int = 0
    every: float = 0.2
    longest: float = 60.0


_ids = count(1)


def _completion(message: dict[str, Any], finish_reason: str, usage: tuple[int, int]) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def tool_calls(
    *calls: tuple[str, dict[str, Any] | str],
    usage: tuple[int, int] = (100, 20),
    delay: float = 0.0,
    content: str | None = None,
) -> Reply:
    """A reply calling tools; arguments given as a string are sent as is (to send malformed JSON)."""
    message = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": f"call_{next(_ids)}",
                "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
            }
            for name, args in calls
        ],
    }
    return Reply(_completion(message, "tool_calls", usage), delay=delay)


def text(content: str, usage: tuple[int, int] = (100, 20), delay: float = 0.0) -> Reply:
    """A plain assistant message."""
    return Reply(_completion({"role": "assistant", "content": content}, "stop", usage), delay=delay)


def error(status: int, message: str = "scripted error", delay: float = 0.0) -> Reply:
    """An HTTP error in the OpenAI error format."""
    return Reply(
        {"error": {"message": message, "type": "scripted", "code": status}}, status=status, delay=delay
    )


def labels_in(request: dict[str, Any], prefix: str = "C") -> list[str]:
    """The candidate labels named in the conversation's opening user message, in order."""
    for message in request.get("messages", []):
        if message.get("role") == "user":
            line = re.search(r"Candidates \(labels[^)]*\):\s*(.*)", message.get("content") or "")
            if line:
                return re.findall(rf"\b{prefix}-[a-z0-9]{{4}}\b", line.group(1))
    return []


def tool_results(request: dict[str, Any]) -> list[str]:
    """The contents of the tool messages in the conversation so far."""
    return [m.get("content") or "" for m in request.get("messages", []) if m.get("role") == "tool"]


def assistant_turns(request: dict[str, Any]) -> int:
    """How many times the model has answered in the conversation so far (0 on the first request)."""
    return sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")


def read_every_diff_then_rank(
    request: dict[str, Any],
    reads: list[tuple[str, dict[str, Any]]],
    reason: Callable[[str, int, int], str],
    confidence: float = 0.8,
) -> Reply:
    """One step of a policy that reviews as a careful model would, in four turns: list the candidates, diff
    every one at once, make the `reads` calls (read_file, search...), then rank by diff size, smallest first.

    Args:
        request: the request body.
        reads: tool calls made on the third turn.
        reason: (label, position, count) -> the reason submitted for a label.
        confidence: the confidence submitted.

    Returns:
        The reply for this turn.
    """
    labels = labels_in(request)
    step = assistant_turns(request)
    if step == 0:
        return tool_calls(("list_candidates", {}))
    if step == 1:
        return tool_calls(*[("diff", {"candidate": label}) for label in labels])
    if step == 2 and reads:
        return tool_calls(*reads)
    diffs = tool_results(request)[1 : 1 + len(labels)]
    order = [label for label, _ in sorted(zip(labels, diffs, strict=True), key=lambda pair: len(pair[1]))]
    reasons = {label: reason(label, i, len(order)) for i, label in enumerate(order)}
    ranking = [[label] for label in order]
    return tool_calls(("submit_ranking", {"ranking": ranking, "reasons": reasons, "confidence": confidence}))


def as_stream(body: dict[str, Any], include_usage: bool, choices: bool = True) -> bytes:
    """A completion as the server-sent events of a streamed reply: the role and content, each tool call
    (string arguments in two pieces, as servers split them), the finish reason, the usage if asked, [DONE].

    Args:
        body: a chat.completion body.
        include_usage: send the usage chunk (`stream_options.include_usage`).
        choices: False sends every chunk with an empty `choices` list (llama-cpp-python's server streams so
            under `--chat_format chatml-function-calling`).

    Returns:
        The event stream's bytes.
    """
    head = {k: body[k] for k in ("id", "created", "model")}
    choice = body["choices"][0]
    message = choice["message"]

    def event(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> str:
        listed = (
            [] if delta is None or not choices else [{"index": 0, "delta": delta, "finish_reason": finish}]
        )
        chunk = {**head, "object": "chat.completion.chunk", "choices": listed, **extra}
        return f"data: {json.dumps(chunk)}\n\n"

    events = [event({"role": "assistant", "content": message.get("content")})]
    for i, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        pieces = [arguments]
        if isinstance(arguments, str):
            pieces = [arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]]
        for n, piece in enumerate(pieces):
            delta: dict[str, Any] = {"index": i, "function": {"arguments": piece}}
            if n == 0:
                delta |= {"id": call["id"], "type": "function"}
                delta["function"]["name"] = call["function"]["name"]
            events.append(event({"tool_calls": [delta]}))
    events.append(event({}, choice["finish_reason"]))
    if include_usage and body.get("usage"):
        events.append(event(None, usage=body["usage"]))
    events.append("data: [DONE]\n\n")
    return "".join(events).encode()


class _Listener(ThreadingHTTPServer):
    # http.server listens with a backlog of 5: a burst of 32 clients connecting at once overflowed it, and
    # the dropped connections waited a full second for TCP to retry. Real inference servers listen with a
    # backlog in the thousands (uvicorn 2048).
    request_queue_size = 1024


Streaming = Literal["events", "refused", "whole", "no_choices"]
NOT_STREAMING = "streaming requested; this server does not stream"


class ScriptedServer:
    """Serves POST /v1/chat/completions from a policy: one JSON body, or server-sent events when the request
    asks to stream. Records every request body that reaches it in `requests`.

    Args:
        policy: (request body, request number) -> the reply.
        host, port: where to listen (port 0: any free one; `url` says which).
        streaming: how a request asking to stream is answered: "events" (server-sent events), "refused"
            (HTTP 400 saying this server does not stream), "whole" (one JSON body, as servers that ignore
            `stream` answer), "no_choices" (events whose `choices` are all empty).
        forced_tool_choice: "honoured"; "crashes": a `tool_choice` other than "auto" gets HTTP 500 with an
            empty message; "named_only": only "required" does, as an assertion in llama-cpp-python's handler
            answers it (a choice naming a function it honours).
        drop_kept_alive: a connection that carried a reply is closed when the next request comes on it,
            unread and unanswered (a server whose keep-alive timeout fired just then); counted in `dropped`.
    """

    def __init__(
        self,
        policy: Policy,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        streaming: Streaming = "events",
        forced_tool_choice: Literal["honoured", "crashes", "named_only"] = "honoured",
        drop_kept_alive: bool = False,
    ) -> None:
        self.policy = policy
        self.streaming = streaming
        self.forced_tool_choice = forced_tool_choice
        self.drop_kept_alive = drop_kept_alive
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        """TCP connections accepted so far (a client keeping them alive opens one per thread)."""
        self.dropped = 0
        """Requests dropped unread with their kept-alive connection (`drop_kept_alive`)."""
        self.authorizations: list[str | None] = []
        """The `Authorization` header of every request that reached the policy, in order."""
        self.abandoned: list[float] = []
        """When (`time.monotonic()`) each endless reply found its client gone (`Reply.endless`)."""
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: with Nagle's algorithm on, the body waits for the
            # client's delayed ACK (~40 ms a request), which would swamp any latency a policy asks for.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def setup(self) -> None:
                with server._lock:
                    server.connections += 1
                self.replied = False
                super().setup()

            def handle_one_request(self) -> None:
                if server.drop_kept_alive and self.replied:
                    # Wait for the client's next request on this connection, then close it unread: the
                    # unread bytes make the close a reset, and the request never reaches the handler.
                    try:
                        arrived = self.connection.recv(1, socket.MSG_PEEK)
                    except OSError:
                        arrived = b""
                    if arrived:
                        with server._lock:
                            server.dropped += 1
                        self.connection.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                    self.close_connection = True
                    return
                super().handle_one_request()

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                arrived = time.monotonic()
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    number = len(server.requests)
                    server.requests.append(body)
                    server.authorizations.append(self.headers.get("Authorization"))
                choice = body.get("tool_choice")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    reply = error(404, f"no route {self.path}")
                elif body.get("stream") and server.streaming == "refused":
                    reply = error(400, NOT_STREAMING)
                elif server.refuses(choice):
                    reply = error(500, "")
                else:
                    try:
                        reply = server.policy(body, number)
                    except Exception as exc:  # a broken script shows up as a 500 the test can see
                        reply = error(500, f"policy raised {type(exc).__name__}: {exc}")
                streamed = (
                    body.get("stream")
                    and reply.status == 200
                    and "choices" in reply.body
                    and server.streaming in ("events", "no_choices")
                )
                if streamed:
                    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                    payload = as_stream(reply.body, include_usage, choices=server.streaming == "events")
                else:
                    payload = json.dumps(reply.body).encode()
                if reply.delay:  # counted from the request's arrival, as a model's latency would be
                    time.sleep(max(0.0, reply.delay - (time.monotonic() - arrived)))
                if reply.on_send is not None:
                    reply.on_send()
                if reply.endless is not None:
                    self.send_endless(reply.endless, payload if streamed else b"", streamed)
                    return
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "text/event-stream" if streamed else "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    if reply.cut_after is not None:
                        self.wfile.write(payload[: reply.cut_after])
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    self.wfile.write(payload)
                    self.replied = True
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer

            def send_endless(self, endless: Endless, events: bytes, streamed: bool) -> None:
                self.close_connection = True
                until = time.monotonic() + endless.longest
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream" if streamed else "application/json")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    start = b"".join(event + b"\n\n" for event in events.split(b"\n\n")[: endless.first])
                    self.wfile.write(start)
                    self.wfile.flush()
                    while time.monotonic() < until:
                        time.sleep(endless.every)
                        self.wfile.write(endless.keep_alive.encode())
                        self.wfile.flush()
                except OSError:  # the client went away (a reset or a broken pipe)
                    with server._lock:
                        server.abandoned.append(time.monotonic())

        self._httpd = _Listener((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-llm", daemon=True)

    def refuses(self, choice: Any) -> bool:
        """Whether a request's `tool_choice` gets the HTTP 500 of `forced_tool_choice`."""
        if self.forced_tool_choice == "crashes":
            return choice is not None and choice != "auto"
        return self.forced_tool_choice == "named_only" and choice == "required"

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> ScriptedServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def tiny_llama(
    words: list[str], pre_tokenizer: Any = None, hidden_size: int = 16, seed: int = 0
) -> tuple[Any, Any]:
    """A one-layer random Llama and a word-level fast tokenizer over `words`, built in memory (no model hub):
    what the TRL tests and examples train on the CPU. Needs torch, tokenizers and transformers.

    Args:
        words: the vocabulary; the first three are the pad, unknown and end-of-sequence tokens.
        pre_tokenizer: how text is split into words (default: on whitespace, which it drops).
        hidden_size: the model's width (its MLP is twice as wide).
        seed: torch's seed for the random weights.

    Returns:
        (model, tokenizer).
    """
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    pad, unknown, eos = words[:3]
    backend = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token=unknown))
    backend.pre_tokenizer = pre_tokenizer or Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=pad, eos_token=eos, unk_token=unknown
    )
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(words),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config), tokenizer


def verl_reward_batch(
    group_ids: list[str],
    patches: list[str],
    scores: list[float],
    lengths: list[int],
    task: dict[str, Any],
    response_length: int,
    prompt_length: int = 3,
) -> Any:
    """A verl ``DataProto`` as verl's fit loop holds it at the reward step, for the verl adapter's tests and
    example: prompts, responses, masks, ``rm_scores`` (the score on each response's last token), the dataset
    row's ``extra_info`` (the task) and the reward function's extras (``patch``, ``acc``) listed in
    ``meta_info["reward_extra_keys"]``. Needs torch and verl.

    Args:
        group_ids: the ``uid`` of each row.
        patches: each row's patch.
        scores: each row's score.
        lengths: each row's response length in tokens (at most `response_length`).
        task: the task fields every row's ``extra_info`` holds.
        response_length: the padded response width.
        prompt_length: the padded prompt width.

    Returns:
        the ``DataProto``.
    """
    import numpy as np
    import torch
    from verl import DataProto

    bs = len(scores)
    mask = torch.zeros(bs, response_length)
    rm_scores = torch.zeros(bs, response_length)
    for row, (score, length) in enumerate(zip(scores, lengths, strict=True)):
        mask[row, :length] = 1
        rm_scores[row, length - 1] = score
    return DataProto.from_dict(
        tensors={
            "prompts": torch.ones(bs, prompt_length, dtype=torch.long),
            "responses": torch.ones(bs, response_length, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(bs, prompt_length), mask], dim=1).long(),
            "response_mask": mask,
            "rm_scores": rm_scores,
        },
        non_tensors={
            "uid": np.array(group_ids, dtype=object),
            "extra_info": np.array([dict(task) for _ in scores], dtype=object),
            "patch": np.array(patches, dtype=object),
            "acc": np.array(scores, dtype=object),
        },
        meta_info={"reward_extra_keys": ["patch", "acc"]},
    )


@dataclass
class SlimeSample:
    """The parts of slime's ``Sample`` gagar's slime adapter reads (slime is not on PyPI): the reward, the
    response length and the metadata a ``--group-rm`` reward function fills."""

    reward: float
    response_length: int = 10
    metadata: dict[str, Any] = field(default_factory=dict)

    def get_reward_value(self, args: Any) -> float:
        return self.reward


def slime_args(**overrides: Any) -> SimpleNamespace:
    """slime's argument namespace as its GRPO reward normalization reads it (4 samples a prompt, 2 prompts),
    with `overrides` applied."""
    defaults: dict[str, Any] = dict(
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        n_samples_per_prompt=4,
        rollout_batch_size=2,
    )
    return SimpleNamespace(**{**defaults, **overrides})
