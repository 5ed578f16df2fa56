"""Per-file mirroring state: what is written, sent and acknowledged of each file.

Why it exists: every other part of the mirror (the backlog, the waiters, the
pump) reads or advances these watermarks; one plain record per
file, with no behaviour beyond its lag, is what they share."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from sessiond.mirror.stream_format import HDR_FILE, HDR_PROJECT, FileRef

if TYPE_CHECKING:
    from .waiters import Countdown

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
        self.waiters: list[tuple[int, Countdown]] = []  # see waiters.py
        self.touched = time.monotonic()

    @property
    def lag(self) -> int:
        if self.size < 0 or self.broken:
            return 0
        return max(0, self.size - self.acked)
