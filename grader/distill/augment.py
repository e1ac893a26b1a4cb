"""Label augmentation: a transcript rewritten under fresh candidate labels shown in a fresh order.

Labels are random and their order means nothing; a grader trained on one labelling could still learn to
prefer a label's look or the first candidate shown. Each augmented copy renames every candidate (and
contrast) label consistently, in the task prompt, the tool-call arguments, the tool results, the submitted
ranking and its reasons, and shows the candidates in a new order: the task's label line, `list_candidates`
rows and the blocks of a `run` over every candidate are reordered the way the tools would have ordered
them. Candidate text (inside data markers) is never touched: a transcript whose candidate text contains a
label is refused rather than rewritten. Data markers are reassigned in order of appearance, so the copy
shows the same marker sequence a grading under the new labels would have shown. The copy is what the tools
return under the new labels, which `tests/test_distill_augment.py` checks by replaying it.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grader.distill.sft import Message
from grader.errors import GagarError

LABEL_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # as grader.graders.llm.tools.assign_labels draws them
DATA_BLOCK = re.compile(r"<<<DATA ([0-9a-f]+)>>>\n.*?\n<<<END \1>>>", re.S)
MARKER = re.compile(r"<<<(?:DATA|END) ([0-9a-f]+)>>>")
LABEL_LINE = re.compile(r"^(Candidates \(labels[^)]*\):\s*)(.*)$", re.M)
CONTRAST_LINE = re.compile(r"^(Failing trajectories shown for contrast \(not to be ranked\):\s*)(.*)$", re.M)


class AugmentationRefused(GagarError, ValueError):
    """The transcript cannot be relabelled safely (candidate text contains a label)."""


@dataclass(frozen=True)
class Relabelling:
    """Old label -> new label, and the order the new labels are shown in."""

    mapping: dict[str, str]
    order: list[str]
    contrast: list[str]


def fresh_relabelling(order: list[str], contrast: list[str], rng: random.Random, avoid: str) -> Relabelling:
    """New labels for every candidate and contrast label, none of which occurs in `avoid`, in a new order.

    Args:
        order: the candidate labels, in the order shown.
        contrast: the contrast labels, in the order shown.
        rng: where the labels and the order come from.
        avoid: text the new labels must not occur in (the whole transcript).

    Returns:
        The relabelling.
    """
    used: set[str] = set(order) | set(contrast)

    def fresh(prefix: str) -> str:
        while True:
            label = f"{prefix}-{''.join(rng.choices(LABEL_ALPHABET, k=4))}"
            if label not in used and label not in avoid:
                used.add(label)
                return label

    mapping = {old: fresh("C") for old in order} | {old: fresh("F") for old in contrast}
    new_order = [mapping[old] for old in order]
    rng.shuffle(new_order)
    new_contrast = [mapping[old] for old in contrast]
    rng.shuffle(new_contrast)
    return Relabelling(mapping, new_order, new_contrast)


def relabel(
    messages: list[Message], order: list[str], contrast: list[str], rng: random.Random
) -> tuple[list[Message], Relabelling]:
    """The conversation under fresh labels in a fresh order.

    Args:
        messages: an SFT conversation (`grader.distill.sft.messages_from_events`).
        order: its candidate labels, in the order shown.
        contrast: its contrast labels, in the order shown.
        rng: where the new labels and order come from.

    Returns:
        The rewritten conversation and the relabelling used.

    Raises:
        AugmentationRefused: candidate text (inside data markers, outside `list_candidates`) holds a label.
    """
    relabelling = fresh_relabelling(order, contrast, rng, json.dumps(messages))
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, relabelling.mapping)) + r")\b")

    def sub(text: str) -> str:
        return pattern.sub(lambda m: relabelling.mapping[m.group(1)], text)

    calls: dict[str, dict[str, Any]] = {}
    out: list[Message] = []
    for message in copy.deepcopy(messages):
        role = message["role"]
        if role == "assistant":
            message["content"] = sub(message.get("content") or "")
            for call in message.get("tool_calls") or []:
                call["function"]["arguments"] = _sub_json(call["function"]["arguments"], sub)
                calls[call["id"]] = call["function"]
        elif role == "user":
            message["content"] = _outside_data(message["content"], sub, pattern)
            message["content"] = LABEL_LINE.sub(
                lambda m: m.group(1) + ", ".join(relabelling.order), message["content"]
            )
            message["content"] = CONTRAST_LINE.sub(
                lambda m: m.group(1) + ", ".join(relabelling.contrast), message["content"]
            )
        elif role == "tool":
            call = calls.get(message.get("tool_call_id", ""), {})
            name = message.get("name") or call.get("name")
            if name == "list_candidates":
                message["content"] = _reorder_rows(sub(message["content"]), relabelling)
            else:
                message["content"] = _outside_data(message["content"], sub, pattern)
                if name == "run" and not (call.get("arguments") or {}).get("targets"):
                    message["content"] = _reorder_run(message["content"], relabelling.order)
        out.append(message)
    return _renumber_markers(out, _markers_in(messages)), relabelling


def _sub_json(value: Any, sub: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return sub(value)
    if isinstance(value, list):
        return [_sub_json(item, sub) for item in value]
    if isinstance(value, dict):
        return {sub(key): _sub_json(item, sub) for key, item in value.items()}
    return value


def _outside_data(text: str, sub: Callable[[str], str], pattern: re.Pattern[str]) -> str:
    """Substitute labels outside data blocks; refuse when a data block (candidate text) holds one."""
    pieces, last = [], 0
    for block in DATA_BLOCK.finditer(text):
        found = pattern.search(block.group(0))
        if found:
            raise AugmentationRefused(f"candidate text contains the label {found.group(0)!r}")
        pieces += [sub(text[last : block.start()]), block.group(0)]
        last = block.end()
    return "".join([*pieces, sub(text[last:])])


def _reorder_rows(text: str, relabelling: Relabelling) -> str:
    """`list_candidates` rows (one per label, candidates then contrast) in the new order."""
    block = DATA_BLOCK.search(text)
    if block is None:
        return text
    head, inner_start = text[: block.start()], block.group(0).index("\n") + 1
    body = block.group(0)[inner_start : block.group(0).rindex("\n")]
    rows: dict[str, list[str]] = {}
    current = None
    for line in body.split("\n"):
        label = line.split(":", 1)[0].split(" ", 1)[0]
        if label in relabelling.order or label in relabelling.contrast:
            current = label
            rows[label] = [line]
        elif current is not None:
            rows[current].append(line)  # a row that ran over a line stays with its label
    ranked = [label for label in [*relabelling.order, *relabelling.contrast] if label in rows]
    new_body = "\n".join(line for label in ranked for line in rows[label])
    opening = block.group(0)[:inner_start]
    closing = block.group(0)[block.group(0).rindex("\n") :]
    return head + opening + new_body + closing + text[block.end() :]


def _reorder_run(text: str, order: list[str]) -> str:
    """The blocks of a `run` over every target (base first, then the candidates as shown) in the new order."""
    spans = [m.span() for m in DATA_BLOCK.finditer(text)]
    inside = lambda at: any(start <= at < end for start, end in spans)  # noqa: E731
    starts, at = [], 0
    for line in text.split("\n"):
        if line.startswith("== ") and not inside(at):
            starts.append(at)
        at += len(line) + 1
    if not starts:
        return text
    preface = text[: starts[0]]
    blocks = [text[a : b - 1] for a, b in zip(starts, [*starts[1:], len(text) + 1], strict=True)]
    everything = re.match(r"== all targets \(([^)]*)\):", blocks[0])
    if everything:
        targets = everything.group(1).split(", ")
        ordered = [t for t in targets if t not in order] + [t for t in order if t in targets]
        return preface + blocks[0].replace(everything.group(1), ", ".join(ordered), 1)
    label_of = lambda block: block[3:].split(":", 1)[0]  # noqa: E731
    rank = {label: i for i, label in enumerate(order)}
    ordered_blocks = sorted(blocks, key=lambda block: rank.get(label_of(block), -1))  # base (-1) first
    return preface + "\n".join(ordered_blocks)


def _markers_in(messages: list[Message]) -> list[str]:
    """The data markers of a conversation, each once, in order of first appearance."""
    sequence: dict[str, None] = {}
    for message in messages:
        for marker in MARKER.findall(message.get("content") or ""):
            sequence.setdefault(marker, None)
    return list(sequence)


def _renumber_markers(messages: list[Message], drawn: list[str]) -> list[Message]:
    """The i-th marker to appear becomes the i-th marker drawn, as a grading that showed this text would
    have drawn them (in the original, the order of appearance is the order drawn)."""
    mapping = dict(zip(_markers_in(messages), drawn, strict=True))
    for message in messages:
        if message.get("content"):
            message["content"] = MARKER.sub(
                lambda m: m.group(0).replace(m.group(1), mapping[m.group(1)]), message["content"]
            )
    return messages
