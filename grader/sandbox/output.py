"""Capped capture of a command's output: keep the head and the tail, count what was cut in between."""

from __future__ import annotations


class CappedBuffer:
    """Collects bytes as they arrive, keeping at most `limit` of them: the first half and the last half.

    Memory stays bounded by `limit` whatever is fed. Not thread-safe; one buffer per stream.
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
        return f"{head}\n[... {self.cut:,} bytes cut ...]\n{tail}"
