"""The daemon's settings: one typed Struct, filled by the CLI (flags and env)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from sessiond.protocol.locations import default_root, default_socket
from sessiond.protocol.wire.framing import DEFAULT_MAX_FRAME

FsyncPolicy = Literal["never", "interval", "always"]


class Settings(msgspec.Struct, kw_only=True):
    root: Path = msgspec.field(default_factory=default_root)
    socket: Path = msgspec.field(default_factory=default_socket)
    flush_interval: float = 0.100
    """Coalescing window of the ``queued`` path, in seconds."""
    fsync: FsyncPolicy = "interval"
    """``interval``: dirty files are fdatasync'ed once a second (like Redis everysec)."""
    fsync_interval: float = 1.0
    max_frame: int = DEFAULT_MAX_FRAME
    max_queued_bytes: int = 256 * 1024 * 1024
    """Above this many queued bytes, connections stop being read until the drain
    catches up (backpressure: latency, never a silent drop)."""
    max_pending_bytes: int = 16 * 1024 * 1024
    """Cap of one session's pre-materialization buffer."""
    max_open_files: int = 0
    """Transcript fds kept open at once (LRU); 0: half the fd limit."""
    idle_evict: float = 30.0
    """Seconds a session with no clients and nothing queued stays in memory."""
    log_level: str = "info"

    def public(self) -> dict[str, str | int | float | bool]:
        return {
            "root": str(self.root),
            "socket": str(self.socket),
            "flushIntervalMs": round(self.flush_interval * 1000, 3),
            "fsync": self.fsync,
            "maxFrame": self.max_frame,
            "maxQueuedBytes": self.max_queued_bytes,
            "logLevel": self.log_level,
        }
