"""Per-file mirroring state: watermarks and waiters for durable acks."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from sessiond.protocol.remote import (
    HDR_FILE,
    HDR_PROJECT,
    FileRef,
)
from sessiond.protocol.wire.errors import SessiondError

# --------------------------------------------------------------- per-file state


class TrackedFile:
    """One transcript as the mirror sees it: what is written, what is acked."""

    __slots__ = (
        "path", "ref", "subject", "headers", "acked", "sent", "size", "resolved", "last_seq",
        "mem", "mem_start", "mem_end", "inflight", "broken", "waiters", "touched",
    )

    def __init__(self, path: Path, ref: FileRef, prefix: str) -> None:
        self.path = path
        self.ref = ref
        self.subject = ref.subject(prefix)
        self.headers = {HDR_PROJECT: ref.project, HDR_FILE: ref.rel}
        self.acked = 0
        """Bytes [0, acked) are in the stream: only contiguous acks advance it."""
        self.sent = 0
        """Bytes [0, sent) were handed to the connection."""
        self.size = -1
        """The file's known end (-1: never seen)."""
        self.resolved = False
        """``acked`` is known: a new file, or the stream was asked."""
        self.last_seq = 0
        """Stream sequence of the file's last range: each publish expects it
        (``Nats-Expected-Last-Subject-Sequence``), so a second writer of the same
        file, or a resend of a range that did arrive, is refused by the server
        instead of making a fork or a duplicate."""
        self.mem: deque[list] = deque()  # [bytes, pos] of observed writes, not yet sent
        self.mem_start = 0
        self.mem_end = 0
        self.inflight: deque[tuple[int, asyncio.Future, float, int]] = deque()  # (end, future, sent at, size)
        self.broken: str | None = None
        self.waiters: list[tuple[int, _Countdown]] = []
        self.touched = time.monotonic()

    @property
    def lag(self) -> int:
        if self.size < 0 or self.broken:
            return 0
        return max(0, self.size - self.acked)


class _Countdown:
    """A durable ack waiting for several files' acks, with a deadline."""

    __slots__ = ("left", "done", "deadline")

    def __init__(self, left: int, done: Callable[[SessiondError | None], None], deadline: float) -> None:
        self.left = left
        self.done: Callable[[SessiondError | None], None] | None = done
        self.deadline = deadline

    def part(self, err: SessiondError | None) -> None:
        if self.done is None:
            return
        self.left -= 1
        if err is not None or self.left <= 0:
            done, self.done = self.done, None
            done(err)
