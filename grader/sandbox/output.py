"""Capping output: keep the head and the tail, and say how much was cut in between.

One rule for every place gagar bounds text: a command's streams in the sandboxes (`CappedBuffer`, bytes as
they arrive) and what a tool shows the model (`cap_text`, characters of a finished string; `cap_lines`, whole
lines of it, saying which lines went).
"""

from __future__ import annotations


class CappedBuffer:
    """Collects bytes as they arrive, keeping at most `limit` of them: the first half and the last half.

    Memory stays bounded by `limit` whatever is fed. Not thread-safe; one buffer per stream.

    Raises:
        ValueError: (constructor) `limit` is not positive.
    """

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError("limit must be positive")
        self._head_limit = limit - limit // 2
        self._tail_limit = limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self._tail_limit:
            self._tail += data[-self._tail_limit :]
            excess = len(self._tail) - self._tail_limit
            if excess > 0:
                del self._tail[:excess]

    @property
    def cut(self) -> int:
        return self.total - len(self._head) - len(self._tail)

    @property
    def truncated(self) -> bool:
        return self.cut > 0

    def text(self) -> str:
        """The kept output decoded as UTF-8 with replacement, the cut marked with how many bytes went."""
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + tail
        return _mark_cut(head, tail, self.cut, "bytes")


def cap_text(text: str, limit: int) -> str:
    """At most about `limit` characters of `text`: its head and its tail, with the count of what was cut.

    Args:
        text: the whole text.
        limit: characters to keep, split evenly between head and tail; text that fits is returned unchanged.

    Returns:
        The text, or its head and tail joined by a line saying how many characters were cut.
    """
    if len(text) <= limit:
        return text
    half = limit // 2
    return _mark_cut(text[:half], text[len(text) - half :], len(text) - 2 * half, "characters")


def cap_lines(text: str, limit: int, first_line: int = 1) -> str:
    """At most about `limit` characters of `text`, cut at line boundaries: whole lines from its head and its
    tail, and between them one line naming the lines that went, e.g. `[... lines 41-97 of 180 cut ...]`.

    A reader comparing outputs line by line (a probe printing one result per line) then never loses part of
    a line unnoticed. Only a line too long to be kept whole (over `limit` for a single line, over a quarter
    of it among four or more) is cut inside, with the count of the characters that went, as `cap_text` does.

    Args:
        text: the whole text; lines end at LF.
        limit: characters to keep, about half from the head; text that fits is returned unchanged. At least
            the first and the last line are kept, so the result may exceed a very small limit.
        first_line: the number of the text's first line (a file shown from a line onwards); when it is not 1
            the marker names the lines without a total.

    Returns:
        The text, or its head lines, the marker line and its tail lines.

    Raises:
        ValueError: `limit` is not positive.
    """
    if limit <= 0:
        raise ValueError("limit must be positive")
    if len(text) <= limit:
        return text
    ends_with_newline = text.endswith("\n")
    lines = text.split("\n")
    if ends_with_newline:
        lines.pop()
    longest = max(80, limit // min(len(lines), 4))  # one long line may fill the limit; of many, a quarter
    shown = [line if len(line) <= longest else cap_text(line, longest).replace("\n", " ") for line in lines]
    head_end, used = 0, 0  # lines [0, head_end) are kept from the head
    while head_end < len(shown) and (head_end == 0 or used + len(shown[head_end]) + 1 <= limit // 2):
        used += len(shown[head_end]) + 1
        head_end += 1
    tail_start = len(shown)  # lines [tail_start, end) are kept from the tail
    while tail_start > head_end and (
        tail_start == len(shown) or used + len(shown[tail_start - 1]) + 1 <= limit
    ):
        used += len(shown[tail_start - 1]) + 1
        tail_start -= 1
    kept_head, kept_tail = shown[:head_end], shown[tail_start:]
    newline = "\n" if ends_with_newline else ""
    if tail_start == head_end:  # every line fits once the long ones are shortened
        return "\n".join(kept_head + kept_tail) + newline
    first, last = first_line + head_end, first_line + tail_start - 1
    which = f"line {first}" if first == last else f"lines {first}-{last}"
    total = f" of {len(lines)}" if first_line == 1 else ""
    return "\n".join([*kept_head, f"[... {which}{total} cut ...]", *kept_tail]) + newline


def _mark_cut(head: str, tail: str, cut: int, unit: str) -> str:
    return f"{head}\n[... {cut:,} {unit} cut ...]\n{tail}"
