"""The in-memory queue of written bytes not yet sent, and cutting the next range.

Why it exists: the file is the mirror's real queue, but reading back what was
just written costs a syscall and a copy; so the mirror keeps the recent writes
of each file in memory, within a byte budget (``queue_bytes``), and reads the
file back only for what is not held (the budget was full, the connection
failed, a restart). ``Backlog.take`` hides which of the two a range came from.

The per-file bytes live on the ``TrackedFile`` (``mem``, ``mem_start``,
``mem_end``); this class fills and empties them and keeps the totals shown
in ``status`` (eviction only asks whether a file holds any).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiond.config import MirrorSettings
from sessiond.mirror.stream_format import cut_at_line, read_range

if TYPE_CHECKING:
    from .tracking import TrackedFile


class Backlog:
    """Observed writes kept in memory until sent, counted across all files."""

    def __init__(self, cfg: MirrorSettings) -> None:
        self.cfg = cfg  # read at each use: a SIGHUP changes ``queue_bytes`` in this very object
        self.bytes = 0
        self.lines = 0

    def keep(self, f: TrackedFile, lines: list[bytes], start: int, n: int) -> None:
        """Hold a write of ``n`` bytes at ``start`` if the budget allows and it
        continues what is held (else it is read back from the file later)."""
        if self.bytes + n <= self.cfg.queue_bytes and (not f.mem or f.mem_end == start):
            if not f.mem:
                f.mem_start = start
            f.mem.append([b"\n".join([*lines, b""]), 0])  # one copy, newline-terminated
            f.mem_end = start + n
            self.bytes += n
            self.lines += len(lines)

    def drop(self, f: TrackedFile) -> None:
        for blob, pos in f.mem:
            self.bytes -= len(blob) - pos
            self.lines -= blob.count(b"\n", pos)
        f.mem.clear()

    def take(self, f: TrackedFile, limit: int) -> bytes:
        """The next range of ``f`` from ``f.sent``, at most ``limit`` bytes of
        whole lines: from memory when it holds it, else read back from the file."""
        start = f.sent
        while f.mem and f.mem_start < start:  # already covered (a resolve moved past it)
            blob, pos = f.mem[0]
            skip = min(len(blob) - pos, start - f.mem_start)
            self._consume(f, skip)
        if f.mem and f.mem_start == start:
            parts, total = [], 0
            for blob, pos in f.mem:
                piece = blob if pos == 0 and len(blob) <= limit - total else blob[pos : pos + limit - total]
                parts.append(piece)
                total += len(piece)
                if total >= limit:
                    break
            data = parts[0] if len(parts) == 1 else b"".join(parts)
            data = cut_at_line(data, start + len(data) < f.size)
            self._consume(f, len(data))
            return data
        end = f.mem_start if f.mem else f.size
        want = min(end - start, limit)
        data = read_range(f.path, start, want)
        if len(data) < want:
            raise OSError(f"file is shorter than the {f.size} bytes written")
        return cut_at_line(data, start + len(data) < f.size)

    def _consume(self, f: TrackedFile, n: int) -> None:
        while n > 0 and f.mem:
            item = f.mem[0]
            blob, pos = item
            k = min(n, len(blob) - pos)
            self.bytes -= k
            self.lines -= blob.count(b"\n", pos, pos + k)
            f.mem_start += k
            n -= k
            if pos + k >= len(blob):
                f.mem.popleft()
            else:
                item[1] = pos + k
