"""Capping output: keep the head and the tail, and say how much was cut in between.

One rule for every place gagar bounds text: a command's streams in the sandboxes (`CappedBuffer`, bytes as
they arrive) and what a tool shows the model (`cap_text`, characters of a finished string).
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


def _mark_cut(head: str, tail: str, cut: int, unit: str) -> str:
    return f"{head}\n[... {cut:,} {unit} cut ...]\n{tail}"
