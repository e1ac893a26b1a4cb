"""The injection scan: added lines of a patch that address the grader instead of the code.

A plain function of patch text, beside `patches`, so that the training glue (`integrations.batch`, which ranks
flagged trajectories last) and the LLM grader's tools share it without one reaching up to the other.
"""

from __future__ import annotations

import re

_INJECTION = re.compile(
    r"(ignore|disregard|forget)\s+(all\s+|any\s+)?(previous|prior|above|earlier)\s+(instructions|prompts?)"
    r"|\b(rank|rate|grade|score|choose|pick|select)\s+(this|me|it)\s+(candidate|patch|one|solution\s+)?\s*"
    r"(first|highest|best|top|#?1)\b"
    r"|\bthis\s+(patch|candidate|solution)\s+(is|should\s+be)\s+(the\s+)?(best|ranked\s+first|correct\s+one)"
    r"|\b(dear|attention|note\s+to(\s+the)?)\s+(grader|reviewer|judge|evaluator|ai|assistant|llm)\b"
    r"|\b(you\s+are|as)\s+(the|an?)\s+(ai\s+)?(grader|judge|evaluator)\b"
    r"|\bsubmit_ranking\b|\bsystem\s+prompt\b",
    re.IGNORECASE,
)


def find_injections(patch_text: str) -> list[str]:
    """Added lines of a patch that address the grader instead of the code (prompt injection attempts)."""
    hits = []
    for line in patch_text.split("\n"):  # not splitlines: text after a form feed is still the added line
        if line.startswith("+") and not line.startswith("+++") and _INJECTION.search(line):
            hits.append(line[1:].strip()[:200])
    return hits


__all__ = ["find_injections"]
