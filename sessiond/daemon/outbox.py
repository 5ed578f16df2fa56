"""Answers go out once per event-loop pass, one write per connection.

A pipelining client gets all the acks of a pass in one write. The outbox is
the answers stage of the end of the pass (``looppass``): it runs after the
writer's stage, so the answers a drain makes leave in the same pass.

Connections holding only pushed frames (a subscription's ``Entries``) are
written after those holding answers: a write seen by ten watchers is ten
socket writes, and the client waiting for its ack of that write gets it
before them, not behind them (both still leave in the same pass).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .looppass import ANSWERS, EndOfPass

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger("sessiond")


class Outbox:
    """Connections with answers to send, each written once at the end of the
    loop pass that made them (the ``ANSWERS`` stage of ``EndOfPass``)."""

    __slots__ = ("end_of_pass", "pending", "pushes")

    def __init__(self, end_of_pass: EndOfPass) -> None:
        self.end_of_pass = end_of_pass
        self.pending: list[Connection] = []
        self.pushes: list[Connection] = []
        """Connections whose output of this pass began with a pushed frame: written last."""
        end_of_pass.register(ANSWERS, self.flush)

    def add(self, conn: Connection) -> None:
        """``conn`` has answers to send: at the end of this pass."""
        self.pending.append(conn)
        self.end_of_pass.request(ANSWERS)

    def add_push(self, conn: Connection) -> None:
        """``conn`` has pushed frames to send: at the end of this pass, after the answers."""
        self.pushes.append(conn)
        self.end_of_pass.request(ANSWERS)

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        if self.pushes:
            pushes, self.pushes = self.pushes, []
            pending += pushes
        for conn in pending:
            try:
                conn.send_answers()
            except Exception:  # a bug: the other connections still get their answers
                log.exception("%s: internal error sending answers", conn.peer)
