"""Answers go out once per event-loop pass, one write per connection.

A pipelining client gets all the acks of a pass in one write; the writer's
end-of-pass hook sends them when they came from a drain (no extra loop
iteration), else one ``call_soon`` sends every connection's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger("sessiond")


class Outbox:
    """Connections with answers to send, each written once per loop pass: by
    the writer's end-of-pass hook when the answers came from a drain (no extra
    loop iteration), else by one ``call_soon`` for all of them."""

    __slots__ = ("loop", "pending", "scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: list[Connection] = []
        self.scheduled = False

    def add(self, conn: Connection) -> None:
        self.pending.append(conn)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        pending, self.pending = self.pending, []
        for conn in pending:
            try:
                conn._flush_out()
            except Exception:  # a bug: the other connections still get their answers
                log.exception("%s: internal error sending answers", conn.peer)
